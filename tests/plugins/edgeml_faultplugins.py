"""Small algorithms that exercise the runtime's fault paths (loaded through EDGEML_PLUGINS, so procs node
processes see them too). Each logs what it observed to the series ``probe``."""

import os
from dataclasses import dataclass

import torch

from edgeml.algorithms.registry import AlgorithmSpec, register
from edgeml.algorithms.ps import PSConfig, asp_server, ps_worker


@dataclass
class NoConfig:
    pass


def _workers(program):
    return lambda cfg: [("worker", program)] * cfg.cluster.workers


def _idle(node):
    while True:
        node.sleep(1.0)


def primitives(node):
    """all_reduce (sum and mean), recv with a timeout, a message between workers."""
    peers = node.ranks("worker")
    t = torch.tensor([float(node.index + 1)])
    node.all_reduce(t)
    node.log("probe", what="sum", value=float(t))
    m = torch.tensor([float(node.index + 1)])
    node.all_reduce(m, mean=True)
    node.log("probe", what="mean", value=float(m))
    t0 = node.now()
    got = node.recv(tag="nothing", timeout=0.3)
    node.log("probe", what="timeout", value=node.now() - t0, got=got is None)
    if node.index == 0:
        node.send(peers[1], "hello", x=torch.arange(3), k=7)
    elif node.index == 1:
        msg = node.recv(src=peers[0], tag="hello")
        node.log("probe", what="hello", value=float(msg["x"].sum() + msg["k"]), nbytes=msg.nbytes)
    _idle(node)


def lost(node):
    """Worker 1 crashes by schedule (the config's), worker 2's program ends at 0.5 s; at 1 s worker 0 sends 2
    messages to the first and 3 to the second, all lost, and carries on."""
    peers = node.ranks("worker")
    if node.index == 1:
        while True:
            node.recv(tag="x")
    if node.index == 2:
        node.sleep(0.5)
        return
    node.sleep(1.0)
    for dst, n in ((peers[1], 2), (peers[2], 3)):
        for _ in range(n):
            node.send(dst, "x", v=torch.zeros(4))
    node.log("probe", what="sent", value=node.now())
    _idle(node)


def reduce_crash(node):
    """Worker 0 (the lowest rank, so procs' first reduction root) never joins and crashes by schedule while
    the others wait in all_reduce; they reduce over the two of them, twice."""
    if node.index == 0:
        node.sleep(30.0)
    for round_ in (1, 2):
        t = torch.tensor([float(node.index + 1)])
        node.all_reduce(t)
        node.log("probe", what="sum", value=float(t), round=round_, at=node.now())
    _idle(node)


def exposers(node):
    """Every worker trains its own model and exposes it."""
    trainer = node.job.trainer(node.index)
    node.expose(trainer.params)
    while True:
        node.compute(trainer.gradient, samples=trainer.batch_size)
        trainer.sgd(0.1)


def raises(node):
    """Worker 0 hits a bug after a few steps; the message has brackets, as gloo's error texts do."""
    trainer = node.job.trainer(node.index)
    for _ in range(3):
        node.compute(trainer.gradient)
    if node.index == 0:
        raise KeyError("[pair.cc:545] missing")
    _idle(node)


def pid_files(node):
    """A parameter-server worker or server that first writes its pid to $EDGEML_TEST_PIDS/<role><index>."""
    with open(os.path.join(os.environ["EDGEML_TEST_PIDS"], f"{node.role}{node.index}"), "w") as f:
        f.write(str(os.getpid()))
    ps_worker(node) if node.role == "worker" else asp_server(node)


register(AlgorithmSpec("fault-primitives", "all_reduce, recv timeout, worker to worker", NoConfig,
                       _workers(primitives)))
register(AlgorithmSpec("fault-lost", "messages to dead peers", NoConfig, _workers(lost)))
register(AlgorithmSpec("fault-reduce-crash", "a crash during all_reduce", NoConfig, _workers(reduce_crash)))
register(AlgorithmSpec("fault-exposers", "every worker exposes its model", NoConfig, _workers(exposers)))
register(AlgorithmSpec("fault-raises", "a node program raises", NoConfig, _workers(raises)))
register(AlgorithmSpec("fault-pids", "ASP whose nodes write their pids", PSConfig,
                       lambda cfg: [("ps", pid_files)] + [("worker", pid_files)] * cfg.cluster.workers))


# ------------------------------------------------------------------ the environment's node interface
def interrupt(node):
    """Worker 1 sends "stop" to worker 0 at 0.5 s, while worker 0 is in a step 100 steps long that "stop"
    interrupts; worker 0 then receives "stop" (it stayed in the mailbox) and takes an uninterrupted step of
    work 2. Worker 0 logs what compute returned and how long each step lasted."""
    peers = node.ranks("worker")
    if node.index == 1:
        node.sleep(0.5)
        node.send(peers[0], "stop", k=5)
        _idle(node)
    if node.index > 1:
        _idle(node)
    t0 = node.now()
    out = node.compute(lambda: 42, work=100.0, interrupt=(peers[1], "stop"))
    node.log("probe", what="interrupted", value=node.now() - t0, result=repr(out))
    node.log("probe", what="kept", value=node.recv(peers[1], "stop")["k"])
    t0 = node.now()
    out = node.compute(lambda: 7, work=2.0, interrupt=(peers[1], "stop"))
    node.log("probe", what="work2", value=node.now() - t0, result=repr(out))
    _idle(node)


def load_probe(node):
    """Worker 0 trains and logs, per window of steps about 0.25 s long, the mean step time and the co-running
    cpu load observed over the window (psutil counts CPU time in clock ticks: a single short step is too
    short to read)."""
    if node.index:
        _idle(node)
    trainer = node.trainer()
    node.load()
    while True:
        t0, steps = node.now(), 0
        while node.now() - t0 < 0.25:
            node.compute(trainer.gradient)
            steps += 1
        node.log("probe", what="window", value=(node.now() - t0) / steps, cpu=node.load().cpu, at=t0,
                 end=node.now())


def neighbourly(node):
    """Each node logs its neighbours, then every 0.2 s sends one message to each of its neighbours (all, up or
    not) and one to the node two places on, and counts its rounds (worker 0 only)."""
    peers = node.ranks("worker")
    node.log("probe", what="neighbours", value=len(node.neighbours(all=True)), up=len(node.neighbours()),
             ranks=" ".join(map(str, node.neighbours(all=True))))
    far = peers[(node.index + 2) % len(peers)]
    while True:
        for dst in node.neighbours(all=True) + [far]:
            node.send(dst, "x", v=torch.zeros(10))
        if node.index == 0:
            node.count("rounds")
        node.count("messages", len(node.neighbours(all=True)) + 1)
        node.sleep(0.2)


def stopper(node):
    """Every worker trains and exposes its model; at 1 s worker 1 ends the run, saying why."""
    trainer = node.trainer()
    node.expose(trainer.params)
    while True:
        node.compute(trainer.gradient)
        trainer.sgd(0.1)
        if node.index == 1 and node.now() >= 1.0:
            node.stop_run("no platform left alive")


register(AlgorithmSpec("env-stop", "an algorithm that ends the run", NoConfig, _workers(stopper)))
register(AlgorithmSpec("env-interrupt", "an interruptible step", NoConfig, _workers(interrupt)))
register(AlgorithmSpec("env-load", "step times beside co-running load", NoConfig, _workers(load_probe)))
register(AlgorithmSpec("env-neighbours", "messages over a topology", NoConfig, _workers(neighbourly)))
