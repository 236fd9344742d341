"""Every setting's default, as recorded in ``golden/defaults.json``: a default that changes must say what the runs
made before the setting existed did (``schema.FORMER_DEFAULTS``).

``edgeml reproduce --resume`` keeps a finished run whose config lacks a setting (one added to edgeml after the run)
as a run of the setting's default, since a setting is added with the default that does what edgeml did before. A
default changed later breaks that: a run made before the setting existed would be kept as a run of the new
default, which it is not (SNAP's ``disagreement``: runs that took published values were kept as runs of Eq. (8)'s
own values). So a changed default fails here until it is declared in ``FORMER_DEFAULTS``; then record the
defaults again::

    PYTHONPATH=$PWD python tests/test_defaults.py --record

A setting added or removed fails here too, so that the record stays whole.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RECORD = Path(__file__).resolve().parent / "golden" / "defaults.json"


def defaults() -> dict[str, object]:
    """``section.key``: its default, over every built-in algorithm's default config (``run.algorithm`` aside; not the
    algorithms a plugin or a test registers)."""
    from edgeml import rundir
    from edgeml.algorithms import BUILTIN
    from edgeml.config import build_config

    found: dict[str, object] = {}
    for algorithm in sorted(BUILTIN):
        config = rundir.toml_safe(build_config({"run": {"algorithm": algorithm}}, paths=False).to_dict())
        for section, values in config.items():
            for key, value in (values.items() if isinstance(values, dict) else ()):
                if f"{section}.{key}" != "run.algorithm":
                    found.setdefault(f"{section}.{key}", value)
    return dict(sorted(found.items()))


def test_a_changed_default_says_what_the_runs_made_before_its_setting_did():
    from edgeml.schema import FORMER_DEFAULTS

    recorded, now = json.loads(RECORD.read_text()), defaults()
    changed = sorted(k for k in recorded.keys() & now.keys() if recorded[k] != now[k] and k not in FORMER_DEFAULTS)
    moves = ", ".join(f"{k} {recorded[k]!r} -> {now[k]!r}" for k in changed)
    assert not changed, (f"defaults changed: {moves}: add each to schema.FORMER_DEFAULTS with what a run made "
                         "without the setting did, then record the defaults (python tests/test_defaults.py --record)")
    assert recorded.keys() == now.keys(), (f"settings added {sorted(now.keys() - recorded.keys())}, removed "
                                           f"{sorted(recorded.keys() - now.keys())}: record the defaults "
                                           "(python tests/test_defaults.py --record)")


def test_every_former_default_is_a_value_its_setting_takes_and_no_longer_its_default():
    from edgeml.schema import FORMER_DEFAULTS

    now = defaults()
    for setting, former in FORMER_DEFAULTS.items():
        assert setting in now, setting
        assert type(former) is type(now[setting]) and former != now[setting], setting


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/test_defaults.py --record")
    record = defaults()
    RECORD.write_text(json.dumps(record, indent=1) + "\n")
    print(f"recorded {len(record)} defaults in {RECORD}")
