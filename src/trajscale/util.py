"""Small helpers at the bottom of the layers: file identity, atomic outputs, stop signals, child processes, LRU."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import sys
import threading
import time
import types
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path

from .errors import InputFileError, OutputError

log = logging.getLogger(__name__)


class LRU:
    """A bounded map, the least recently used entry out first: at most ``count`` entries and, with ``max_bytes``,
    at most that many bytes (``size`` of each value; the newest is kept whatever its size). Thread-safe."""

    def __init__(self, count: int | None = None, max_bytes: int | None = None, size: Callable = len) -> None:
        self.count, self.max_bytes, self._size = count, max_bytes, size
        self._kept: OrderedDict = OrderedDict()
        self.bytes, self._lock = 0, threading.Lock()

    def __contains__(self, key) -> bool:
        return key in self._kept

    def peek(self, key, default=None):
        """The value kept under ``key``, its place unchanged."""
        return self._kept.get(key, default)

    def get(self, key, default=None):
        """The value kept under ``key``, now the most recently used."""
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
            return self._kept.get(key, default)

    def put(self, key, value) -> list[tuple]:
        """Keep ``value`` under ``key``, the most recently used; return the (key, value) pairs it pushed out."""
        weigh = self._size if self.max_bytes is not None else lambda _: 0
        with self._lock:
            if key in self._kept:
                self.bytes -= weigh(self._kept.pop(key))
            self._kept[key] = value
            self.bytes += weigh(value)
            out = []
            while len(self._kept) > 1 and (self.count is not None and len(self._kept) > self.count
                                           or self.max_bytes is not None and self.bytes > self.max_bytes):
                out.append(self._kept.popitem(last=False))
                self.bytes -= weigh(out[-1][1])
            return out

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self.bytes = 0


def file_identity(paths: list[str]) -> tuple:
    """(real path, device, inode, size, mtime_ns) of each file; a missing file counts as its path."""
    out = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            out.append((p,))
            continue
        out.append((os.path.realpath(p), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


#: Every URL scheme trajscale reads by range requests, name -> its prefixes: the one table of them, at the bottom
#: of the layers so that every layer tells a URL from a path alike.
SCHEME_PREFIXES = {"s3": ("s3://",), "gs": ("gs://", "gcs://"), "az": ("az://", "abfs://", "abfss://"),
                   "http": ("http://", "https://"), "hf": ("hf://",)}


def scheme_of(location) -> str | None:
    """The name of ``location``'s scheme in :data:`SCHEME_PREFIXES`; None for a local path (or anything else)."""
    if not isinstance(location, str):
        return None
    return next((name for name, prefixes in SCHEME_PREFIXES.items() if location.startswith(prefixes)), None)


def is_url(path) -> bool:
    """Whether ``path`` names an object behind a URL rather than a local file (told without I/O)."""
    return scheme_of(path) is not None


