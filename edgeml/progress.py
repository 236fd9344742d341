"""Progress of a run on stderr, silent with ``--quiet``: a live status line on a terminal, and a plain line every
few seconds elsewhere (CI logs, pipes, files), so a long run never looks hung."""

from __future__ import annotations

import math
import time

from rich.console import Console
from rich.live import Live
from rich.text import Text

from edgeml.rundir import eval_column

PLAIN_EVERY_S = 5.0
"""Seconds of wall time between two plain progress lines when stderr is not a terminal."""


class RunProgress:
    """One status line: clock, steps, the algorithm's counters, loss, accuracy; refreshed on every evaluation.

    On a terminal it appears once a run has lasted a couple of seconds, so short runs stay quiet; elsewhere a
    plain line is printed every ``PLAIN_EVERY_S`` seconds of wall time (the first after as long).
    """

    def __init__(self, cfg, quiet: bool = False, console: Console | None = None):
        self.cfg = cfg
        self.quiet = quiet
        self.console = console or Console(stderr=True)
        self.live: Live | None = None
        self.t0 = time.monotonic()
        self.printed = self.t0
        self.last: dict | None = None

    def __enter__(self) -> RunProgress:
        self.t0 = self.printed = time.monotonic()
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
            "".join(f"{k} {v:g}  " for k, v in row.items() if not eval_column(k)),
            f"loss {loss:.4f}  " if not math.isnan(loss) else "",
            (f"acc {acc:.3f}" if not math.isnan(acc) else "", "green"))

    def update(self, row: dict) -> None:
        self.last = row
        if self.quiet:
            return
        now = time.monotonic()
        if not self.console.is_terminal:
            if now - self.printed >= PLAIN_EVERY_S:
                self.printed = now
                self.console.print(self._line(row), soft_wrap=True, highlight=False)
            return
        if self.live is None and now - self.t0 > 2.0:
            self.live = Live(self._line(row), console=self.console, refresh_per_second=4, transient=False)
            self.live.start()
        if self.live is not None:
            self.live.update(self._line(row))
