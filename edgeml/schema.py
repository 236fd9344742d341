"""What a configuration is: the common sections' typed fields, their ranges, and the one check of them.

A run is described by one ``Config``: the common sections below plus one section named after the algorithm
holding that algorithm's own dataclass (``[ssp] staleness = 3``). Every number's allowed range is declared
beside its field with ``ranged`` (``lr: float = ranged(0.1, gt=0)``), for the common sections and for every
algorithm alike, and ``check_fields`` enforces them all: no number anywhere may be nan or inf, and each must
lie in its field's range (every element of a list, for a list field). A config class's ``validate(cfg)``
keeps only the rules that involve several fields. Loading a config (TOML, ``--set``, the algorithm's section,
paths and data) is ``edgeml.config``'s; this module imports nothing of edgeml but its errors, so every layer
may use it.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from edgeml.errors import UserError


@dataclass(frozen=True)
class Range:
    """The values a number may take: finite, above ``lo`` (``lo < x`` when ``open_lo``, else ``lo <= x``) and
    below ``hi`` (likewise with ``open_hi``)."""

    lo: float = -math.inf
    hi: float = math.inf
    open_lo: bool = False
    open_hi: bool = False
    zero: str = ""
    """What 0 means where it is allowed and special; the message says it, so the fix is in the one line."""

    def admits(self, x: float) -> bool:
        return (math.isfinite(x) and (x > self.lo if self.open_lo else x >= self.lo)
                and (x < self.hi if self.open_hi else x <= self.hi))

    def describe(self, whole: bool) -> str:
        kind = "a whole number" if whole else "a number"
        if self.hi < math.inf and self.lo > -math.inf:
            text = (f"{kind} in {'(' if self.open_lo else '['}{_num(self.lo)}, {_num(self.hi)}"
                    f"{')' if self.open_hi else ']'}")
        elif self.lo > -math.inf:
            text = f"{kind} {'>' if self.open_lo else '>='} {_num(self.lo)}"
        elif self.hi < math.inf:
            text = f"{kind} {'<' if self.open_hi else '<='} {_num(self.hi)}"
        else:
            text = f"a finite {kind[2:]}"
        return f"{text} (0 means {self.zero})" if self.zero else text


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def ranged(default: Any = dataclasses.MISSING, *, ge: float | None = None, gt: float | None = None,
           le: float | None = None, lt: float | None = None, zero: str = "",
           default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field whose number (or every number of its list) must lie in the given bounds:
    ``ge``/``gt`` below, ``le``/``lt`` above; ``zero`` says what 0 means where it is special."""
    if (ge is not None and gt is not None) or (le is not None and lt is not None):
        raise TypeError("ranged: give one lower bound (ge or gt) and one upper bound (le or lt)")
    rule = Range(lo=-math.inf if ge is None and gt is None else (gt if gt is not None else ge),
                 hi=math.inf if le is None and lt is None else (lt if lt is not None else le),
                 open_lo=gt is not None, open_hi=lt is not None, zero=zero)
    return field(default=default, default_factory=default_factory, metadata={"range": rule})


def range_of(cls_or_obj: Any, name: str) -> Range | None:
    """The range declared for field ``name`` of a config dataclass, if any."""
    f = next((f for f in dataclasses.fields(cls_or_obj) if f.name == name), None)
    return f.metadata.get("range") if f is not None else None


