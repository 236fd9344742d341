"""The ``edgeml`` command line: parse, build a config, call one library function. No logic lives here."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from edgeml.errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode="rich",
                  help="Reproduce and compare distributed training schemes across heterogeneous edge devices.")
err = Console(stderr=True)


def command(*args, **kwargs):
    """``app.command`` that turns user errors into one line and exit code 2, failures into exit code 1."""
    register = app.command(*args, **kwargs)

    def wrap(fn):
        @functools.wraps(fn)
        def run_safely(*a, **kw):
            try:
                return fn(*a, **kw)
            except UserError as exc:
                err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
                raise typer.Exit(2) from None
            except KeyboardInterrupt:
                err.print("[yellow]interrupted[/yellow]: what was measured so far is in the run directory")
                raise typer.Exit(130) from None
            except RuntimeError as exc:
                err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
                raise typer.Exit(1) from None
        return register(run_safely)
    return wrap

NETWORKS = {
    "ideal": ({}, "no latency, unlimited bandwidth"),
    "lan": ({"latency_s": 0.0005, "up_mbps": 1000.0, "down_mbps": 1000.0}, "0.5 ms, 1 Gb/s both ways"),
    "edge": ({"latency_s": 0.02, "up_mbps": 10.0, "down_mbps": 100.0}, "20 ms, 10 Mb/s up, 100 Mb/s down"),
    "wan": ({"latency_s": 0.05, "up_mbps": 10.0, "down_mbps": 10.0}, "50 ms, 10 Mb/s both ways"),
}


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
            raise UserError(f"unknown network profile {network!r}: choose one of {', '.join(NETWORKS)}")
        layers.setdefault("network", {}).update(NETWORKS[network][0])
    return layers


@command()
def run(
    algorithm: str = typer.Argument(..., help="Algorithm name (see `edgeml list`)."),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", help="Number of workers (devices)."),
    dataset: Optional[str] = typer.Option(None, help="digits, breast-cancer, fashion-mnist, mnist, cifar10."),
    model: Optional[str] = typer.Option(None, help="Model name; default depends on the dataset."),
    backend: Optional[str] = typer.Option(None, help="procs (real processes) or sim (virtual clock)."),
    hetero: Optional[str] = typer.Option(None, help="Speed profile: homogeneous, 1:1:3, H=3.2, ec2, ..."),
    network: Optional[str] = typer.Option(None, help=f"Network profile: {', '.join(NETWORKS)}."),
    device: Optional[str] = typer.Option(None, help="cpu or cuda (procs)."),
    seed: Optional[int] = typer.Option(None, help="Random seed."),
    max_time: Optional[float] = typer.Option(None, help="Stop after this many seconds on the run's clock."),
    max_steps: Optional[int] = typer.Option(None, help="Stop after this many steps over all workers."),
    target_accuracy: Optional[float] = typer.Option(None, help="Stop at this test accuracy."),
    target_loss: Optional[float] = typer.Option(None, help="Stop at this test loss."),
    partition: Optional[str] = typer.Option(None, help="iid, shards or dirichlet."),
    batch_size: Optional[int] = typer.Option(None, help="Mini-batch size."),
    data_root: Optional[str] = typer.Option(None, help="Directory holding the dataset files."),
    download: Optional[bool] = typer.Option(None, "--download/--no-download", help="Fetch missing datasets."),
    out: Optional[str] = typer.Option(None, help="Parent directory of run directories (default runs/)."),
    name: Optional[str] = typer.Option(None, help="Run directory name."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="TOML config file."),
    set_: list[str] = typer.Option([], "--set", "-s", help="Override any field: section.key=value."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display; print only the run path."),
) -> None:
    """Run one algorithm and write a run directory (its path is printed last)."""
    from edgeml.config import build_config, merge, parse_overrides, read_toml
    from edgeml.runner import run as run_config

    layers = [read_toml(config)] if config else []
    flags = _base_layers(workers=workers, dataset=dataset, model=model, backend=backend, hetero=hetero,
                         network=network, device=device, seed=seed, max_time=max_time, max_steps=max_steps,
                         target_accuracy=target_accuracy, target_loss=target_loss, partition=partition,
                         batch_size=batch_size, data_root=data_root, download=download, out=out, name=name)
    cfg = build_config(merge(*layers, {"run": {"algorithm": algorithm}}, flags, parse_overrides(set_)))
    typer.echo(run_config(cfg, quiet=quiet))


@command("list")
def list_(what: str = typer.Argument("all", help="algorithms, datasets, models, profiles, networks or all."),
          ) -> None:
    """List what edgeml knows: algorithms (with their settings), datasets, models, profiles."""
    from edgeml.algorithms import REGISTRY
    from edgeml.config import describe_fields
    from edgeml.data import DATASETS
    from edgeml.hetero import PROFILES
    from edgeml.models import MODELS

    console = Console()
    kinds = ["algorithms", "datasets", "models", "profiles", "networks"]
    if what != "all" and what not in kinds:
        raise UserError(f"cannot list {what!r}: choose one of {', '.join(kinds)} or all")
    if what in ("all", "algorithms"):
        t = Table(title="algorithms")
        t.add_column("name", style="cyan")
        t.add_column("description")
        t.add_column(escape("settings ([name] section / --set name.key=value)"))
        for spec in sorted(REGISTRY.values(), key=lambda s: s.name):
            settings = ", ".join(f"{n}={d!r}" for n, _, d, _ in describe_fields(spec.config))
            t.add_row(spec.name, f"{spec.summary} ({spec.paper})" if spec.paper else spec.summary, settings)
        console.print(t)
    for kind, entries in (("datasets", DATASETS), ("models", MODELS), ("profiles", PROFILES),
                          ("networks", {k: v[1] for k, v in NETWORKS.items()})):
        if what in ("all", kind):
            t = Table(title=kind)
            t.add_column("name", style="cyan")
            t.add_column("description")
            for k, v in entries.items():
                t.add_row(k, v)
            console.print(t)


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
    from edgeml.report import compare_dirs, wide_console

    cmp = compare_dirs(run_dirs, target_accuracy or [], target_loss or [], rule, baseline, recursive)
    wide_console().print(*cmp.rich())
    for p in cmp.write(out) if out else []:
        print(p)


@command("plot")
def plot(
    run_dirs: list[str] = typer.Argument(..., help="Run directories, glob patterns, an experiment's results folder, "
                                                   "or folders holding run directories."),
    out: Path = typer.Option(Path("figures"), help="Folder for the PNG and PDF figures."),
    recursive: bool = typer.Option(False, "--recursive", "-r", help="Search every folder below the given ones."),
) -> None:
    """Draw convergence curves and bars, time breakdown, throughput and the series figures (PNG and PDF)."""
    from edgeml.figures import write_figures
    from edgeml.report import load_runs

    for f in write_figures(load_runs(run_dirs, recursive), out):
        print(f.png)
        print(f.png.with_suffix(".pdf"))


@command("reproduce")
def reproduce(
    paper: str = typer.Argument(..., help="Experiment name (a file experiments/<paper>.toml) or a .toml path."),
    quick: bool = typer.Option(False, "--quick", help="Reduced version that finishes in minutes on 2 cores."),
    out: Optional[Path] = typer.Option(None, help="Output folder (default results/<paper>/, or .../quick/)."),
    seeds: Optional[str] = typer.Option(None, help="Comma-separated seeds replacing the experiment's, e.g. 0,1,2."),
    backend: Optional[str] = typer.Option(None, help="procs or sim for every run."),
    resume: bool = typer.Option(False, "--resume", help="Keep runs already finished in the output folder with the "
                                                         "same configuration; run only the rest."),
    only: Optional[str] = typer.Option(None, help="Run only the runs whose names match this glob (e.g. 'fig5*'); "
                                                  "keep the others that already finished."),
    force: bool = typer.Option(False, "--force", help="Delete finished runs in the output folder that this would "
                                                      "run again (without it, reproduce refuses)."),
) -> None:
    """Run a paper's experiment: the system and its baselines; write tables, figures and REPORT.md with verdicts."""
    from edgeml.reproduce import reproduce as run_experiment

    seed_list = None
    if seeds is not None:
        try:
            seed_list = [int(s) for s in seeds.split(",") if s.strip()]
        except ValueError:
            raise UserError(f"--seeds {seeds!r}: give comma-separated integers, e.g. --seeds 0,1,2") from None
    line = " ".join(["edgeml reproduce", paper] + (["--quick"] if quick else []) + ([f"--out {out}"] if out else [])
                    + ([f"--seeds {seeds}"] if seeds else []) + ([f"--backend {backend}"] if backend else []))
    print(run_experiment(paper, quick, out, seed_list, backend, command_line=line, resume=resume, only=only,
                         force=force) / "REPORT.md")


def _stop_on_signals() -> None:
    """SIGTERM (``timeout``, job schedulers) stops a run in order, as Ctrl-C does; and Ctrl-C works even when
    a non-interactive shell started us in the background with SIGINT ignored."""
    import signal

    def terminate(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main() -> None:
    _stop_on_signals()
    app()


if __name__ == "__main__":
    main()
