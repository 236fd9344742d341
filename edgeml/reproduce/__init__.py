"""Paper reproductions: ``edgeml reproduce PAPER`` runs an experiment file and writes ``--out`` (by default
``runs/reproduce/<paper>/``, and ``.../quick/`` with ``--quick``: a scratch folder git ignores; the committed
reproductions under ``results/<paper>/`` are written with ``--out results/<paper>``).

Output: ``experiment.toml``, ``notes.md`` and ``ledger.toml`` (a copy of the experiment used), ``runs/``,
``compare.csv``, ``compare_runs.csv``,
``compare_reach.csv``, ``compare.md``, ``figures/`` (PNG and PDF, one folder per figure group), ``verdicts.csv``
(each claim's result: ``edgeml reproduce --summary`` renders the scoreboard ``results/README.md`` from them) and
``REPORT.md``: the verdicts, then one section per figure group with the paper's statements, what was measured,
the verdicts (with the diagnoses of those that do not read holds) and the figures. Finished runs are never
deleted without ``--force``; a run that fails is recorded (its reason in REPORT.md) and the others go on.
A reproduction holds ``--out`` alone while it writes there (``output_lock``: a second one on the same folder is
refused, naming the first's PID), writes nothing that resolves outside it, keeps a finished run only once it
reads back whole (``edgeml.rundir.verify``; one that does not is run again), and stops on a full disk with one
line (finished runs kept, for ``--resume``).

The steps, one module each: ``load`` reads the experiment file into typed dataclasses, ``plan`` turns it into
planned runs (pure), ``execute`` runs or keeps them (one at a time, side by side in child processes with
``parallel``, or as Ray tasks on a cluster with ``cluster``), ``render`` writes the tables
(``edgeml.analysis.compare``), figures (``edgeml.analysis.figures``), verdicts (``edgeml.analysis.verdicts``) and
REPORT.md from the finished runs alone.

An experiment is a folder ``experiments/<paper>/``: ``experiment.toml`` (below); ``notes.md``, the prose under
the headings ``## description``, ``## differences`` and ``## <figure id>`` (each instead of the key of that name
below), where a measured number is a placeholder the report fills from the runs, ``{{ mean(final_accuracy,
"snap-100") }}`` (``edgeml.analysis.placeholders``); and ``ledger.toml``, the paper's departures
(``edgeml.analysis.ledger``), which the report opens with and every diagnosis cites. A lone ``.toml`` file is an
experiment without notes or ledger. ``experiment.toml``::

    [experiment]
    paper = "baselines"          # the default output is runs/reproduce/<paper>/ (default: the file name)
    title = "..."
    description = "..."          # one paragraph for REPORT.md
    seeds = [0, 1, 2]            # every run is repeated per seed (run.seed), unless the run names its own
    quick_seeds = [0, 1]         # optional: with --quick, each run's seeds among these
    baseline = "bsp"             # run name speedups are measured against
    target_loss = [0.9, 1.0]     # or target_accuracy: the targets of the time-to-target tables (the first is
                                 # the headline); neither: automatic (the runs' stop target, else 95% of the
                                 # weakest run's best accuracy)
    rule = "stays"               # convergence rule (edgeml.analysis.convergence): stays, smoothed, first, stopping
    differences = "..."          # where settings differ from the paper and why
    ci = true                    # false keeps the experiment out of scripts/reproduce_quick.sh
    labels = { "network.commit_delay_s" = "delay {} s", "cluster.workers" = "servers" }   # optional: short
                                 # names of config keys in legends and axes ("delay 8 s", "servers=100"; axis
                                 # "delay (s)"); without one, a word value stands alone ("sim", "H=1.6") and a
                                 # number is named by its field ("workers=100")

    [settings]                   # config layers shared by all runs: the sections of a run config
    data = { dataset = "fashion-mnist" }
    [quick]                      # layers merged over [settings] and each run's config with --quick
    data = { dataset = "digits" }

    [[figures]]                  # optional: a figure group's panels and what the paper says about them
    id = "fig5"                  # runs join it with figure = "fig5"; its files go to figures/fig5/
    title = "Fig. 5: ADSP against Fixed ADACOMM at four heterogeneity degrees"
    cite = "ADSP Fig. 5"     # the paper's figure; captions cite it and nothing else
    text = "..."                 # optional: what the paper's figure shows, for REPORT.md
    panels = ["bars", "convergence_time"]   # optional: the panels to draw (default: every one with data)
    against = [{ x = "cluster.hetero", y = ["time_to_target"] }]   # optional: metrics against a swept
                                 # setting (or against a measured quantity), per method with intervals
    settled = { decision = "commit_rate", fixed = "adsp.fixed_rate" }   # optional: a table of what each run
                                 # that searched the value online settled on, beside the group's best fixed one
    per_class = true             # optional: a table of each run's final accuracy per class (eval.per_class)
    runs = ["fig5-*", "ssp[cluster.hetero=H=2]"]   # optional: of the runs that name this group, only those
                                 # these pick (as --only picks: exact names, globs), e.g. one point of a sweep

    [[runs]]
    name = "ssp"                 # unique; defaults to algorithm
    algorithm = "ssp"
    label = "SSP (s = 3)"        # optional: what figures (one colour per label) and the verdicts' words call
                                 # its runs; default: the algorithm's name in the papers ("SSP")
    config = { ssp = { staleness = 3 } }     # optional layers for this run
    quick = { stop = { max_time = 5 } }      # optional layers for this run with --quick
    sweep = { "cluster.hetero" = ["H=1", "H=2"] }   # optional: one run per value (product over keys),
                                 # named "ssp[cluster.hetero=H=2]"; "algorithm.lr" sweeps each run's own
                                 # algorithm's key (ssp.lr here), so methods pair at one shared value
    points = { "cluster.hetero=H=2" = { ssp = { staleness = 2 } } }   # optional: a layer for one point of the
                                 # full sweep (a value tuned per setting), after the sweep's values; --quick
                                 # runs take the run's quick layer instead
    quick_sweep = { "cluster.hetero" = ["H=1"] }     # optional: the sweep with --quick (default: sweep)
    seeds = [0]                  # optional: this run's seeds instead of the experiment's
    quick_seeds = [0]            # optional: its seeds with --quick (default: its seeds among the experiment's
                                 # quick_seeds, else its first)
    tunes = { key = "ssp.staleness", by = "time_to_target", runs = { "ssp-timed" = "ssp.staleness" } }
                                 # optional, on an entry that sweeps candidates on tuning seeds: the report
                                 # tables the candidate each setting (its other sweep keys) chooses beside the
                                 # value the tuned runs use there (edgeml.reproduce.tuning); with
                                 # edge = "above" (a step size) nothing above a diverged candidate is chosen
    figure = "fig5"              # optional: the figure group(s) it is drawn in (an id, a list of ids, or a
                                 # title of its own: "Fig. 2: SSP" draws every panel in figures/fig-2/)

    [[group]]                    # entries with defaults: any key of an entry but name, label, points and tunes;
    figure = "fig6"              # tables merge key by key (the entry winning), other values are the entry's
    config = { stop = { max_time = 100000 }, ssp = { staleness = 3 } }  # where it gives one; its entries come
                                 # after the [[runs]]; of a section per algorithm (as in [settings]) each run
                                 # takes its own algorithm's, in config and quick, and no other's
    [[group.runs]]
    name = "fig6-bsp"
    algorithm = "bsp"
                                 # (or the group's entries a line each: runs = [{ name = "fig6-ssp", ... }])

    [[claims]]                   # see edgeml.analysis.claims (kinds, fields) and .verdicts
    text = "ADSP converges 80% faster than BSP (Fig. 4b)"
    metric = "time_to_target"
    run = "adsp"
    baseline = "bsp"
    kind = "reduction"
    paper_value = 0.80
    seeds = [0, 1, 2]            # optional: the seeds it is decided on (default: all the runs share)
    targets = [0.9, 1.0]         # optional: check it at these targets (default: the headline target);
                                 # "reached" among them: the highest accuracy (lowest loss), in steps of
                                 # 0.005, that every run of the claim's run and baseline reaches
    # epochs = [8, 30]           # optional, in the place of targets: read where each run has completed that
                                 # many epochs (the time for the same epochs; metric = "accuracy" there)
    headline = true              # optional: the paper's abstract or conclusions state it (needs 5 seeds)
    rule = "first"               # optional: the arrival rule it is decided on (window = N with "smoothed")
    reading = { quote = "...", section = "ADSP Sec. 5.2" }   # how the paper defines the quantity (a headline
                                 # claim must say; "open" where the paper leaves it open)
    diagnosis = { departures = ["budget"], text = "...", ablations = ["adsp-long"] }   # optional: why it does
                                 # not read holds: the ledger rows it blames, its cause their kind (or cause =
                                 # "claim": the ablations put the paper's own setting there and it still falls
                                 # short), with the runs that test it, each decided in the claim's place ("run
                                 # vs baseline": an ablation of both sides) and each differing from the claim's
                                 # runs in the cited rows' config keys alone
    # claims may be grouped as runs are: [[group]] with claim keys as defaults (all but text and diagnosis:
    # claims on one quantity share the paper's reading of it), then [[group.claims]]

Layers merge in this order, later winning key by key: settings, run config (its group's, then its own), quick,
run quick (its group's, then its own), sweep values,
then ``run.algorithm``/``run.seed`` (and ``--backend``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from rich.console import Console

from edgeml import rundir
from edgeml.analysis.tables import wide_console
from edgeml.errors import RunFailed, UserError
# the steps as modules: their main functions share the modules' names (plan.plan, execute.execute...); those that
# draw (render, check: matplotlib) load when a reproduction renders, so that a run's worker process, which
# imports this package for its runs, imports none of them
from edgeml.reproduce import cluster as cluster_mod
# (departures and validate register the loader's checks of every experiment it reads)
from edgeml.reproduce import cost, departures, execute, load, parallel, plan, validate  # noqa: F401


DEFAULT_OUT = Path("runs") / "reproduce"
"""Where a reproduction goes without ``--out``: beside ``edgeml run``'s run directories, never over the
committed ``results/``."""


def output_folder(exp: load.Experiment, quick: bool, out: Path | None) -> Path:
    """``out``, else ``DEFAULT_OUT/<paper>/`` (``.../quick/``), which must lie inside ``DEFAULT_OUT``."""
    if out:
        return Path(out)
    default = DEFAULT_OUT / exp.paper / ("quick" if quick else "")
    return execute.inside(DEFAULT_OUT, default, f"paper {exp.paper!r}: its output folder")


@contextlib.contextmanager
def output_lock(out: Path) -> Iterator[None]:
    """Hold ``out`` for this process alone while the block runs: an advisory lock (``flock``) on the file
    ``execute.LOCK`` in it, which holds this process's PID. A second reproduction on the same folder is refused
    (UserError) naming the holder's PID. The kernel releases the lock however the holder ends (killed
    included); a clean end removes the file, and removes ``out`` (and the folders made for it) when the block
    left nothing else there."""
    import fcntl

    made = [p for p in (out, *out.parents) if not p.exists()]
    out.mkdir(parents=True, exist_ok=True)
    path = out / execute.LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise UserError(f"{out} is being written by another edgeml reproduce ({holder}): wait for it to end, "
                            f"or choose another --out") from None
        try:  # the holder that was releasing the lock may have removed this file meanwhile: lock the one there
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # while still held, so that no one holds a lock on a file no longer there
        os.close(fd)
        for folder in made:
            try:
                folder.rmdir()
            except OSError:
                break


def _holder(fd: int) -> str:
    """The PID the lock file's holder wrote, waiting the moment between its lock and its write."""
    deadline = time.monotonic() + 2.0
    while True:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit() or time.monotonic() > deadline:
            return f"PID {text}" if text.isdigit() else "PID unknown"
        time.sleep(0.01)


