"""Run one configuration end to end: job, backend, run directory. The command line and ``reproduce`` call this."""

from __future__ import annotations

import getpass
import os
import platform
import socket
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import torch

import edgeml
from edgeml.config import Config
from edgeml.errors import UserError
from edgeml.metrics import Monitor, RunWriter
from edgeml.train import Job, build_job


def git_sha() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(edgeml.__file__).parent, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def run_dir_for(cfg: Config) -> Path:
    name = cfg.run.name or (f"{cfg.run.algorithm}-{cfg.data.dataset}-w{cfg.cluster.workers}-s{cfg.run.seed}-"
                            f"{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}")
    path = Path(cfg.run.out) / name
    if path.exists():
        raise UserError(f"run directory {str(path)!r} already exists: choose another --out or run.name")
    return path


def meta_for(cfg: Config, job: Job, calibration: dict) -> dict:
    return {
        "edgeml_version": edgeml.__version__, "git_sha": git_sha(), "seed": cfg.run.seed,
        "algorithm": cfg.run.algorithm, "backend": cfg.run.backend, "host": socket.gethostname(),
        "user": getpass.getuser(), "platform": platform.platform(), "python": platform.python_version(),
        "torch": torch.__version__, "cpus": os.cpu_count(), "model": job.model_name,
        "num_params": int(job.init_params.numel()), "started": datetime.now(timezone.utc).isoformat(),
        "calibration": calibration, "base_step_s": job.base_step_s,
        "step_factors": job.cluster.factors,
    }


def run(cfg: Config, *, quiet: bool = True, path: Path | None = None) -> Path:
    """Run ``cfg``; return the run directory. Raises UserError on bad input before anything is written."""
    from edgeml.algorithms import get_algorithm

    spec = get_algorithm(cfg.run.algorithm)
    if cfg.run.device == "cuda" and not torch.cuda.is_available():
        raise UserError("run.device = cuda but no CUDA device is visible: use --device cpu")
    path = path or run_dir_for(cfg)
    if cfg.run.backend == "procs":
        from edgeml.runtime import procs

        if procs.launched_by_torchrun():
            return procs.run_torchrun(cfg, spec, path, quiet=quiet)
        job = build_job(cfg, base_step_s=0.0)
        calibration = procs.calibrate(job)
        job.base_step_s = calibration["base_step_s"]
    else:
        job = build_job(cfg)
        calibration = {"virtual": True, "base_step_s": job.base_step_s}
    writer = RunWriter(path, cfg.to_dict(), meta_for(cfg, job, calibration))
    if cfg.run.backend == "procs":
        writer.close()
        status, reason = procs.run_local(job, path, quiet)
        if not quiet:
            _print_outcome(path, status, reason)
    else:
        status, reason = _run_sim(job, spec, writer, quiet)
    if status == "failed":
        raise RuntimeError(f"run failed: {reason} (partial results in {path})")
    if status == "interrupted":
        raise KeyboardInterrupt
    return path


def _print_outcome(path: Path, status: str, reason: str) -> None:
    import json

    from rich.console import Console

    s = json.loads((path / "summary.json").read_text()) if (path / "summary.json").exists() else {}
    acc = s.get("final_accuracy")
    tail = f": accuracy {acc:.4f} after {s.get('total_steps')} steps" if acc is not None else ""
    Console(stderr=True).print(f"[bold]{status}[/bold] ({reason}){tail}")


def _run_sim(job: Job, spec, writer: RunWriter, quiet: bool) -> tuple[str, str]:
    from edgeml.progress import RunProgress
    from edgeml.runtime.sim import Kernel

    progress = RunProgress(job.cfg, quiet=quiet)
    monitor = Monitor(job, writer, on_row=progress.update)
    kernel = Kernel(job, spec.nodes(job.cfg), monitor)
    status, reason = "failed", "interrupted before start"
    try:
        with progress:
            status, reason = kernel.run()
    finally:
        writer.finish(kernel.reports(), [row for n in kernel.nodes.values() for row in n.series], monitor.rows,
                      kernel.now, status, reason, job)
    if not quiet:
        _print_outcome(writer.path, status, reason)
    return status, reason
