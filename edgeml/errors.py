"""User-facing errors.

A ``UserError`` carries a one-line message that names the problem and the fix. The command line prints it
without a traceback and exits with code 2; library callers can catch it like any ``ValueError``. A
``RunFailed`` says a run failed (exit code 1), its traceback kept in the run directory.
"""


class UserError(ValueError):
    """Bad input from the user: unknown names, impossible values, missing data."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped a run: ``path`` is its run directory, holding what was measured, or None when
    the run had not made one yet."""

    def __init__(self, path=None):
        super().__init__(path)
        self.path = path


class RunFailed(RuntimeError):
    """A run (or some runs of a reproduction) failed after writing what it measured; the node's traceback is in
    the run directory's ``error.txt``. The command line prints the message and exits with code 1. Any other
    exception is a bug in edgeml and keeps its traceback."""


def interrupt_handled() -> None:
    """Tell the interpreter that the KeyboardInterrupt just caught was handled, so the exit code is ours.

    CPython remembers a KeyboardInterrupt that escaped an ``exec`` of source text, even one caught later, and at
    exit kills itself with SIGINT whatever ``sys.exit`` said. Dataclasses and namedtuples ``exec`` their methods
    while modules import, so a Ctrl-C during torch's import lands there. Evaluating an empty text resets that
    memory: the next run returns 130 as the command line says."""
    exec("")


def interrupt_within(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (or SIGTERM) that ``exc`` stands for, or None. Python wraps an exception raised while a class is
    made (a descriptor's ``__set_name__``, as while matplotlib imports) in a RuntimeError with the interrupt as its
    cause: a Ctrl-C that lands there is still a Ctrl-C, not a failure."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__
    return None


def unwrap_interrupt(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, with a Ctrl-C that came back wrapped (``interrupt_within``) raised as itself."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        interrupt = interrupt_within(exc)
        if interrupt is None:
            raise
        raise interrupt from None
