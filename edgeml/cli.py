"""The ``edgeml`` command line: parse, build a config, call one library function. No logic lives here."""

from __future__ import annotations

import functools
import os
import sys
import typing
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from edgeml.schema import COMMON_SECTIONS, ClusterSection, DataSection, RunSection, StopSection, did_you_mean, range_of
from edgeml.errors import Interrupted, RunFailed, UserError, interrupt_handled, unwrap_interrupt

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Reproduce and compare distributed training schemes across heterogeneous edge devices. "
                       "Run an algorithm with `edgeml run ALGORITHM` (`edgeml list` shows them), a paper's "
                       "experiment with `edgeml reproduce PAPER`.")
# No emoji codes: user text such as the profile "1:2:3" or a path must print as written.
err = Console(stderr=True, emoji=False)


def command(*args, **kwargs):
    """``app.command`` that turns user errors into one line and exit code 2, failures into exit code 1."""

    def wrap(fn):
        # `edgeml --help` lists the whole description (click would cut a derived short help with "...")
        register = app.command(*args, short_help=" ".join((fn.__doc__ or "").split()), **kwargs)

        @functools.wraps(fn)
        def run_safely(*a, **kw):
            try:
                return unwrap_interrupt(fn, *a, **kw)
            except UserError as exc:
                err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
                raise typer.Exit(2) from None
            except KeyboardInterrupt as exc:
                interrupt_handled()
                path = getattr(exc, "path", None)
                if getattr(exc, "resume", None):  # a reproduction, even when one of its runs was cut short
                    err.print(Text.assemble(("interrupted", "yellow"), ": finished runs are kept; continue with ",
                                            (exc.resume, "bold")), soft_wrap=True)
                elif path is not None:  # a run directory holds what was measured: its path, last on stdout as ever
                    err.print(f"[yellow]interrupted[/yellow]: what was measured so far is in {escape(str(path))}",
                              soft_wrap=True)
                    typer.echo(path)
                elif isinstance(exc, Interrupted):
                    err.print("[yellow]interrupted[/yellow] before the run started: no run directory was made")
                else:
                    err.print("[yellow]interrupted[/yellow]")
                raise typer.Exit(130) from None
            except RunFailed as exc:  # its traceback is in the run directory's error.txt (EDGEML_DEBUG=1 shows it)
                err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
                raise typer.Exit(1) from None
            except OSError as exc:  # a path the command reads or writes (a folder where a file must go...)
                if os.environ.get("EDGEML_DEBUG", "") not in ("", "0") or exc.filename is None:
                    raise
                err.print(f"[red]error:[/red] {escape(repr(exc.filename))}: {escape(exc.strerror or str(exc))}: "
                          "choose another path, or move what is there", highlight=False, soft_wrap=True)
                raise typer.Exit(1) from None
        return register(run_safely)
    return wrap

NETWORKS = {
    "ideal": ({}, "no latency, unlimited bandwidth"),
    "lan": ({"latency_s": 0.0005, "up_mbps": 1000.0, "down_mbps": 1000.0}, "0.5 ms, 1 Gb/s both ways"),
    "edge": ({"latency_s": 0.02, "up_mbps": 10.0, "down_mbps": 100.0}, "20 ms, 10 Mb/s up, 100 Mb/s down"),
    "wan": ({"latency_s": 0.05, "up_mbps": 10.0, "down_mbps": 10.0}, "50 ms, 10 Mb/s both ways"),
}


PRESETS = {
    "starter": ({"run": {"backend": "sim"},
                 "cluster": {"workers": 6, "hetero": "1:1:1:1:4:4", "base_step_s": 0.05, "random_wait_s": 0.25},
                 "stop": {"max_time": 60.0}},
                "a first comparison where BSP, SSP and ADSP differ (README, 'A first comparison'): 6 workers, two "
                "4x slower, random waits before each push (exponential, mean 5 steps), 50 ms steps, 60 s; sim"),
}
"""Named sets of settings (``--preset``) under the config file, the flags and ``--set``: the run's world, never an
algorithm's own settings, so that every algorithm runs in the same one."""