def cache_root() -> Path:
    """trajscale's cache folder: ``$TRAJSCALE_CACHE_DIR``, else ``$XDG_CACHE_HOME/trajscale``, else ``~/.cache``'s."""
    root = os.environ.get("TRAJSCALE_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trajscale"


def why_untrusted(st: os.stat_result) -> str | None:
    """Why a cache entry or folder with this stat is not trusted (another user's, or others may write it), or None."""
    if st.st_uid != os.getuid():
        return f"owned by uid {st.st_uid}, not by you"
    who = [w for w, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit]
    if who:
        return f"writable by {' and '.join(who)} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


#: The first bytes of every HDF5 file (the format is told by them, not by the suffix).
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def is_hdf5(path: str | os.PathLike) -> bool:
    """True if the file starts with the HDF5 signature (format by magic bytes, not suffix)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(8) == HDF5_MAGIC
    except OSError:
        return False


def check_input_file(path: str | os.PathLike) -> None:
    """Raise InputFileError if ``path`` is missing, a directory or empty (a URL's is checked by its first request)."""
    if is_url(path):
        return
    p = Path(path)
    try:
        st = p.stat()   # one metadata call, not three (exists, is_dir, stat): every run checks its inputs
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):   # what Path.exists() calls missing
            raise
        raise InputFileError(p, "no such file") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputFileError(p, "is a directory, not a file")
    if st.st_size == 0:
        raise InputFileError(p, "file is empty")


def input_files(inputs: Iterable[str | os.PathLike | None]) -> list[str]:
    """The files behind ``inputs``: a folder stands for the files in it."""
    out = []
    for p in inputs:
        if p is None:
            continue
        p = os.fspath(p)
        out.append(p)
        if os.path.isdir(p):
            with contextlib.suppress(OSError):
                out.extend(e.path for e in os.scandir(p) if e.is_file())
    return out


def refuse_input_as_output(path: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = ()) -> None:
    """Raise OutputError if ``path`` is one of ``inputs`` by device and inode (``--overwrite`` never allows it)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    for inp in input_files(inputs):
        try:
            si = os.stat(inp)
        except OSError:
            continue
        if (si.st_dev, si.st_ino) == (st.st_dev, st.st_ino):
            raise OutputError(path, f"is the input {inp}: refusing to write over an input "
                                    "(--overwrite never allows it); choose another output name")


def check_output_path(path: str | os.PathLike, overwrite: bool = False,
                      inputs: Iterable[str | os.PathLike | None] = (), need_bytes: int = 0) -> Path:
    """Refuse an output that is an input, in a missing or unwritable directory, existing without ``overwrite``,
    without ``need_bytes`` free, or a URL (outputs are written locally); every command's outputs pass here."""
    if is_url(os.fspath(path)):
        raise OutputError(path, "outputs are written to local paths: write it here, then upload the finished "
                                "file (e.g. `aws s3 cp FILE URL`), which the store shows under its key only "
                                "when complete")
    p = Path(path)
    refuse_input_as_output(p, inputs)
    if not p.parent.exists():
        raise OutputError(p, f"directory {p.parent} does not exist")
    if not p.parent.is_dir():   # e.g. -o rmsd.csv/x.h5md
        raise OutputError(p, f"{p.parent} is a file, not a directory")
    if p.is_dir():
        raise OutputError(p, "is a directory")
    if p.exists() and not overwrite:
        raise OutputError(p, "already exists (use --overwrite to replace it)")
    check_writable_folder(p, need_bytes)
    return p


def check_writable_folder(path: Path, need_bytes: int = 0) -> None:
    """Raise OutputError unless a file can be created beside ``path`` with ``need_bytes`` free: a real create,
    since ``os.access`` answers yes to root in a read-only bind mount."""
    folder = path.parent
    probe = folder / f".{path.name}.probe-{os.getpid()}@{_HOST}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:   # left by a killed probe of this pid: it proves the folder was writable
        pass
    except OSError as exc:
        raise OutputError(path, f"cannot create files in {folder}: {exc.strerror}") from None
    else:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)
    if need_bytes > 0:
        free = free_bytes(folder)
        if free is not None and free < need_bytes:
            raise OutputError(path, f"needs about {_mb(need_bytes)} but {folder} has {_mb(free)} free")


def free_bytes(folder: str | os.PathLike) -> int | None:
    """Bytes an unprivileged user may still write in ``folder``'s file system (None: unknown)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n < 1e10 else f"{n / 1e9:.1f} GB"


def is_no_space(exc: BaseException) -> bool:
    """True for a full disk (or quota): ENOSPC/EDQUOT, also as HDF5 reports it in its message text."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    return "No space left on device" in text or "errno = 28," in text or "Disk quota exceeded" in text


def temporary_name(path: str | os.PathLike) -> Path:
    """``.NAME.tmp-PID@HOST`` beside ``path``: the host names whose process table can tell it is stale."""
    p = Path(path)
    return p.with_name(f".{p.name}.tmp-{os.getpid()}@{_HOST}")


def host_name() -> str:
    """This host's name (POSIX's gethostname is uname's nodename), without importing socket (2 ms of a start)."""
    return os.uname().nodename


_HOST = host_name().replace("/", "_")
# (the @HOST part is absent in temporaries of trajscale before 0.3: those are this host's)
_TMP_NAME = re.compile(r"^\..+\.tmp-(\d+)(?:@(.+))?$")
#: Folders this process has written in, their killed writers' leftovers removed (once: not a listing a file;
#: bounded: a folder pushed out is listed again at its next write)
_TIDIED = LRU(4096)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # alive, owned by someone else
        return True
    return True


#: The temporary folder of a run's worker processes (a pool's task marks, Dask's scratch space).
TASKS_PREFIX = "trajscale-tasks-"


def process_folder(prefix: str = TASKS_PREFIX, where: str | None = None) -> str:
    """A new folder ``PREFIX<pid>-<random>`` in ``where`` for this process's workers (gone processes' removed)."""
    import shutil
    import tempfile

    where = where or tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(where) if n.startswith(prefix)]
    except OSError:
        names = []
    for name in names:
        pid = name[len(prefix):].split("-", 1)[0]
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        path = os.path.join(where, name)
        with contextlib.suppress(OSError):
            if os.stat(path).st_uid == os.getuid():
                shutil.rmtree(path, ignore_errors=True)
    made = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=where)
    import atexit

    atexit.register(_remove_own, made, os.getpid())   # (an owner that is never closed leaves none at its exit)
    return made


