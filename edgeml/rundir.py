"""The run directory: its files and columns, the writer the backends fill it with, and the reader analysis uses.

Run directory (format 1; tables are rebuilt from it alone):

    config.toml     the resolved configuration
    meta.json       edgeml version, format, git SHA, seed, host, its processor (cpu: model name and the vector
                    instructions torch uses), backend, threads, calibration, status
                    (running, completed, stalled, stopped, interrupted, failed), stop reason, duration
                    (on the run's clock), and its cost when it ended: wall_s (wall-clock seconds) and cpu_s
                    (CPU seconds of the run's process and its children)
    evals.csv       time_s, total_steps, total_samples, total_bytes, total_byte_hops, ps_ingress_bytes, loss,
                    accuracy, messages_lost, then the algorithm's counters (``Node.count``: rounds, iterations,
                    epochs, commits; a column appears when first counted, earlier rows read 0)
    nodes.csv       one row per node: rank, role, index, compute_s, comm_s, wait_s, alive_s, steps, samples,
                    messages_sent, bytes_sent, messages_lost, messages_recv, bytes_recv, byte_hops, crashed,
                    crash_time_s
    messages.csv    one row per node and message tag: rank, role, tag, messages_sent, bytes_sent,
                    messages_lost, min_bytes, max_bytes (the smallest and largest message; tag ``all_reduce``
                    counts a ring all-reduce's share, see ``edgeml.runtime.base``), byte_hops
    series/*.csv    algorithm time series (time_s, rank, role, fields...): e.g. staleness, decisions
    summary.json    headline numbers (see ``edgeml.runtime.monitor.summarize``)
    error.txt       only when a node program raised: which node (role, index, rank), when, and the traceback
    experiment.json only in a reproduction's run: paper, run name, its ``[[runs]]`` entry (spec), sweep point,
                    seed, quick (see ``edgeml.reproduce``)

``edgeml run`` leaves these files as it wrote them. ``compact`` packs a finished run into one archive,
``run.zip``, holding what the analysis reads of it, as ``edgeml reproduce`` keeps its runs (see ``compact``):
the reader reads a file from the archive as from the folder (``read_file``, ``files``), and reads the former
compacted form too, each CSV table gzip-compressed as ``<name>.csv.gz``.

``evals.csv`` is appended as the run goes, so a run that dies keeps what it measured. A crashed node's
``alive_s`` ends at its crash; a node process that died (killed, or exited on its own) counts as crashed.

The writer takes plain rows and numbers (the backends turn their node reports into rows and compute the
summary, ``edgeml.runtime.monitor``); the reader (``Run``, ``load_run``, ``find_runs``, ``load_runs``) is what every
table and figure is rebuilt from. Which runs ``find_runs`` finds: run directories (with ``summary.json``,
``evals.csv`` or ``run.zip``), an experiment's results folder (holding ``runs/`` and ``experiment.toml``), or a
folder whose direct children are run directories; ``recursive`` searches every folder below. Runs written by
different experiments (``experiment.json``: paper, quick) are never loaded together. Run labels: a reproduction's runs
are named by ``experiment.json``; other run directories by algorithm, plus the config keys that tell apart runs
of the same algorithm.

This module sits below the runtime and the analysis, which both use it: it imports nothing of edgeml but the
package's version, its errors and the config schema, and pandas and rich only where a reader needs them (node
processes import the writer and should not pay for them).
"""

from __future__ import annotations

import contextlib
import csv
import errno
import functools
import glob
import gzip
import io
import json
import math
import sys
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeml import __version__
from edgeml.errors import UserError
from edgeml.schema import COMMON_SECTIONS, FORMER_DEFAULTS, Config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

if TYPE_CHECKING:
    import pandas as pd

FORMAT_VERSION = 1
CONFIG = "config.toml"
META = "meta.json"
EVALS = "evals.csv"
NODES = "nodes.csv"
MESSAGES = "messages.csv"
SERIES = "series"
SUMMARY = "summary.json"
ERROR = "error.txt"
EXPERIMENT = "experiment.json"
GZIP = ".gz"
"""The suffix of a gzip-compressed table, the former compacted form: ``evals.csv.gz`` holds what ``evals.csv``
would (``read_file``)."""
ARCHIVE = "run.zip"
"""A compacted run's one file: every file the analysis reads, by its name in the folder (``compact``)."""

EVAL_COLUMNS = ("time_s", "total_steps", "total_samples", "total_bytes", "total_byte_hops", "ps_ingress_bytes",
                "loss", "accuracy", "messages_lost")
"""``evals.csv``'s own columns (the algorithm's counters follow them), which no counter may shadow."""
CLASS_ACCURACY = "accuracy_c"
"""The prefix of ``evals.csv``'s per-class accuracy columns (``eval.per_class``: ``accuracy_c0``, ...)."""
AVERAGE_COLUMNS = ("average_loss", "average_accuracy")
"""``evals.csv``'s columns of the nodes' average model where ``loss`` and ``accuracy`` describe their own models
(``eval.models`` = ``mean`` or ``worst``, several nodes): decentralized training reports both."""
NODE_COLUMNS = ["rank", "role", "index", "compute_s", "comm_s", "wait_s", "alive_s", "steps", "samples",
                "messages_sent", "bytes_sent", "messages_lost", "messages_recv", "bytes_recv", "byte_hops", "crashed",
                "crash_time_s"]
TAG_COLUMNS = ["rank", "role", "tag", "messages_sent", "bytes_sent", "messages_lost", "min_bytes", "max_bytes",
               "byte_hops"]


def eval_column(name: str) -> bool:
    """Whether an ``evals.csv`` column is the monitor's own (not an algorithm's counter)."""
    return name in EVAL_COLUMNS or name in AVERAGE_COLUMNS or \
        (name.startswith(CLASS_ACCURACY) and name[len(CLASS_ACCURACY):].isdigit())


# What the reader needs of a run (a run written by an older edgeml that lacks one is refused with a fix).
SUMMARY_NEEDED = ("algorithm", "dataset", "model", "workers", "hetero", "final_accuracy", "best_accuracy",
                  "total_steps", "total_samples", "total_bytes", "ps_ingress_bytes", "compute_fraction",
                  "comm_fraction", "wait_fraction", "duration_s")
