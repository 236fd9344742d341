"""``python -m edgeml`` and the ``edgeml`` command.

The command line's own modules (typer, rich, the config schema) take a second or more to import on a busy
machine; a Ctrl-C in that second ends the command as any interruption before a run does: one line, exit 130,
no traceback."""

import sys


def entry() -> None:
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
