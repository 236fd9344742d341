"""Loading a run's configuration: defaults <- base layers <- TOML file <- ``--set`` overrides, then validation.

What a config *is* (the typed sections, each number's range beside its field) is ``edgeml.schema``'s. Here the
layers are read and merged, the algorithm's own section is found through the registry, and the result is
validated: every field's type and range (``schema.check_fields``), the rules that involve several fields (each
config class's ``validate``), the world the run describes (``edgeml.world.build``, with the algorithm's
roles), ``run.out`` a writable directory path and ``data.root`` an existing directory holding the data set.
Validation writes nothing and never uses torch (the command line defers its import), so bad input is refused
at once. The resolved config is written into every run directory.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from edgeml.errors import UserError
from edgeml.schema import (COMMON_SECTIONS, Config, check_binary, check_fields, check_limits, did_you_mean,
                           unknown_keys, update_section)


# --------------------------------------------------------------------------------------------- parsing


def parse_set_value(raw: str) -> Any:
    """Parse the value of ``--set key=value`` as a TOML literal, falling back to a bare string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def parse_overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    """``["ssp.staleness=3", "stop.max_time=5"]`` -> ``{"ssp": {"staleness": 3}, "stop": {"max_time": 5}}``."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not section or not name:
            raise UserError(f"--set {item!r} is malformed: write --set section.key=value, e.g. --set stop.max_time=30")
        out.setdefault(section, {})[name] = parse_set_value(raw.strip())
    return out


def read_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        raise UserError(f"config file {str(p)!r} is a directory: pass the path of a TOML file")
    if not p.is_file():
        raise UserError(f"config file {str(p)!r} does not exist: pass the path of a TOML file")
    try:
        return tomllib.loads(p.read_bytes().decode())
    except OSError as exc:
        raise UserError(f"config file {str(p)!r} cannot be read ({exc.strerror}): check its permissions") from None
    except UnicodeDecodeError:
        raise UserError(f"config file {str(p)!r} is not UTF-8 text: pass a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"config file {str(p)!r} is not valid TOML ({exc}): fix the syntax") from None


def merge(*layers: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Merge section dicts; later layers win key by key."""
    out: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for section, values in layer.items():
            if not isinstance(values, dict):
                raise UserError(f"config entry {section!r} must be a [section] table, e.g. [{section}] key = value")
            out.setdefault(section, {}).update(values)
    return out


def build_config(layers: dict[str, dict[str, Any]], *, paths: bool = True) -> Config:
    """Build and validate a Config from merged section dicts; ``paths``: also check that ``run.out`` is writable
    and the data set is there (a plan of runs checks those once, for the runs it will start)."""
    from edgeml.algorithms import ALIASES, get_algorithm

    cfg = Config()
    algorithm = layers.get("run", {}).get("algorithm", cfg.run.algorithm)
    spec = get_algorithm(str(algorithm))
    cfg.algo = spec.config()
    targets, unknown = {}, []
    for section, values in layers.items():
        if section in COMMON_SECTIONS:
            targets[section] = getattr(cfg, section)
        elif section == spec.name or ALIASES.get(section) == spec.name:  # [tap] for asp, [centralized], ...
            targets[section] = cfg.algo
        else:
            sections = [*COMMON_SECTIONS, spec.name]
            unknown.append(f"section [{section}]{did_you_mean(section, sections)}")
            continue
        unknown += [f"'{section}.{key}'{hint}" for key, hint in unknown_keys(targets[section], values)]
    if unknown:  # every unknown name at once, so one run finds every typo
        raise UserError(f"unknown config {'entries' if len(unknown) > 1 else 'entry'} {'; '.join(unknown)}: "
                        f"see edgeml list settings and edgeml list {spec.name} for the known ones")
    for section, obj in targets.items():
        update_section(obj, section, layers[section])
    validate(cfg, paths=paths)
    return cfg


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                base: dict[str, dict[str, Any]] | None = None) -> Config:
    """Defaults <- ``base`` <- TOML file <- ``--set`` overrides."""
    layers = [base or {}]
    if path:
        layers.append(read_toml(path))
    layers.append(parse_overrides(overrides or []))
    return build_config(merge(*layers))


def check_out(out: str | Path, name: str = "run.out") -> None:
    """An output folder (``run.out``, or a command's ``--out`` named by ``name``) must be a directory, or
    creatable as one, and writable: checked before anything is written."""
    path = Path(out)
    shown = f"{name} {str(out)!r}" if name.startswith("--") else f"{name} = {str(out)!r}"
    if path.exists() and not path.is_dir():
        raise UserError(f"{shown} is a file: pass a directory (created when missing) to --out")
    existing = next(p for p in (path.absolute(), *path.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise UserError(f"{shown} lies under the file {str(existing)!r}: pass a directory path to --out")
    try:  # os.access answers yes for root even where nothing can be created (/proc, read-only mounts)
        tempfile.TemporaryDirectory(dir=existing, prefix=".edgeml-").cleanup()
    except OSError as exc:
        raise UserError(f"{shown} is not writable ({exc.strerror} in {str(existing)!r}): "
                        f"pass a writable directory to --out") from None


def validate(cfg: Config, *, paths: bool = True) -> None:
    """Refuse impossible values and paths with a message naming the key, the value and the allowed range;
    ``paths``: also the output folder and the data set's files (``check_paths``)."""
    from edgeml import world
    from edgeml.algorithms import get_algorithm
    from edgeml.runtime.base import layout

    for name in COMMON_SECTIONS:
        check_fields(name, getattr(cfg, name))
    if cfg.algo is not None:
        check_fields(cfg.run.algorithm, cfg.algo)
    check_limits(cfg)  # before the world is built: a billion workers would exhaust memory building it
    s = cfg.stop
    if not (s.max_time or s.max_steps or s.target_accuracy or s.target_loss or s.loss_variance or s.plateau):
        raise UserError("no stopping rule: set stop.max_time, stop.max_steps, a target, stop.loss_variance or "
                        "stop.plateau")
    if cfg.run.name and (Path(cfg.run.name).name != cfg.run.name or cfg.run.name in (".", "..")):
        raise UserError(f"run.name = {cfg.run.name!r} is not a single directory name: "
                        f"put the parent directory in --out and a plain name in --name")
    if cfg.model.binary:
        check_binary(cfg.model.name)
    if cfg.algo is not None and hasattr(cfg.algo, "validate"):
        cfg.algo.validate(cfg)
    # the world the run describes (profile, slowdowns, crashes, devices, load, links), built as the runner will
    world.build(cfg, layout(get_algorithm(cfg.run.algorithm).nodes(cfg)).roles)
    if paths:
        check_paths(cfg)


def check_paths(cfg: Config) -> None:
    """``run.out`` a writable directory path and the data set's files where ``data`` says (or downloadable)."""
    from edgeml import data

    check_out(cfg.run.out)
    data.locate(cfg.data.dataset, cfg.data.root or None, cfg.data.download)