def _remove_own(path: str, pid: int) -> None:
    """Remove ``path`` at exit unless removed already; never from a forked child that inherited the handler."""
    if os.getpid() == pid:
        import shutil

        shutil.rmtree(path, ignore_errors=True)


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Remove this user's ``.NAME.tmp-PID@HOST`` files in ``folder`` whose process here is gone; return them."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    uid = os.getuid()
    for entry in entries:
        m = _TMP_NAME.match(entry.name)
        # On a shared file system another node's writer is alive or dead regardless of our pids
        if not m or m.group(2) not in (None, _HOST) or int(m.group(1)) == os.getpid() \
                or pid_alive(int(m.group(1))):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != uid or not entry.is_file(follow_symlinks=False):
                continue
            os.unlink(entry.path)
        except OSError:
            continue
        removed.append(Path(entry.path))
        log.info("removed %s, left by a writer that was killed", entry.path)
    return removed


@contextlib.contextmanager
def main_not_reimported():
    """While active, new spawn/forkserver children do not import the parent's ``__main__``."""
    main = sys.modules.get("__main__")
    stand_in = types.ModuleType("__main__")
    stand_in.__spec__ = None
    sys.modules["__main__"] = stand_in
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main
        else:
            sys.modules.pop("__main__", None)


def fsync_path(path: Path, directory: bool = False) -> None:
    """fsync a file, or a folder (after a rename in it; a file system that refuses that is let be)."""
    fd = os.open(path, (os.O_RDONLY | os.O_DIRECTORY) if directory else os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:   # some filesystems refuse fsync on a directory: the rename still happened
        if not directory:
            raise
    finally:
        os.close(fd)


def save_output(path: str | os.PathLike, write, overwrite: bool = True) -> Path:
    """``write(tmp)`` under :func:`atomic_output` beside ``path``; return ``path``. A folder that cannot take the
    result gets it written into ``$TMPDIR`` instead, the OutputError naming both."""
    try:
        with atomic_output(path, overwrite=overwrite) as tmp:
            write(tmp)
        return Path(path)
    except OSError as exc:
        reason = f"cannot write it ({exc.strerror or _short_error(exc)})"
    except OutputError as exc:
        reason = exc.problem
    import tempfile

    name = Path(path).name
    fd, fallback = tempfile.mkstemp(prefix="trajscale-", suffix=f"-{name}")
    os.close(fd)
    try:
        write(Path(fallback))
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(fallback)
        raise OutputError(path, f"{reason}; saving it in {Path(fallback).parent} failed too "
                                f"({exc.strerror or _short_error(exc)})") from None
    raise OutputError(path, f"{reason}; the result is saved as {fallback}")


def _short_error(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, overwrite: bool = True):
    """A temporary path beside ``path``, renamed to ``path`` only on success (fsynced, then its folder: a crash
    leaves the old file or the whole new one), removed on any exception; killed writers' leftovers go first, at a
    process's first write in the folder (a writer of many files there lists it once, not a file)."""
    final = check_output_path(path, overwrite=overwrite)
    if (folder := os.path.abspath(final.parent)) not in _TIDIED:
        remove_stale_temporaries(folder)
        _TIDIED.put(folder, True)
    tmp = temporary_name(final)
    try:
        yield tmp
        if tmp.exists():
            fsync_path(tmp)
        os.replace(tmp, final)
        fsync_path(final.parent, directory=True)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


# Set by the CLI's SIGTERM handler: an exception raised from a signal handler can be swallowed in a C
# callback, so loops that write outputs poll this flag instead; elsewhere the handler raises.
_stop_signal: list[int] = []
_polling: list[bool] = []


def request_stop(signum: int) -> bool:
    """Record a termination signal; True if a polling loop will act on it."""
    _stop_signal.append(signum)
    return bool(_polling)


@contextlib.contextmanager
def polling_for_stop():
    """Mark a loop that calls :func:`raise_if_stopped` between blocks."""
    _polling.append(True)
    try:
        yield
    finally:
        _polling.pop()


def stop_requested() -> int:
    """The termination signal recorded so far (0: none), without raising: MPI ranks agree on it first."""
    return _stop_signal[0] if _stop_signal else 0


def raise_if_stopped() -> None:
    """Raise SystemExit if a termination signal arrived (checked between blocks)."""
    if _stop_signal:
        raise SystemExit(128 + _stop_signal[0])


def slow_phase_for_tests(phase: str, worker: str) -> None:
    """Sleep as ``TRAJSCALE_TEST_SLOW_READ`` / ``_COMPUTE`` ask; ``phase`` is ``"read"`` or ``"compute"``."""
    spec = os.environ.get(f"TRAJSCALE_TEST_SLOW_{phase.upper()}")
    if not spec:
        return
    seconds, _, who = spec.partition(":")
    if who and worker != f"rank {int(who)}":
        return
    time.sleep(float(seconds))
