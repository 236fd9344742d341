"""Live progress of a run in the terminal (rich), silent with ``--quiet``."""

from __future__ import annotations

import math
import time

from rich.console import Console
from rich.live import Live
from rich.text import Text

from edgeml.runtime.base import EVAL_COLUMNS


class RunProgress:
    """One status line: clock, steps, the algorithm's counters, loss, accuracy; refreshed on every evaluation.

    It only appears once a run has lasted a couple of seconds, so short runs stay quiet.
    """

    def __init__(self, cfg, quiet: bool = False, console: Console | None = None):
        self.cfg = cfg
        self.quiet = quiet
        self.console = console or Console(stderr=True)
        self.live: Live | None = None
        self.t0 = time.monotonic()
        self.last: dict | None = None

    def __enter__(self) -> "RunProgress":
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def _line(self, row: dict) -> Text:
        c = self.cfg
        budget = f"/{c.stop.max_time:g}" if c.stop.max_time else ""
        acc = row["accuracy"]
        loss = row["loss"]
        return Text.assemble(
            (f"{c.run.algorithm} ", "bold cyan"), f"{c.run.backend} w={c.cluster.workers}  ",
            f"clock {row['time_s']:.1f}{budget} s  steps {row['total_steps']}  ",
            "".join(f"{k} {v:g}  " for k, v in row.items() if k not in EVAL_COLUMNS),
            f"loss {loss:.4f}  " if not math.isnan(loss) else "", (f"acc {acc:.3f}" if not math.isnan(acc) else "", "green"))

    def update(self, row: dict) -> None:
        self.last = row
        if self.quiet:
            return
        if self.live is None and time.monotonic() - self.t0 > 2.0 and self.console.is_terminal:
            self.live = Live(self._line(row), console=self.console, refresh_per_second=4, transient=False)
            self.live.start()
        if self.live is not None:
            self.live.update(self._line(row))
