"""Frames streamed over IMD (v2 or v3, through ``imdclient``) written into an H5MD file as they come, in a
process of their own; the followed run analyses that file. IMD sends Å and ps."""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np

from .errors import ConfigError, InputFileError
from .util import raise_if_stopped

TYPE_CHECKING = False
if TYPE_CHECKING:   # the receiver's machinery is imported by the run that starts one, not by every run
    import subprocess
    import typing

log = logging.getLogger(__name__)


def host_port(url: str) -> tuple[str, int]:
    """``imd://HOST:PORT`` as ``(HOST, PORT)``; a clear error for anything else."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "imd" or not parts.hostname or port is None:
        raise ConfigError(f"{url}: an IMD stream is named imd://HOST:PORT")
    return parts.hostname, port


def receive(url: str, out: str, n_atoms: int, *, overwrite: bool = False,
            chunk_frames: int = 1) -> tuple[int, str | None]:
    """Write every frame of the IMD stream at ``url`` into ``out``; return the frames written and what
    imdclient said of a failed connection (None: the producer closed it).  The file is marked complete
    when the stream ends; an interrupt leaves the frames so far, unmarked."""
    from imdclient.IMDClient import IMDClient

    from .pwrite import ParallelWriter

    host, port = host_port(url)
    client = IMDClient(host, port, n_atoms)
    info = client.get_imdsessioninfo()
    ids = np.arange(n_atoms)
    n, problem = 0, None
    try:
        with ParallelWriter(out, n_atoms, chunks=chunk_frames, overwrite=overwrite,
                            velocities=bool(getattr(info, "velocities", False)),
                            forces=bool(getattr(info, "forces", False)),
                            box="triclinic" if getattr(info, "box", False) else None) as w:
            while True:
                try:
                    f = client.get_imdframe()
                except EOFError as exc:   # the stream ended
                    problem = connection_failure(exc)
                    break
                box = None if f.box is None else _box_lengths_angles(f.box)
                step = n if getattr(f, "step", None) is None else int(f.step)
                when = float(n) if getattr(f, "time", None) is None else float(f.time)
                w.write(step=step, time=when, ids=ids, positions=f.positions, box=box,
                        velocities=getattr(f, "velocities", None), forces=getattr(f, "forces", None))
                n += 1
    finally:
        client.stop()
    return n, problem


def _box_lengths_angles(vectors) -> np.ndarray:
    """A frame's box vectors as ``[a, b, c, alpha, beta, gamma]`` (MDAnalysis imported only for a box)."""
    from MDAnalysis.lib.mdamath import triclinic_box

    return triclinic_box(*np.asarray(vectors, np.float64))


def connection_failure(end: EOFError) -> str | None:
    """What failed, when imdclient's end of stream came from a failed connection; None when the producer closed it."""
    seen: set[int] = set()
    cause: BaseException | None = end
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ConnectionResetError):
            return "connection reset by the producer"
        if isinstance(cause, TimeoutError | BlockingIOError):
            return "no data within imdclient's read timeout (a producer that hangs or was paused)"
        cause = cause.__cause__ or cause.__context__
    return None


@dataclass(frozen=True)
class Receiver:
    """A receiver process (:func:`main`) writing a stream into ``out``; ``folder`` is the temporary
    folder holding ``out`` (None: ``out`` is the user's ``--tee`` file, kept); ``said`` is the file its
    stderr goes to (its last line says how the stream ended)."""

    process: subprocess.Popen
    out: str
    folder: str | None
    said: typing.IO[str]

    def ended(self):
        """How the stream ended, once its file is complete: ``(Ending, detail)`` from the receiver's exit."""
        import subprocess

        from .endings import Ending

        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:   # marked complete, yet the receiver lingers: its file is whole
            return Ending.STREAM_ENDED, ""
        if code != Ending.VANISHED.status:
            return Ending.STREAM_ENDED, ""
        return Ending.VANISHED, self.last_line() or f"(receiver status {code})"

    def last_line(self) -> str:
        self.said.seek(0)
        lines = [line.strip() for line in self.said.read().splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def stop(self) -> None:
        """End the receiver (if it still runs) and remove a temporary copy of the stream."""
        import shutil

        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait()
        self.said.close()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def start_receiver(url: str, n_atoms: int, *, tee: str | None = None, overwrite: bool = False,
                   shared: bool = False, wait: float = 60.0) -> Receiver:
    """The receiver of the stream at ``url``, once it has written its H5MD file (up to ``wait`` s), or a clear
    error.  ``tee``: the file to write (kept); else a temporary folder's, in the working directory when
    ``shared`` (an MPI job's nodes share it)."""
    import subprocess
    import tempfile

    folder = None if tee else tempfile.mkdtemp(prefix=".trajscale-imd-" if shared else "trajscale-imd-",
                                               dir=os.getcwd() if shared else None)
    out = tee or os.path.join(folder, "stream.h5md")
    old = os.stat(out) if os.path.exists(out) else None   # an existing --tee is replaced once the stream comes
    # an MPI launcher's variables would make the receiver take itself for a rank of the job
    from .launch import without_launcher

    env = without_launcher(os.environ)
    said = tempfile.TemporaryFile("w+")   # closed by stop(), after the receiver's end is read
    process = subprocess.Popen([sys.executable, "-m", "trajscale.imd", url, out, str(n_atoms),
                                *(["--overwrite"] if overwrite else [])], env=env, stderr=said)
    receiver = Receiver(process, out, folder, said)
    try:
        if not _wait_for_file(process, out, old, wait):
            why = receiver.last_line() or "no reason given"
            raise InputFileError(url, f"no frame came within {wait:g} s" if process.poll() is None
                                 else "the stream ended before its first frame" if process.returncode == 0
                                 else f"the stream could not be received: {why}")
    except BaseException:
        receiver.stop()
        raise
    return receiver


def _wait_for_file(process: subprocess.Popen, out: str, old, wait: float) -> bool:
    """Whether the receiver wrote ``out`` (a new file, not ``old``) before it ended or ``wait`` s passed."""

    def written() -> bool:
        try:
            now = os.stat(out)
        except FileNotFoundError:
            return False
        return old is None or (now.st_ino, now.st_mtime_ns) != (old.st_ino, old.st_mtime_ns)

    t0 = time.monotonic()
    while process.poll() is None and time.monotonic() - t0 < wait:
        if written():
            return True
        raise_if_stopped()
        time.sleep(0.05)
    return written()


def main(argv: list[str]) -> int:
    """``python -m trajscale.imd URL OUT N_ATOMS [--overwrite]``: the receiver process of a streamed run; its
    last stderr line says what it received; exit 0 when the producer closed the connection, else
    :attr:`Ending.VANISHED`'s status."""
    from .endings import Ending

    try:
        n, problem = receive(argv[0], argv[1], int(argv[2]), overwrite="--overwrite" in argv[3:])
    except KeyboardInterrupt:   # Ctrl-C reaches the whole process group: the followed run says what ended
        return 130
    except Exception as exc:   # noqa: BLE001 - the run that started this process reports the line
        print(f"{argv[0]}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if problem is not None:
        print(f"after {n} frames: {problem}", file=sys.stderr)
        return Ending.VANISHED.status
    print(n, "frames received", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
