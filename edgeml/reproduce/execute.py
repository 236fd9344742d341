"""Running the planned runs of a reproduction into ``<out>/runs/``, keeping what is finished.

A run whose directory holds a finished run of exactly its configuration is kept with ``--resume`` (and when
``--only`` does not select it); every other selected run runs, after its old directory is deleted. A finished
run is deleted only with ``--force``, and a folder reproduce did not write is never cleared. A run that fails
is recorded and the others go on. The runs go through ``edgeml.runner.run``, looked up at each call (tests
replace it).
"""

from __future__ import annotations

import copy
import json
import shutil
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from edgeml import rundir
from edgeml.errors import RunFailed, UserError
from edgeml.reproduce.load import Experiment
from edgeml.reproduce.plan import PlannedRun


@dataclass
class Work:
    run: PlannedRun
    cfg: Any  # its edgeml.schema.Config, run.out and run.name set
    runs_now: bool  # whether it runs (else it is kept, or left out when --only skips it and it never finished)


@dataclass
class Outcome:
    done: list[PlannedRun] = field(default_factory=list)  # the runs the tables cover: run now or kept
    failures: list[tuple[PlannedRun, str]] = field(default_factory=list)  # (run, reason)


def finished(path: Path, cfg, quick: bool) -> bool:
    """Whether ``path`` holds a finished run of exactly ``cfg`` from this reproduction (``--resume`` keeps it).

    The output folder itself (``run.out``) may differ: a reproduction can be continued from another place. A
    setting the run's ``config.toml`` lacks (one added to edgeml after the run) counts as the same where the new
    configuration keeps it at its default: a setting is added with the default that does what edgeml did
    before, so a reproduction spanning sessions keeps its finished runs."""
    from edgeml.config import build_config, read_toml

    def comparable(config: dict) -> dict:
        return {**config, "run": {k: v for k, v in config.get("run", {}).items() if k != "out"}}

    try:
        done = json.loads((path / rundir.SUMMARY).read_text())
        tag = json.loads((path / rundir.EXPERIMENT).read_text())
        old, new = read_toml(path / rundir.CONFIG), rundir.toml_safe(cfg.to_dict())
        defaults = rundir.toml_safe(build_config({"run": {"algorithm": cfg.run.algorithm}}, paths=False).to_dict())
        for section, values in new.items():
            if isinstance(values, dict) and isinstance(old.get(section), dict):
                for key, value in values.items():
                    if key not in old[section] and defaults.get(section, {}).get(key) == value:
                        old[section][key] = value
        same = comparable(old) == comparable(new)
    except (OSError, ValueError, UserError):
        return False
    return same and tag.get("quick") == quick and done.get("status") in rundir.FINISHED


def plan_work(planned: list[PlannedRun], selected: set[str], out: Path, quick: bool, resume: bool) -> list[Work]:
    """Each planned run with its config and whether it runs now: a selected run runs unless ``resume`` keeps it
    finished; a run ``--only`` does not select never runs."""
    from edgeml.config import check_paths

    work = []
    for p in planned:
        cfg = copy.deepcopy(p.cfg)
        cfg.run.name, cfg.run.out = p.dirname, str(out / "runs")
        kept = (resume or p.dirname not in selected) and finished(out / "runs" / p.dirname, cfg, quick)
        work.append(Work(p, cfg, p.dirname in selected and not kept))
    checked = set()
    for w in work:  # every data set a starting run reads is there (or downloadable) before any run starts
        key = (w.cfg.data.dataset, w.cfg.data.root, w.cfg.data.download)
        if w.runs_now and key not in checked:
            checked.add(key)
            try:
                check_paths(w.cfg)
            except UserError as exc:
                raise UserError(f"run {w.run.name!r}: {exc}") from None
    return work