def _non_finite(key: str, value: Any) -> tuple[str, float] | None:
    """The first nan or inf in a number, list or table, with the key that leads to it."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (key, value)
    if isinstance(value, dict):
        items = [(f"{key}.{k}", v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(f"{key}[{i}]", v) for i, v in enumerate(value)]
    else:
        return None
    return next(filter(None, (_non_finite(k, v) for k, v in items)), None)


def check_fields(section: str, obj: Any) -> None:
    """Refuse nan and inf anywhere in a config section (lists of tables included), and any number outside
    its field's declared range (each number of a list field too)."""
    for f in dataclasses.fields(obj):
        key, value = f"{section}.{f.name}", getattr(obj, f.name)
        rule: Range | None = f.metadata.get("range")
        bad = _non_finite(key, value)
        if bad is not None:
            where, x = bad
            fix = rule.describe(whole=False) if rule and (where == key or where.startswith(f"{key}[")) \
                else "a finite number"
            raise UserError(f"{where} = {x} is not a finite number: use {fix}")
        if rule is None:
            continue
        numbers = [(f"{key}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, list) else [(key, value)]
        for where, x in numbers:
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                if isinstance(value, list):
                    raise UserError(f"{where} = {x!r} is not a number: use {rule.describe(False)}")
                continue
            if not rule.admits(x):
                raise UserError(f"{where} = {x!r} is out of range: use {rule.describe(isinstance(x, int))}")


# --------------------------------------------------------------------------------------------- sections


@dataclass
class RunSection:
    algorithm: str = "bsp"
    """Registered algorithm name (``edgeml list``)."""
    backend: Literal["procs", "sim"] = "procs"
    """``procs``: one OS process per node, messages over the runtime's own TCP transport; ``sim``: a virtual clock
    in one process."""
    device: Literal["cpu", "cuda"] = "cpu"
    """Where workers compute (``procs``); several workers may share one GPU."""
    seed: int = ranged(0, ge=0, le=2**32 - 1)
    """Seed of every random choice (data split, initial model, batches, failures): 0 to 2**32 - 1."""
    out: str = "runs"
    """Parent directory of run directories (created when missing; must be writable)."""
    name: str = ""
    """Run directory name (one path component of at most ``NAME_MAX_BYTES`` bytes); empty means
    ``<algorithm>-<dataset>-w<workers>-s<seed>-<time>``."""
    threads: int = ranged(1, ge=1)
    """torch threads per worker process (one per process keeps many workers from oversubscribing cores); sim
    runs with this many too. At most this machine's cores."""
    max_procs_per_core: int = ranged(16, ge=1)
    """procs: refuse a run of more node processes than this per core of the host (use the sim backend)."""


@dataclass
class DataSection:
    dataset: str = "digits"
    """Registered data set name (``edgeml list datasets``)."""
    root: str = ""
    """Existing directory holding the data set's original files, the only place searched when set (ignored by
    the bundled ``digits``, ``breast-cancer``, ``credit-synthetic`` and ``credit-full-rank``); empty searches
    $EDGEML_DATA, $EDGEML_CACHE/<name> (default ~/.cache/edgeml/<name>), system packages."""
    download: bool = False
    """Fetch through torchvision when the files are absent (never done implicitly)."""
    partition: Literal["iid", "shards", "dirichlet", "sorted"] = "iid"
    """How training samples are split over workers: same label mix, a few label-sorted shards, Dirichlet, or
    class-sorted contiguous parts (``sorted``, ESync's non-iid split)."""
    alpha: float = ranged(0.5, gt=0)
    """Dirichlet concentration for ``partition = "dirichlet"`` (> 0; small means skewed workers)."""
    shards_per_worker: int = ranged(2, ge=1)
    """Label-sorted shards per worker for ``partition = "shards"``."""
    batch_size: int = ranged(32, ge=1)
    """Mini-batch size of every worker; at most the smallest worker's share of the training set."""
    order: Literal["shuffled", "class"] = "shuffled"
    """How each worker's epochs visit its shard: ``shuffled`` anew every epoch; ``class``, class by class in the
    same order every epoch (labels ascending, data set order within a class: the ESync authors' non-i.i.d.
    sampler)."""
    train_samples: int = ranged(0, ge=0, zero="the whole training set")
    """Train on a seeded random subset of this many training samples, split over the workers (AdaComp
    Table II's 20% training set); 0: all of them."""


@dataclass
class ModelSection:
    name: str = ""
    """Registered model name; empty picks the dataset's default (``mlp`` for tabular/8x8, ``lenet5`` otherwise)."""
    width: float = ranged(1.0, gt=0)
    """MobileNet-v2's width multiplier (other models refuse values other than 1)."""
    binary: bool = False
    """A linear model (``BINARY_MODELS``) of a two-class data set with one output, the binary model (a weight per
    feature and a bias: SNAP's 24-parameter SVM), instead of one output per class."""
    init: Literal["default", "truncated-normal"] = "default"
    """The initial weights: ``default``, PyTorch's for each layer; ``truncated-normal``, every weight from a normal of
    standard deviation 0.1 cut at two of them and every bias 0.1 (TensorFlow's ``truncated_normal`` set-up, as
    AdaComp's authors' code and TensorFlow's tutorials initialize)."""


BINARY_MODELS = ("logreg", "svm", "l2svm")
"""The models ``model.binary`` applies to: the linear ones."""


def check_binary(name: str, classes: int | None = None) -> None:
    """Refuse ``model.binary`` for ``name`` (empty: the data set's default, never linear) other than a linear model,
    or, where known, a data set of other than two ``classes``."""
    from edgeml.errors import UserError

    if name not in BINARY_MODELS or classes not in (None, 2):
        of = f" of {classes} classes" if classes not in (None, 2) else ""
        raise UserError(f"model.binary = true is for a linear model ({', '.join(BINARY_MODELS)}) of two classes, not "
                        f"'{name or 'the data set default'}'{of}: set model.binary = false, or choose such a model "
                        "and data set")


@dataclass
class ClusterSection:
    workers: int = ranged(4, ge=1)
    """Number of workers (devices)."""
    hetero: str = "homogeneous"
    """Speed profile: ``homogeneous``, ratios of step times ``1:1:3``, ``H=3.2`` (target degree, ADSP
    Sec. 5.2), ``ec2`` (ADSP's 18-worker mix), ``adacomp-3class``, ``cpu-gpu`` (ESync's mix)."""
    base_step_s: float = ranged(0.0, ge=0, zero="calibrate on the host (procs) or 0.01 s (sim)")
    """Step time of the fastest device. 0: calibrated on the host (procs) or 0.01 s (sim)."""
    throttle: bool = True
    """procs: sleep each step up to its emulated duration; off measures raw speed (benchmarks)."""
    slowdowns: list[dict] = field(default_factory=list)
    """Time-varying slowdowns: ``[{worker = 0, start = 10.0, end = 20.0, factor = 3.0}]``; ``node`` instead of
    ``worker`` names any nodes (``{node = "ps", start = 0, factor = 2}``; see ``edgeml.world``), whose ``end`` may
    be left out (until the run ends)."""
    crashes: list[dict] = field(default_factory=list)
    """Fail-stop schedule: ``[{worker = 1, time = 5.0}]``."""
    crash_prob: float = ranged(0.0, ge=0, le=1)
    """Probability that a worker fails (stops) right after each push (a send the algorithm marks as a failure
    point with ``node.push``; queries and replies never fail)."""
    devices: dict[str, Any] = field(default_factory=dict)
    """Device kind per node, overriding ``run.device``: ``{cpu = "0-1", cuda = "2-5"}`` (worker indices, a role
    like ``"ps"``, ``"worker:0-1"`` or ``"*"``; see ``edgeml.world``). ESync's testbed: 4 GPUs and 2 CPUs."""
    throttle_mode: Literal["absolute", "scale"] = "absolute"
    """procs: ``absolute`` sleeps each step up to ``base_step_s`` x factor; ``scale`` stretches the measured step
    time by the factor, so real co-running load shows in step times."""
    random_wait_s: float = ranged(0.0, ge=0, zero="no random wait")
    """Mean random wait between a computation and its push (AdaComp's platform, AdaComp Sec. IV-A); 0: none."""
    random_wait: Literal["exponential", "uniform"] = "exponential"
    """Distribution of the random wait: ``exponential`` (memoryless) or ``uniform`` on [0, 2 x mean]."""


@dataclass
class NetworkSection:
    latency_s: float = ranged(0.0, ge=0)
    """One-way latency of each worker's access link."""
    up_mbps: float = ranged(0.0, ge=0, zero="unlimited")
    """Worker upload bandwidth in Mb/s (0: unlimited)."""
    down_mbps: float = ranged(0.0, ge=0, zero="unlimited")
    """Worker download bandwidth in Mb/s (0: unlimited)."""
    commit_delay_s: float = ranged(0.0, ge=0)
    """Extra delay added to every message a worker sends (ADSP Fig. 6)."""
    links: list[dict] = field(default_factory=list)
    """Overrides of the star's access links, by worker index or by node set: ``[{worker = 2, latency_s = 0.05,
    up_mbps = 10, down_mbps = 100}, {node = "ps", up_mbps = 100}]``. Nodes other than workers have ideal links
    unless named; a node's up link sends one message at a time (a parameter server's replies queue on it)."""
    topology: Literal["star", "complete", "ring", "random", "edges"] = "star"
    """Graph over all nodes: ``star`` (access links to one switch: the fields above), ``complete``, ``ring`` (in
    rank order), ``random`` (connected, average ``degree``, seeded) or ``edges`` (the list ``edges``)."""
    degree: float = ranged(3.0, gt=0)
    """Average degree of the ``random`` topology (SNAP's simulations: 3)."""
    edges: list = field(default_factory=list)
    """Links of the ``edges`` topology: ``[[0, 1], ["ps", 2], {u = 1, v = 2, latency_s = 0.01, up_mbps = 10,
    down_mbps = 10}]`` (ends are worker indices or nodes like ``"ps"``; up: u to v)."""
    link_latency_s: float = ranged(0.0, ge=0)
    """One-way latency of every link of a topology other than ``star``."""
    link_mbps: float = ranged(0.0, ge=0, zero="unlimited")
    """Rate of every link of a topology other than ``star``, each way, in Mb/s (0: unlimited)."""
    failed_links: float = ranged(0.0, ge=0, le=1, zero="no failed links")
    """Fraction of links that fail (seeded; SNAP Fig. 9: 0.01 and 0.05), as ``failures`` says."""
    failures: Literal["permanent", "transient", "silent"] = "permanent"
    """``permanent``: that fraction of links is down both ways (a message between neighbours over one is lost,
    others detour); ``transient``: each message to a neighbour misses with that probability, one way, and its
    sender learns of it (SNAP Sec. V); ``silent``: it misses so untold."""
    failed_from_s: float = ranged(0.0, ge=0)
    """When failures start (seconds on the run's clock)."""
    failed_for_s: float = ranged(0.0, ge=0, zero="until the run ends")
    """How long they last; 0: until the run ends."""
    failed_may_disconnect: bool = False
    """Permanent failures: let them cut nodes off (their messages are lost); otherwise only links whose loss keeps
    the network connected fail."""
    jitter_s: float = ranged(0.0, ge=0, zero="no jitter")
    """Each message's flight gains a random delay, uniform in [0, jitter_s] (seeded per sender)."""


@dataclass
class StopSection:
    max_time: float = ranged(20.0, ge=0, zero="no time limit")
    """Seconds on the run's clock (wall clock in procs, virtual in sim); 0 disables."""
    max_steps: int = ranged(0, ge=0, zero="no step limit")
    """Total training steps over all workers; 0 disables."""
    target_accuracy: float = ranged(0.0, ge=0, le=1, zero="no accuracy target")
    """Stop once test accuracy reaches this; 0 disables."""
    target_loss: float = ranged(0.0, ge=0, zero="no loss target")
    """Stop once test loss falls to this; 0 disables."""
    loss_variance: float = ranged(0.0, ge=0, zero="no variance rule")
    """ADSP's rule (ADSP Sec. 5.2): stop once the variance of the last ``window`` losses is below this;
    0 disables."""
    window: int = ranged(10, ge=2)
    """Number of evaluations whose loss variance ``loss_variance`` tests (at least 2)."""
    plateau: int = ranged(0, ge=0, zero="no plateau rule")
    """Stop once the best test accuracy of the last ``plateau`` evaluations is no more than ``plateau_delta``
    above the best before them: the accuracy has stopped improving (runs to a plateau); 0 disables."""
    plateau_delta: float = ranged(0.001, ge=0)
    """How much the best accuracy must rise within ``plateau`` evaluations for the run to go on."""
    diverged: bool = False
    """Stop once the test loss of an evaluated model is NaN or infinite: the model has diverged."""


@dataclass
class EvalSection:
    interval: float = ranged(1.0, ge=0.001)
    """Evaluate the global model every this many seconds on the run's clock (at least 1 ms; at most
    ``MAX_EVALUATIONS`` evaluations in ``stop.max_time``)."""
    test_samples: int = ranged(2000, ge=0, zero="all test samples")
    """Evaluate on this many test samples (a fixed subset); 0 uses all."""
    models: Literal["average", "mean", "worst"] = "average"
    """Which model loss and accuracy describe when several nodes expose one: ``average``, their average (the
    global model); ``mean``, the mean over their own models; ``worst``, the highest loss and lowest accuracy
    among them (SNAP Sec. III). ``mean`` and ``worst`` also record ``average_loss``/``average_accuracy``."""
    per_class: bool = False
    """Also record each class's accuracy on the test samples (``evals.csv`` columns ``accuracy_c0``,
    ``accuracy_c1``, ...; of the model the ``accuracy`` column describes): where non-i.i.d. data hurt."""


@dataclass
class LoadSection:
    schedule: list[dict] = field(default_factory=list)
    """Co-running workloads ``[{node = 0, kind = "cpu", intensity = 0.5, start = 0, end = 30}]``: kind cpu,
    disk, net or io (disk and net), intensity u in (0, 1], end omitted = until the run ends; real processes in
    procs, the model of ``edgeml.world`` in sim."""
    repeat: int = ranged(0, ge=0, zero="the schedule names nodes as written")
    """A schedule written for workers 0..N-1 that repeats over a larger deployment: worker i runs the workloads
    of worker i mod N (so a sweep over cluster.workers loads every worker alike)."""
    time_scale: float = ranged(1.0, gt=0)
    """Multiplies every schedule entry's start and end: a schedule written for a long run, replayed over a shorter
    one (a quick reproduction's ``[quick] load.time_scale = 0.015``)."""
    cores: int = ranged(1, ge=1)
    """Cores of each node's share of its host, which its training and its workloads compete for (procs pins
    them there; sim's model)."""
    net_MBps: float = ranged(100.0, gt=0)
    """Network capacity in MB/s: a net workload of intensity 1 sends this much; observed net load is traffic
    over it."""
    disk_MBps: float = ranged(20.0, gt=0)
    """Disk capacity in MB/s: a disk workload of intensity 1 moves this much; observed disk load is storage
    traffic over it."""
    dir: str = ""
    """Directory of the disk workloads' temporary files (empty: the system's; a tmpfs reaches no disk)."""


FORMER_DEFAULTS: dict[str, object] = {
    "adsp.reward_clock": "trial",
    "adsp.trial_sampling": "within",
    "adsp.burn_in": "none",
    "adsp.reward_reuse": True,
    "adacomm.reward_clock": "trial",
    "fixed_adacomm.reward_clock": "trial",
    "snap.stages": "continue",
    "snap.disagreement": "published",
    "snap0.disagreement": "published",
    "sno.disagreement": "published",
    # defaults changed while their settings existed (a run lacking one predates the setting and did the first default)
    "adsp.check_period_s": 60.0,
    "adsp.epoch_s": 1200.0,
    "adsp.lr_decay_s": 600.0,
    "adsp.loss_samples": 3,
    "adsp.target_ratio": 0.5,
    "adacomm.trial_s": 30.0,
    "adacomm.adapt_period_s": 60.0,
    "adacomm.lr_decay_s": 600.0,
    "fixed_adacomm.trial_s": 30.0,
    "fixed_adacomm.lr_decay_s": 600.0,
    "esync.lr": 0.001,
    "ssgd.lr": 0.001,
    "standalone.lr": 0.001,
}
"""What a run made before a setting existed did, for the settings added with a default that changed what edgeml
does, or whose default changed later (``section.key``: value; ``tests/test_defaults.py`` asks for each new one).
A run directory whose config lacks such a key is read as having this value (it is no run of the new default:
``edgeml reproduce --resume`` runs it again); any other key it lacks counts as the new default, which does what
edgeml did before."""


COMMON_SECTIONS: dict[str, type] = {
    "run": RunSection,
    "data": DataSection,
    "model": ModelSection,
    "cluster": ClusterSection,
    "network": NetworkSection,
    "stop": StopSection,
    "eval": EvalSection,
    "load": LoadSection,
}


@dataclass
class Config:
    run: RunSection = field(default_factory=RunSection)
    data: DataSection = field(default_factory=DataSection)
    model: ModelSection = field(default_factory=ModelSection)
    cluster: ClusterSection = field(default_factory=ClusterSection)
    network: NetworkSection = field(default_factory=NetworkSection)
    stop: StopSection = field(default_factory=StopSection)
    eval: EvalSection = field(default_factory=EvalSection)
    load: LoadSection = field(default_factory=LoadSection)
    algo: Any = None
    """The algorithm's own config dataclass, written as the section named after the algorithm."""

    def to_dict(self) -> dict[str, dict]:
        out = {name: dataclasses.asdict(getattr(self, name)) for name in COMMON_SECTIONS}
        out[self.run.algorithm] = dataclasses.asdict(self.algo) if self.algo is not None else {}
        return out




# --------------------------------------------------------------------------------------------- limits

NAME_MAX_BYTES = 200
"""The longest run directory name (``run.name``), in UTF-8 bytes: file systems take 255 per path component; the
rest is room for what is appended to one (``-s<seed>``, ``.tmp``)."""
PATH_MAX_BYTES = 3800
"""The longest path a setting may hold (``run.out``, ``data.root``, ``load.dir``), in UTF-8 bytes: Linux takes
4096, and the files of a run directory go below it."""
MAX_EVALUATIONS = 10_000_000
"""Evaluations one run that only its clock ends may make (``stop.max_time / eval.interval``, without
``stop.max_steps``): each is a forward pass over the test samples, a millisecond at the least, so more would
outlast any budget (a 100000 s limit that only backs up an algorithm's iterations, evaluated every 0.05 s,
makes 2 million)."""
NODE_MIB = {"sim": 0.125, "procs": 16.0}
"""The least memory one node takes, in MiB, by backend (measured with the smallest model: a sim node's state and
coroutine; a procs node's own pages, forked from a parent that holds torch); a model's copies come on top."""


def _short(text: str, width: int = 40) -> str:
    return repr(text) if len(text) <= width else repr(text[:width]) + "..."


def _spans_machines() -> bool:
    """Launched by torchrun (as ``edgeml.runtime.procs.torchrun`` tells it): the nodes share no host's memory."""
    import os

    return "TORCHELASTIC_RUN_ID" in os.environ or {"RANK", "WORLD_SIZE", "MASTER_ADDR"} <= set(os.environ)


def check_limits(cfg: Config) -> None:
    """The upper bounds that depend on the host or on several fields, checked before anything is built (a
    billion workers would exhaust memory building the node list): names and paths within what file systems
    take, ``run.threads`` within this machine's cores, ``cluster.workers`` within its memory, and the
    evaluations of a run within ``MAX_EVALUATIONS``."""
    import os

    size = len(cfg.run.name.encode())
    if size > NAME_MAX_BYTES:
        raise UserError(f"run.name = {_short(cfg.run.name)} is {size} bytes long: use a name of 1 to "
                        f"{NAME_MAX_BYTES} bytes (--name)")
    for key, value in (("run.out", cfg.run.out), ("data.root", cfg.data.root), ("load.dir", cfg.load.dir)):
        with_name = key == "run.out" and bool(cfg.run.name)
        size = len(os.fsencode(value)) + (len(cfg.run.name.encode()) + 1 if with_name else 0)
        if size > PATH_MAX_BYTES:
            raise UserError(f"{key} = {_short(value)} is {size} bytes long{' with run.name' if with_name else ''}: "
                            f"use a path of at most {PATH_MAX_BYTES} bytes")
        longest = max((len(os.fsencode(part)) for part in value.split("/")), default=0)
        if longest > 255:
            raise UserError(f"{key} = {_short(value)} has a folder name of {longest} bytes: use folder names of at "
                            f"most 255 bytes")
    cores = os.cpu_count() or 1
    if cfg.run.threads > cores:
        raise UserError(f"run.threads = {cfg.run.threads} is more than this machine's {cores} cores: use a whole "
                        f"number in [1, {cores}]")
    s, interval = cfg.stop, cfg.eval.interval
    # where a step budget ends the run, the time limit is only its backstop (committed runs keep 1e5 s)
    if s.max_time and not s.max_steps and s.max_time / interval > MAX_EVALUATIONS:
        raise UserError(f"eval.interval = {interval:g} makes {s.max_time / interval:.3g} evaluations in "
                        f"stop.max_time = {s.max_time:g} s, more than {MAX_EVALUATIONS}: use eval.interval >= "
                        f"{s.max_time / MAX_EVALUATIONS:g} (or a shorter stop.max_time, or a stop.max_steps)")
    backend = cfg.run.backend
    if backend == "procs" and _spans_machines():
        return
    import psutil

    total = psutil.virtual_memory().total
    per = NODE_MIB[backend] * 2**20
    most = max(1, int(total // per) - 1)  # an algorithm's other nodes (a parameter server) take one share
    if cfg.cluster.workers > most:
        raise UserError(f"cluster.workers = {cfg.cluster.workers} needs at least {_bytes(cfg.cluster.workers * per)} "
                        f"of memory on the {backend} backend ({NODE_MIB[backend]:g} MiB a worker), more than this "
                        f"machine's {_bytes(total)}: use a whole number in [1, {most}]")


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} PiB"  # pragma: no cover


# --------------------------------------------------------------------------------------------- values


def _check_value(where: str, tp: Any, value: Any) -> Any:
    """Coerce ``value`` to the annotated type ``tp`` or raise a one-line UserError."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            hint = did_you_mean(value, [str(a) for a in allowed]) if isinstance(value, str) else ""
            raise UserError(f"{where} = {value!r} is not allowed{hint}: choose one of "
                            f"{', '.join(map(str, allowed))}")
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise UserError(f"{where} = {value!r} is not a boolean: use true or false")
    if tp is int:
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            raise UserError(f"{where} = {value!r} is not a whole number")
        return int(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{where} = {value!r} is not a number")
        return float(value)
    if tp is str:
        if not isinstance(value, (str, int, float)):
            raise UserError(f"{where} = {value!r} is not a string")
        return str(value)
    if origin is list:
        if not isinstance(value, list):
            raise UserError(f"{where} = {value!r} is not a list: write it as [..] in TOML")
        item = typing.get_args(tp)
        if item and item[0] in (int, float, str, bool):  # a list of plain values: each element checked
            return [_check_value(f"{where}[{i}]", item[0], v) for i, v in enumerate(value)]
        return value
    return value


def _types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def did_you_mean(name: str, known: list[str]) -> str:
    """`` (did you mean 'max_time'?)`` for the closest known name, or nothing."""
    import difflib

    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_keys(obj: Any, values: dict[str, Any]) -> list[tuple[str, str]]:
    """The keys of ``values`` that dataclass ``obj`` has no field for, each with a suggestion (or "")."""
    known = list(_types(type(obj)))
    return [(key, did_you_mean(key, known)) for key in values if key not in known]


def update_section(obj: Any, section: str, values: dict[str, Any]) -> None:
    """Set fields of dataclass ``obj`` from ``values``, refusing unknown keys (all of them at once, each with
    its closest known key) and mistyped values."""
    unknown = unknown_keys(obj, values)
    if unknown:
        known = ", ".join(sorted(_types(type(obj)))) or "(none)"
        listed = ", ".join(f"'{section}.{key}'{hint}" for key, hint in unknown)
        raise UserError(f"unknown config key{'s' if len(unknown) > 1 else ''} {listed}: known keys in [{section}] "
                        f"are {known}")
    hints = _types(type(obj))
    for key, value in values.items():
        setattr(obj, key, _check_value(f"{section}.{key}", hints[key], value))



def _field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of ``cls`` and of the dataclasses it inherits from (nearest wins)."""
    import ast
    import inspect

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            body = ast.parse(inspect.getsource(klass)).body[0].body  # type: ignore[attr-defined]
        except (OSError, TypeError, IndexError):
            continue
        for node, nxt in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                docs[node.target.id] = " ".join(str(nxt.value.value).split())  # type: ignore[union-attr]
    return docs


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "|".join(map(str, typing.get_args(tp)))
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def describe_fields(cls: type) -> list[tuple[str, str, Any, str]]:
    """(name, type, default, doc) of each field of a config dataclass, for ``edgeml list`` and docs."""
    docs, hints = _field_docs(cls), _types(cls)
    rows = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        rows.append((f.name, _type_name(hints[f.name]), default, docs.get(f.name, "")))
    return rows
