"""Running the planned runs of a reproduction into ``<out>/runs/``, keeping what is finished.

A run whose directory holds a finished run of exactly its configuration is kept with ``--resume`` (and when
``--only`` does not select it), once it reads back whole (``edgeml.rundir.verify``): a damaged one is run again,
and the user is told. Every other selected run runs, after its old directory is deleted. A finished run is
deleted only with ``--force``, and a folder reproduce did not write is never cleared. A run that fails is
recorded and the others go on. A finished run, run now or kept, is verified again and compacted to what the
report reads of it (packed into one archive, ``run.zip``, without the series no figure or claim reads:
``_record``). Every path written lies inside the output folder (``inside``). The runs go through
``edgeml.runner.run``, looked up at each call (tests replace it).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import re
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from edgeml import rundir
from edgeml.errors import RunFailed, UserError
from edgeml.reproduce.load import FILES, Experiment, companions
from edgeml.reproduce.plan import PlannedRun


@dataclass
class Work:
    run: PlannedRun
    cfg: Any  # its edgeml.schema.Config, run.out and run.name set
    runs_now: bool  # whether it runs (else it is kept, or left out when --only skips it and it never finished)
    outdated: bool = False  # --only skips it and its directory holds a finished run of another configuration
    damaged: str | None = None  # why the finished run its directory holds cannot be kept (it runs again)


LOCK = ".edgeml.lock"
"""The lock file a reproduction holds in its output folder while it writes there (``edgeml.reproduce.output_lock``)."""


def inside(root: Path, path: Path, what: str, strict: bool = True) -> Path:
    """``path``, refused (UserError) unless it resolves to a place inside ``root`` (resolved too; ``strict``: not
    ``root`` itself): no name of an experiment's run or figure, no ``..`` and no link may make a reproduction
    write elsewhere."""
    base, resolved = Path(root).resolve(), Path(path).resolve()
    if (strict and resolved == base) or not resolved.is_relative_to(base):
        raise UserError(f"{what} {str(path)!r} resolves to {str(resolved)!r}, outside {str(base)!r}: rename it "
                        f"(one name, no '/' or '..'), or remove the link that leads out")
    return path


@dataclass
class Outcome:
    done: list[PlannedRun] = field(default_factory=list)  # the runs the tables cover: run now or kept
    failures: list[tuple[PlannedRun, str]] = field(default_factory=list)  # (run, reason)


@functools.cache
def _defaults(algorithm: str) -> dict:
    """The default config of ``algorithm``, as its run directories write it (built once per algorithm)."""
    from edgeml.config import build_config

    return rundir.toml_safe(build_config({"run": {"algorithm": algorithm}}, paths=False).to_dict())


def finished(path: Path, cfg, quick: bool) -> bool:
    """Whether ``path`` holds a finished run of exactly ``cfg`` from this reproduction (``--resume`` keeps it).

    The output folder itself (``run.out``) may differ: a reproduction can be continued from another place; and so
    may the torch threads a run computes with (``run.threads``): they set how fast it runs, not what it computes
    (its float sums may round another way), so a run can take more cores where a session allows. A
    setting the run's ``config.toml`` lacks (one added to edgeml after the run) counts as the same where the new
    configuration keeps it at its default: a setting is added with the default that does what edgeml did
    before, so a reproduction spanning sessions keeps its finished runs; unless the new default changed what
    edgeml does (``schema.FORMER_DEFAULTS``): the run lacking it did what that value does."""
    from edgeml.schema import FORMER_DEFAULTS

    def comparable(config: dict) -> dict:
        return {**config, "run": {k: v for k, v in config.get("run", {}).items() if k not in ("out", "threads")}}

    try:
        done, tag = rundir.read_json(path, rundir.SUMMARY), rundir.read_json(path, rundir.EXPERIMENT)
        old, new = rundir.read_config(path), rundir.toml_safe(cfg.to_dict())
        defaults = _defaults(cfg.run.algorithm)
        for section, values in new.items():
            if isinstance(values, dict) and isinstance(old.get(section), dict):
                for key, value in values.items():
                    if key in old[section]:
                        continue
                    if f"{section}.{key}" in FORMER_DEFAULTS:
                        old[section][key] = FORMER_DEFAULTS[f"{section}.{key}"]
                    elif defaults.get(section, {}).get(key) == value:
                        old[section][key] = value
        same = comparable(old) == comparable(new)
    except (OSError, ValueError, UserError):
        return False
    return same and tag.get("quick") == quick and done.get("status") in rundir.FINISHED


def tagged(path: Path) -> bool:
    """Whether ``path`` holds a run a reproduction finished and tagged (``run_one``): one that ``--force`` alone
    may delete. A run cut short before its tag (its driver killed meanwhile) is no finished run of a
    reproduction: it runs again without asking."""
    return rundir.finished_status(path) in rundir.FINISHED and rundir.read_file(path, rundir.EXPERIMENT) is not None


def plan_work(planned: list[PlannedRun], selected: set[str], out: Path, quick: bool, resume: bool) -> list[Work]:
    """Each planned run with its config and whether it runs now: a selected run runs unless ``resume`` keeps it
    finished; a run ``--only`` does not select never runs."""
    from edgeml.config import check_paths

    work = []
    for p in planned:
        cfg = copy.deepcopy(p.cfg)
        cfg.run.name, cfg.run.out = p.dirname, str(out / "runs")
        path = inside(out / "runs", out / "runs" / p.dirname, f"run {p.name!r}: its directory")
        keeps = resume or p.dirname not in selected
        damaged = rundir.verify(path) if keeps and path.is_dir() else None
        kept = keeps and damaged is None and finished(path, cfg, quick)
        outdated = p.dirname not in selected and not kept and not damaged and tagged(path)
        work.append(Work(p, cfg, (p.dirname in selected or damaged is not None) and not kept, outdated, damaged))
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
    if out.exists() and not (out / "experiment.toml").exists() and {p.name for p in out.iterdir()} - {"quick", LOCK}:
        raise UserError(f"{out} exists and was not written by edgeml reproduce: choose a new or empty --out")
    doomed = [w.run.dirname for w in work if w.runs_now and not w.damaged and tagged(out / "runs" / w.run.dirname)]
    if doomed and not force:
        raise UserError(f"{out / 'runs'} holds {len(doomed)} finished run(s) that this would delete and run again "
                        f"({', '.join(doomed[:3])}{', ...' if len(doomed) > 3 else ''}): add --resume to keep those "
                        "with the same configuration, or --force to run them again")
    outdated = [w.run.dirname for w in work if w.outdated]
    if outdated and not force:
        raise UserError(f"{out / 'runs'} holds {len(outdated)} finished run(s) that --only leaves out and that "
                        f"{exp.source.name} now configures otherwise ({', '.join(outdated[:3])}"
                        f"{', ...' if len(outdated) > 3 else ''}): the report would leave them out; continue the "
                        f"folder's own {out / 'experiment.toml'}, select them with --only to run them again, or add "
                        "--force to leave them out")
    for w in work:
        if w.damaged:
            console.print(f"{w.run.dirname}: the finished run kept there does not read back ({w.damaged}): "
                          "running it again", style="yellow", highlight=False, markup=False, soft_wrap=True)
    out.mkdir(parents=True, exist_ok=True)
    copy = inside(out, out / "experiment.toml", "the experiment file's copy")
    if not (copy.exists() and copy.samefile(exp.source)):  # continued from its own copy: already there
        shutil.copyfile(exp.source, copy)
        brought = {p.name: p for p in companions(exp.source)}  # notes.md, ledger.toml: the copy's too
        for name in FILES[1:]:
            (out / name).unlink(missing_ok=True)
            if name in brought:
                shutil.copyfile(brought[name], out / name)
    planned = {w.run.dirname for w in work}
    stale = sorted({p.name for p in (out / "runs").glob("*") if p.is_dir()} - planned) \
        if (out / "runs").is_dir() else []
    base = functools.partial(re.sub, r"-s-?\d+$", "")  # a planned run at a seed this call leaves out (--seeds)
    bases = {base(d) for d in planned}
    other_seeds = [d for d in stale if base(d) != d and base(d) in bases]
    foreign = [d for d in stale if d not in other_seeds]
    if other_seeds:
        console.print(f"{len(other_seeds)} run directories in {out / 'runs'} hold this experiment's runs at "
                      f"seeds this call does not run (--seeds; e.g. {other_seeds[0]}): left alone, and left out of "
                      "the tables",
                      style="dim", highlight=False, markup=False)
    if foreign:
        console.print(f"{len(foreign)} run directories in {out / 'runs'} are no run of this experiment (e.g. "
                      f"{foreign[0]}): left alone, and left out of the tables", style="yellow", highlight=False,
                      markup=False)


def progress_bar(console: Console) -> Progress:
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console)


class Eta:
    """The time a reproduction has left, from its runs' estimated core-seconds (``edgeml.reproduce.cost``):
    before any run ends, what is left over the cores; after, what is left scaled by the wall time the ended
    runs took against their estimates (which absorbs both the estimates' error and the runs side by side)."""

    def __init__(self, estimates: list[float | None], cores: int):
        known = [e for e in estimates if e is not None]
        self.fill = sum(known) / len(known) if known else 1.0  # a run of unknown cost: the mean of the others
        self.left = sum(self.cost(e) for e in estimates)
        self.done, self.cores, self.t0 = 0.0, max(1, cores), time.monotonic()

    def cost(self, estimate: float | None) -> float:
        return self.fill if estimate is None else estimate

    def ended(self, estimate: float | None) -> None:
        self.done += self.cost(estimate)
        self.left -= self.cost(estimate)

    def text(self) -> str:
        if self.left <= 0:
            return ""
        measured = self.done > 0
        seconds = (time.monotonic() - self.t0) * self.left / self.done if measured else self.left / self.cores
        m, s = divmod(int(round(seconds)), 60)
        h, m = divmod(m, 60)
        return f", ETA {'' if measured else '~'}{f'{h}:{m:02d}:{s:02d}' if h else f'{m}:{s:02d}'}"


def execute(exp: Experiment, work: list[Work], selected: set[str], out: Path, quick: bool,
            progress: Progress, jobs: int | None = 1, cluster: bool = False,
            estimates: dict[str, float | None] | None = None, workers: list | None = None) -> Outcome:
    """Run (or keep) every planned run, reporting each on ``progress``; a failed run is recorded. With ``jobs``
    above 1 the runs that run now go side by side in child processes (``edgeml.reproduce.parallel``); with
    ``cluster`` they go to the Ray cluster of the running ``edgeml.reproduce.cluster.session`` (``jobs``: the CPUs
    they may reserve, None: all the cluster's). Either way the outcome lists the runs in the plan's order.
    ``estimates``: each run's estimated core-seconds by run directory name, for the ETA shown (``Eta``);
    ``workers``: run processes already started for them (``edgeml.reproduce.parallel.start_workers``)."""
    from edgeml.analysis.figures import compact_run  # noqa: F401  (matplotlib: imported before any run, not as one ends)

    task = progress.add_task(exp.paper, total=len(work))
    results: dict[int, str | None] = {}  # plan index -> failure reason (None: done); left out: absent
    heads = {k: f"[{k}/{len(work)}] {w.run.name} seed {w.run.seed}" for k, w in enumerate(work, 1)}
    state = {"running": 0, "failed": 0}
    side_by_side = cluster or (jobs or 1) > 1
    estimates = estimates or {}
    eta = Eta([estimates.get(w.run.dirname) for w in work if w.runs_now], jobs or 1)

    def show(name: str = "") -> None:
        counts = f"{state['running']} running, " if side_by_side else ""
        what = f": [cyan]{escape(name)}[/]" if name else ""
        progress.update(task, description=f"{exp.paper}{what} ({counts}{state['failed']} failed{eta.text()})")

    def end(k: int, reason: str | None) -> None:
        w = work[k - 1]
        path = out / "runs" / w.run.dirname
        if reason is None:
            panels = [exp.figures[f].panels if f in exp.figures else None for f in w.run.figures or [""]]
            reason = _record(w.run, path, w.runs_now, progress, heads[k], panels)
        else:
            _say(progress, f"{heads[k]}: FAILED: {reason}", style="red")
        results[k] = reason
        state["failed"] += reason is not None
        if w.runs_now:
            eta.ended(estimates.get(w.run.dirname))
        progress.advance(task)
        show()

    parallel = []
    for k, w in enumerate(work, 1):
        p = w.run
        path = out / "runs" / p.dirname
        if not w.runs_now and p.dirname not in selected and not finished(path, w.cfg, quick):
            _say(progress, f"{heads[k]}: not selected by --only and not run yet: left out")
            progress.advance(task)
            continue
        if not w.runs_now:
            end(k, None)
        elif side_by_side:
            parallel.append((k, p, w.cfg))
        else:
            show(f"{p.name} ({p.algorithm}) seed {p.seed}")
            _starting(progress, heads[k], w)
            end(k, run_one(exp.paper, w, path, quick))
    if parallel:
        def start(k: int) -> None:
            state["running"] += 1
            _starting(progress, heads[k], work[k - 1])

        def stop(k: int, reason: str | None) -> None:
            state["running"] -= 1
            end(k, reason)

        if cluster:
            from edgeml.reproduce.cluster import run_cluster

            run_cluster(parallel, jobs, run_one, lambda k: {"paper": exp.paper, "w": work[k - 1], "quick": quick},
                        lambda k: out / "runs" / work[k - 1].run.dirname, start, stop, lambda running: show())
        else:
            from edgeml.reproduce.parallel import run_parallel

            run_parallel(parallel, jobs, run_one,
                         lambda k: (exp.paper, work[k - 1], out / "runs" / work[k - 1].run.dirname, quick), start,
                         stop, lambda running: show(), started=workers)
    progress.update(task, description=f"{exp.paper}: tables, figures, report")
    outcome = Outcome()
    for k, w in enumerate(work, 1):
        if k in results:
            if results[k] is None:
                outcome.done.append(w.run)
            else:
                outcome.failures.append((w.run, results[k]))
    return outcome


def _starting(progress: Progress, head: str, w: Work) -> None:
    if not progress.console.is_terminal:  # a CI log shows each run as it starts, not only as it ends
        _say(progress, f"{head}: running {w.run.algorithm} ({w.cfg.run.backend})")


def run_one(paper: str, w: Work, path: Path, quick: bool, root: Path | None = None) -> str | None:
    """Run one planned run afresh and tag its directory; returns why it failed when it raised (None when it
    returned: ``_record`` then reads its status). Runs in the driver (``--jobs 1``), in a run's own child
    process (``edgeml.reproduce.parallel``) or in a Ray task on a cluster's node (``edgeml.reproduce.cluster``).
    ``path`` must lie inside ``root`` (default: the run's ``run.out``), or nothing is run or deleted."""
    from edgeml import runner

    p = w.run
    inside(root or Path(w.cfg.run.out), path, f"run {p.name!r}: its directory")  # before anything is deleted
    # there: the folder the run is made in (the output's runs/; on a cluster, the node's temporary folder)
    shutil.rmtree(path, ignore_errors=True)
    reason = None
    try:
        runner.run(w.cfg, quiet=True, path=path)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - one failed run must not end a reproduction of hours
        if not isinstance(exc, (RunFailed, UserError)):  # a bug outside the node programs: keep its traceback
            if runner.debugging():
                raise
            if path.is_dir() and not (path / rundir.ERROR).exists():
                with contextlib.suppress(OSError):
                    (path / rundir.ERROR).write_text(traceback.format_exc())
        reason = f"{type(exc).__name__}: {exc}"
    finally:
        if path.is_dir():
            try:
                rundir.tag_run(path, {"paper": paper, "run": p.name, "spec": p.spec, "point": p.point,
                                      "seed": p.seed, "quick": quick})
            except OSError as exc:  # untagged, the run is no finished run of this reproduction: run again later
                reason = reason or f"cannot tag the run directory: {rundir.describe_write_error(exc)}"
    return reason


def _record(p: PlannedRun, path: Path, ran: bool, progress: Progress, head: str,
            panels: list[list[str] | None] | None = None) -> str | None:
    """A run that ran or was kept: None (done) when its status is a finished one, else the failure reason.

    A finished run is compacted to what the tables, figures and claims read of it (packed into ``run.zip``
    without the series no figure or claim reads: ``edgeml.analysis.figures.compact_run``), so that a
    reproduction, the committed ones in ``results/`` among them, holds no bulk nobody reads; a failed run is
    left as it is for its post-mortem. ``panels``: those of the figure groups the run is drawn in, so that a
    series none of them draws is left out too. ``edgeml run`` writes every series in full, as plain CSV."""
    from edgeml.analysis.figures import compact_run

    try:
        s = rundir.read_json(path, rundir.SUMMARY)
    except (OSError, ValueError) as exc:
        _say(progress, f"{head}: FAILED: its summary.json cannot be read ({exc})", style="red")
        return f"its summary.json cannot be read ({exc})"
    if s.get("status") not in rundir.FINISHED:
        _say(progress, f"{head}: FAILED: {s.get('status')} ({s.get('stop_reason')})", style="red")
        return f"status {s.get('status')}: {s.get('stop_reason')}"
    damaged = rundir.verify(path)  # a run is packed (and counted) only once it reads back whole
    if damaged:
        _say(progress, f"{head}: FAILED: its run directory does not read back ({damaged})", style="red")
        return f"its run directory does not read back: {damaged}"
    compact_run(path, panels)
    acc = s.get("final_accuracy")
    _say(progress, f"{head}{' (kept)' if not ran else ''}: "
                   f"{'accuracy %.3f' % acc if acc is not None else 'no evaluation'}, "
                   f"{s.get('total_steps')} steps ({s.get('stop_reason')})")
    return None


def _say(progress: Progress, text: str, style: str | None = None) -> None:
    # run names and stop reasons are printed as written, never read as console markup
    progress.console.print(text, style=style, highlight=False, markup=False)