def _base_layers(**options) -> dict[str, dict]:
    """Map the common flags onto config sections (flags left unset do not override the config file)."""
    table = {
        "workers": ("cluster", "workers"), "dataset": ("data", "dataset"), "model": ("model", "name"),
        "backend": ("run", "backend"), "hetero": ("cluster", "hetero"), "device": ("run", "device"),
        "seed": ("run", "seed"), "max_time": ("stop", "max_time"), "max_steps": ("stop", "max_steps"),
        "target_accuracy": ("stop", "target_accuracy"), "target_loss": ("stop", "target_loss"),
        "out": ("run", "out"), "name": ("run", "name"), "data_root": ("data", "root"),
        "download": ("data", "download"), "partition": ("data", "partition"), "batch_size": ("data", "batch_size"),
    }
    layers: dict[str, dict] = {}
    for key, value in options.items():
        if value is None or key not in table:
            continue
        section, field = table[key]
        layers.setdefault(section, {})[field] = value
    network = options.get("network")
    if network is not None:
        if network not in NETWORKS:
            raise UserError(f"unknown network profile {network!r}{did_you_mean(network, list(NETWORKS))}: choose "
                            f"one of {', '.join(NETWORKS)}")
        layers.setdefault("network", {}).update(NETWORKS[network][0])
    return layers


def _choices(cls: type, name: str) -> tuple[str, ...]:
    """The values a ``Literal`` config field allows."""
    return typing.get_args(typing.get_type_hints(cls)[name])


@command()
def run(
    algorithm: str = typer.Argument(..., help="Algorithm name (see `edgeml list`)."),
    workers: Optional[int] = typer.Option(
        None, "--workers", "-w", help=f"Number of workers (devices), >= 1. Default {ClusterSection.workers}."),
    dataset: Optional[str] = typer.Option(
        None, help=f"digits, breast-cancer, credit-synthetic, credit-full-rank, fashion-mnist, mnist, cifar10. "
                   f"Default {DataSection.dataset}."),
    model: Optional[str] = typer.Option(None, help="Model name; default depends on the dataset."),
    backend: Optional[str] = typer.Option(
        None, help=f"procs (real processes) or sim (virtual clock). Default {RunSection.backend}."),
    hetero: Optional[str] = typer.Option(None, help="Speed profile: homogeneous, 1:1:3, H=3.2, ec2, ..."),
    network: Optional[str] = typer.Option(None, help=f"Network profile: {', '.join(NETWORKS)}."),
    device: Optional[str] = typer.Option(None, help="cpu or cuda (procs)."),
    seed: Optional[int] = typer.Option(None, help=f"Random seed, 0 to 2**32-1. Default {RunSection.seed}."),
    max_time: Optional[float] = typer.Option(
        None, help=f"Stop after this many seconds on the run's clock; 0: no time limit. "
                   f"Default {StopSection.max_time:g}."),
    max_steps: Optional[int] = typer.Option(
        None, help="Stop after this many steps over all workers; 0: no step limit (the default)."),
    target_accuracy: Optional[float] = typer.Option(
        None, help="Stop at this test accuracy, in [0, 1]; 0: no target (the default)."),
    target_loss: Optional[float] = typer.Option(None, help="Stop at this test loss; 0: no target (the default)."),
    partition: Optional[str] = typer.Option(
        None, help=f"How samples are split over workers: {', '.join(_choices(DataSection, 'partition'))}. "
                   f"Default {DataSection.partition}."),
    batch_size: Optional[int] = typer.Option(
        None, help=f"Mini-batch size, at most each worker's share of the data. Default {DataSection.batch_size}."),
    data_root: Optional[str] = typer.Option(
        None, help="Existing directory holding the dataset files, then the only place searched."),
    download: Optional[bool] = typer.Option(None, "--download/--no-download", help="Fetch missing datasets."),
    out: Optional[str] = typer.Option(
        None, help=f"Writable parent directory of run directories (created when missing). Default {RunSection.out}/."),
    name: Optional[str] = typer.Option(None, help="Run directory name; default algorithm, dataset, seed and time."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="TOML config file."),
    set_: list[str] = typer.Option([], "--set", "-s", help="Override any field: section.key=value "
                                                           "(see `edgeml list settings`)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display; print only the run path."),
    preset: Optional[str] = typer.Option(
        None, "--preset", help=f"Start from named settings ({', '.join(PRESETS)}; `edgeml list presets`); the config "
                               f"file, the flags and --set override them."),
) -> None:
    """Run one algorithm and write a run directory (its path is printed last)."""
    from edgeml.config import build_config, merge, parse_overrides, read_toml

    if preset is not None and preset not in PRESETS:
        raise UserError(f"unknown preset {preset!r}{did_you_mean(preset, list(PRESETS))}: choose one of "
                        f"{', '.join(PRESETS)}")
    layers = ([PRESETS[preset][0]] if preset else []) + ([read_toml(config)] if config else [])
    flags = _base_layers(workers=workers, dataset=dataset, model=model, backend=backend, hetero=hetero,
                         network=network, device=device, seed=seed, max_time=max_time, max_steps=max_steps,
                         target_accuracy=target_accuracy, target_loss=target_loss, partition=partition,
                         batch_size=batch_size, data_root=data_root, download=download, out=out, name=name)
    cfg = build_config(merge(*layers, {"run": {"algorithm": algorithm}}, flags, parse_overrides(set_)))
    if not quiet:
        _preparing(cfg)
    try:
        from edgeml.runner import run as run_config  # torch loads here, after the input is known to be good
    except KeyboardInterrupt:
        raise Interrupted() from None  # nothing written yet

    typer.echo(run_config(cfg, quiet=quiet))