EVALS_NEEDED = ("time_s", "total_steps", "total_bytes", "loss", "accuracy")
NODES_NEEDED = ("role", "index", "compute_s", "comm_s", "wait_s", "alive_s")
# Run-config keys that never distinguish one configuration from another.
NOT_CONFIG = ("run.seed", "run.name", "run.out")
FINISHED = ("completed", "stalled", "stopped")
"""Statuses of a run that ended by itself (a stopping rule, every node done, or stalled), not by failing."""


# ------------------------------------------------------------------------------------------ values


def csv_value(v: Any) -> Any:
    """A number as its shortest exact text, NaN as an empty cell. Numpy scalars (whose repr is
    ``np.float32(...)``, ``np.True_``) become Python numbers first."""
    if hasattr(v, "item") and hasattr(v, "dtype") and getattr(v, "ndim", 1) == 0:
        v = v.item()
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("" if math.isnan(v) else repr(v))
    return v


def toml_safe(d: Any) -> Any:
    """``d`` without its None values (TOML has no null), as ``config.toml`` holds it."""
    if isinstance(d, dict):
        return {k: toml_safe(v) for k, v in d.items() if v is not None}
    if isinstance(d, list):
        return [toml_safe(v) for v in d]
    return d


def fmt_value(v: Any) -> str:
    """A config value as run labels and sweep points show it: ``true``, ``H=2``, ``[1, 2]``."""
    if isinstance(v, bool):
        return str(v).lower()
    return v if isinstance(v, str) else json.dumps(v)


# ------------------------------------------------------------------------------------------ the writer


DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""The errors of a write that no longer fits on the disk (or in the user's quota, or in a file's size limit)."""


def describe_write_error(exc: OSError) -> str:
    """An OSError from writing, in a few words: "No space left on device (run.zip)"."""
    where = f" ({Path(exc.filename).name})" if getattr(exc, "filename", None) else ""
    return f"{exc.strerror or exc}{where}"


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``path`` whole or not at all: through ``<path>.tmp``, which a failed write (a full disk) removes, so
    that a reader never sees half a file and nothing temporary is left."""
    tmp = path.with_name(f"{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def remove_temporary(path: Path) -> None:
    """Remove the ``*.tmp`` files a write cut short left in the run directory ``path`` (best effort)."""
    with contextlib.suppress(OSError):
        for p in path.rglob("*.tmp"):
            with contextlib.suppress(OSError):
                p.unlink()


class RunWriter:
    """Writes one run directory. Created only after the config is valid, so bad input leaves nothing.

    A file the reader trusts whole (``meta.json``, ``summary.json``, a rewritten ``evals.csv``) replaces the old
    one only once written (``write_atomic``); a write that fails (a full disk) raises its OSError and leaves no
    temporary file, and ``error``, the first such failure, stops ``append_eval`` from trying again, so a run
    ends on the first failure rather than on a chain of them."""

    error: OSError | None = None

    def __init__(self, path: Path, config: dict, meta: dict):
        import tomli_w

        self.path = path
        path.mkdir(parents=True, exist_ok=False)
        write_atomic(path / CONFIG, tomli_w.dumps(toml_safe(config)))
        self.meta = {"format": FORMAT_VERSION, **meta, "status": "running"}
        self.write_meta()
        self.columns = list(EVAL_COLUMNS)
        self._evals = open(path / EVALS, "w", newline="")
        self._eval_writer = csv.DictWriter(self._evals, fieldnames=self.columns)
        self._eval_writer.writeheader()
        self._evals.flush()

    @classmethod
    def attach(cls, path: Path) -> "RunWriter":
        """Reopen a run directory created by another process, to append evaluations and finish it."""
        self = cls.__new__(cls)
        self.path = path
        self.meta = json.loads((path / META).read_text())
        with open(path / EVALS, newline="") as f:
            self.columns = next(csv.reader(f), None) or list(EVAL_COLUMNS)
        self._evals = open(path / EVALS, "a", newline="")
        self._eval_writer = csv.DictWriter(self._evals, fieldnames=self.columns)
        return self

    def close(self) -> None:
        self._evals.close()

    def write_meta(self, **updates: Any) -> None:
        self.meta.update(updates)
        write_atomic(self.path / META, json.dumps(self.meta, indent=2, default=str))

    def write_error(self, text: str) -> Path | None:
        """Add a node's error report (who, when, traceback) to ``error.txt``; returns its path, or None when it
        cannot be written (a full disk): a report must never hide the failure it reports."""
        path = self.path / ERROR
        try:
            with open(path, "a") as f:
                f.write(text.rstrip("\n") + "\n\n")
        except OSError:
            return None
        return path

    def append_eval(self, row: dict[str, Any]) -> None:
        """Append one evaluation; after a failed write (``error``) nothing more is written."""
        if self.error is not None:
            return
        try:
            self._append_eval(row)
        except OSError as exc:
            self.error = exc
            with contextlib.suppress(OSError):
                self._evals.close()
            raise

    def _append_eval(self, row: dict[str, Any]) -> None:
        new = [k for k in row if k not in self.columns]
        if new:  # an algorithm counter seen for the first time: rewrite the table with its column (rare)
            self._evals.close()
            with open(self.path / EVALS, newline="") as f:
                old = list(csv.DictReader(f))
            self.columns += new
            text = io.StringIO(newline="")
            w = csv.DictWriter(text, fieldnames=self.columns, restval=0)
            w.writeheader()
            w.writerows(old)
            write_atomic(self.path / EVALS, text.getvalue())
            self._evals = open(self.path / EVALS, "a", newline="")
            self._eval_writer = csv.DictWriter(self._evals, fieldnames=self.columns)
        self._eval_writer.writerow({k: csv_value(row.get(k, 0)) for k in self.columns})
        self._evals.flush()

    def finish(self, nodes: list[dict], messages: list[dict], series: list[tuple[str, dict]], summary: dict,
               duration: float, status: str, reason: str) -> dict[str, Any]:
        """End the run: ``nodes.csv`` and ``messages.csv`` from their rows (``NODE_COLUMNS``, ``TAG_COLUMNS``,
        in the order given), ``series/<name>.csv`` from (name, row) pairs, ``summary.json``, and the final
        status in ``meta.json``. Returns ``summary``."""
        with contextlib.suppress(OSError):  # (a failed append closed it already)
            self._evals.close()
        for name, columns, rows in ((NODES, NODE_COLUMNS, nodes), (MESSAGES, TAG_COLUMNS, messages)):
            write_atomic(self.path / name, _csv_text(columns, rows))
        self._write_series(series)
        write_atomic(self.path / SUMMARY, json.dumps(summary, indent=2))
        self.write_meta(status=status, stop_reason=reason, duration_s=duration)
        return summary

    def _write_series(self, series: list[tuple[str, dict]]) -> None:
        by_name: dict[str, list[dict]] = {}
        for name, row in series:
            by_name.setdefault(name, []).append(row)
        if by_name:
            (self.path / SERIES).mkdir(exist_ok=True)
        for name, rows in by_name.items():
            cols: list[str] = []
            for row in rows:
                cols.extend(k for k in row if k not in cols)
            write_atomic(self.path / SERIES / f"{name}.csv",
                         _csv_text(cols, [{k: csv_value(v) for k, v in row.items()} for row in rows]))


def _csv_text(columns: list[str], rows: list[dict]) -> str:
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=columns)
    w.writeheader()
    w.writerows(rows)
    return text.getvalue()


