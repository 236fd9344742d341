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

On an AVX-512 host, ``ATEN_CPU_CAPABILITY=avx2`` makes torch dispatch as on the AVX2 host that recorded them.

Bits depend on torch's version and the CPU's vector extensions as well as on the algorithm, so the goldens record
both (``golden/platform.json``) and the comparison is skipped, saying why, on another platform: there, regenerate
them first (on the commit before a change) and compare against those. One column is compared to a tolerance,
the test loss: torch's kernels choose their summation order by CPU model beyond the recorded vector extensions,
and two AVX-512 hosts gave the same accuracies, steps and bytes for every algorithm but losses a few float32
roundings apart (2e-8 to 7e-8 relative from the evaluation's sums; up to 1e-6 for ``standalone``, whose
full-data steps drifted by as much), so it must match within ``LOSS_RTOL``; every other value must match
exactly.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"
LOSS_RTOL = 1e-5
"""The test loss's tolerance: float32 roundings of the sums, far below any change of what an algorithm computes
(which moves the loss by more and, within a few steps, the accuracies too)."""
COMMON = ["run.backend='sim'", "run.seed=0", "data.dataset='digits'", "cluster.workers=4",
          "cluster.hetero='1:1:2:4'", "network.latency_s=0.002", "stop.max_time=4", "eval.interval=0.25"]
GOLDEN = {
    "bsp": [],
    "ssp": ["ssp.staleness=2"],
    "asp": [],
    "adsp": ["adsp.check_period_s=0.5", "adsp.epoch_s=2", "adsp.lr_decay_s=2", "adsp.trial_periods=2",
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
    "gosgd": [],
    "edgegossip": ["edgegossip.method='hash_kmeans'", "edgegossip.ratio=5"],
}

VARIANTS = {
    "adsp-within": ("adsp", ["adsp.check_period_s=0.5", "adsp.epoch_s=2", "adsp.lr_decay_s=2", "adsp.loss_samples=5",
                             "adsp.probe_samples=256", "adsp.trial_sampling='within'", "adsp.burn_in='none'",
                             "adsp.reward_reuse=true", "adsp.target_ratio=0.5"]),
}
"""Settings that keep an earlier computation of an algorithm, each with its golden in ``golden/variants/``: ADSP's
search as it was before its trials were sampled at checkpoints (the golden is the ``adsp`` golden of that
version), so that runs made then stay runs of this version's configuration."""


def golden_run(algorithm: str, out: Path, settings: list[str] | None = None) -> Path:
    from edgeml.config import load_config
    from edgeml.runner import run

    overrides = [f"run.algorithm='{algorithm}'", *COMMON, *(GOLDEN[algorithm] if settings is None else settings),
                 f"run.out='{out}'", f"run.name='{algorithm}'"]
    return run(load_config(overrides=overrides), quiet=True) / "evals.csv"


def platform() -> dict[str, str]:
    import torch

    return {"torch": torch.__version__.split("+")[0], "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_every_builtin_algorithm_has_a_golden():
    from edgeml.algorithms import BUILTIN

    assert sorted(GOLDEN) == sorted(BUILTIN)
    assert sorted(p.stem for p in GOLDEN_DIR.glob("*.csv")) == sorted(GOLDEN)
    assert set(json.loads((GOLDEN_DIR / "platform.json").read_text())) == set(platform())


@pytest.mark.parametrize("algorithm", sorted(GOLDEN) + sorted(VARIANTS))
def test_golden_evals(tmp_path, algorithm):
    recorded = json.loads((GOLDEN_DIR / "platform.json").read_text())
    if recorded != platform():
        pytest.skip(f"goldens were computed on {recorded}, this is {platform()}: regenerate them to compare")
    if algorithm in VARIANTS:
        golden = read_rows(GOLDEN_DIR / "variants" / f"{algorithm}.csv")
        got = read_rows(golden_run(VARIANTS[algorithm][0], tmp_path, VARIANTS[algorithm][1]))
    else:
        golden = read_rows(GOLDEN_DIR / f"{algorithm}.csv")
        got = read_rows(golden_run(algorithm, tmp_path))
    assert len(golden) >= 10
    assert len(got) == len(golden)
    for i, (want, row) in enumerate(zip(golden, got)):
        exact = {k for k in want if k != "loss"}
        assert {k: row[k] for k in exact} == {k: want[k] for k in exact}, f"{algorithm}: evals.csv row {i} differs"
        assert same_loss(row["loss"], want["loss"]), f"{algorithm}: row {i}: loss {row['loss']} != {want['loss']}"


def same_loss(got: str, want: str) -> bool:
    """Equal losses up to ``LOSS_RTOL`` (NaN only where the golden has NaN)."""
    a, b = float(got), float(want)
    return a == b or (a != a and b != b) or abs(a - b) <= LOSS_RTOL * abs(b)


def test_the_loss_tolerance_is_a_rounding_not_a_change():
    assert same_loss("2.1497200859917536", "2.1497201707628038")  # two hosts' float32 sums
    assert same_loss("nan", "nan") and not same_loss("nan", "0.5") and not same_loss("0.5", "nan")
    assert same_loss("0.30111982027689616", "0.3011195182800293")  # standalone's drift, 1e-6
    assert not same_loss("2.1497", "2.1498")  # 5e-5 relative: a change


if __name__ == "__main__":
    import os
    import shutil
    import tempfile

    os.environ["OMP_NUM_THREADS"] = "1"  # as in the test-suite (tests/conftest.py), before torch loads

    if len(sys.argv) < 2 or sys.argv[1] != "--regenerate":
        sys.exit("usage: python tests/test_golden.py --regenerate [ALGORITHM ...]")
    names = sys.argv[2:] or sorted(GOLDEN)
    recorded = GOLDEN_DIR / "platform.json"
    if set(names) != set(GOLDEN) and recorded.exists() and json.loads(recorded.read_text()) != platform():
        sys.exit(f"the goldens were computed on {recorded.read_text().strip()}: regenerate all of them here, not a few")
    GOLDEN_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            shutil.copyfile(golden_run(name, Path(tmp)), GOLDEN_DIR / f"{name}.csv")
            print(f"wrote {GOLDEN_DIR / name}.csv")
    (GOLDEN_DIR / "platform.json").write_text(json.dumps(platform(), indent=1) + "\n")
