"""Shared helpers for the benchmark scripts: run a config, read its tables, write a results section."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a script runs from a checkout, installed or not
    sys.path.insert(0, str(ROOT))

from edgeml.config import load_config  # noqa: E402
from edgeml.runner import run  # noqa: E402


def run_config(out: Path, *overrides: str) -> tuple[Path, pd.DataFrame, dict]:
    path = run(load_config(overrides=[f"run.out='{out}'", *overrides]), quiet=True)
    return path, pd.read_csv(path / "nodes.csv"), json.loads((path / "summary.json").read_text())


def record(name: str, lines: list[str]) -> None:
    """Print the result and keep it in results/benchmarks/<name>.md with the command that produced it."""
    command = "python " + " ".join([str(Path(sys.argv[0]).relative_to(ROOT)) if Path(sys.argv[0]).is_absolute()
                                    else sys.argv[0], *sys.argv[1:]])
    text = "\n".join([f"# {name}", "", f"Command: `{command}`  ", f"Date: {datetime.now(timezone.utc):%Y-%m-%d}",
                      "", *lines, ""])
    print(text)
    dest = ROOT / "results" / "benchmarks"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / f"{name}.md").write_text(text)