def tag_run(path: Path, tag: dict[str, Any]) -> None:
    """Write ``experiment.json``: which reproduction a run belongs to (paper, run, spec, point, seed, quick)."""
    write_atomic(path / EXPERIMENT, json.dumps(tag))


def finished_status(path: Path) -> str | None:
    """The status in a run's ``summary.json`` (None without a readable one)."""
    try:
        return read_json(path, SUMMARY).get("status")
    except (OSError, ValueError):
        return None


def read_file(run: Path, name: str) -> bytes | None:
    """The bytes of the run directory ``run``'s file ``name`` (``summary.json``, ``series/decisions.csv``): the
    file itself, else its gzip-compressed copy ``<name>.gz`` (the former compacted form), else the member of
    ``run.zip`` (``compact``); None when none holds it. A loose file comes first: a compaction cut short leaves
    it until the archive holding it is complete."""
    for p, unpack in ((run / name, None), (run / f"{name}{GZIP}", gzip.decompress)):
        if p.is_file():
            data = p.read_bytes()
            return _unpacked(p, data, unpack) if unpack else data
    with _zip(run) as z:
        return _member(z, name) if z is not None and name in z.NameToInfo else None


_DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError)
"""What a damaged archive or gzip copy raises when read (beside OSError): a bad CRC, a damaged deflate stream,
a truncated member."""


def _member(z: zipfile.ZipFile, name: str) -> bytes:
    """A member of a run's archive; a damaged one is an OSError naming the archive and the member."""
    try:
        return z.read(name)
    except _DAMAGED as exc:
        raise OSError(f"{z.filename}: {name} is damaged ({exc or type(exc).__name__})") from None


def _unpacked(path: Path, data: bytes, unpack) -> bytes:
    try:
        return unpack(data)
    except _DAMAGED as exc:
        raise OSError(f"{path} is damaged ({exc or type(exc).__name__})") from None


@contextlib.contextmanager
def _zip(run: Path):
    """The run's ``run.zip`` open for reading (None without one); a damaged archive is an OSError, as an
    unreadable file is."""
    if not (run / ARCHIVE).is_file():
        yield None
        return
    try:
        with zipfile.ZipFile(run / ARCHIVE) as z:
            yield z
    except (zipfile.BadZipFile, EOFError) as exc:
        raise OSError(f"{run / ARCHIVE} is damaged ({exc or type(exc).__name__})") from None


def table_problem(data: bytes) -> str | None:
    """Why a CSV table's bytes are not a whole table (None when they are): not UTF-8, empty, a row with another
    number of fields than the header, or a last line cut short (every table the writer writes ends its lines)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text at byte {exc.start}"
    if not text.strip():
        return "empty"
    if not text.endswith("\n"):
        return "its last line is cut short"
    rows = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(rows)
        for row in rows:
            if len(row) != len(header):
                return f"line {rows.line_num} has {len(row)} fields where the header has {len(header)}"
    except csv.Error as exc:
        return f"line {rows.line_num}: {exc}"
    return None


def verify(path: Path) -> str | None:
    """Why the run directory ``path``, which says it finished, cannot be counted; None when it reads back whole,
    or when it does not say it finished (without ``summary.json``, or with a status not in ``FINISHED``: such a
    run is run again anyway).

    Every file reads back (each member of ``run.zip`` passes its checksum), the JSON and TOML files parse, every
    CSV table is whole (``table_problem``), ``meta.json`` ends with the status ``summary.json`` has, and the last
    evaluation of ``evals.csv`` is the one ``summary.json`` reports: at the run's end (``duration_s``), with its
    final accuracy and loss. (A table cut at the end of a line still parses: the last check finds that.)"""
    if not _is_run(path):
        return None
    try:
        found = files(path)
    except OSError as exc:
        return str(exc)
    if SUMMARY not in found:
        return None
    parsed: dict[str, Any] = {}
    for name in (SUMMARY, META, EXPERIMENT, CONFIG):
        if name in found:
            try:
                text = found[name].decode("utf-8")
                parsed[name] = tomllib.loads(text) if name == CONFIG else json.loads(text)
            except ValueError as exc:  # (UnicodeDecodeError, JSONDecodeError and TOMLDecodeError among them)
                return f"{name} does not parse ({exc})"
    summary = parsed[SUMMARY]
    if not isinstance(summary, dict) or summary.get("status") not in FINISHED:
        return None
    for name in (META, CONFIG, EVALS):
        if name not in found:
            return f"it has no {name}"
    for name, data in found.items():
        problem = table_problem(data) if name.endswith(".csv") else None
        if problem:
            return f"{name}: {problem}"
    meta = parsed[META]
    if isinstance(meta, dict) and meta.get("status") != summary["status"]:
        return f"meta.json says {meta.get('status')} where summary.json says {summary['status']}"
    rows = list(csv.DictReader(io.StringIO(found[EVALS].decode("utf-8"), newline="")))
    return last_evaluation_problem({c: [_number(r.get(c)) for r in rows] for c in ("time_s", "accuracy", "loss")},
                                   summary)


def _number(text: str | None) -> float:
    try:
        return float(text) if text else math.nan
    except ValueError:
        return math.nan


def last_evaluation_problem(columns: dict[str, list[float]], summary: dict) -> str | None:
    """Where the evaluations (``columns``: ``time_s``, ``accuracy`` and ``loss``, in row order) of a run that
    finished end elsewhere than its ``summary.json`` says, or None: the last is at the run's end, with the final
    accuracy and loss. A table cut at a line's end still parses; this finds it."""
    if summary.get("status") not in FINISHED:
        return None  # a failed run has no evaluation at its end

    def last(column: str) -> float | None:
        values = [v for v in columns.get(column, []) if math.isfinite(v)]
        return values[-1] if values else None

    def same(a: float | None, b: Any) -> bool:
        return (a is None and b is None) or (a is not None and isinstance(b, (int, float)) and
                                             math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12))

    duration, times = summary.get("duration_s"), columns.get("time_s", [])
    end = times[-1] if times else math.nan
    if isinstance(duration, (int, float)) and not math.isclose(end, duration, rel_tol=1e-9, abs_tol=1e-6):
        return f"evals.csv ends at {end:g} s where summary.json says the run ended at {duration:g} s"
    for column in ("accuracy", "loss"):
        if f"final_{column}" in summary and not same(last(column), summary[f"final_{column}"]):
            return (f"evals.csv's last {column} is {last(column)} where summary.json says "
                    f"{summary[f'final_{column}']}")
    return None


