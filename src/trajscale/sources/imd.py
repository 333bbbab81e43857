"""Frames streamed over IMD (v2 or v3, through ``imdclient``) written into an H5MD file as they come.

``trajscale run ANALYSIS TOP imd://HOST:PORT`` runs :func:`receive` in its own
process: each frame received is written with :class:`~trajscale.pwrite.ParallelWriter`
(crash-consistent: a frame counts once it is whole), and the followed run
(:mod:`trajscale.follow`) analyses that file on any executor. The stream's end
closes the file, which marks it complete; nothing streamed is lost (``--tee``
keeps the file). IMD sends Å and ps (MDAnalysis's units), as ``IMDReader`` reads them.
"""

from __future__ import annotations

import logging
import sys
from urllib.parse import urlsplit

import numpy as np

from ..errors import ConfigError

log = logging.getLogger(__name__)

SCHEME = "imd://"


def is_stream(trajectory) -> bool:
    return isinstance(trajectory, str) and trajectory.startswith(SCHEME)


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
    """Write every frame of the IMD stream at ``url`` into ``out`` (H5MD); return the frames written and,
    when the connection failed (reset by the producer, or another error), what imdclient said of it
    (None when the producer closed its connection).

    The file is closed (and so marked complete) when the stream ends; an interrupt
    leaves the frames received so far, unmarked.
    """
    from imdclient.IMDClient import IMDClient
    from MDAnalysis.lib.mdamath import triclinic_box

    from ..pwrite import ParallelWriter

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
                box = None if f.box is None else triclinic_box(*np.asarray(f.box, np.float64))
                step = n if getattr(f, "step", None) is None else int(f.step)
                time = float(n) if getattr(f, "time", None) is None else float(f.time)
                w.write(step=step, time=time, ids=ids, positions=f.positions, box=box,
                        velocities=getattr(f, "velocities", None), forces=getattr(f, "forces", None))
                n += 1
    finally:
        client.stop()
    return n, problem


def connection_failure(end: EOFError) -> str | None:
    """What failed, when imdclient's end of stream (``end``) came from a failed connection: reset by the
    producer, silent past imdclient's read timeout, or another error; None when the producer closed the
    connection (an end of stream, or a producer killed whose system closed it: IMD cannot tell them apart).

    imdclient raises every end as an EOFError, with the error it met in the exception's chain (its
    cause, or the context of the error it raised in its place).
    """
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


def main(argv: list[str]) -> int:
    """``python -m trajscale.sources.imd URL OUT N_ATOMS [--overwrite]``: the receiver process of a
    streamed run; its last line on stderr says what it received, or why it could not. Its exit status
    says how the stream ended: 0 when the producer closed the connection, :attr:`Ending.VANISHED`'s
    when the connection failed (the frames received are kept either way)."""
    from ..endings import Ending

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