def reproduce(paper: str, quick: bool = False, out: Path | None = None, seeds: list[int] | None = None,
              backend: str | None = None, console: Console | None = None, command_line: str = "",
              resume: bool = False, only: str | Sequence[str] | None = None, force: bool = False, jobs: int | None = 1,
              check: bool = False, cluster: str | None = None, address: str | None = None,
              pdf: bool = False) -> Path:
    """Run every run of an experiment; write the tables, the figures and REPORT.md; return the output folder.

    With ``resume``, a run whose directory already holds a finished run of the same configuration is kept
    rather than run again. With ``only`` (a glob on run names, or several), only the matching runs are run; the
    others are kept where they already finished and left out where they did not. A finished run is deleted (to run it
    again) only with ``force``. A run that fails is recorded in REPORT.md and the others go on; the call then
    raises RunFailed after writing everything, so that scripts notice.

    ``jobs``: the cores the runs may keep busy at once; above 1 they run side by side in child processes
    (``edgeml.reproduce.parallel``), with the same results. ``check``: compare each claim's verdict with the
    committed report's (``edgeml.reproduce.check``) and raise RunFailed on any change, naming them. ``pdf``: each
    figure as a PDF beside its PNG as well, linked from REPORT.md (the PNGs alone keep a committed report small).

    ``cluster="ray"``: the runs that run now are Ray tasks (``edgeml.reproduce.cluster``), on a local Ray instance
    with ``jobs`` CPUs (None: this machine's cores), or on the running cluster at ``address`` (which implies
    ``cluster="ray"``; ``jobs``: the most CPUs to reserve there, None: all); the results are the same. Ray and the
    address are checked before anything is written."""
    from edgeml.config import check_out
    from edgeml.reproduce import check as check_mod

    console = console or wide_console(stderr=True)
    if jobs is not None and jobs < 1:
        raise UserError(f"--jobs {jobs}: give the number of cores to use, 1 or more")
    cluster = cluster or ("ray" if address else None)
    if cluster:
        cluster_mod.check(cluster, address)
        if jobs is None and address is None:
            jobs = parallel.default_jobs()
    elif jobs is None:
        raise UserError("jobs=None (all the cluster's CPUs) needs a cluster: give jobs, or cluster='ray'")
    exp = load.load_experiment(paper)
    if check:  # the committed results/<paper>/ (check_mod reads there) lie inside results/
        results = load.beside_experiments(exp.source) / "results"
        execute.inside(results, results / exp.paper / ("quick" if quick else ""),
                       f"paper {exp.paper!r}: its committed results")
    committed = check_mod.committed_verdicts(exp, quick) if check else None
    planned = plan.plan(exp, quick, seeds, backend)
    selected = _selected(only, planned, exp.paper)
    out = output_folder(exp, quick, out)
    check_out(out, "--out")
    for gid in dict.fromkeys(g for p in planned for g in p.figures):
        if gid in exp.figures:
            execute.inside(out / "figures", out / "figures" / exp.figures[gid].folder, f"figure {gid!r}: its folder",
                           strict=False)
    with output_lock(out):
        try:
            return _reproduce(exp, quick, out, planned, selected, console, committed, command_line, resume, force,
                              jobs, cluster, address, pdf, paper)
        except OSError as exc:
            if exc.errno not in rundir.DISK_FULL:
                raise
            raise RunFailed(f"the disk holding {out} is full ({exc.strerror}): free space, then continue with "
                            "--resume (finished runs are kept)") from None


