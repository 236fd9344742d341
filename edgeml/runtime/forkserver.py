"""Imported first by the fork server that starts node processes: tie its life to the launcher's.

Node processes ask Linux to kill them when their parent dies, but their parent is the fork server, not the
launcher. Without this, killing the launcher (SIGKILL, an out-of-memory kill) would leave the fork server and
every node running. The fork server's parent is the launcher, so the same request here closes the chain.
"""

import ctypes
import signal

try:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except OSError:  # not Linux: the launcher's own clean-up still applies
    pass