@command("twin")
def twin(
    algorithm: str = typer.Argument(..., help="Algorithm name (see `edgeml list`)."),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", help="Number of workers (devices), >= 1."),
    hetero: Optional[str] = typer.Option(None, help="Speed profile: homogeneous, 1:1:3, H=3.2, ec2, ..."),
    network: Optional[str] = typer.Option(None, help=f"Network profile: {', '.join(NETWORKS)}."),
    seed: Optional[int] = typer.Option(None, help=f"Random seed of both runs. Default {RunSection.seed}."),
    max_time: Optional[float] = typer.Option(None, help="Stop each run after this many seconds on its clock."),
    target_accuracy: Optional[list[float]] = typer.Option(
        None, help="Compare the times until this test accuracy (repeatable; default: the runs' stop target, else "
                   "95% of the lower best accuracy)."),
    target_loss: Optional[list[float]] = typer.Option(None, help="Compare the times until this test loss."),
    out: Optional[str] = typer.Option(None, help=f"Parent directory of the runs and the report. Default "
                                                 f"{RunSection.out}/."),
    name: Optional[str] = typer.Option(None, help="Name of the pair: NAME-procs, NAME-sim and the report NAME-twin; "
                                                  "default twin-ALGORITHM-sSEED."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="TOML config file."),
    set_: list[str] = typer.Option([], "--set", "-s", help="Override any field: section.key=value."),
    preset: Optional[str] = typer.Option(None, "--preset", help=f"Start from named settings ({', '.join(PRESETS)})."),
) -> None:
    """Run one configuration on real processes and on the virtual clock (same seed, world and step time), and
    report how far the simulator's times, rates, shares and staleness lie from what the processes measured."""
    from edgeml.config import merge, parse_overrides, read_toml

    if preset is not None and preset not in PRESETS:
        raise UserError(f"unknown preset {preset!r}{did_you_mean(preset, list(PRESETS))}: choose one of "
                        f"{', '.join(PRESETS)}")
    layers = ([PRESETS[preset][0]] if preset else []) + ([read_toml(config)] if config else [])
    flags = _base_layers(workers=workers, hetero=hetero, network=network, seed=seed, max_time=max_time, out=out)
    from edgeml.analysis.compare import choose_targets

    if target_accuracy or target_loss:  # refused before the runs, not after them
        choose_targets([], target_accuracy or [], target_loss or [], "stays")
    try:
        from edgeml.runner import run_twins  # torch loads here
    except KeyboardInterrupt:
        raise Interrupted() from None
    procs, sim, folder = run_twins(merge(*layers, {"run": {"algorithm": algorithm}}, flags, parse_overrides(set_)),
                                   name, quiet=False)
    from edgeml.analysis import twin as twins
    from edgeml.rundir import load_run

    runs = load_run(procs), load_run(sim)
    table = twins.twin_table(*runs, choose_targets(list(runs), target_accuracy or [], target_loss or [], "stays"))
    for path in twins.write(folder, table, *runs):
        err.print(str(path), highlight=False, soft_wrap=True)
    typer.echo(twins.markdown(table, *runs))


