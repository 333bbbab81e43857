"""Imported only by the forkserver, first of :data:`~.processes.FORKSERVER_PRELOAD`: SIGINT blocked there.

The forkserver is started by fork+exec, and CPython's ``_posixsubprocess``
clears the signal mask in the new process, so the mask
:func:`trajscale.pools.sigint_blocked` holds in the parent does not reach it
(seen: ``SigBlk: 0`` in the forkserver's ``/proc/PID/status``).  Blocked here, a
Ctrl-C to the terminal's process group stays pending through the forkserver's
own imports and through each worker forked from it (which restores SIGINT's
default handler before running anything of ours) until the worker's
initializer, :func:`trajscale.pools.quiet_worker`, ignores it and unblocks it.
Without it a worker that received the signal in that window printed a
``KeyboardInterrupt`` traceback (one run in a few under load).
"""

import signal

if hasattr(signal, "pthread_sigmask"):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
