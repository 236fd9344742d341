"""Experiment folders: groups with their defaults, notes.md and its placeholders, the departures ledger, diagnoses
that cite it (one factor per ablation), the paper's own reading of a headline claim; and the budget of
experiments/ (lines, line length)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from edgeml.analysis import placeholders
from edgeml.errors import UserError
from edgeml.reproduce.load import load_experiment
from edgeml.reproduce.plan import plan

EXPERIMENT = """
[experiment]
paper = "toy"
seeds = [0, 1]
baseline = "bsp"
target_accuracy = 0.5

[settings]
run = { backend = "sim" }
stop = { max_time = 10 }
cluster = { workers = 2 }

[[group]]
config = { stop = { max_time = 20 }, network = { latency_s = 0.0 } }
[[group.runs]]
algorithm = "bsp"
[[group.runs]]
name = "bsp-net"
algorithm = "bsp"
config = { network = { latency_s = 0.01 } }
[[group.runs]]
name = "bsp-net-wide"
algorithm = "bsp"
config = { network = { latency_s = 0.01 }, data = { batch_size = 8 } }
[[group.runs]]
name = "bsp-same"
algorithm = "bsp"

[[group]]
metric = "time_to_target"
kind = "ratio"
baseline = "bsp"
[[group.claims]]
text = "ssp is faster"
run = "ssp"
direction = "lower"
DIAGNOSIS

[[runs]]
name = "ssp"
algorithm = "ssp"
config = { stop = { max_time = 20 }, network = { latency_s = 0.0 } }
"""

LEDGER = """
[[departure]]
id = "network"
what = "network"
kind = "setting"
paper = "a LAN"
section = "Toy Sec. 1"
quote = "over a LAN"
ours = "an ideal network"
why = "the barrier alone"
keys = ["network.latency_s"]
tests = ["bsp-net"]

[[departure]]
id = "sampler"
what = "the order of a shard"
kind = "implementation"
paper = "class by class"
section = "Toy Alg. 1"
quote = "3. visit the shard class by class"
ours = "reshuffled every epoch"
why = "i.i.d. batches"
keys = []
tests = []