def prepare_out(exp: Experiment, out: Path, work: list[Work], force: bool, console: Console) -> None:
    """Refuse to clear a directory reproduce did not write, or to delete finished runs without ``force``; then
    create ``out`` with the experiment file, and name run directories that are no run of this experiment."""
    if out.exists() and not (out / "experiment.toml").exists() and {p.name for p in out.iterdir()} - {"quick"}:
        raise UserError(f"{out} exists and was not written by edgeml reproduce: choose a new or empty --out")
    doomed = [w.run.dirname for w in work
              if w.runs_now and rundir.finished_status(out / "runs" / w.run.dirname) in rundir.FINISHED]
    if doomed and not force:
        raise UserError(f"{out / 'runs'} holds {len(doomed)} finished run(s) that this would delete and run again "
                        f"({', '.join(doomed[:3])}{', ...' if len(doomed) > 3 else ''}): add --resume to keep those "
                        "with the same configuration, or --force to run them again")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(exp.source, out / "experiment.toml")
    planned = {w.run.dirname for w in work}
    stale = sorted({p.name for p in (out / "runs").glob("*") if p.is_dir()} - planned) \
        if (out / "runs").is_dir() else []
    if stale:
        console.print(f"{len(stale)} run directories in {out / 'runs'} are no run of this experiment (e.g. "
                      f"{stale[0]}): left alone, and left out of the tables", style="yellow", highlight=False,
                      markup=False)


def progress_bar(console: Console) -> Progress:
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console)


def execute(exp: Experiment, work: list[Work], selected: set[str], out: Path, quick: bool,
            progress: Progress) -> Outcome:
    """Run (or keep) every planned run in order, reporting each on ``progress``; a failed run is recorded."""
    outcome = Outcome()
    task = progress.add_task(exp.paper, total=len(work))
    for k, w in enumerate(work, 1):
        p = w.run
        progress.update(task, description=f"{exp.paper}: [cyan]{escape(p.name)}[/] ({p.algorithm}) seed {p.seed}")
        progress.advance(task)
        head = f"[{k}/{len(work)}] {p.name} seed {p.seed}"
        path = out / "runs" / p.dirname
        if not w.runs_now and p.dirname not in selected and not finished(path, w.cfg, quick):
            _say(progress, f"{head}: not selected by --only and not run yet: left out")
            continue
        if w.runs_now:
            path = _run(exp, w, path, quick, outcome, progress, head)
            if path is None:
                continue
        _record(p, path, w.runs_now, outcome, progress, head)
    progress.update(task, description=f"{exp.paper}: tables, figures, report")
    return outcome


def _run(exp: Experiment, w: Work, path: Path, quick: bool, outcome: Outcome, progress: Progress,
         head: str) -> Path | None:
    """Run one planned run afresh and tag its directory; None when it raised (recorded as a failure)."""
    from edgeml import runner

    p = w.run
    shutil.rmtree(path, ignore_errors=True)
    if not progress.console.is_terminal:  # a CI log shows each run as it starts, not only as it ends
        _say(progress, f"{head}: running {p.algorithm} ({w.cfg.run.backend})")
    try:
        path = runner.run(w.cfg, quiet=True, path=path)
        return path
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - one failed run must not end a reproduction of hours
        if not isinstance(exc, (RunFailed, UserError)):  # a bug outside the node programs: keep its traceback
            if runner.debugging():
                raise
            if path.is_dir() and not (path / rundir.ERROR).exists():
                (path / rundir.ERROR).write_text(traceback.format_exc())
        outcome.failures.append((p, f"{type(exc).__name__}: {exc}"))
        _say(progress, f"{head}: FAILED: {exc}", style="red")
        return None
    finally:
        if path.is_dir():
            rundir.tag_run(path, {"paper": exp.paper, "run": p.name, "spec": p.spec, "point": p.point,
                                  "seed": p.seed, "quick": quick})


def _record(p: PlannedRun, path: Path, ran: bool, outcome: Outcome, progress: Progress, head: str) -> None:
    """A run that ran or was kept: done when its status is a finished one, else a failure."""
    s = json.loads((path / rundir.SUMMARY).read_text())
    if s.get("status") not in rundir.FINISHED:
        outcome.failures.append((p, f"status {s.get('status')}: {s.get('stop_reason')}"))
        _say(progress, f"{head}: FAILED: {s.get('status')} ({s.get('stop_reason')})", style="red")
        return
    acc = s.get("final_accuracy")
    _say(progress, f"{head}{' (kept)' if not ran else ''}: "
                   f"{'accuracy %.3f' % acc if acc is not None else 'no evaluation'}, "
                   f"{s.get('total_steps')} steps ({s.get('stop_reason')})")
    outcome.done.append(p)


def _say(progress: Progress, text: str, style: str | None = None) -> None:
    # run names and stop reasons are printed as written, never read as console markup
    progress.console.print(text, style=style, highlight=False, markup=False)