def read_json(run: Path, name: str) -> dict:
    """A JSON file of the run (``read_file``) holding an object; OSError when the run has none or cannot be
    read, ValueError when it is no JSON object."""
    data = read_file(run, name)
    if data is None:
        raise FileNotFoundError(run / name)
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"{run / name} holds no JSON object")
    return value


def read_config(run: Path) -> dict:
    """The run's resolved configuration (``config.toml``); OSError or ValueError as ``read_json``."""
    data = read_file(run, CONFIG)
    if data is None:
        raise FileNotFoundError(run / CONFIG)
    return tomllib.loads(data.decode("utf-8"))


def files(run: Path) -> dict[str, bytes]:
    """Every file of the run directory by its name in the folder (``series/staleness.csv``), read from the
    archive, a gzip-compressed copy or the folder (``read_file``, which the folder's files override)."""
    found: dict[str, bytes] = {}
    with _zip(run) as z:
        if z is not None:
            found.update((n, _member(z, n)) for n in z.namelist())
    for p in sorted(run.rglob("*")):
        name = p.relative_to(run).as_posix()
        if p.is_file() and name != ARCHIVE and not name.endswith(".tmp"):
            data = p.read_bytes()
            if name.endswith(GZIP):
                name, data = name.removesuffix(GZIP), _unpacked(p, data, gzip.decompress)
                if (run / name).is_file():
                    continue
            found[name] = data
    return dict(sorted(found.items()))


DROPPED = (MESSAGES,)
"""Tables of a finished run that no table, figure or claim reads: a compacted run leaves them out."""


def compact(path: Path, series: dict[str, tuple[str, ...] | Totals | None]) -> None:
    """Pack a finished run directory into ``run.zip``, holding what the analysis reads of it, as ``edgeml
    reproduce`` keeps its runs (the committed reproductions in ``results/`` among them; ``edgeml run`` leaves its
    runs as written): one file per run, which keeps a clone of many runs small on disk as well as in bytes.

    The archive holds every file of the run (``files``) but the ``DROPPED`` tables and the series not named in
    ``series``; a series named there with columns (the ones the analysis reads, where those are all a
    reproduction keeps) is cut to them, each kept column keeping its text; one named with a ``Totals`` is kept as
    its totals per key (its readers only ever add its rows up over nodes), so every table, figure and claim reads
    what it read before. Members are deflated, sorted, and carry no time, so a run compacts to the same
    bytes wherever it ran; compacting again changes nothing (a run that is its archive alone is only checked
    for what is no longer read). The archive replaces the loose files only once it is complete: a compaction cut
    short leaves them, which the reader prefers (``read_file``)."""

    def unread(name: str) -> bool:
        return name in DROPPED or (name.startswith(f"{SERIES}/") and _series_name(name) not in series)

    def totalled(name: str) -> bool:
        return name.startswith(f"{SERIES}/") and isinstance(series.get(_series_name(name)), Totals)

    archive = path / ARCHIVE
    if [p.name for p in path.iterdir()] == [ARCHIVE]:
        with _zip(path) as z:
            if not any(unread(n) or totalled(n) for n in z.namelist()):
                return  # compacted before, and it holds nothing unread now (nor a series that may need totalling)
    kept: dict[str, bytes] = {}
    for name, data in files(path).items():
        if not unread(name):
            spec = series.get(_series_name(name)) if name.startswith(f"{SERIES}/") else None
            kept[name] = (spec.of(data) if isinstance(spec, Totals) else _cut_columns(data, spec) if spec else data)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in kept.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type, info.create_system, info.external_attr = zipfile.ZIP_DEFLATED, 3, 0o644 << 16
            z.writestr(info, data, compresslevel=9)
    if not archive.is_file() or archive.read_bytes() != buf.getvalue():
        write_atomic(archive, buf.getvalue())
    with _zip(path) as z:  # read back: the loose files go only once the archive holds every one of them whole
        back = {n: _member(z, n) for n in z.namelist()}
    if back != kept:
        raise OSError(f"{archive} does not read back as written: the run's files are left as they were")
    for p in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if p.is_file() and p != archive:
            p.unlink()
        elif p.is_dir() and not any(p.iterdir()):
            p.rmdir()