def _reproduce(exp: load.Experiment, quick: bool, out: Path, planned: list[plan.PlannedRun], selected: set[str],
               console: Console, committed, command_line: str, resume: bool, force: bool, jobs: int | None,
               cluster: str | None, address: str | None, pdf: bool, paper: str) -> Path:
    """``reproduce`` once the input is checked and ``out`` is held."""
    from edgeml.reproduce import check as check_mod
    from edgeml.reproduce import render

    for name in ("runs", "figures", *load.FILES, "REPORT.md", render.VERDICTS, "compare.csv", "compare_runs.csv",
                 "compare_reach.csv", "compare.md"):
        execute.inside(out, out / name, "the output")  # a link there must not lead the writes elsewhere
    work = execute.plan_work(planned, selected, out, quick, resume)
    with contextlib.ExitStack() as ray_session, contextlib.ExitStack() as pool:
        now = sum(w.runs_now for w in work)
        workers = parallel.start_workers(min(jobs, now)) if not cluster and jobs > 1 and now > 1 else []
        pool.callback(parallel.close_workers, workers)  # (those the runs took over are ended by then)
        if cluster and any(w.runs_now for w in work):  # joined (or started) before anything is written
            if console.is_terminal:  # seconds of silence otherwise
                console.print(f"joining the Ray cluster at {address}..." if address else
                              f"starting a local Ray instance ({jobs} CPUs)...", style="dim", highlight=False,
                              markup=False)
            ray_session.enter_context(cluster_mod.session(address, jobs))
        execute.prepare_out(exp, out, work, force, console)
        with execute.progress_bar(console) as progress:
            rows = cost.plan_rows(planned, selected, out, quick, jobs or 1) if any(w.runs_now for w in work) else []
            estimates = {r.run.dirname: r.estimate for r in rows}
            outcome = execute.execute(exp, work, selected, out, quick, progress, jobs, cluster=bool(cluster),
                                      estimates=estimates, workers=workers)
            ray_session.close()  # Ray shuts down before the tables are drawn
            command = command_line or f"edgeml reproduce {paper}" + (" --quick" if quick else "")
            processes = jobs or parallel.default_jobs()  # a cluster's runs: the figures are drawn here
            report = render.render(render.Report(exp, out, planned, outcome.done, outcome.failures, command, quick,
                                                 processes=processes, pdf=pdf))
    console.print(*(report.cmp.rich() if report.cmp else []), render.claims_table(exp, quick, report.results))
    changes = (check_mod.compare_verdicts(committed, report.results, check_mod.timed_claims(exp.claims, report.runs))
               if committed is not None else [])
    for c in changes:
        console.print(f"verdict changed: {c.claim} ({c.at}): {c.old} -> {c.new}" + (f"; not counted: {c.why}" if c.why
                      else ""), style="yellow" if c.why else "red", highlight=False, markup=False)
    changed = [c for c in changes if not c.why]
    if committed is not None and not changed:
        console.print(f"--check: every verdict is as committed in {committed.source}"
                      + (f" ({len(changes)} read on procs runs moved within their timing, listed above)" if changes
                         else ""), highlight=False, markup=False)
    if changed:
        raise RunFailed(f"{len(changed)} claim verdict(s) differ from {committed.source} (listed above)"
                        + (f"; and {len(outcome.failures)} of {len(planned)} runs failed" if outcome.failures
                           else ""))
    if outcome.failures:
        raise RunFailed(f"{len(outcome.failures)} of {len(planned)} runs failed (reasons in {out / 'REPORT.md'}); "
                           "the other runs, tables and figures are written")
    return out


