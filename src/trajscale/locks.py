"""An output in use: an ``flock`` on a lock file that names its holder (pid and host), for as long as it runs.

A second run on the same output is refused in one line naming the holder. The kernel lets go of an ``flock``
when the last holder ends, so a killed run leaves no stale lock. Forked workers share their parent's lock and
never remove it; the process that took it removes the file when it lets go or exits.

A holder names itself just after it takes the lock, so a refused run may find the file empty, or naming a dead
run of this host that left it: it looks again, for a moment, before it names the holder as unknown.
"""

from __future__ import annotations

import atexit
import os
import time
from pathlib import Path

from .errors import OutputError

#: lock file path -> (descriptor, pid) of the locks this process holds: a run again in the same process
#: (the Python API after an interrupt) takes its own lock over
_HELD: dict[str, tuple[int, int]] = {}

#: how long a refused run waits for a holder that took the lock to write its name in it, in slices of _SLICE_S
_NAMING_S, _SLICE_S = 0.5, 0.01


class OutputLock:
    """The lock file ``path`` of the output ``output`` (named in the refusal, ``what`` saying what is held)."""

    def __init__(self, path: str | os.PathLike, output: str | os.PathLike, what: str) -> None:
        self.path = Path(path)
        self.output = output
        self.what = what
        self._fd: int | None = None   # the lock file's descriptor while this process holds it
        self._owner = 0                # the pid that took it (a forked worker inherits, never removes it)

    def take(self) -> bool:
        """Hold the lock for this process's life (or until :meth:`release`); OutputError if another holds it.
        Where no lock can be taken (a read-only or lockless file system), nothing else can write either: go on.
        False when this process held it already (an earlier run, or its caller)."""
        if self._fd is not None:
            return False
        held = _HELD.get(str(self.path))
        if held is not None and held[1] == os.getpid():   # an earlier, interrupted run of this process
            self._fd, self._owner = held
            return False
        import fcntl

        from .util import host_name, pid_alive

        me, deadline = host_name(), time.monotonic() + _NAMING_S
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                return True
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                try:
                    holder = os.read(fd, 256).decode(errors="replace").strip()
                finally:
                    os.close(fd)
                pid, _, host = holder.partition("@")
                named = pid.isdigit() and (host != me or pid_alive(int(pid)))
                if not named and time.monotonic() < deadline:   # look again: the lock or its name may change
                    time.sleep(_SLICE_S)
                    continue
                pid = pid or "?"
                raise OutputError(self.output, f"another process (pid {pid}{f' on {host}' if host else ''}) is "
                                               f"writing {self.what}: wait for it to end, or stop it, before "
                                               "running this again") from None
            except OSError:
                os.close(fd)
                return True
            try:   # the file its holder removed as this process opened it is no lock any more: open it again
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        # over a dead holder's name in one write, blanks past its end: the file never reads empty or mixed
        name = f"{os.getpid()}@{me}".encode()
        os.pwrite(fd, name.ljust(os.fstat(fd).st_size), 0)
        os.ftruncate(fd, len(name))
        self._fd, self._owner = fd, os.getpid()
        _HELD[str(self.path)] = (fd, self._owner)
        # forked workers end by os._exit, without atexit handlers: only this process removes it
        atexit.register(self.release)
        return True

    def release(self) -> None:
        """Remove and let go of the lock file (the output is finished or discarded, or this process ends)."""
        if self._fd is not None and self._owner == os.getpid():
            if _HELD.get(str(self.path), (None,))[0] == self._fd:
                del _HELD[str(self.path)]
                self.path.unlink(missing_ok=True)
                os.close(self._fd)
        self._fd = None


__all__ = ["OutputLock"]