@dataclass(frozen=True)
class Totals:
    """How ``compact`` keeps a series whose every reader adds its rows up per key (SNAP's exchange: a row per
    server and iteration, read as the iteration's values sent over all servers): one row per value of the ``by``
    columns, in the order they first appear, with the ``sums`` columns summed and the ``means`` averaged over the
    key's rows (blank fields left out). Totalling a table already totalled changes nothing."""
    by: tuple[str, ...]
    sums: tuple[str, ...] = ()
    means: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        return self.by + self.sums + self.means

    def of(self, data: bytes) -> bytes:
        """The CSV table ``data`` totalled (the table as it is where it lacks a column named here)."""
        rows = csv.reader(io.StringIO(data.decode("utf-8"), newline=""))
        header = next(rows, [])
        if not set(self.columns) <= set(header):
            return data
        at = [header.index(c) for c in self.columns]
        groups: dict[tuple[str, ...], list[list[str]]] = {}
        for row in rows:
            fields = [row[i] for i in at]
            groups.setdefault(tuple(fields[:len(self.by)]), []).append(fields[len(self.by):])
        out = io.StringIO(newline="")
        w = csv.writer(out)  # the writer's dialect, as the run's tables are written
        w.writerow(self.columns)
        n = len(self.sums)
        for key, values in groups.items():
            w.writerow([*key, *(_total([v[i] for v in values], False) for i in range(n)),
                        *(_total([v[i] for v in values], True) for i in range(n, n + len(self.means)))])
        return out.getvalue().encode("utf-8")


def _total(texts: list[str], mean: bool) -> str:
    """The sum (or mean) of numbers written as text: whole numbers stay whole where every one is (a sum), a single
    number keeps its text; blank fields are left out (all blank: blank)."""
    texts = [t for t in texts if t.strip()]
    if len(texts) <= 1:
        return texts[0] if texts else ""
    if not mean and all(t.lstrip("-").isdigit() for t in texts):
        return str(sum(map(int, texts)))
    total = math.fsum(map(float, texts))
    return repr(total / len(texts) if mean else total)


def _series_name(name: str) -> str:
    """``series/staleness.csv`` -> ``staleness``."""
    return name.removeprefix(f"{SERIES}/").removesuffix(".csv")


def _cut_columns(data: bytes, columns: tuple[str, ...]) -> bytes:
    """A CSV table cut to ``columns`` (when it has them all and more), each row's kept fields keeping their
    text; else the table as it is."""
    text = data.decode("utf-8")
    rows = csv.reader(io.StringIO(text, newline=""))
    header = next(rows, [])
    if not (set(columns) <= set(header) and len(columns) < len(header)):
        return data
    keep = [header.index(c) for c in columns]
    out = io.StringIO(newline="")
    w = csv.writer(out)  # the writer's dialect, as the run's tables are written
    w.writerow(columns)
    w.writerows([row[i] for i in keep] for row in rows)
    return out.getvalue().encode("utf-8")


# ------------------------------------------------------------------------------------------ the reader


@dataclass
class Run:
    path: Path
    summary: dict
    config: dict
    label: str = ""
    spec: str = ""  # the method: the experiment's [[runs]] name, or the algorithm
    point: dict = field(default_factory=dict)  # its sweep values (or the config keys that set it apart)
    experiment: str = ""  # "adsp", "adsp --quick"; "" when not written by reproduce
    name: str = ""  # what figures and verdicts call it (its [[runs]] label); "" for its algorithm's display name

    @property
    def seed(self) -> int:
        return int(self.summary.get("seed", self.config.get("run", {}).get("seed", 0)))

    @property
    def setting(self) -> str:
        return ",".join(f"{k}={fmt_value(v)}" for k, v in self.point.items())

    def meta(self) -> dict:
        try:
            data = read_file(self.path, META)
            return json.loads(data) if data is not None else {}
        except (OSError, ValueError) as exc:
            raise UserError(f"run {self.path}: {META} cannot be read ({exc}): re-run it, or leave it out") from None

    def table(self, name: str, needed: tuple[str, ...] = (), required: bool = True) -> pd.DataFrame | None:
        """A CSV of the run (``evals.csv``, ``series/staleness.csv``...), checked for the columns we use; read from
        the folder or the run's archive (``read_file``)."""
        import pandas as pd

        try:
            data = read_file(self.path, name)
        except OSError as exc:
            raise UserError(f"run {self.path}: {name} cannot be read ({exc}): re-run it, or leave it out") from None
        if data is None:
            if required:
                raise UserError(f"run {self.path}: missing {name} (written by an older edgeml or unfinished?): "
                                f"re-run it with edgeml {__version__}")
            return None
        problem = table_problem(data)
        if problem:
            raise UserError(f"run {self.path}: {name} is damaged ({problem}): re-run it, or leave it out")
        df = pd.read_csv(io.BytesIO(data))
        missing = [c for c in needed if c not in df.columns]
        if missing:
            raise UserError(f"run {self.path}: {name} has no column {', '.join(missing)} (written by an older "
                            f"edgeml?): re-run it with edgeml {__version__}")
        return df

    @functools.cached_property
    def evals(self) -> pd.DataFrame:
        evals = self.table(EVALS, EVALS_NEEDED)
        problem = last_evaluation_problem(
            {c: pd_floats(evals[c]) for c in ("time_s", "accuracy", "loss")}, self.summary)
        if problem:
            raise UserError(f"run {self.path}: {problem} (a damaged or cut table): re-run it, or leave it out")
        return evals

    def decided(self, name: str) -> float | None:
        """The mean of a quantity the algorithm decided (``series/decisions.csv``, rows named ``name``), or one
        ``DERIVED`` from its series."""
        read = derived(name)
        if read is not None:
            return read(self)
        d = self._decisions(name)
        return None if d is None else float(d.mean())

    def last_decided(self, name: str) -> float | None:
        """The last value the algorithm decided for ``name`` (``series/decisions.csv``, in time order)."""
        d = self._decisions(name)
        return None if d is None else float(d.iloc[-1])

    def _decisions(self, name: str):
        d = self.table(f"{SERIES}/decisions.csv", ("name", "value"), required=False)
        if d is None or not (d["name"] == name).any():
            return None
        d = d[d["name"] == name]
        return (d.sort_values("time_s", kind="stable") if "time_s" in d.columns else d)["value"]