def show_plan(paper: str, quick: bool = False, out: Path | None = None, seeds: list[int] | None = None,
              backend: str | None = None, only: str | Sequence[str] | None = None, jobs: int = 1,
              console: Console | None = None) -> list[cost.PlanRow]:
    """List the planned runs (name, seed, backend, workers, max_time, reserved cores, estimated core-seconds,
    finished or not in the output folder) and a total, without running or writing anything
    (``edgeml.reproduce.cost`` says how the cost is estimated); returns the rows."""
    if jobs < 1:
        raise UserError(f"--jobs {jobs}: give the number of cores to use, 1 or more")
    console = console or wide_console()
    exp = load.load_experiment(paper)
    planned = plan.plan(exp, quick, seeds, backend)
    selected = _selected(only, planned, exp.paper)
    out = output_folder(exp, quick, out)
    rows = cost.plan_rows(planned, selected, out, quick, jobs)
    console.print(*cost.plan_table(exp.paper, rows, jobs))
    return rows


def _selected(only: str | Sequence[str] | None, planned: list[plan.PlannedRun], paper: str) -> set[str]:
    """``plan.select``'s run directories, refusing an ``--only`` pattern that matches none."""
    for pattern in [only] if only is None or isinstance(only, str) else only:
        if pattern is not None and not pattern.strip():
            raise UserError(f"--only {pattern!r} is empty: give a run's name or a glob, e.g. --only 'fig5*'")
        if not plan.select(pattern, planned):
            raise UserError(f"--only {pattern!r} matches no run of {paper}: choose among "
                        f"{', '.join(dict.fromkeys(p.spec for p in planned))} (a swept entry's name picks all its "
                        "points; 'NAME[setting=value]' one of them)")
    return plan.select(only, planned)
