"""Run one configuration end to end: world, job, backend, run directory. The command line and ``reproduce`` call
this. The runner builds the run's world once (``edgeml.world.build``, with the algorithm's roles) and hands the
backends the job (data, model, world), the algorithm's node programs and the progress display.

A failed run raises ``RunFailed`` (the command line exits 1) after its run directory is complete; a node
program's traceback is in ``error.txt`` there. With ``EDGEML_DEBUG=1`` a sim run re-raises the node's own
exception instead and a procs run prints the traceback.
"""

from __future__ import annotations

import getpass
import json
import math
import os
import platform
import socket
import subprocess
import time
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import torch

import edgeml
from edgeml.schema import Config
from edgeml.algorithms import get_algorithm
from edgeml.errors import Interrupted, RunFailed, UserError
from edgeml.runtime.monitor import Monitor, error_report, report_rows, summarize
from edgeml.rundir import DISK_FULL, META, RunWriter, describe_write_error, remove_temporary, write_atomic
from edgeml.progress import RunProgress
from edgeml.runtime.base import layout
from edgeml.train import Job, build_job
from edgeml.world import build as build_world


def git_sha() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(edgeml.__file__).parent, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def debugging() -> bool:
    return os.environ.get("EDGEML_DEBUG", "") not in ("", "0")


def run_dir_for(cfg: Config) -> Path:
    name = cfg.run.name or (f"{cfg.run.algorithm}-{cfg.data.dataset}-w{cfg.cluster.workers}-s{cfg.run.seed}-"
                            f"{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}")
    path = Path(cfg.run.out) / name
    if path.resolve().parent != Path(cfg.run.out).resolve():  # ".." or a "/" in the name, or a link out of it
        raise UserError(f"run.name = {name!r} would put the run directory at {str(path.resolve())!r}, not directly "
                        f"in run.out = {cfg.run.out!r}: give a name without '/' or '..'")
    if path.exists():
        raise UserError(f"run directory {str(path)!r} already exists: choose another --out or run.name")
    return path


def _usable_cores() -> int:
    """The cores this run may use (its CPU affinity, as taskset or a scheduler's slot sets it), where ``cpus``
    counts the host's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _cpu_description() -> dict:
    """The host's processor: its model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``; "" when
    unknown) and the vector instructions torch's CPU kernels use on it (``torch.backends.cpu``: DEFAULT, AVX2,
    AVX512...). The same run can cost twice as much on one host as on another (a ResNet-18 step: 0.35 s against
    0.8 s), so a cost compared across hosts needs them."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {"model": model or platform.processor(), "capability": torch.backends.cpu.get_cpu_capability()}


def meta_for(cfg: Config, job: Job, calibration: dict) -> dict:
    world = job.world
    return {
        "edgeml_version": edgeml.__version__, "git_sha": git_sha(), "seed": cfg.run.seed,
        "algorithm": cfg.run.algorithm, "backend": cfg.run.backend, "host": socket.gethostname(),
        "user": getpass.getuser(), "platform": platform.platform(), "python": platform.python_version(),
        "torch": torch.__version__, "cpus": os.cpu_count(), "cores": _usable_cores(), "threads": cfg.run.threads,
        "cpu": _cpu_description(), "model": job.model_name,
        "num_params": int(job.init_params.numel()), "started": datetime.now(timezone.utc).isoformat(),
        "calibration": calibration, "base_step_s": job.base_step_s,
        "step_factors": [world.factors[r] for r in world.roles.get("worker", [])],
        "nodes": {str(r): {"device": world.device(r), "speed_factor": world.factors[r],
                           "degree": len(world.neighbours(r))} for r in world.ranks},
        "topology": cfg.network.topology,
        "link_outages": [{"start_s": o.start, "end_s": o.end if math.isfinite(o.end) else None,
                          "links": sorted(list(e) for e in o.edges)} for o in world.topology.outages],
    }


def prepare(cfg: Config, *, base_step_s: float | None = None) -> tuple[Job, list]:
    """The job (its world built once, with the algorithm's roles; data; initial model) and the algorithm's node
    programs of a run of ``cfg``. ``base_step_s``: a factor-1 step's time when not ``cluster.base_step_s``
    (procs calibrates it later). Raises ``UserError`` on impossible settings."""
    programs = get_algorithm(cfg.run.algorithm).nodes(cfg)
    world = build_world(cfg, layout(programs).roles, base_step_s=base_step_s)
    return build_job(cfg, world), programs


def check_capacity(cfg: Config, nodes: int, cores: int) -> None:
    """Refuse a procs run of more node processes than ``run.max_procs_per_core`` per core of this host."""
    per_core = cfg.run.max_procs_per_core
    if per_core < 1:
        raise UserError(f"run.max_procs_per_core = {per_core}: must be >= 1")
    if nodes > per_core * cores:
        raise UserError(f"{cfg.run.algorithm} with {cfg.cluster.workers} workers needs {nodes} node processes, "
                        f"more than run.max_procs_per_core = {per_core} per core allows on this host's {cores} "
                        f"cores: use --backend sim (any number of nodes on a virtual clock), fewer workers, or "
                        f"raise run.max_procs_per_core")


