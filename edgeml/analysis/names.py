"""What readers see a run and its settings called, in figures and in the words of verdicts: a method by its name
in the papers (``AlgorithmSpec.display``) or the experiment's label for it, a setting by the experiment's short
name for its config key, else by its value where that is a word, else by the key's last part; never the raw
``section.key``."""

from __future__ import annotations

import json
import re
from typing import Any

from edgeml.rundir import Run, fmt_value


def method_of(run: Run) -> str:
    """What a figure colours by and a verdict calls a run: its experiment's label for it (``[[runs]] label``),
    else its algorithm's name in the papers ("SNAP-0", "Fixed ADACOMM")."""
    from edgeml.algorithms import display_name

    return run.name or display_name(run.summary["algorithm"])


def setting_text(key: str, value: Any, labels: dict[str, str] | None = None) -> str:
    """One setting as a legend names it: by the experiment's short name for its key (``[experiment] labels``:
    "delay=8", or a template "delay {} s": "delay 8 s"), else a word value alone ("sim", "H=1.6", "dirichlet"),
    else the key's last part ("workers=100"); never the raw ``section.key``. Numbers as ``:g`` writes them."""
    v = f"{value:g}" if isinstance(value, float) else fmt_value(value)
    name = (labels or {}).get(key) or ""
    if "{}" in name:
        return name.replace("{}", v)
    if not name and isinstance(value, str) and re.search(r"[A-Za-z]", value):
        return v
    name = name or key.rsplit(".", 1)[-1]
    return v if v.startswith(f"{name}=") else f"{name}={v}"


def key_name(key: str, labels: dict[str, str] | None = None) -> str:
    """A config key as an axis names it: its short name ("delay {} s": "delay (s)"), else its last part
    ("cluster.workers": "workers")."""
    name = (labels or {}).get(key) or key.rsplit(".", 1)[-1]
    if "{}" not in name:
        return name
    before, after = (part.strip() for part in name.split("{}", 1))
    return f"{before} ({after})" if before and after else before or after


def point_text(point: str, labels: dict[str, str] | None = None) -> str:
    """A sweep point as run labels write it ("data.partition=iid,network.commit_delay_s=8.0") as readers see
    it ("iid, commit_delay_s=8"): each ``section.key=value`` term by ``setting_text``."""
    terms = point_terms(point)
    return ", ".join(setting_text(k, read_value(v), labels) for k, v in terms) if terms else point


def point_terms(point: str) -> list[tuple[str, str]]:
    """The (``section.key``, value as written) terms of a point "k=v,k2=v2"; split only at a comma that starts
    the next key, so a value may hold commas ("[1, 2]")."""
    return [tuple(t.split("=", 1)) for t in re.split(r",(?=[A-Za-z_][\w-]*\.[\w-]+=)", point) if "=" in t]


def read_value(text: str) -> Any:
    """A value as ``fmt_value`` wrote it, read back (a number, a list) where it reads as JSON, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text
