"""Golden metrics: one short sim run per registered algorithm must reproduce its committed ``evals.csv`` bit for bit.

A refactor that claims to change no computation proves it here. Each run below is a few virtual seconds of 4
heterogeneous workers on digits with a link latency, evaluated every 0.25 s; every algorithm setting whose
default is derived from the run (check periods, trial lengths, decay) is given explicitly, so that a change of
defaults does not move the goldens, only a change of what the algorithm computes does.

The goldens are regenerated only on purpose, when an algorithm's computation is meant to change (say why in the
CHANGELOG)::

    PYTHONPATH=$PWD python tests/test_golden.py --regenerate [ALGORITHM ...]

The comparison covers the golden file's columns, as text, so a column added to ``evals.csv`` later does not
break it while every value the golden holds must match exactly.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"
COMMON = ["run.backend='sim'", "run.seed=0", "data.dataset='digits'", "cluster.workers=4",
          "cluster.hetero='1:1:2:4'", "network.latency_s=0.002", "stop.max_time=4", "eval.interval=0.25"]
GOLDEN = {
    "bsp": [],
    "ssp": ["ssp.staleness=2"],
    "asp": [],
    "adsp": ["adsp.check_period_s=0.5", "adsp.epoch_s=2", "adsp.lr_decay_s=2", "adsp.loss_samples=5",
             "adsp.probe_samples=256"],
    "adacomm": ["adacomm.trial_s=0.3", "adacomm.adapt_period_s=0.5", "adacomm.lr_decay_s=2"],
    "fixed_adacomm": ["fixed_adacomm.trial_s=0.3", "fixed_adacomm.lr_decay_s=2"],
    "adacomp": [],
    "asgd": [],
    "comp_asgd": [],
    "esync": ["esync.lr=0.05", "esync.mode='delayed_ack'"],
    "ssgd": ["ssgd.lr=0.05", "ssgd.aggregation='ps'"],
    "standalone": ["standalone.lr=0.05"],
    "snap": ["snap.round_s=0.5"],
    "snap0": ["snap0.round_s=0.5"],
    "sno": ["sno.round_s=0.5"],
    "peer_ps": [],
    "terngrad": [],
}


def golden_run(algorithm: str, out: Path) -> Path:
    from edgeml.config import load_config
    from edgeml.runner import run

    overrides = [f"run.algorithm='{algorithm}'", *COMMON, *GOLDEN[algorithm], f"run.out='{out}'",
                 f"run.name='{algorithm}'"]
    return run(load_config(overrides=overrides), quiet=True) / "evals.csv"


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_every_builtin_algorithm_has_a_golden():
    from edgeml.algorithms import BUILTIN

    assert sorted(GOLDEN) == sorted(BUILTIN)
    assert sorted(p.stem for p in GOLDEN_DIR.glob("*.csv")) == sorted(GOLDEN)


@pytest.mark.parametrize("algorithm", sorted(GOLDEN))
def test_golden_evals(tmp_path, algorithm):
    golden = read_rows(GOLDEN_DIR / f"{algorithm}.csv")
    got = read_rows(golden_run(algorithm, tmp_path))
    assert len(golden) >= 10
    assert len(got) == len(golden)
    for i, (want, row) in enumerate(zip(golden, got)):
        assert {k: row[k] for k in want} == want, f"{algorithm}: evals.csv row {i} differs"


if __name__ == "__main__":
    import os
    import shutil
    import tempfile

    os.environ["OMP_NUM_THREADS"] = "1"  # as in the test-suite (tests/conftest.py), before torch loads

    if len(sys.argv) < 2 or sys.argv[1] != "--regenerate":
        sys.exit("usage: python tests/test_golden.py --regenerate [ALGORITHM ...]")
    names = sys.argv[2:] or sorted(GOLDEN)
    GOLDEN_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            shutil.copyfile(golden_run(name, Path(tmp)), GOLDEN_DIR / f"{name}.csv")
            print(f"wrote {GOLDEN_DIR / name}.csv")
