"""The monitor both backends drive: it evaluates the exposed model and decides when to stop; the totals and
headline numbers (``summarize``) and the rows of the node reports. ``sim`` runs it in its one process,
``procs`` in the monitor process (rank 0, ``edgeml.runtime.procs.monitor``); the run directory it writes to is
``edgeml.rundir``'s."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

from edgeml.rundir import AVERAGE_COLUMNS, CLASS_ACCURACY, DIVERGED, RunWriter
from edgeml.runtime.base import Counters, NodeInfo, TagCounters
from edgeml.train import Evaluator, Job


@dataclass
class NodeReport:
    info: NodeInfo
    counters: Counters
    crashed_at: float | None = None
    tags: dict[str, TagCounters] = field(default_factory=dict)


@dataclass
class Totals:
    steps: int = 0
    samples: int = 0
    bytes: int = 0
    byte_hops: int = 0
    ps_ingress: int = 0
    messages_lost: int = 0
    counts: dict[str, float] = field(default_factory=dict)
    """The algorithm's counters (``Node.count``), summed over nodes."""

    @staticmethod
    def of(reports: list[NodeReport]) -> "Totals":
        t = Totals()
        for r in reports:
            c = r.counters
            t.steps += c.steps
            t.samples += c.samples
            t.bytes += c.bytes_sent
            t.byte_hops += c.byte_hops
            t.messages_lost += c.messages_lost
            if r.info.role == "ps":
                t.ps_ingress += c.bytes_recv
            for name, n in c.counts.items():
                t.counts[name] = t.counts.get(name, 0) + n
        return t


def _nan_worst(x: float) -> float:
    """Order key putting NaN (a diverged model) above everything: the worst of a set with a NaN is NaN."""
    return math.inf if math.isnan(x) else x


def _worst_accuracy(values) -> float:
    """The lowest of accuracies, NaN (a diverged model) counting as the worst."""
    return min(values, key=lambda a: -_nan_worst(-a))


class Monitor:
    """Evaluates the exposed global model at fixed clock intervals and applies the stopping rules.

    Both backends drive it the same way: ``evaluate(time, params_list, totals)`` at each interval, then
    ``stop_reason`` tells whether to end the run. Evaluation happens outside the nodes' clocks: in ``sim`` it
    costs no virtual time, in ``procs`` the monitor process does it while the nodes keep training.
    """

    def __init__(self, job: Job, writer: RunWriter | None = None, on_row: Callable[[dict], None] | None = None):
        self.job = job
        self.stop_cfg = job.cfg.stop
        ds = job.dataset
        self.evaluator = Evaluator(job, ds.x_test[job.test_index], ds.y_test[job.test_index])
        self.rows: list[dict[str, Any]] = []
        self.writer = writer
        self.on_row = on_row
        self.stop_reason: str | None = None
        self.next_eval = 0.0

    def evaluate(self, t: float, params: list[torch.Tensor], totals: Totals) -> dict[str, Any]:
        how, per_class = self.job.cfg.eval.models, self.job.cfg.eval.per_class
        classes: list[float] = [math.nan] * self.job.dataset.num_classes if per_class else []
        # the average model beside the nodes' own, whenever the columns describe the nodes' own models
        average: dict[str, float] = {} if how == "average" else dict.fromkeys(AVERAGE_COLUMNS, math.nan)

        def averaged():  # in float64: nodes that hold the same model (after an all-reduce) evaluate it exactly
            return params[0].detach().float().cpu().clone() if len(params) == 1 else \
                torch.stack([p.detach().cpu().double() for p in params]).mean(0).float()

        if not params:
            loss, acc = math.nan, math.nan
        elif how == "average" or len(params) == 1:
            loss, acc = self.evaluator(averaged(), classes if per_class else None)
            if average:
                average = dict(zip(AVERAGE_COLUMNS, (loss, acc)))
        else:
            average = dict(zip(AVERAGE_COLUMNS, self.evaluator(averaged(), None)))
            scored = []
            for p in params:
                c: list[float] = []
                scored.append((c, self.evaluator(p.detach().float().cpu(), c if per_class else None)))
            losses, accs = [x for _, (x, _) in scored], [a for _, (_, a) in scored]
            loss, acc = (statistics.fmean(losses), statistics.fmean(accs)) if how == "mean" else \
                (max(losses, key=_nan_worst), _worst_accuracy(accs))
            if per_class:  # each class as the accuracy column reads the models: their mean, or the worst
                columns = list(zip(*(c for c, _ in scored)))
                classes = [statistics.fmean(v) if how == "mean" else _worst_accuracy(v) for v in columns]
        row = {"time_s": round(t, 6), "total_steps": totals.steps, "total_samples": totals.samples,
               "total_bytes": totals.bytes, "total_byte_hops": totals.byte_hops, "ps_ingress_bytes": totals.ps_ingress,
               "loss": loss, "accuracy": acc, "messages_lost": totals.messages_lost, **average,
               **{f"{CLASS_ACCURACY}{k}": a for k, a in enumerate(classes)}, **totals.counts}
        self.rows.append(row)
        if self.writer:
            self.writer.append_eval(row)
        if self.on_row:
            self.on_row(row)
        self._check_targets(row, evaluated=bool(params))
        return row

    def _check_targets(self, row: dict[str, Any], evaluated: bool) -> None:
        """``evaluated``: whether a model was evaluated (no model, as when every node has crashed, is not a
        diverged one)."""
        s = self.stop_cfg
        if self.stop_reason:
            return
        if s.diverged and evaluated and not math.isfinite(row["loss"]):
            self.stop_reason = f"{DIVERGED} (test loss {row['loss']})"
        elif s.target_accuracy and row["accuracy"] >= s.target_accuracy:
            self.stop_reason = f"target accuracy {s.target_accuracy} reached"
        elif s.target_loss and row["loss"] <= s.target_loss:
            self.stop_reason = f"target loss {s.target_loss} reached"
        elif s.loss_variance and len(self.rows) >= s.window:
            recent = [r["loss"] for r in self.rows[-s.window:]]
            if all(math.isfinite(x) for x in recent) and statistics.pvariance(recent) < s.loss_variance:
                self.stop_reason = f"loss variance below {s.loss_variance} for {s.window} evaluations"
        if not self.stop_reason and s.plateau and len(self.rows) > s.plateau:
            accuracy = [r["accuracy"] for r in self.rows]
            before = max((a for a in accuracy[:-s.plateau] if math.isfinite(a)), default=math.nan)
            recent = max((a for a in accuracy[-s.plateau:] if math.isfinite(a)), default=math.nan)
            if math.isfinite(before) and not recent > before + s.plateau_delta:
                self.stop_reason = (f"accuracy plateau: the best of the last {s.plateau} evaluations "
                                    f"({recent:.4f}) is within {s.plateau_delta:g} of the best before ({before:.4f})")

    def check_steps(self, total_steps: int) -> None:
        if not self.stop_reason and self.stop_cfg.max_steps and total_steps >= self.stop_cfg.max_steps:
            self.stop_reason = f"step budget {self.stop_cfg.max_steps} reached"

    def check_time(self, t: float) -> None:
        if not self.stop_reason and self.stop_cfg.max_time and t >= self.stop_cfg.max_time:
            self.stop_reason = f"time budget {self.stop_cfg.max_time:g} s reached"


