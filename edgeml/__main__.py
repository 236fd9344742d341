"""``python -m edgeml`` and the ``edgeml`` command.

The command line's own modules (typer, rich, the config schema) take a second or more to import on a busy
machine; a Ctrl-C in that second ends the command as any interruption before a run does: one line, exit 130,
no traceback."""

import signal
import sys


def entry() -> None:
    # a shell that starts us in the background without job control (CI, scripts) leaves SIGINT ignored, and the
    # interpreter keeps it so: Ctrl-C (or a SIGINT from a supervisor) must work from the first line
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        from edgeml.cli import main
    except KeyboardInterrupt:
        from edgeml.errors import interrupt_handled

        interrupt_handled()
        sys.stderr.write("interrupted before the run started: no run directory was made\n")
        raise SystemExit(130) from None
    main()


if __name__ == "__main__":
    entry()