DIVERGED = "the model diverged"
"""How a run that ``stop.diverged`` ended says so (``summary.json`` ``stop_reason``)."""


def diverged(summary: dict) -> bool:
    """Whether the run stopped because its model diverged (a non-finite test loss)."""
    return str(summary.get("stop_reason") or "").startswith(DIVERGED)


def pd_floats(column) -> list[float]:
    """A table column's values as floats (NaN where one is no number)."""
    import pandas as pd

    return [float(v) for v in pd.to_numeric(column, errors="coerce").astype(float)]


WINDOW_EPOCHS = 8
"""Epochs per window of ``window_prediction_error``."""


def _window_prediction_error(run: Run) -> float | None:
    """The predictor's relative error over windows of ``WINDOW_EPOCHS`` consecutive epochs of each platform
    (``series/epochs.csv``: |sum predicted - sum measured| / sum measured per window, averaged over windows, then
    platforms; failed epochs left out; a platform's last, incomplete window too). Per epoch (``prediction_error``)
    the error also holds the epoch-to-epoch noise of a short epoch; over a window that noise averages out, as
    over the paper's longer epochs."""
    import numpy as np

    ep = run.table(f"{SERIES}/epochs.csv", required=False)
    if ep is None or not {"rank", "epoch", "predicted_s", "measured_s", "failed"} <= set(ep.columns):
        return None  # not a run with a predictor (GoSGD's epochs.csv has no predictions)
    errors = []
    for _, g in ep[ep["failed"] == 0].sort_values("epoch").groupby("rank"):
        n = len(g) // WINDOW_EPOCHS * WINDOW_EPOCHS
        if n == 0:
            continue
        predicted = g["predicted_s"].to_numpy()[:n].reshape(-1, WINDOW_EPOCHS).sum(axis=1)
        measured = g["measured_s"].to_numpy()[:n].reshape(-1, WINDOW_EPOCHS).sum(axis=1)
        keep = measured > 0
        if keep.any():
            errors.append(float(np.mean(np.abs(predicted[keep] - measured[keep]) / measured[keep])))
    return float(np.mean(errors)) if errors else None


def _persistence_errors(run: Run):
    """Per platform and epoch (failed ones left out, and each platform's first, which has nothing before it): the
    predictor's relative error and that of a load-blind guess, the previous epoch's measured time per point times
    this epoch's points (``series/epochs.csv``). None for a run without predictions."""
    import numpy as np

    ep = run.table(f"{SERIES}/epochs.csv", required=False)
    if ep is None or not {"rank", "epoch", "points", "predicted_s", "measured_s", "failed"} <= set(ep.columns):
        return None
    ours, guess = [], []
    for _, g in ep[(ep["failed"] == 0) & (ep["points"] > 0) & (ep["measured_s"] > 0)].sort_values("epoch").groupby(
            "rank"):
        per_point = (g["measured_s"] / g["points"]).to_numpy()
        measured, points = g["measured_s"].to_numpy()[1:], g["points"].to_numpy()[1:]
        ours += list(np.abs(g["predicted_s"].to_numpy()[1:] - measured) / measured)
        guess += list(np.abs(per_point[:-1] * points - measured) / measured)
    return (np.array(ours), np.array(guess)) if ours else None


def _persistence_error(run: Run) -> float | None:
    """The mean relative error of a load-blind guess of each epoch's training time: the previous epoch's time per
    point times this epoch's points, over the epochs ``prediction_over_persistence`` compares."""
    e = _persistence_errors(run)
    return None if e is None else float(e[1].mean())


def _prediction_over_persistence(run: Run) -> float | None:
    """The predictor's mean relative error over the load-blind guess's (``persistence_error``), on the same epochs:
    below 1 the predictor, which reads the co-running load, beats the guess that ignores it."""
    e = _persistence_errors(run)
    return None if e is None or e[1].mean() == 0 else float(e[0].mean() / e[1].mean())


def _accuracy_jitter(run: Run) -> float | None:
    """How much the test accuracy swings between evaluations: the standard deviation of its successive
    differences over the second half of the run's evaluations (by time), where a curve that has settled
    differs from one evaluation to the next by noise alone. None with fewer than three evaluations there."""
    import numpy as np

    ev = run.evals
    acc = ev.loc[ev["time_s"] >= ev["time_s"].max() / 2, "accuracy"].dropna().to_numpy()
    return float(np.std(np.diff(acc))) if len(acc) >= 3 else None


SMOOTH_WINDOW = 5
"""The evaluations a moving average of a run's test accuracy or loss spans (the ``smoothed`` arrival rule's
default, ``edgeml.analysis.convergence``, and ``best_smoothed_accuracy``)."""


def _best_smoothed_accuracy(run: Run) -> float | None:
    """The highest moving average of the test accuracy over ``SMOOTH_WINDOW`` evaluations: the maximum a paper
    reads off smoothed accuracy curves (AdaComp Sec. V-C: "the moving average accuracies for each run"), where
    ``best_accuracy`` is one evaluation's. None with fewer evaluations than the window."""
    import numpy as np

    acc = run.evals["accuracy"].dropna().to_numpy()
    if len(acc) < SMOOTH_WINDOW:
        return None
    return float(np.convolve(acc, np.ones(SMOOTH_WINDOW) / SMOOTH_WINDOW, mode="valid").max())


LATE_SHARE = 0.1
"""The share of a run's iterations, its last, that ``late_sent_fraction`` reads."""


def _late_sent_fraction(run: Run) -> float | None:
    """Of the values a SNAP-family run's frames could have carried (parameters x frames), the share they sent, over
    its last ``LATE_SHARE`` of iterations (``series/exchange.csv``, kept where a figure draws the ``exchange``
    panel: ``DRAWN_SERIES``): near 0 where the exchange falls silent as the iteration converges (SNAP Fig. 4(b)),
    near 1 where parameters keep changing. None for a run without that series."""
    ex = _exchange(run)
    if ex is None:
        return None
    return _sent_share(ex[ex["iteration"] >= (1 - LATE_SHARE) * (ex["iteration"].max() + 1)])