def _preparing(cfg) -> None:
    """Say what happens during the seconds before the first progress line (torch, data, calibration)."""
    if err.is_terminal:
        calibrating = cfg.run.backend == "procs" and not cfg.cluster.base_step_s
        err.print(Text(f"preparing {cfg.run.algorithm} ({cfg.run.backend}, {cfg.cluster.workers} workers): "
                       f"loading torch and {cfg.data.dataset}, building the model"
                       f"{', calibrating the host' if calibrating else ''}...", style="dim"))


LISTS = ("algorithms", "settings", "datasets", "partitions", "models", "profiles", "topologies", "networks",
         "presets")


@command("list")
def list_(what: str = typer.Argument(
        "all", help=f"all, {', '.join(LISTS)} (settings: the common sections), or one algorithm (or alias) or "
                    f"section name."),
          ) -> None:
    """List what edgeml knows, and every setting with its type, default and meaning."""
    from edgeml.algorithms import ALIASES, REGISTRY
    from edgeml.data import DATASETS, PARTITIONS
    from edgeml.world.profiles import PROFILES
    from edgeml.world.topology import TOPOLOGIES

    console = Console(emoji=False, highlight=False)
    algorithm = ALIASES.get(what.lower(), what.lower())
    if what in COMMON_SECTIONS:
        console.print(_settings_table(what, COMMON_SECTIONS[what], f"[{what}]"))
        return
    if algorithm in REGISTRY:
        console.print(_algorithm_table(REGISTRY[algorithm]))
        return
    if what != "all" and what not in LISTS:
        raise UserError(f"cannot list {what!r}: choose one of all, {', '.join(LISTS)}, an algorithm "
                        f"({', '.join(sorted(REGISTRY))}) or a section ({', '.join(COMMON_SECTIONS)})")
    specs = sorted(REGISTRY.values(), key=lambda s: s.name)
    if what == "algorithms":
        for spec in specs:
            console.print(_algorithm_table(spec))
    if what == "settings":
        for section, cls in COMMON_SECTIONS.items():
            console.print(_settings_table(section, cls, f"[{section}]"))
    if what == "all":
        console.print(_table("algorithms", {_name_and_aliases(s.name): f"{s.summary} ({s.paper})" if s.paper
                                            else s.summary for s in specs}))
    for kind, entries in (("datasets", DATASETS), ("partitions", PARTITIONS), ("profiles", PROFILES),
                          ("topologies", TOPOLOGIES), ("networks", {k: v[1] for k, v in NETWORKS.items()}),
                          ("presets", {k: v[1] for k, v in PRESETS.items()})):
        if what in ("all", kind):
            console.print(_table(kind, entries))
    if what in ("all", "models"):
        from edgeml.models import MODELS  # imports torch

        console.print(_table("models", MODELS))
    if what == "all":
        console.print(Text("Settings with their meaning: edgeml list settings (common sections), edgeml list "
                           "algorithms (each algorithm's own), or edgeml list NAME for one of them."))


def _table(title: str, entries: dict[str, str]) -> Table:
    t = Table(title=title)
    t.add_column("name", style="cyan", no_wrap=True)
    t.add_column("description")
    for k, v in entries.items():
        t.add_row(Text(k), Text(v))
    return t


def _name_and_aliases(name: str) -> str:
    """``asp (also tap)``: an algorithm's name with the other names it answers to."""
    from edgeml.algorithms import ALIASES

    aliases = sorted(a for a, target in ALIASES.items() if target == name)
    return f"{name} (also {', '.join(aliases)})" if aliases else name


def _algorithm_table(spec) -> Table:
    about = f"{spec.summary} ({spec.paper})" if spec.paper else spec.summary
    return _settings_table(spec.name, spec.config, f"{_name_and_aliases(spec.name)}: {about}")


def _settings_table(section: str, cls: type, title: str) -> Table:
    """One row per setting: name, type, default and its docstring; ``--set section.name=value`` changes it."""
    from edgeml.schema import describe_fields

    t = Table(title=Text(title), caption=Text(f"[{section}] in a config file, or --set {section}.NAME=VALUE"),
              title_justify="left", caption_justify="left")
    t.add_column("setting", style="cyan", no_wrap=True)
    t.add_column("type")
    t.add_column("default")
    t.add_column("meaning", ratio=1)
    for name, type_name, default, doc in describe_fields(cls):
        t.add_row(Text(name), Text(type_name), Text(_toml(default)), Text(doc.replace("``", "")))
    return t