def run(cfg: Config, *, quiet: bool = True, path: Path | None = None) -> Path:
    """Run ``cfg``; return the run directory. Raises UserError on bad input before anything is written, and
    ``Interrupted`` (a KeyboardInterrupt naming the run directory, or None when none was made yet) on Ctrl-C.
    However it ends, a run directory that was made gets the run's cost in ``meta.json``: ``wall_s`` (seconds
    from this call to its end) and ``cpu_s`` (CPU seconds of this process and its children meanwhile)."""
    path = path or run_dir_for(cfg)
    wall, cpu, existed = time.monotonic(), cpu_seconds(), (path / "meta.json").exists()
    try:
        return _run(cfg, quiet, path)
    except Interrupted:
        raise
    except KeyboardInterrupt:
        raise Interrupted(path if path.exists() else None) from None
    except OSError as exc:  # writing the run directory failed (a full disk): the run failed, in one line
        if not (exc.errno in DISK_FULL or _within(path, exc.filename)):
            raise
        raise RunFailed(write_failure(path, exc)) from None
    finally:
        if not existed:  # never another run's directory (a path that was taken is refused)
            record_cost(path, time.monotonic() - wall, cpu_seconds() - cpu)


def _within(folder: Path, filename) -> bool:
    return isinstance(filename, (str, Path)) and Path(filename).absolute().is_relative_to(folder.absolute())