[[departure]]
id = "length"
what = "run length"
kind = "budget"
paper = "to convergence"
section = "Toy Sec. 5"
quote = "until it converges"
ours = "20 s"
why = "CI"
keys = ["stop.max_time"]
tests = []
"""


def folder(tmp_path: Path, diagnosis: str = "", ledger: str | None = LEDGER, notes: str | None = None,
           experiment: str = EXPERIMENT) -> str:
    d = tmp_path / "toy"
    d.mkdir(exist_ok=True)
    (d / "experiment.toml").write_text(experiment.replace("DIAGNOSIS", diagnosis))
    for name, text in (("ledger.toml", ledger), ("notes.md", notes)):
        (d / name).unlink(missing_ok=True)
        if text is not None:
            (d / name).write_text(text)
    return str(d)


def refused(path: str) -> str:
    with pytest.raises(UserError) as info:
        load_experiment(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_group_gives_its_entries_defaults_that_an_entry_overrides(tmp_path):
    exp = load_experiment(folder(tmp_path))
    # the top-level [[runs]] come first, then each group's entries in order
    assert [r.name for r in exp.runs] == ["ssp", "bsp", "bsp-net", "bsp-net-wide", "bsp-same"]
    layers = {p.name: p.layers for p in plan(exp)}
    assert layers["bsp"]["stop"]["max_time"] == 20 and layers["bsp"]["network"] == {"latency_s": 0.0}
    assert layers["bsp-net"]["network"] == {"latency_s": 0.01}          # the entry wins, key by key
    assert layers["bsp-net-wide"]["data"] == {"batch_size": 8} and layers["bsp-net-wide"]["stop"]["max_time"] == 20
    assert exp.claims[0].metric == "time_to_target" and exp.claims[0].baseline == "bsp"  # claims group too


def test_a_group_of_several_algorithms_gives_each_its_own_section_and_no_other(tmp_path):
    mixed = EXPERIMENT.replace('[[group]]\nconfig = { stop = { max_time = 20 }, network = { latency_s = 0.0 } }',
                               '[[group]]\nconfig = { stop = { max_time = 20 }, bsp = { lr = 0.2 }, ssp = { lr = 0.3, '
                               'staleness = 2 } }\nquick = { bsp.lr = 0.4, ssp.lr = 0.5 }', 1)
    mixed = mixed.replace('name = "bsp-same"\nalgorithm = "bsp"', 'name = "ssp-grouped"\nalgorithm = "ssp"\n'
                          'config.ssp.lr = 0.6')
    exp = load_experiment(folder(tmp_path, experiment=mixed))
    for quick, bsp_lr, ssp_lr in ((False, 0.2, 0.6), (True, 0.4, 0.5)):  # --quick: the quick layers last
        cfgs = {p.name: p.cfg for p in plan(exp, quick=quick)}
        assert cfgs["bsp"].algo.lr == bsp_lr and cfgs["bsp-net"].algo.lr == bsp_lr  # its own section, from the group
        assert cfgs["ssp-grouped"].algo.lr == ssp_lr and cfgs["ssp-grouped"].algo.staleness == 2  # the entry wins
        assert "ssp" not in plan(exp, quick=quick)[1].layers  # bsp's runs never see ssp's section
    # a section of an algorithm no run of the group runs is a mistake, named; so is one in a run's own config
    idle = mixed.replace("quick = { bsp.lr = 0.4, ssp.lr = 0.5 }", "quick = { bsp.lr = 0.4, asp.lr = 0.5 }")
    assert "[asp]" in refused(folder(tmp_path, experiment=idle))
    own = mixed.replace('config.ssp.lr = 0.6', 'config.bsp.lr = 0.6')
    assert "bsp" in refused(folder(tmp_path, experiment=own))


def test_claims_of_a_group_share_its_reading_of_the_quantity_and_an_entry_may_give_its_own(tmp_path):
    shared = EXPERIMENT.replace('baseline = "bsp"\n[[group.claims]]',
                                'baseline = "bsp"\nreading = { quote = "the time to 0.5", section = "Toy Sec. 2" }\n'
                                '[[group.claims]]')
    shared = shared.replace('direction = "lower"\nDIAGNOSIS',
                            'direction = "lower"\nDIAGNOSIS\n[[group.claims]]\ntext = "ssp is faster, read its way"\n'
                            'run = "ssp"\nreading = { quote = "the time to 0.6" }')
    claims = load_experiment(folder(tmp_path, experiment=shared)).claims
    assert [(c.reading.quote, c.reading.section) for c in claims] == [("the time to 0.5", "Toy Sec. 2"),
                                                                      ("the time to 0.6", "Toy Sec. 2")]


def test_a_diagnosis_cites_ledger_rows_and_its_cause_follows_from_their_kind(tmp_path):
    exp = load_experiment(folder(tmp_path, 'diagnosis = { departures = ["network"], text = "the LAN", '
                                           'ablations = ["ssp vs bsp-net"] }'))
    d = exp.claims[0].diagnosis
    assert d.cause == "setting" and d.departures == ("network",) and [x.id for x in exp.ledger][:1] == ["network"]


def test_a_diagnosis_without_a_ledger_row_is_refused(tmp_path):
    message = refused(folder(tmp_path, 'diagnosis = { cause = "setting", text = "the LAN" }'))
    assert "departures" in message
    message = refused(folder(tmp_path, 'diagnosis = { departures = ["network"], text = "the LAN" }', ledger=None))
    assert "'network'" in message and "ledger.toml" in message


def test_an_unknown_departure_id_is_refused(tmp_path):
    message = refused(folder(tmp_path, 'diagnosis = { departures = ["netwrok"], text = "the LAN" }'))
    assert "'netwrok'" in message and "network" in message


def test_an_ablation_that_differs_in_a_key_it_does_not_cite_is_refused_with_the_key_named(tmp_path):
    message = refused(folder(tmp_path, 'diagnosis = { departures = ["network"], text = "the LAN", '
                                       'ablations = ["ssp vs bsp-net-wide"] }'))
    assert "data.batch_size" in message and "network.latency_s" not in message.split("differs")[-1]
    # citing more rows does not help: some cited row must name the key
    message = refused(folder(tmp_path, 'diagnosis = { departures = ["network", "length"], cause = "setting", '
                                       'text = "the LAN", ablations = ["ssp vs bsp-net-wide"] }'))
    assert "data.batch_size" in message


def test_an_ablation_that_changes_nothing_is_refused(tmp_path):
    message = refused(folder(tmp_path, 'diagnosis = { departures = ["network"], text = "the LAN", '
                                       'ablations = ["ssp vs bsp-same"] }'))
    assert "'ssp vs bsp-same'" in message and "changes no config key" in message


def test_implementation_needs_a_cited_row_of_that_kind(tmp_path):
    message = refused(folder(tmp_path, 'diagnosis = { departures = ["network"], cause = "implementation", '
                                       'text = "our code" }'))
    assert "implementation" in message and "algorithm line" in message
    exp = load_experiment(folder(tmp_path, 'diagnosis = { departures = ["sampler"], text = "our code" }'))
    assert exp.claims[0].diagnosis.cause == "implementation"


def test_rows_of_several_kinds_need_a_cause_and_claim_needs_ablations(tmp_path):
    message = refused(folder(tmp_path, 'diagnosis = { departures = ["network", "length"], text = "both" }'))
    assert "setting, budget" in message
    exp = load_experiment(folder(tmp_path, 'diagnosis = { departures = ["network", "length"], cause = "budget", '
                                           'text = "both" }'))
    assert exp.claims[0].diagnosis.cause == "budget"
    assert "ablations" in refused(folder(tmp_path, 'diagnosis = { departures = ["network"], cause = "claim", '
                                                   'text = "it does not hold" }'))


def test_the_ledger_is_strict(tmp_path):
    assert "kind" in refused(folder(tmp_path, ledger=LEDGER.replace('kind = "budget"', 'kind = "luck"')))
    assert "'network.latncy_s'" in refused(folder(tmp_path, ledger=LEDGER.replace('["network.latency_s"]',
                                                                                   '["network.latncy_s"]')))
    assert "'bsp-nett'" in refused(folder(tmp_path, ledger=LEDGER.replace('["bsp-net"]', '["bsp-nett"]')))
    assert "two departures" in refused(folder(tmp_path, ledger=LEDGER.replace('id = "length"', 'id = "network"')))
    assert "lacks why" in refused(folder(tmp_path, ledger=LEDGER.replace('why = "CI"\n', '')))


def test_a_headline_claim_states_the_papers_reading(tmp_path):
    headline = 'headline = true\nseeds = [0, 1]'
    assert "reading" in refused(folder(tmp_path, headline))
    reading = '\nreading = { quote = "the time to 0.8", section = "Toy Sec. 5" }'
    exp = load_experiment(folder(tmp_path, headline + reading))
    assert exp.claims[0].reading.words() == '"the time to 0.8" (Toy Sec. 5)'
    assert load_experiment(folder(tmp_path, headline + '\nreading = "open"')).claims[0].reading.open
    assert "reading must be" in refused(folder(tmp_path, headline + '\nreading = { quote = "x" }'))


def test_notes_give_the_prose_by_heading_and_their_placeholders_are_checked(tmp_path):
    notes = ('# Toy\n\n## description\n\nBSP ends at {{ mean(final_accuracy, "bsp") :.3f }}.\n\n'
             '## differences\n\nNone.\n')
    exp = load_experiment(folder(tmp_path, notes=notes))
    assert exp.description == 'BSP ends at {{ mean(final_accuracy, "bsp") :.3f }}.' and exp.differences == "None."
    assert "'fig9'" in refused(folder(tmp_path, notes="## fig9\n\ntext\n"))
    assert "does not parse" in refused(folder(tmp_path, notes='## description\n\n{{ eval("1") }}\n'))
    assert "'bsq'" in refused(folder(tmp_path, notes='## description\n\n{{ mean(final_accuracy, "bsq") }}\n'))
    assert "format" in refused(folder(tmp_path, notes='## description\n\n{{ max(final_loss, "bsp") :{0} }}\n'))
    both = EXPERIMENT.replace('paper = "toy"', 'paper = "toy"\ndescription = "twice"')
    assert "both" in refused(folder(tmp_path, notes="## description\n\nonce\n", experiment=both))


def test_a_placeholder_is_filled_from_the_runs():
    per_run = pd.DataFrame({"run": ["bsp", "bsp", "ssp[cluster.hetero=1:3]", "ssp[cluster.hetero=1:3]"],
                            "seed": [0, 1, 0, 1], "total_byte_hops": [675_793_560, 676_000_000, 1e6, 3e6],
                            "final_accuracy": [0.8, 0.9, 0.5, 0.7]})
    spec = {"bsp": "bsp", "ssp[cluster.hetero=1:3]": "ssp"}
    text = ('seed 0 sends {{ mean(total_byte_hops, "bsp", seed=0) * 1e-6 :.0f }} MB; SSP (an entry picks its '
            'points) ends at {{ mean(final_accuracy, "ssp") :.2f }}, at best {{ max(final_accuracy, "ss*") }} over '
            '{{ n(final_accuracy, "ssp") }} runs; {{ mean(final_accuracy, "asp") }}')
    assert placeholders.fill(text, per_run, spec) == ("seed 0 sends 676 MB; SSP (an entry picks its points) ends at "
                                                      "0.60, at best 0.7 over 2 runs; n/a")
    assert placeholders.fill("no placeholder", None, {}) == "no placeholder"
    with pytest.raises(UserError, match="no column 'finl_accuracy'"):
        placeholders.fill('{{ mean(finl_accuracy, "bsp") }}', per_run, spec)


def test_diagnoses_and_ledger_rows_take_placeholders_checked_at_load_and_filled_from_the_runs(tmp_path):
    good = '{{ mean(final_accuracy, "bsp") :.2f }}'
    exp = load_experiment(folder(tmp_path, 'diagnosis = { departures = ["network"], text = "BSP ends at '
                                           + good.replace('"', '\\"') + '" }',
                                 ledger=LEDGER.replace('why = "the barrier alone"', f"why = 'BSP ends at {good}'")))
    assert good in exp.claims[0].diagnosis.text
    bad = '{{ mean(final_accuracy, "bsq") }}'
    assert "'bsq'" in refused(folder(tmp_path, 'diagnosis = { departures = ["network"], text = "at '
                                               + bad.replace('"', '\\"') + '" }'))
    assert "'bsq'" in refused(folder(tmp_path, ledger=LEDGER.replace('ours = "an ideal network"', f"ours = '{bad}'")))
    assert "does not parse" in refused(folder(tmp_path, ledger=LEDGER.replace('ours = "an ideal network"',
                                                                             "ours = '{{ eval(1) }}'")))
    from edgeml.analysis.ledger import ledger_lines

    per_run = pd.DataFrame({"run": ["bsp", "bsp"], "seed": [0, 1], "final_accuracy": [0.8, 0.9]})
    table = "\n".join(ledger_lines(exp.ledger, lambda t: placeholders.fill(t, per_run, {"bsp": "bsp"})))
    assert "BSP ends at 0.85" in table and "{{" not in table


ROOT = Path(__file__).resolve().parents[1] / "experiments"
BEFORE = 4198  # experiments/ in lines when each paper's experiment was one TOML file
MIGRATED = ("adacomp", "adsp", "adsp-cifar10", "baselines", "edgegossip", "edgegossip-cifar10", "esync", "snap")
"""The experiments that were those files (an experiment added since, such as twins, has no former length)."""


def _lines(names: tuple[str, ...] | None = None) -> dict[Path, list[str]]:
    return {p: p.read_text().splitlines() for p in sorted(ROOT.glob("*/*"))
            if p.suffix in (".toml", ".md") and (names is None or p.parent.name in names)}


def test_no_line_of_experiments_is_over_160_characters():
    long = [f"{p.relative_to(ROOT)}:{i}" for p, lines in _lines().items() for i, x in enumerate(lines, 1)
            if len(x) > 160]
    assert not long, f"lines over 160 characters: {', '.join(long[:5])}"


def test_experiments_are_a_third_shorter_than_the_single_files_were():
    # the ledgers are new (the departures tables): the budget is the matrix, the claims and the notes
    assert all((ROOT / name / "experiment.toml").is_file() for name in MIGRATED)
    total = sum(len(lines) for p, lines in _lines(MIGRATED).items() if p.name != "ledger.toml")
    assert total <= BEFORE * 2 / 3, f"experiments/ holds {total} lines (ledgers aside), over {BEFORE * 2 // 3}"


def test_every_experiment_is_a_folder_and_loads_with_its_ledger():
    from edgeml.reproduce.load import experiment_names

    names = experiment_names()
    assert {"adsp", "esync", "snap", "adacomp", "edgegossip", "baselines"} <= set(names)
    assert not list(ROOT.glob("*.toml"))  # the single files are migrated, not kept beside
    for paper in ("adsp", "esync", "snap", "adacomp", "edgegossip"):
        assert (ROOT / paper / "ledger.toml").is_file() and (ROOT / paper / "notes.md").is_file()