def _exchange(run: Run):
    ex = run.table(f"{SERIES}/exchange.csv", required=False)
    return None if ex is None or not {"iteration", "sent", "values"} <= set(ex.columns) or ex.empty else ex


def _sent_share(rows) -> float | None:
    values = float(rows["values"].sum())
    return float(rows["sent"].sum()) / values if values > 0 else None


def _sent_fraction_at(run: Run, iteration: int) -> float | None:
    """``sent_fraction_at_<k>``: of the values a SNAP-family run's frames could have carried at its iteration k
    (counted from 0, every server), the share they sent. For SNAP-0, which sends every value that changed, one minus
    it is the share of parameters unchanged in that iteration (SNAP Fig. 2(a)). None without that iteration."""
    ex = _exchange(run)
    return None if ex is None else _sent_share(ex[ex["iteration"] == iteration])


def _bytes_per_message(run: Run) -> float | None:
    """The bytes of the messages every node sent over their number (``nodes.csv``): the mean message size, which
    both backends count in one message path (``edgeml.runtime.base``), so twins of a run agree on it wherever
    their messages do (SNAP's frames carry only the values that moved, which may differ between the clocks)."""
    nodes = run.table("nodes.csv", ("messages_sent", "bytes_sent"), required=False)
    sent = None if nodes is None else float(nodes["messages_sent"].sum())
    return float(nodes["bytes_sent"].sum()) / sent if sent else None


def _mean_staleness(run: Run) -> float | None:
    """The mean staleness of the updates a parameter server applied (``series/staleness.csv``: the models made
    since the pushing worker last pulled), kept where a figure draws the ``staleness`` panel (``DRAWN_SERIES``);
    None for a run without that series (no parameter server)."""
    s = run.table(f"{SERIES}/staleness.csv", ("staleness",), required=False)
    return None if s is None or s.empty else float(s["staleness"].astype(float).mean())


SHARES = {"compute_share": "compute_s", "comm_share": "comm_s", "wait_share": "wait_s"}
"""The share of the nodes' time (``nodes.csv``: all nodes' seconds over their ``alive_s``) each spent computing,
communicating and waiting, by the ``DERIVED`` quantity's name."""


def _share(run: Run, column: str) -> float | None:
    """All nodes' ``column`` seconds over all nodes' time alive (``SHARES``); None without ``nodes.csv``."""
    nodes = run.table("nodes.csv", (column, "alive_s"), required=False)
    alive = None if nodes is None else float(nodes["alive_s"].sum())
    return float(nodes[column].sum()) / alive if alive else None


DERIVED = {"window_prediction_error": _window_prediction_error, "accuracy_jitter": _accuracy_jitter,
           "persistence_error": _persistence_error, "prediction_over_persistence": _prediction_over_persistence,
           "late_sent_fraction": _late_sent_fraction, "bytes_per_message": _bytes_per_message,
           "best_smoothed_accuracy": _best_smoothed_accuracy, "mean_staleness": _mean_staleness,
           **{name: functools.partial(_share, column=column) for name, column in SHARES.items()}}
"""Quantities read from a run's series beyond ``decisions.csv`` (``Run.decided``), by name."""
DERIVED_FAMILIES = {"sent_fraction_at_": _sent_fraction_at}
"""``DERIVED`` quantities with a whole number in their name (``sent_fraction_at_15``: at iteration 15), by prefix."""
DRAWN_SERIES = {"late_sent_fraction": "exchange", "sent_fraction_at_": "exchange", "mean_staleness": "staleness"}
"""The ``DERIVED`` quantities (and families, by prefix) whose series a reproduction keeps only where a figure draws
it (SNAP's exchange: a row per server and iteration; the staleness: a row per update; too large to keep in every
run): a claim on one must read runs drawn in such a figure (``edgeml.reproduce.validate``)."""


def derived(name: str):
    """How to read the ``DERIVED`` quantity ``name`` (a function of the run), of a family's included; else None."""
    if name in DERIVED:
        return DERIVED[name]
    for prefix, read in DERIVED_FAMILIES.items():
        k = name[len(prefix):]
        if name.startswith(prefix) and k.isdigit() and k.isascii():
            return functools.partial(read, iteration=int(k))
    return None


def drawn_series(name: str) -> str | None:
    """The series a derived quantity reads that a reproduction keeps only where a figure draws it (``DRAWN_SERIES``)."""
    if derived(name) is None:
        return None
    return next((s for key, s in DRAWN_SERIES.items() if name == key or (key in DERIVED_FAMILIES
                                                                            and name.startswith(key))), None)


DERIVED_SERIES = ("epochs",)
"""The series the ``DERIVED`` quantities read: a reproduction keeps them whole in every run that has them, drawn
or not (``edgeml.analysis.figures.compact_run``)."""


def _is_run(p: Path) -> bool:
    return any((p / n).is_file() for n in (SUMMARY, EVALS, EVALS + GZIP, ARCHIVE))


def _runs_below(d: Path, recursive: bool) -> list[Path]:
    if recursive:
        return sorted({p.parent for n in (SUMMARY, EVALS, EVALS + GZIP, ARCHIVE) for p in d.rglob(n)})
    if (d / "runs").is_dir() and (d / "experiment.toml").is_file():  # an experiment's results folder
        d = d / "runs"
    return sorted(p for p in d.iterdir() if p.is_dir() and _is_run(p))


def find_runs(patterns: list[str], recursive: bool = False) -> list[Path]:
    """Run directories named by paths, glob patterns, experiment results folders or folders holding runs
    directly (every folder below with ``recursive``)."""
    found: list[Path] = []
    for pattern in patterns:
        is_glob = any(c in pattern for c in "*?[")
        if is_glob:
            matches = [Path(p) for p in sorted(glob.glob(pattern, recursive=True))]
            if not matches:
                raise UserError(f"no path matches {pattern!r}: check the pattern (quote it to stop the shell)")
        else:
            matches = [Path(pattern)]
        for m in matches:
            if not m.exists():
                raise UserError(f"{str(m)!r} does not exist: pass run directories or a directory holding them")
            below = [m] if _is_run(m) else _runs_below(m, recursive) if m.is_dir() else []
            if not below and not is_glob:
                raise UserError(f"{str(m)!r} holds no run directory" + ("" if recursive else " directly below it") +
                                " (run directories have summary.json, evals.csv or run.zip): pass run directories or "
                                "an "
                                "experiment's results folder" + ("" if recursive else
                                                                 ", or --recursive to search every folder below"))
            found.extend(below)
    unique = list(dict.fromkeys(p.resolve() for p in found))
    if not unique:
        raise UserError(f"no run directories found in {' '.join(patterns)}")
    return unique