def write_failure(path: Path, exc: OSError) -> str:
    """End the run whose directory ``path`` could not be written as failed, as far as the disk allows: its
    ``meta.json`` says ``failed`` where it can still be written (where it cannot, the run has no finished
    ``summary.json``, so ``--resume`` runs it again), and no temporary file is left. Returns the one line that
    says so."""
    reason = f"cannot write the run directory: {describe_write_error(exc)}"
    recorded = False
    try:
        meta = json.loads((path / META).read_text())
        meta.update(status="failed", stop_reason=reason)
        write_atomic(path / META, json.dumps(meta, indent=2, default=str))
        recorded = True
    except (OSError, ValueError):
        pass
    remove_temporary(path)
    fix = "free space on the disk or choose another --out"
    if not path.exists():
        return f"run failed: {reason}: {fix}"
    said = "" if recorded else "; its meta.json could not say so either, and a --resume runs it again"
    return f"run failed: {reason}{said}: {fix} (partial results in {path})"


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and its children: those it waited for
    (``RUSAGE_CHILDREN``) and the node processes a procs run's fork server started and reaped (the fork server
    is not this process's direct child until it exits, so its own and its children's times are read apart)."""
    import resource

    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    try:
        from multiprocessing import forkserver

        pid = getattr(forkserver._forkserver, "_forkserver_pid", None)  # noqa: SLF001 - no public handle
        if pid:
            import psutil

            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    except Exception:  # noqa: BLE001 - a cost record must never fail a run
        pass
    return total


def run_twins(layers: dict, name: str | None = None, *, quiet: bool = True) -> tuple[Path, Path, Path]:
    """Twin runs (``edgeml twin``, ``edgeml.analysis.twin``): the config ``layers`` make on real processes, then on
    the virtual clock with the same seed and world and the procs run's factor-1 step time (calibrated, or given);
    returns both run directories and the folder for their report: NAME-procs, NAME-sim and NAME-twin in run.out
    (NAME: ``name``, else twin-ALGORITHM-sSEED). A name whose folders exist is refused before anything runs."""
    from edgeml.config import build_config, check_out, merge
    from edgeml.rundir import META

    cfg = build_config(merge(layers, {"run": {"backend": "procs"}}))
    build_config(merge(layers, {"run": {"backend": "sim"}, "cluster": {"base_step_s": 0.01}}))  # refused now, not later
    name = name or f"twin-{cfg.run.algorithm}-s{cfg.run.seed}"
    parent = Path(cfg.run.out)
    check_out(parent, "run.out")
    folders = {side: parent / f"{name}-{side}" for side in ("procs", "sim", "twin")}
    if any(f.resolve().parent != parent.resolve() for f in folders.values()):  # ".." or "/" in the name
        raise UserError(f"twin name {name!r} would put folders outside run.out = {str(parent)!r}: give a name without "
                        "'/' or '..'")
    taken = [p for p in folders.values() if p.exists()]
    if taken:
        raise UserError(f"{taken[0]} exists: choose another name for the twins (--name), or move it")
    procs = run(build_config(merge(layers, {"run": {"backend": "procs", "name": folders["procs"].name}})),
                quiet=quiet)
    step = json.loads((procs / META).read_text())["base_step_s"]
    sim = run(build_config(merge(layers, {"run": {"backend": "sim", "name": folders["sim"].name},
                                          "cluster": {"base_step_s": step}})), quiet=quiet)
    return procs, sim, folders["twin"]


def record_cost(path: Path, wall_s: float, cpu_s: float) -> None:
    """Add the run's ``wall_s`` and ``cpu_s`` (this process and its children) to ``meta.json``, when the run
    directory was made."""
    from edgeml.rundir import META

    if not (path / META).is_file():
        return
    try:
        writer = RunWriter.attach(path)
        writer.close()
        writer.write_meta(wall_s=round(wall_s, 3), cpu_s=round(cpu_s, 3))
    except (OSError, ValueError):  # the run directory went away or is damaged: the run's own error stands
        pass


def _run(cfg: Config, quiet: bool, path: Path) -> Path:
    job, programs = prepare(cfg, base_step_s=None if cfg.run.backend == "sim" else 0.0)  # refuses bad data first
    world = job.world
    cuda = [r for r in world.ranks if world.device(r) == "cuda"]
    if cuda and not torch.cuda.is_available():
        raise UserError(f"{len(cuda)} node(s) set to run on cuda (run.device / cluster.devices) but no CUDA device "
                        f"is visible: use --device cpu, or cluster.devices to put them on cpu")
    progress = partial(RunProgress, cfg, quiet=quiet)
    if cfg.run.backend == "sim":
        return _run_sim(cfg, job, programs, path, progress, quiet)

    from edgeml.runtime import procs

    torchrun = procs.launched_by_torchrun()
    if torchrun:
        procs.check_world(cfg, len(programs))
        if world.workloads:
            raise UserError("load.schedule is not supported under torchrun (the interfering processes run on the "
                            "launching host only): run the co-running load experiment on one machine, or in sim")
    if not torchrun:
        check_capacity(cfg, len(programs), procs.host_cores())
    preload = get_algorithm(cfg.run.algorithm).preload
    if torchrun and not procs.torchrun_is_monitor():
        procs.torchrun_node(job, programs, preload)  # does not return
    calibration = procs.calibrate(job)
    job.base_step_s = calibration["base_step_s"]
    RunWriter(path, cfg.to_dict(), meta_for(cfg, job, calibration)).close()
    status, reason = (procs.torchrun_monitor(job, programs, path, progress) if torchrun
                      else procs.run_local(job, programs, path, progress, preload))
    return _outcome(path, status, reason, quiet)


def _outcome(path: Path, status: str, reason: str, quiet: bool) -> Path:
    """Tell the user how the run ended; raise for a failed or interrupted one."""
    if not quiet:
        _print_outcome(path, status, reason)
    error = path / "error.txt"
    if status == "failed":
        if error.exists() and debugging():
            import sys

            print(error.read_text(), file=sys.stderr)
        where = f"traceback in {error}; " if error.exists() else ""
        raise RunFailed(f"run failed: {reason} ({where}partial results in {path})")
    if status == "interrupted":
        raise KeyboardInterrupt
    return path


def _print_outcome(path: Path, status: str, reason: str) -> None:
    import json

    from rich.console import Console
    from rich.text import Text

    s = json.loads((path / "summary.json").read_text()) if (path / "summary.json").exists() else {}
    acc = s.get("final_accuracy")
    tail = f": accuracy {acc:.4f} after {s.get('total_steps')} steps" if acc is not None else ""
    # the reason may quote an error text with [brackets]: print it literally, never as console markup
    Console(stderr=True).print(Text.assemble((status, "bold"), f" ({reason}){tail}"))


def _run_sim(cfg: Config, job: Job, programs: list, path: Path, progress, quiet: bool) -> Path:
    from edgeml.runtime.sim import Kernel

    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.run.threads)  # results depend on it: never on what ran before in this process
    try:
        writer = RunWriter(path, cfg.to_dict(), meta_for(cfg, job, {"virtual": True, "base_step_s": job.base_step_s}))
        progress = progress()
        monitor = Monitor(job, writer, on_row=progress.update)
        kernel = Kernel(job, programs, monitor)
        status, reason = "failed", "ended before it started"
        try:
            with progress:
                status, reason = kernel.run()
        except KeyboardInterrupt:  # a Ctrl-C before the kernel's own loop catches it: recorded, raised by _outcome
            status, reason = "interrupted", "interrupted by the user"
        except OSError as exc:
            if exc is not writer.error:
                raise
        finally:
            if writer.error is not None and status != "interrupted":  # evals.csv could not be written: failed
                status, reason = "failed", f"cannot write the run directory: {describe_write_error(writer.error)}"
            if kernel.error:
                info, _, trace = kernel.error
                writer.write_error(error_report(info, kernel.now, trace))
            try:
                reports, now = kernel.reports(), kernel.now
                writer.finish(*report_rows(reports, now), [row for n in kernel.nodes.values() for row in n.series],
                              summarize(job, reports, monitor.rows, now, status, reason), now, status, reason)
            except OSError as exc:  # the run directory went away (deleted, disk full): an interrupt still wins
                if status == "interrupted":
                    raise KeyboardInterrupt from exc
                raise
    finally:
        torch.set_num_threads(threads)
    if kernel.error and debugging():
        raise kernel.error[1]
    return _outcome(writer.path, status, reason, quiet)
