"""The ``procs`` backend: one OS process per node, messages over TCP between them, wall-clock time.

Layout of a run: rank 0 is the *monitor* (evaluates snapshots of the exposed model, applies the stopping
rules, writes the run directory, shows progress); ranks 1..N are the algorithm's nodes. Modules:

- ``framing``: a message as one buffer on the wire, its header plain data (never unpickled);
- ``transport``: point-to-point messages that a dead peer can neither block nor break, between processes that
  prove they know the run's secret;
- ``node``: the runtime interface on the wall clock (throttled steps, link emulation, all_reduce over the
  transport) and a node process's life;
- ``calibrate``: the emulated step time of the fastest device (throttling);
- ``monitor``: evaluation, stopping rules, deaths, stalls and the run directory;
- ``launch``: a single-machine run, its processes and their supervision;
- ``torchrun``: one rank of a run that ``torchrun`` started across machines.
"""

from edgeml.runtime.procs.calibrate import calibrate, host_cores  # noqa: F401
from edgeml.runtime.procs.launch import run_local  # noqa: F401
from edgeml.runtime.procs.torchrun import (check_world, launched_by_torchrun, torchrun_is_monitor,  # noqa: F401
                                           torchrun_monitor, torchrun_node)
