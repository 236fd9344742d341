"""What every figure shares: matplotlib's backend, the axis names, colours, markers, line styles and sizes, the
figure and its wrapped title, and ``Styles``, the colour and marker per method and line style per setting of
one figure. The helpers are the figure modules' own (underscored); the figures themselves are the package's."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from edgeml.analysis.compare import HOST_BOUND  # noqa: E402

X_AXES = {"time_s": "training time (s)", "total_steps": "total steps over all workers",
          "total_mb": "bytes sent by all nodes (MB)", "ingress_mb": "bytes into the parameter server (MB)",
          "iterations": "iterations"}
X_NAMES = {"time_s": "training time", "total_steps": "total steps", "total_mb": "bytes sent",
           "ingress_mb": "ingress at the parameter server", "iterations": "iterations"}
PARTS = {"computation": "#4C72B0", "communication": "#DD8452", "waiting": "#C44E52"}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
HATCHES = ("", "//", "..", "xx", "\\\\", "++")
"""Bar fills that tell apart runs of one method (one colour) in the same panel."""
DASHES = ("-", "--", ":", "-.", (0, (6, 2, 1, 2, 1, 2)), (0, (10, 3)), (0, (1, 3)), (0, (4, 1, 4, 4)))
GRID_POINTS = 400
"""At most this many points on a curve's x grid: the seeds' own evaluation points, thinned geometrically (every early
point kept, later ones spaced out) where there are more."""
MAX_WIDTH = 14.0     # inches; at 150 dpi a figure is at most 2100 px wide
MAX_TICK_LABELS = 12  # per axis: more worker labels are thinned out


def label_spans(mid, lo, hi) -> np.ndarray:
    """Error-bar lengths [below, above] around ``mid`` for an interval [lo, hi] (scalars or arrays): clipped at 0,
    because a mean of equal values can land an ulp outside their range and matplotlib refuses negative lengths."""
    mid, lo, hi = (np.atleast_1d(np.asarray(v, dtype=float)) for v in (mid, lo, hi))
    return np.clip(np.vstack([mid - lo, hi - mid]), 0.0, None)


def new_figure(nrows: int, ncols: int, width: float, height: float) -> tuple[Figure, list]:
    # A bare Figure (no pyplot) leaves no global state behind, so many figures never pile up in memory.
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.85):
        fig = Figure(figsize=(min(width, MAX_WIDTH), height), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel().tolist()
    return fig, axes


def panel_title(fig: Figure, text: str, context: str) -> None:
    width = max(40, int(fig.get_figwidth() * 11))  # characters that fit at this font size
    lines = textwrap.wrap(text, width) + (textwrap.wrap(context, width) if context else [])
    fig.suptitle("\n".join(lines), fontsize=11)


def fit_titles(fig: Figure) -> None:
    """Fold each panel's title that is wider than its panel onto as many lines as it needs: the constrained layout
    makes room above a panel for a title's lines, not beside it for its width, so a long one ran off the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    for ax in fig.axes:
        text = ax.title.get_text()
        wide, room = ax.title.get_window_extent(renderer).width, ax.get_window_extent(renderer).width
        if text and wide > room:
            ax.title.set_text(textwrap.fill(" ".join(text.split()), max(12, int(len(text) * room / wide))))


def wrap_label(text: str, width: int = 18) -> str:
    """A tick label on several lines: one per part of a setting, long parts folded at word boundaries."""
    return "\n".join(textwrap.fill(part, width, break_long_words=False) for part in text.split(", "))


def order_of(df: pd.DataFrame, col: str) -> list:
    return list(dict.fromkeys(df[col])) if col in df else []


class _Solid(dict):
    """Line style per setting; any other setting (that of a method run in one setting only) is drawn solid."""

    def __missing__(self, key):
        return "-"


@dataclass
class Styles:
    """Colour and marker per method, line style per setting, shared by every panel of one figure.

    ``settings`` are the settings of the methods run in several (their names as the legend shows them:
    ``edgeml.analysis.figures.group_settings``), each with a line style of its own; a method run in one setting
    gets no line-style entry, and its line is drawn in that setting's style where another method has it, else
    solid; ``solo``: such a solid line exists, so the settings' styles leave solid to it (ASGD beside AdaComp
    at c = 0.1, 0.01 and 0.001: one colour per method, one line style per c, and ASGD's alone solid).
    ``notes``: a remark after a method's name in the legend ("same curve as SNAP-0")."""

    methods: list[str]
    settings: list[str]
    notes: dict[str, str] = field(default_factory=dict)
    solo: bool = False

    def __post_init__(self):
        palette = sns.color_palette("tab10" if len(self.methods) <= 10 else "husl", len(self.methods))
        self.colour = dict(zip(self.methods, palette))
        self.marker = {m: MARKERS[i % len(MARKERS)] for i, m in enumerate(self.methods)}
        dashes = DASHES[1:] if self.solo else DASHES
        self.dash = _Solid({s: dashes[i % len(dashes)] for i, s in enumerate(self.settings)})

    @classmethod
    def of(cls, df: pd.DataFrame) -> "Styles":
        """The methods of a figure's table, and the settings of those run in several."""
        methods = order_of(df, "method")
        # a method with runs whose step times the host set, not the device model (``analysis.compare.host_bound``)
        marked = set(df.loc[df["host_bound"].astype(bool), "method"]) if "host_bound" in df else set()
        notes = {m: HOST_BOUND for m in methods if m in marked}
        if "setting" not in df:
            return cls(methods, [], notes)
        several = df.groupby("method", sort=False)["setting"].transform("nunique") > 1
        settings = order_of(df[several], "setting")
        return cls(methods, settings, notes,
                   solo=bool(settings) and not df.loc[~several, "setting"].isin(settings).all())

    def add_notes(self, notes: dict[str, str]) -> None:
        """Add remarks after methods' names, beside any they have."""
        for m, note in notes.items():
            self.notes[m] = "; ".join(filter(None, (self.notes.get(m), note)))

    def legend(self, fig: Figure, lines: bool = True) -> None:
        """Methods (colour and marker) and, when some method ran in several, settings (line style), below the
        panels; a method's note follows its name."""
        handles = [Line2D([], [], color=self.colour[m], marker=self.marker[m], lw=1.6 if lines else 0, ms=6)
                   for m in self.methods]
        labels = [f"{m} ({self.notes[m]})" if self.notes.get(m) else m for m in self.methods]
        if self.settings and lines:
            handles += [Line2D([], [], color="0.35", ls=self.dash[s], lw=1.6) for s in self.settings]
            labels += list(self.settings)
        width = max(map(len, labels)) + 6
        ncols = max(1, min(len(labels), int(fig.get_figwidth() * 11) // width))
        # grow the figure by the legend's height, so that many entries never squeeze it into the panels
        fig.set_figheight(fig.get_figheight() + 0.24 * (math.ceil(len(labels) / ncols) + 1))
        fig.legend(handles, labels, loc="outside lower center", ncols=ncols, frameon=False)
