"""edgeml: reproduce and compare distributed training schemes across heterogeneous edge devices.

The package is layered; imports point one way, from the command line down to the math. A module may import
modules of its own layer or of layers below it, never above (``tests/test_layers.py`` parses every import,
function-level ones included, and fails on any that runs back up or closes a cycle):

- ``cli``: the command line, thin;
- ``reproduce``: paper experiments: load, plan, execute (through the runner), render;
- ``analysis``: run directories read back into tables, verdicts and figures;
- ``runner``, ``config``, ``progress``: one run end to end; loading and validating its configuration;
- ``algorithms``: node programs and their configs, registered by name;
- ``runtime``: the node interface and the backends that run node programs (sim, procs);
- ``train``: the training step, the job every node shares, the cost model;
- ``world``, ``data``, ``models``: the run's environment, data sets and partitions, models;
- ``rundir``, ``schema``, ``errors``, ``cache``: the run-directory format, what a configuration is, user errors,
  where edgeml keeps what it can fetch or compute again.
"""

__version__ = "0.1.0"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("__main__", "cli"),
    ("reproduce",),
    ("analysis",),
    ("runner", "config", "progress"),
    ("algorithms",),
    ("runtime",),
    ("train",),
    ("world", "data", "models"),
    ("rundir", "schema", "errors", "cache"),
)
"""The layers, top first: each entry names top-level modules or packages of ``edgeml``."""
