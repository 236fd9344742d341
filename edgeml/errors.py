"""User-facing errors.

A ``UserError`` carries a one-line message that names the problem and the fix. The command line prints it
without a traceback and exits with code 2; library callers can catch it like any ``ValueError``.
"""


class UserError(ValueError):
    """Bad input from the user: unknown names, impossible values, missing data."""