def _toml(value: Any) -> str:
    """A default as it would be written in a config file."""
    if isinstance(value, bool):
        return str(value).lower()
    return f'"{value}"' if isinstance(value, str) else repr(value)


@command("compare")
def compare(
    run_dirs: list[str] = typer.Argument(..., help="Run directories, glob patterns, an experiment's results folder, "
                                                   "or folders holding run directories."),
    target_accuracy: Optional[list[float]] = typer.Option(
        None, help="Time until this test accuracy (repeat for several targets; the first is the headline)."),
    target_loss: Optional[list[float]] = typer.Option(None, help="Time until this test loss (repeatable)."),
    rule: str = typer.Option("stays", help="When a target counts as reached: stays (never leaves it again), "
                                           "smoothed, first, or stopping (the runs' own stopping rule)."),
    baseline: Optional[str] = typer.Option(None, help="Run or algorithm speedups are measured against "
                                                      "(default: bsp if present, else the first run)."),
    recursive: bool = typer.Option(False, "--recursive", "-r", help="Search every folder below the given ones."),
    out: Optional[Path] = typer.Option(None, help="Write compare.csv, compare_runs.csv, compare_reach.csv and "
                                                  "compare.md here."),
) -> None:
    """Compare runs: accuracy, time to target (censored when never reached), paired speedup, bytes, time shares."""
    from edgeml.config import check_out
    from edgeml.analysis.compare import compare_dirs
    from edgeml.analysis.tables import wide_console

    if out is not None:
        check_out(out, "--out")
    cmp = compare_dirs(run_dirs, target_accuracy or [], target_loss or [], rule, baseline, recursive)
    wide_console().print(*cmp.rich())
    for p in cmp.write(out) if out else []:
        print(p)


@command("plot")
def plot(
    run_dirs: list[str] = typer.Argument(..., help="Run directories, glob patterns, an experiment's results folder, "
                                                   "or folders holding run directories."),
    out: Path = typer.Option(Path("runs") / "figures", help="Folder for the PNG and PDF figures."),
    recursive: bool = typer.Option(False, "--recursive", "-r", help="Search every folder below the given ones."),
    target_accuracy: Optional[list[float]] = typer.Option(
        None, help="The bars show the time until this test accuracy (repeat for several: the first is drawn; "
                   "default: the runs' common stop target, else 95% of the lowest best accuracy)."),
    target_loss: Optional[list[float]] = typer.Option(None, help="The bars show the time until this test loss."),
    rule: str = typer.Option("stays", help="When a target counts as reached: stays (never leaves it again), "
                                           "smoothed, first, or stopping (the runs' own stopping rule)."),
) -> None:
    """Draw convergence curves and bars, time breakdown, throughput and the series figures (PNG and PDF)."""
    from edgeml.config import check_out
    from edgeml.analysis.compare import choose_targets, compare as compare_runs
    from edgeml.analysis.figures import write_figures
    from edgeml.rundir import load_runs

    check_out(out, "--out")
    runs = load_runs(run_dirs, recursive)
    cmp = compare_runs(runs, choose_targets(runs, target_accuracy or [], target_loss or [], rule))
    for f in write_figures(runs, out, cmp):
        print(f.png)
        print(f.png.with_suffix(".pdf"))


