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


def _register_extensions() -> None:
    """Commands that live in other modules (compare, plot, reproduce) register themselves on ``app``."""
    try:
        from edgeml import report, reproduce  # noqa: F401
    except ImportError:
        pass


def _stop_on_signals() -> None:
    """SIGTERM (``timeout``, job schedulers) stops a run in order, as Ctrl-C does; and Ctrl-C works even when
    a non-interactive shell started us in the background with SIGINT ignored."""
    import signal

    def terminate(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main() -> None:
    _register_extensions()
    _stop_on_signals()
    app()


if __name__ == "__main__":
    main()
