"""Imported only by the forkserver, first of :data:`~.processes.FORKSERVER_PRELOAD`: SIGINT blocked there.

The forkserver is started by fork+exec, and ``_posixsubprocess`` clears the signal mask, so the mask
:func:`trajscale.pools.sigint_blocked` holds in the parent does not reach it.  Blocked here, a Ctrl-C
stays pending through the forkserver's imports and each forked worker's start until the worker's
initializer, :func:`trajscale.pools.quiet_worker`, ignores and unblocks it; else a worker signalled
in that window prints a ``KeyboardInterrupt`` traceback."""

import signal

if hasattr(signal, "pthread_sigmask"):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