@command("reproduce")
def reproduce(
    paper: Optional[str] = typer.Argument(None, help="Experiment name (a folder experiments/<paper>/), or the path of "
                                                     "an experiment folder or .toml file."),
    quick: bool = typer.Option(False, "--quick", help="Reduced version that finishes in minutes on 2 cores."),
    out: Optional[Path] = typer.Option(
        None, help="Output folder (default runs/reproduce/<paper>/, or .../quick/; the committed reproductions: "
                   "--out results/<paper>)."),
    seeds: Optional[str] = typer.Option(None, help="Comma-separated seeds replacing the experiment's, e.g. 0,1,2."),
    backend: Optional[str] = typer.Option(None, help="procs or sim for every run."),
    resume: bool = typer.Option(False, "--resume", help="Keep runs already finished in the output folder with the "
                                                         "same configuration; run only the rest."),
    only: Optional[list[str]] = typer.Option(None, help="Run only the runs whose names, or the names of their "
                                                        "swept entries, match this glob (e.g. 'fig5*', 'fig5-adsp'; "
                                                        "a run's exact name is taken literally; repeat --only for "
                                                        "several); keep the others that already finished."),
    force: bool = typer.Option(False, "--force", help="Delete finished runs in the output folder that this would "
                                                      "run again (without it, reproduce refuses)."),
    jobs: Optional[int] = typer.Option(
        None, "--jobs", "-j", help="Cores to keep busy: independent runs go side by side, each in its own process "
                                   "(a sim run takes run.threads cores, a procs run one per process, at most N; "
                                   "results are the same as one at a time). Default: this machine's cores; 1: one "
                                   "run at a time in this process."),
    plan_only: bool = typer.Option(False, "--plan", help="List the planned runs with their estimated core-seconds "
                                                         "and whether they finished in the output folder, and a "
                                                         "total; run and write nothing."),
    check: bool = typer.Option(False, "--check", help="After reproducing, compare each claim's verdict with the "
                                                      "committed results/<paper>/[quick/]verdicts.csv; exit 1 on any "
                                                      "change (each is printed), 2 where none is committed."),
    cluster: Optional[str] = typer.Option(
        None, "--cluster", help="ray: run each run as a Ray task (pip install -e '.[cluster]'), on a local Ray "
                                "instance with --jobs CPUs, or on the cluster at --address; run directories come "
                                "back to --out, results are the same."),
    address: Optional[str] = typer.Option(
        None, "--address", help="Join the running Ray cluster at this address (host:port, as `ray start --head` "
                                "prints it); implies --cluster ray. --jobs then caps the CPUs used (default: all)."),
    pdf: bool = typer.Option(False, "--pdf", help="Write each figure as a PDF beside its PNG, linked from "
                                                  "REPORT.md."),
    summary: bool = typer.Option(False, "--summary", help="Render the scoreboard, README.md in the results folder "
                                                          "(--out; default results/ here, else the checkout's), "
                                                          "from each reproduction's verdicts.csv there; no PAPER, "
                                                          "nothing run."),
) -> None:
    """Run a paper's experiment: the system and its baselines; write tables, figures and REPORT.md with verdicts."""
    from edgeml.reproduce import reproduce as run_experiment
    from edgeml.reproduce import show_plan
    from edgeml.reproduce.parallel import default_jobs

    if summary:
        from edgeml.reproduce.summary import write_summary

        if paper is not None:
            raise UserError(f"--summary takes no PAPER (got {paper!r}): it renders the scoreboard of every "
                            "reproduction in --out (default results/)")
        import edgeml

        # default: ./results, else the checkout's (beside its experiments/, where the committed reports are)
        folder = out or next((f for f in (Path("results"), Path(edgeml.__file__).resolve().parents[1] / "results")
                              if f.is_dir()), Path("results"))
        if not folder.is_dir():
            raise UserError(f"--summary: {folder} is no folder: give --out the folder holding results/<paper>/")
        print(write_summary(folder))
        return
    if paper is None:
        from edgeml.reproduce.load import experiment_names

        raise UserError(f"give the PAPER to reproduce, one of {', '.join(experiment_names())}, or --summary")

    if jobs is not None and jobs < 1:
        raise UserError(f"--jobs {jobs}: give the number of cores to use, 1 or more (default: this machine's "
                        f"{default_jobs()})")
    on_cluster = address is not None and not plan_only  # --jobs left out: all the cluster's CPUs
    jobs = jobs if on_cluster else jobs or default_jobs()

    seed_list = None
    if seeds is not None:
        try:
            seed_list = [int(s) for s in seeds.split(",")]
        except ValueError:
            raise UserError(f"--seeds {seeds!r}: give comma-separated integers, e.g. --seeds 0,1,2") from None
        if len(set(seed_list)) < len(seed_list):
            raise UserError(f"--seeds {seeds!r} names a seed twice: give each seed once, e.g. --seeds 0,1,2")
        seed_range = range_of(RunSection, "seed")
        bad = next((s for s in seed_list if not seed_range.admits(s)), None)
        if bad is not None:
            raise UserError(f"--seeds {seeds!r}: seed {bad} is out of range: use {seed_range.describe(True)}")
    if plan_only:
        show_plan(paper, quick, out, seed_list, backend, only, jobs)
        return
    line = " ".join(["edgeml reproduce", paper] + (["--quick"] if quick else []) + ([f"--out {out}"] if out else [])
                    + ([f"--seeds {seeds}"] if seeds else []) + ([f"--backend {backend}"] if backend else []))
    try:
        report = unwrap_interrupt(run_experiment, paper, quick, out, seed_list, backend, command_line=line,
                                  resume=resume, only=only, force=force, jobs=jobs, check=check, cluster=cluster,
                                  address=address, pdf=pdf)
    except KeyboardInterrupt as exc:  # finished runs are kept: say how to go on from them
        import shlex

        exc.resume = " ".join(["edgeml reproduce", shlex.quote(paper), *(["--quick"] if quick else []),
                               *([f"--out {shlex.quote(str(out))}"] if out else []),
                               *([f"--seeds {seeds}"] if seeds else []), *([f"--backend {backend}"] if backend else []),
                               *(f"--only {shlex.quote(g)}" for g in only or ()),
                               *([f"--jobs {jobs}"] if jobs != default_jobs() and not on_cluster else []),
                               *([f"--address {address}"] if address else
                                 [f"--cluster {cluster}"] if cluster else []), *(["--pdf"] if pdf else []),
                               "--resume"])
        raise
    print(report / "REPORT.md")