# ------------------------------------------------------------------------------------------ rows and summary


def report_rows(reports: list[NodeReport], duration: float) -> tuple[list[dict], list[dict]]:
    """``nodes.csv``'s and ``messages.csv``'s rows (``edgeml.rundir.RunWriter.finish``), in rank order."""
    ranked = sorted(reports, key=lambda r: r.info.rank)
    return ([node_row(r, duration) for r in ranked],
            [{"rank": r.info.rank, "role": r.info.role, "tag": tag, **asdict(t)} for r in ranked
             for tag, t in sorted(r.tags.items())])


def node_row(r: NodeReport, duration: float) -> dict[str, Any]:
    end = r.crashed_at if r.crashed_at is not None else duration
    return {"rank": r.info.rank, "role": r.info.role, "index": r.info.index, **{
        k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(r.counters).items() if k != "counts"},
        "alive_s": round(end, 6), "crashed": r.crashed_at is not None,
        "crash_time_s": "" if r.crashed_at is None else round(r.crashed_at, 6)}


def error_report(info: NodeInfo, t: float, trace: str) -> str:
    """The ``error.txt`` entry of a node program that raised: who, when, and the full traceback."""
    return f"{info.name} (rank {info.rank}) raised at t = {t:.6g} s on the run's clock\n{trace.rstrip()}"


def time_to(evals: list[dict], key: str, target: float, below: bool) -> float | None:
    for row in evals:
        v = row[key]
        if isinstance(v, float) and math.isnan(v):
            continue
        if (v <= target) if below else (v >= target):
            return row["time_s"]
    return None


def _spread(workers: list[NodeReport], duration: float) -> float | None:
    """Largest minus smallest share of its alive time a worker spent computing (ESync Fig. 5's balance)."""
    shares = [r.counters.compute_s / end for r in workers
              if (end := r.crashed_at if r.crashed_at is not None else duration) > 0]
    return max(shares) - min(shares) if shares else None


def summarize(job: Job, reports: list[NodeReport], evals: list[dict], duration: float, status: str,
              reason: str) -> dict[str, Any]:
    cfg = job.cfg
    totals = Totals.of(reports)
    workers = [r for r in reports if r.info.role == "worker"]
    alive = sum((r.crashed_at if r.crashed_at is not None else duration) for r in workers) or 1.0
    accs = [r["accuracy"] for r in evals if math.isfinite(r["accuracy"])]
    losses = [r["loss"] for r in evals if math.isfinite(r["loss"])]
    s = cfg.stop
    return {
        "algorithm": cfg.run.algorithm, "dataset": cfg.data.dataset, "model": job.model_name,
        "workers": cfg.cluster.workers, "hetero": cfg.cluster.hetero, "backend": cfg.run.backend,
        "seed": cfg.run.seed, "status": status, "stop_reason": reason, "duration_s": round(duration, 6),
        "final_accuracy": accs[-1] if accs else None, "best_accuracy": max(accs) if accs else None,
        "final_loss": losses[-1] if losses else None, "best_loss": min(losses) if losses else None,
        "total_steps": totals.steps, "total_samples": totals.samples, "counts": totals.counts,
        "total_bytes": totals.bytes, "total_byte_hops": totals.byte_hops, "ps_ingress_bytes": totals.ps_ingress,
        "messages_lost": totals.messages_lost,
        "compute_fraction": sum(r.counters.compute_s for r in workers) / alive,
        "comm_fraction": sum(r.counters.comm_s for r in workers) / alive,
        "wait_fraction": sum(r.counters.wait_s for r in workers) / alive,
        "compute_fraction_spread": _spread(workers, duration),
        "crashed_workers": sum(r.crashed_at is not None for r in workers),
        "target_accuracy": s.target_accuracy or None,
        "time_to_target_accuracy": time_to(evals, "accuracy", s.target_accuracy, False) if s.target_accuracy else None,
        "target_loss": s.target_loss or None,
        "time_to_target_loss": time_to(evals, "loss", s.target_loss, True) if s.target_loss else None,
    }