def load_run(path: Path) -> Run:
    try:
        summary, config = read_json(path, SUMMARY), read_config(path)
        exp = read_json(path, EXPERIMENT) if read_file(path, EXPERIMENT) is not None else {}
    except FileNotFoundError as exc:
        raise UserError(f"run {path}: missing {Path(exc.args[0]).name} (unfinished, killed, or not a run "
                        "directory): let it finish or leave it out") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"run {path}: unreadable file ({exc}): re-run it") from None
    missing = [k for k in SUMMARY_NEEDED if k not in summary]
    if missing:
        raise UserError(f"run {path}: summary.json lacks {', '.join(missing)} (written by an older edgeml?): "
                        f"re-run it with edgeml {__version__}")
    label = str(exp.get("run", ""))
    experiment = f"{exp['paper']}{' --quick' if exp.get('quick') else ''}" if exp.get("paper") else ""
    return Run(path, summary, config, label, str(exp.get("spec", label.split("[", 1)[0])), exp.get("point", {}),
               experiment)


SECTION_DEFAULTS: dict[str, dict[str, Any]] = {}
"""The defaults of each algorithm's config section, by section name, as ``edgeml.algorithms.registry.register``
records them (this layer cannot import the registry)."""


def flat_config(run: Run) -> dict[str, Any]:
    """The run's config as {"section.key": value}. A key its config lacks (written before the key existed)
    counts as its default, in the common sections and in its algorithm's (``SECTION_DEFAULTS``), so old and new
    runs differ only where they do; or as what runs did before it existed, where its default changed that
    (``schema.FORMER_DEFAULTS``: an old ADSP run's reward clock)."""
    former = {k: v for k, v in FORMER_DEFAULTS.items() if k.split(".", 1)[0] in run.config}
    own = {f"{s}.{k}": v for s in run.config if s in SECTION_DEFAULTS for k, v in SECTION_DEFAULTS[s].items()}
    return {**_config_defaults(), **own, **former, **_flatten(run.config)}


def _flatten(config: dict) -> dict[str, Any]:
    return {f"{s}.{k}": v for s, values in config.items() if isinstance(values, dict)
            for k, v in values.items() if f"{s}.{k}" not in NOT_CONFIG}


@functools.cache
def _config_defaults() -> dict[str, Any]:
    # the common sections' defaults; an algorithm's section has none here (Config() holds no algorithm's)
    return _flatten(Config().to_dict())


def warn(text: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(text, style="yellow", highlight=False, markup=False, soft_wrap=True)


def load_runs(patterns: list[str], recursive: bool = False) -> list[Run]:
    """Load run directories and label them (experiment name, else algorithm plus distinguishing keys)."""
    import pandas as pd

    paths = find_runs(patterns, recursive)
    # among several runs, one still in progress (or killed before writing its summary) is left out, not fatal
    unfinished = [p for p in paths if not _has_summary(p)] if len(paths) > 1 else []
    if unfinished and len(unfinished) < len(paths):
        warn(f"skipping {len(unfinished)} unfinished run(s) (no summary.json): " + ", ".join(map(str, unfinished)))
    runs = [load_run(p) for p in paths if p not in unfinished or len(unfinished) == len(paths)]
    experiments = pd.Series([r.experiment for r in runs if r.experiment]).value_counts(sort=False)
    if len(experiments) > 1:
        raise UserError("these runs come from different experiments (" +
                        ", ".join(f"{e}: {n} runs" for e, n in experiments.items()) +
                        "): compare one experiment's runs at a time")
    _label(runs)
    return runs


def _has_summary(path: Path) -> bool:
    """Whether the run holds a ``summary.json``; one whose archive cannot say counts as holding one, so that
    ``load_run`` names what is damaged."""
    try:
        return read_file(path, SUMMARY) is not None
    except OSError:
        return True


def _label(runs: list[Run]) -> None:
    """Label the runs no reproduction named: by algorithm, plus the config keys in which runs of one algorithm
    differ ("bsp[cluster.hetero=1:3]"), plus the common settings in which any of them differ (a comparison of
    BSP on procs with SSP on sim says so: "bsp[run.backend=procs]" against "ssp[run.backend=sim]"), plus the
    status where runs that would share a label ended differently, so that an interrupted run is never pooled
    with a completed one ("bsp (interrupted)")."""
    mine = [r for r in runs if not r.label]
    flats = {id(r): flat_config(r) for r in mine}
    by_algorithm: dict[str, dict[str, dict]] = {}
    for r in mine:
        flat = flats[id(r)]
        by_algorithm.setdefault(r.summary["algorithm"], {})[json.dumps(flat, sort_keys=True, default=str)] = flat
    common = [k for k in dict.fromkeys(k for r in mine for k in flats[id(r)])
              if k.split(".")[0] in COMMON_SECTIONS and k != "run.algorithm"
              and len({json.dumps(flats[id(r)].get(k), default=str) for r in mine}) > 1]
    for r in mine:
        configs = list(by_algorithm[r.summary["algorithm"]].values())
        flat = flats[id(r)]
        r.spec = r.label = r.summary["algorithm"]
        own = [k for k in flat if len(configs) > 1 and any(c.get(k) != flat[k] for c in configs)]
        r.point = {k: flat[k] for k in [*own, *(k for k in common if k not in own)]}
        if r.point:
            r.label += f"[{r.setting}]"
    statuses: dict[str, set] = {}
    for r in mine:
        statuses.setdefault(r.label, set()).add(r.summary.get("status", "completed"))
    for r in mine:
        status = r.summary.get("status", "completed")
        if len(statuses[r.label]) > 1 and status != "completed":
            r.label += f" ({status})"