METAVARS = {
    "algorithm": "ALGORITHM", "workers": "N", "dataset": "NAME", "model": "NAME", "backend": "procs|sim",
    "hetero": "PROFILE", "network": "NAME", "device": "cpu|cuda", "seed": "SEED", "max_time": "SECONDS",
    "max_steps": "STEPS", "target_accuracy": "ACCURACY", "target_loss": "LOSS", "partition": "NAME",
    "batch_size": "N", "data_root": "DIR", "out": "DIR", "name": "NAME", "config": "FILE", "set_": "KEY=VALUE",
    "run_dirs": "RUNS...", "rule": "stays|smoothed|first|stopping", "baseline": "NAME", "paper": "PAPER",
    "seeds": "N,N,...", "only": "GLOB", "what": "WHAT", "jobs": "N", "cluster": "ray", "address": "ADDR",
    "preset": "NAME",
}
"""The metavar of each option in ``--help``: what its value is."""


def _stop_on_signals() -> None:
    """SIGTERM (``timeout``, job schedulers) stops a run in order, as Ctrl-C does; and Ctrl-C works even when
    a non-interactive shell started us in the background with SIGINT ignored."""
    import signal

    def terminate(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main() -> None:
    try:
        _main()
    except KeyboardInterrupt:  # before or after a command ran (building the command table, loading plugins)
        interrupt_handled()
        err.print("[yellow]interrupted[/yellow] before the run started: no run directory was made")
        sys.exit(130)


def _main() -> None:
    try:  # recent typer vendors click
        from typer._click.exceptions import ClickException
    except ImportError:
        from click.exceptions import ClickException

    _stop_on_signals()
    cli = typer.main.get_command(app)
    for command in cli.commands.values():  # what a value is, as a reader of --help wants it (not its type)
        for param in command.params:
            param.metavar = METAVARS.get(param.name, param.metavar)
    if len(sys.argv) > 1 and sys.argv[1] not in cli.commands and not sys.argv[1].startswith("-"):
        try:
            from edgeml.algorithms import ALIASES, REGISTRY  # loads the plugins, whose faults are the user's
        except UserError as exc:
            err.print(Text.assemble(("error: ", "red"), str(exc)), soft_wrap=True)
            sys.exit(2)
        if sys.argv[1].lower() in REGISTRY or sys.argv[1].lower() in ALIASES:  # the design card's `edgeml adsp`
            err.print(Text.assemble(("error: ", "red"), f"no command {sys.argv[1]!r}: run an algorithm with "
                                    f"edgeml run {sys.argv[1]} (see edgeml --help)"), soft_wrap=True)
            sys.exit(2)
    try:
        code = cli(standalone_mode=False)
    except ClickException as exc:  # a mistyped option or value: one line, as for every other bad input
        if type(exc).__name__ != "NoArgsIsHelpError":  # that one has printed the help already
            hint = f" (see {exc.ctx.command_path} --help)" if getattr(exc, "ctx", None) else ""
            err.print(Text.assemble(("error: ", "red"), exc.format_message() + hint), soft_wrap=True)
        code = exc.exit_code
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
