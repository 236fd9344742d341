"""The algorithm registry: each algorithm is a config dataclass plus node programs, registered by name.

An algorithm module defines a config dataclass (an optional ``validate(self, cfg)`` refuses impossible values
with ``UserError``) and a ``nodes(cfg)`` function returning ``[(role, program), ...]``: the node programs of
one run, in rank order. Nodes with role ``"worker"`` are the devices of the heterogeneity profile, in order.
Programs talk to ``edgeml.runtime.base.Node`` only. Algorithm modules import this module (never the package
``edgeml.algorithms``, which imports them).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import traceback
from dataclasses import dataclass
from typing import Callable

from edgeml import rundir
from edgeml.errors import UserError
from edgeml.schema import did_you_mean


@dataclass(frozen=True)
class AlgorithmSpec:
    name: str
    summary: str
    config: type
    nodes: Callable[[object], list[tuple[str, Callable]]]
    paper: str = ""
    preload: tuple[str, ...] = ()
    """Modules the node programs import lazily that take long to load (``scipy.optimize``, scikit-learn):
    backends on a wall clock import them in every node process before the run's clock starts, so a first use
    mid-run does not stall the node (importing them at the top would slow config validation instead)."""
    display: str = ""
    """The name the papers give it ("SNAP-0", "Fixed ADACOMM"): what figures and verdicts call its runs (default:
    ``name``)."""
    decisions: tuple[str, ...] = ()
    """The quantities its node programs log in ``series/decisions.csv`` (``node.log("decisions", name=...)``):
    the metrics of its own that claims and figures may name, beside the ones every run has."""


REGISTRY: dict[str, AlgorithmSpec] = {}
ALIASES: dict[str, str] = {}


def register(spec: AlgorithmSpec, *aliases: str, replace: bool = False) -> AlgorithmSpec:
    """Add an algorithm under its name and ``aliases``; a name that is taken (a built-in's, another plugin's) is
    refused unless ``replace=True`` says the new one is meant to stand in for it."""
    for name in (spec.name, *aliases):
        key = name.lower()  # get_algorithm's lookup: "BSP" would name bsp
        taken = REGISTRY.get(ALIASES.get(key, key)) or REGISTRY.get(name)
        if taken is not None and not replace and taken is not spec:
            raise UserError(f"algorithm name {name!r} is already registered ({taken.name}: {taken.summary}): "
                            f"choose another name, or pass replace=True to register() to replace it")
    REGISTRY[spec.name] = spec
    # a run written before a key of this section existed reads it as its default (rundir.flat_config)
    if dataclasses.is_dataclass(spec.config):
        rundir.SECTION_DEFAULTS[spec.name] = dataclasses.asdict(spec.config())
    for a in aliases:
        ALIASES[a] = spec.name
    return spec


def get_algorithm(name: str) -> AlgorithmSpec:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in REGISTRY:
        raise UserError(f"unknown algorithm {name!r}{did_you_mean(key, sorted({*REGISTRY, *ALIASES}))}: choose "
                        f"one of {', '.join(sorted(REGISTRY))} (see edgeml list)")
    return REGISTRY[key]


def display_name(name: str) -> str:
    """What figures and verdicts call an algorithm: its ``display`` name, else its registered name (an algorithm
    not registered here, from a plugin this process has not loaded, keeps the name its runs recorded)."""
    spec = REGISTRY.get(ALIASES.get(name.lower(), name.lower()))
    return (spec.display or spec.name) if spec else name


def roles_of(cfg) -> dict[str, list[int]]:
    """Role -> ranks of the configured algorithm's nodes (programs in rank order from 1, as
    ``runtime.base.layout`` numbers them)."""
    roles: dict[str, list[int]] = {}
    for rank, (role, _) in enumerate(get_algorithm(cfg.run.algorithm).nodes(cfg), start=1):
        roles.setdefault(role, []).append(rank)
    return roles


def load_plugins() -> None:
    """Import the modules named in ``EDGEML_PLUGINS`` (comma-separated), which register more algorithms.

    Spawned worker processes inherit the variable, so a plugin algorithm runs on every backend.
    """
    for name in filter(None, (m.strip() for m in os.environ.get("EDGEML_PLUGINS", "").split(","))):
        if name.startswith("."):  # relative to what? it would resolve against whichever package imports it
            raise UserError(f"EDGEML_PLUGINS names {name!r}, a relative module name: give its full dotted name "
                            f"(package.module)")
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            missing_itself = exc.name is not None and (name == exc.name or name.startswith(exc.name + "."))
            if not missing_itself:  # the plugin imports something that is not installed
                raise UserError(f"EDGEML_PLUGINS module {name!r} failed to import: {exc}: install what it needs, "
                                f"or remove it from EDGEML_PLUGINS") from None
            raise UserError(f"EDGEML_PLUGINS names module {name!r} which cannot be imported ({exc}): "
                            f"fix the name or PYTHONPATH") from None
        except UserError as exc:
            raise UserError(f"EDGEML_PLUGINS module {name!r}: {exc}") from None
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - any fault of a plugin is the user's to fix
            where = next((f"{f.filename}:{f.lineno}" for f in reversed(traceback.extract_tb(exc.__traceback__))), "")
            detail = " ".join(str(exc).split()) or "no message"
            raise UserError(f"EDGEML_PLUGINS module {name!r} failed to import: {type(exc).__name__}: {detail}"
                            f"{f' (at {where})' if where else ''}: fix the module, or remove it from "
                            f"EDGEML_PLUGINS") from None
