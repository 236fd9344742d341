"""Typed, strict run configuration.

A run is described by one ``Config``: a few common sections (``run``, ``data``, ``model``, ``cluster``,
``network``, ``stop``, ``eval``) plus one section named after the algorithm holding that algorithm's own
dataclass (``[ssp] staleness = 3``). Every field is reachable from a TOML file (``--config``) and from
``--set section.key=value``; unknown keys and impossible values raise ``UserError`` naming the key and the
allowed values: no number anywhere may be nan or inf, the common sections' numbers have the ranges in
``RANGES``, ``run.out`` must be a writable directory path and ``data.root`` an existing directory holding the
data set. Validation never uses torch (the command line defers its import), so bad input is refused at once.
The resolved config is written into every run directory.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from edgeml.errors import UserError


@dataclass
class RunSection:
    algorithm: str = "bsp"
    """Registered algorithm name (``edgeml list``)."""
    backend: Literal["procs", "sim"] = "procs"
    """``procs``: one OS process per node over torch.distributed; ``sim``: virtual clock in one process."""
    device: Literal["cpu", "cuda"] = "cpu"
    """Where workers compute (``procs``); several workers may share one GPU."""
    seed: int = 0
    """Seed of every random choice (data split, initial model, batches, failures): 0 to 2**32 - 1."""
    out: str = "runs"
    """Parent directory of run directories (created when missing; must be writable)."""
    name: str = ""
    """Run directory name (one path component); empty means ``<algorithm>-<dataset>-w<workers>-s<seed>-<time>``."""
    threads: int = 1
    """torch threads per worker process (one per process keeps many workers from oversubscribing cores); sim
    runs with this many too."""
    max_procs_per_core: int = 16
    """procs: refuse a run of more node processes than this per core of the host (use the sim backend)."""


@dataclass
class DataSection:
    dataset: str = "digits"
    """Registered data set name (``edgeml list datasets``)."""
    root: str = ""
    """Existing directory holding the data set's original files, the only place searched when set (ignored by
    the bundled ``digits`` and ``breast-cancer``); empty searches $EDGEML_DATA, ~/.cache/edgeml, system packages."""
    download: bool = False
    """Fetch through torchvision when the files are absent (never done implicitly)."""
    partition: Literal["iid", "shards", "dirichlet", "sorted"] = "iid"
    """How training samples are split over workers: same label mix, a few label-sorted shards, Dirichlet, or
    class-sorted contiguous parts (``sorted``, ESync's non-iid split)."""
    alpha: float = 0.5
    """Dirichlet concentration for ``partition = "dirichlet"`` (> 0; small means skewed workers)."""
    shards_per_worker: int = 2
    """Label-sorted shards per worker for ``partition = "shards"``."""
    batch_size: int = 32
    """Mini-batch size of every worker; at most the smallest worker's share of the training set."""
    train_samples: int = 0
    """Train on a seeded random subset of this many training samples, split over the workers (adacomp.txt
    Table II's 20% training set); 0: all of them."""


@dataclass
class ModelSection:
    name: str = ""
    """Registered model name; empty picks the dataset's default (``mlp`` for tabular/8x8, ``lenet5`` otherwise)."""
    width: float = 1.0
    """MobileNet-v2's width multiplier (other models refuse values other than 1)."""


@dataclass
class ClusterSection:
    workers: int = 4
    """Number of workers (devices)."""
    hetero: str = "homogeneous"
    """Speed profile: ``homogeneous``, ratios of step times ``1:1:3``, ``H=3.2`` (target degree, adsp.txt
    Sec. 5.2), ``ec2`` (ADSP's 18-worker mix), ``adacomp-3class``, ``cpu-gpu`` (ESync's mix)."""
    base_step_s: float = 0.0
    """Step time of the fastest device. 0: calibrated on the host (procs) or 0.01 s (sim)."""
    throttle: bool = True
    """procs: sleep each step up to its emulated duration; off measures raw speed (benchmarks)."""
    slowdowns: list[dict] = field(default_factory=list)
    """Time-varying slowdowns: ``[{worker = 0, start = 10.0, end = 20.0, factor = 3.0}]``; ``node`` instead of
    ``worker`` names any nodes (``{node = "ps", start = 0, factor = 2}``; see ``edgeml.env``), whose ``end`` may
    be left out (until the run ends)."""
    crashes: list[dict] = field(default_factory=list)
    """Fail-stop schedule: ``[{worker = 1, time = 5.0}]``."""
    crash_prob: float = 0.0
    """Probability that a worker fails (stops) right after each push (a send the algorithm marks as a failure
    point with ``node.push``; queries and replies never fail)."""
    devices: dict[str, Any] = field(default_factory=dict)
    """Device kind per node, overriding ``run.device``: ``{cpu = "0-1", cuda = "2-5"}`` (worker indices, a role
    like ``"ps"``, ``"worker:0-1"`` or ``"*"``; see ``edgeml.env``). ESync's testbed: 4 GPUs and 2 CPUs."""
    throttle_mode: Literal["absolute", "scale"] = "absolute"
    """procs: ``absolute`` sleeps each step up to ``base_step_s`` x factor; ``scale`` stretches the measured step
    time by the factor, so real co-running load shows in step times."""
    random_wait_s: float = 0.0
    """Mean random wait between a computation and its push (AdaComp's platform, adacomp.txt Sec. IV-A); 0: none."""
    random_wait: Literal["exponential", "uniform"] = "exponential"
    """Distribution of the random wait: ``exponential`` (memoryless) or ``uniform`` on [0, 2 x mean]."""


@dataclass
class NetworkSection:
    latency_s: float = 0.0
    """One-way latency of each worker's access link."""
    up_mbps: float = 0.0
    """Worker upload bandwidth in Mb/s (0: unlimited)."""
    down_mbps: float = 0.0
    """Worker download bandwidth in Mb/s (0: unlimited)."""
    commit_delay_s: float = 0.0
    """Extra delay added to every message a worker sends (adsp.txt Fig. 6)."""
    links: list[dict] = field(default_factory=list)
    """Per-worker overrides: ``[{worker = 2, latency_s = 0.05, up_mbps = 10, down_mbps = 100}]``."""
    topology: Literal["star", "complete", "ring", "random", "edges"] = "star"
    """Graph over all nodes: ``star`` (access links to one switch: the fields above), ``complete``, ``ring`` (in
    rank order), ``random`` (connected, average ``degree``, seeded) or ``edges`` (the list ``edges``)."""
    degree: float = 3.0
    """Average degree of the ``random`` topology (SNAP's simulations: 3)."""
    edges: list = field(default_factory=list)
    """Links of the ``edges`` topology: ``[[0, 1], ["ps", 2], {u = 1, v = 2, latency_s = 0.01, up_mbps = 10,
    down_mbps = 10}]`` (ends are worker indices or nodes like ``"ps"``; up: u to v)."""
    link_latency_s: float = 0.0
    """One-way latency of every link of a topology other than ``star``."""
    link_mbps: float = 0.0
    """Rate of every link of a topology other than ``star``, each way, in Mb/s (0: unlimited)."""
    failed_links: float = 0.0
    """Fraction of links that fail (seeded; SNAP Fig. 9: 0.01 and 0.05). A message between neighbours whose link
    is down is lost; others detour. Failures never cut the network unless ``failed_may_disconnect``."""
    failed_from_s: float = 0.0
    """When the failed links go down (seconds on the run's clock)."""
    failed_for_s: float = 0.0
    """How long they stay down; 0: until the run ends."""
    failed_may_disconnect: bool = False
    """Let failures cut nodes off (their messages are lost); otherwise only links whose loss keeps the network
    connected fail."""
    jitter_s: float = 0.0
    """Each message's flight gains a random delay, uniform in [0, jitter_s] (seeded per sender)."""


@dataclass
class StopSection:
    max_time: float = 20.0
    """Seconds on the run's clock (wall clock in procs, virtual in sim); 0 disables."""
    max_steps: int = 0
    """Total training steps over all workers; 0 disables."""
    target_accuracy: float = 0.0
    """Stop once test accuracy reaches this; 0 disables."""
    target_loss: float = 0.0
    """Stop once test loss falls to this; 0 disables."""
    loss_variance: float = 0.0
    """ADSP's rule (adsp.txt Sec. 5.2): stop once the variance of the last ``window`` losses is below this;
    0 disables."""
    window: int = 10
    """Number of evaluations whose loss variance ``loss_variance`` tests (at least 2)."""
    diverged: bool = False
    """Stop once the test loss of an evaluated model is NaN or infinite: the model has diverged."""


@dataclass
class EvalSection:
    interval: float = 1.0
    """Evaluate the global model every this many seconds on the run's clock."""
    test_samples: int = 2000
    """Evaluate on this many test samples (a fixed subset); 0 uses all."""
    models: Literal["average", "mean", "worst"] = "average"
    """Which model the loss and accuracy columns describe when several nodes expose one: ``average``, the
    average of their parameters (the global model); ``mean``, the mean loss and accuracy of each node's own
    model; ``worst``, the highest loss and the lowest accuracy among them (decentralized training has
    converged when every node's model has: snap.txt Sec. III)."""


@dataclass
class LoadSection:
    schedule: list[dict] = field(default_factory=list)
    """Co-running workloads ``[{node = 0, kind = "cpu", intensity = 0.5, start = 0, end = 30}]``: kind cpu,
    disk, net or io (disk and net), intensity u in (0, 1], end omitted = until the run ends; real processes in
    procs, the model of ``edgeml.env`` in sim."""
    cores: int = 1
    """Cores of each node's share of its host, which its training and its workloads compete for (procs pins
    them there; sim's model)."""
    net_MBps: float = 100.0
    """Network capacity in MB/s: a net workload of intensity 1 sends this much; observed net load is traffic
    over it."""
    disk_MBps: float = 20.0
    """Disk capacity in MB/s: a disk workload of intensity 1 moves this much; observed disk load is storage
    traffic over it."""
    dir: str = ""
    """Directory of the disk workloads' temporary files (empty: the system's; a tmpfs reaches no disk)."""


COMMON_SECTIONS: dict[str, type] = {
    "run": RunSection,
    "data": DataSection,
    "model": ModelSection,
    "cluster": ClusterSection,
    "network": NetworkSection,
    "stop": StopSection,
    "eval": EvalSection,
    "load": LoadSection,
}


@dataclass
class Config:
    run: RunSection = field(default_factory=RunSection)
    data: DataSection = field(default_factory=DataSection)
    model: ModelSection = field(default_factory=ModelSection)
    cluster: ClusterSection = field(default_factory=ClusterSection)
    network: NetworkSection = field(default_factory=NetworkSection)
    stop: StopSection = field(default_factory=StopSection)
    eval: EvalSection = field(default_factory=EvalSection)
    load: LoadSection = field(default_factory=LoadSection)
    algo: Any = None
    """The algorithm's own config dataclass, written as the section named after the algorithm."""

    def to_dict(self) -> dict[str, dict]:
        out = {name: dataclasses.asdict(getattr(self, name)) for name in COMMON_SECTIONS}
        out[self.run.algorithm] = dataclasses.asdict(self.algo) if self.algo is not None else {}
        return out


# --------------------------------------------------------------------------------------------- parsing


def _check_value(where: str, tp: Any, value: Any) -> Any:
    """Coerce ``value`` to the annotated type ``tp`` or raise a one-line UserError."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise UserError(f"{where} = {value!r} is not allowed: choose one of {', '.join(map(str, allowed))}")
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise UserError(f"{where} = {value!r} is not a boolean: use true or false")
    if tp is int:
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            raise UserError(f"{where} = {value!r} is not a whole number")
        return int(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{where} = {value!r} is not a number")
        return float(value)
    if tp is str:
        if not isinstance(value, (str, int, float)):
            raise UserError(f"{where} = {value!r} is not a string")
        return str(value)
    if origin is list:
        if not isinstance(value, list):
            raise UserError(f"{where} = {value!r} is not a list: write it as [..] in TOML")
        return value
    return value


def _types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def update_section(obj: Any, section: str, values: dict[str, Any]) -> None:
    """Set fields of dataclass ``obj`` from ``values``, refusing unknown keys and mistyped values."""
    hints = _types(type(obj))
    for key, value in values.items():
        if key not in hints:
            known = ", ".join(sorted(hints)) or "(none)"
            raise UserError(f"unknown config key '{section}.{key}': known keys in [{section}] are {known}")
        setattr(obj, key, _check_value(f"{section}.{key}", hints[key], value))


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


def build_config(layers: dict[str, dict[str, Any]]) -> Config:
    """Build and validate a Config from merged section dicts."""
    from edgeml.algorithms import ALIASES, get_algorithm

    cfg = Config()
    algorithm = layers.get("run", {}).get("algorithm", cfg.run.algorithm)
    spec = get_algorithm(str(algorithm))
    cfg.algo = spec.config()
    for section, values in layers.items():
        if section in COMMON_SECTIONS:
            update_section(getattr(cfg, section), section, values)
        elif section == spec.name or ALIASES.get(section) == spec.name:  # [tap] for asp, [centralized], ...
            update_section(cfg.algo, section, values)
        else:
            raise UserError(
                f"unknown config section [{section}]: use one of {', '.join(COMMON_SECTIONS)} "
                f"or [{spec.name}] for the algorithm's own settings"
            )
    validate(cfg)
    return cfg


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                base: dict[str, dict[str, Any]] | None = None) -> Config:
    """Defaults <- ``base`` <- TOML file <- ``--set`` overrides."""
    layers = [base or {}]
    if path:
        layers.append(read_toml(path))
    layers.append(parse_overrides(overrides or []))
    return build_config(merge(*layers))


@dataclass(frozen=True)
class Range:
    """The values a number may take: finite, ``lo <= x <= hi`` (``lo < x`` when ``open_lo``)."""

    lo: float
    hi: float = math.inf
    open_lo: bool = False
    zero: str = ""
    """What 0 means where it is allowed and special; the message says it, so the fix is in the one line."""

    def admits(self, x: float) -> bool:
        return math.isfinite(x) and (x > self.lo if self.open_lo else x >= self.lo) and x <= self.hi

    def describe(self, whole: bool) -> str:
        kind = "a whole number" if whole else "a number"
        if self.hi < math.inf:
            text = f"{kind} in {'(' if self.open_lo else '['}{_num(self.lo)}, {_num(self.hi)}]"
        else:
            text = f"{kind} {'>' if self.open_lo else '>='} {_num(self.lo)}"
        return f"{text} (0 means {self.zero})" if self.zero else text


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


# The allowed range of every number in the common sections (a test checks that none is missing). Algorithm
# sections check their own ranges in their ``validate``; nan and inf are refused in every section.
RANGES: dict[str, Range] = {
    "run.seed": Range(0, 2**32 - 1),
    "run.threads": Range(1),
    "run.max_procs_per_core": Range(1),
    "model.width": Range(0, open_lo=True),
    "cluster.random_wait_s": Range(0, zero="no random wait"),
    "network.degree": Range(0, open_lo=True),
    "network.link_latency_s": Range(0),
    "network.link_mbps": Range(0, zero="unlimited"),
    "network.failed_links": Range(0, 1, zero="no failed links"),
    "network.failed_from_s": Range(0),
    "network.failed_for_s": Range(0, zero="until the run ends"),
    "network.jitter_s": Range(0, zero="no jitter"),
    "load.cores": Range(1),
    "load.net_MBps": Range(0, open_lo=True),
    "load.disk_MBps": Range(0, open_lo=True),
    "data.alpha": Range(0, open_lo=True),
    "data.shards_per_worker": Range(1),
    "data.train_samples": Range(0, zero="the whole training set"),
    "data.batch_size": Range(1),
    "cluster.workers": Range(1),
    "cluster.base_step_s": Range(0, zero="calibrate on the host (procs) or 0.01 s (sim)"),
    "cluster.crash_prob": Range(0, 1),
    "network.latency_s": Range(0),
    "network.up_mbps": Range(0, zero="unlimited"),
    "network.down_mbps": Range(0, zero="unlimited"),
    "network.commit_delay_s": Range(0),
    "stop.max_time": Range(0, zero="no time limit"),
    "stop.max_steps": Range(0, zero="no step limit"),
    "stop.target_accuracy": Range(0, 1, zero="no accuracy target"),
    "stop.target_loss": Range(0, zero="no loss target"),
    "stop.loss_variance": Range(0, zero="no variance rule"),
    "stop.window": Range(2),
    "eval.interval": Range(0, open_lo=True),
    "eval.test_samples": Range(0, zero="all test samples"),
}


def _non_finite(key: str, value: Any) -> tuple[str, float] | None:
    """The first nan or inf in a number, list or table, with the key that leads to it."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (key, value)
    if isinstance(value, dict):
        items = [(f"{key}.{k}", v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(f"{key}[{i}]", v) for i, v in enumerate(value)]
    else:
        return None
    return next(filter(None, (_non_finite(k, v) for k, v in items)), None)


def check_numbers(section: str, obj: Any) -> None:
    """Refuse nan and inf anywhere in a config section (lists of tables included), and numbers outside their
    field's range in ``RANGES``."""
    for f in dataclasses.fields(obj):
        key, value = f"{section}.{f.name}", getattr(obj, f.name)
        rule = RANGES.get(key)
        bad = _non_finite(key, value)
        if bad is not None:
            where, x = bad
            fix = rule.describe(whole=False) if rule and where == key else "a finite number"
            raise UserError(f"{where} = {x} is not a finite number: use {fix}")
        if rule and isinstance(value, (int, float)) and not rule.admits(value):
            raise UserError(f"{key} = {value!r} is out of range: use {rule.describe(isinstance(value, int))}")


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


def validate(cfg: Config) -> None:
    """Refuse impossible values and paths with a message naming the key, the value and the allowed range."""
    from edgeml import data, hetero

    for name in COMMON_SECTIONS:
        check_numbers(name, getattr(cfg, name))
    if cfg.algo is not None:
        check_numbers(cfg.run.algorithm, cfg.algo)
    s = cfg.stop
    if not (s.max_time or s.max_steps or s.target_accuracy or s.target_loss or s.loss_variance):
        raise UserError("no stopping rule: set stop.max_time, stop.max_steps, a target or stop.loss_variance")
    if cfg.run.name and (Path(cfg.run.name).name != cfg.run.name or cfg.run.name in (".", "..")):
        raise UserError(f"run.name = {cfg.run.name!r} is not a single directory name: "
                        f"put the parent directory in --out and a plain name in --name")
    hetero.build_cluster(cfg)  # parses profile, slowdowns, crashes and links; raises UserError on bad input
    if cfg.algo is not None and hasattr(cfg.algo, "validate"):
        cfg.algo.validate(cfg)
    _validate_env(cfg)
    check_out(cfg.run.out)
    data.locate(cfg.data.dataset, cfg.data.root or None, cfg.data.download)


def _validate_env(cfg: Config) -> None:
    """The environment's node sets and graphs (``edgeml.env``; its numbers are in ``RANGES``): build the Env."""
    from edgeml.env import build_env

    build_env(cfg)


def _field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of ``cls`` and of the dataclasses it inherits from (nearest wins)."""
    import ast
    import inspect

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            body = ast.parse(inspect.getsource(klass)).body[0].body  # type: ignore[attr-defined]
        except (OSError, TypeError, IndexError):
            continue
        for node, nxt in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                docs[node.target.id] = " ".join(str(nxt.value.value).split())  # type: ignore[union-attr]
    return docs


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "|".join(map(str, typing.get_args(tp)))
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def describe_fields(cls: type) -> list[tuple[str, str, Any, str]]:
    """(name, type, default, doc) of each field of a config dataclass, for ``edgeml list`` and docs."""
    docs, hints = _field_docs(cls), _types(cls)
    rows = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        rows.append((f.name, _type_name(hints[f.name]), default, docs.get(f.name, "")))
    return rows
