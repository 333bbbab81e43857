"""Writers of growing trajectories, run as separate processes by the follow tests.

``python -m tests.sources.follow_producers h5md OUT DELAY [KILL_AFTER]``: the PSF/DCD frames written
with ParallelWriter, one every DELAY s; with KILL_AFTER, it stops writing after that many frames and
waits to be killed (its last frames never marked complete).

``python -m tests.sources.follow_producers xtc SRC OUT DELAY PIECE``: SRC's bytes appended to OUT in
PIECE-byte pieces (pieces end inside frames, as a writer caught mid-frame), then ``OUT.done``.

``python -m tests.sources.follow_producers mdaxtc OUT DELAY [forever]``: the PSF/DCD frames written with
MDAnalysis's XTCWriter, one every DELAY s (its buffer reaches the disk in pieces that end inside frames), then
``OUT.done``; with ``forever`` it writes them again and again until SIGTERM, then closes the file.

With ``FOLLOW_HOLD=PATH`` in the environment each writer stops after its first 10 frames or pieces until
PATH exists: a reader then surely opens the file while it is still growing. (The H5MD writer holds
its file's lock meanwhile: only a reader that opens without the lock, as a follower does, reads it.)
"""

from __future__ import annotations

import os
import sys
import time
import warnings


def hold(i: int) -> None:
    """After the 10th frame or piece, wait for the test's go (``FOLLOW_HOLD``), if it asked for one."""
    go = os.environ.get("FOLLOW_HOLD")
    if go and i == 10:
        deadline = time.monotonic() + 600
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.02)


def adk_vacuum_frames():
    """AdK in vacuum's positions (PSF/DCD: 98 frames, 3341 atoms) and times as MDAnalysis reads them.

    Read by MDAnalysis once per machine and kept in the temporary folder (named by a digest of the DCD's bytes,
    not its mtime: a fresh install of the data finds it; whole or absent): the producers after the first need
    not import MDAnalysis, a second of CPU each."""
    import hashlib
    import tempfile
    from pathlib import Path

    import numpy as np

    from tests.datafiles import DCD as dcd

    digest = hashlib.sha256(Path(dcd).read_bytes()).hexdigest()[:16]
    kept = Path(tempfile.gettempdir()) / f"trajscale-tests-adk-dcd-{digest}.npz"
    if not kept.exists():
        import MDAnalysis as mda
        from MDAnalysisTests.datafiles import DCD, PSF

        u = mda.Universe(PSF, DCD)
        assert all(ts.dimensions is None for ts in u.trajectory[:1])   # no box: none is written
        times = np.array([ts.time for ts in u.trajectory])
        positions = np.array([ts.positions for ts in u.trajectory])
        part = kept.with_name(f"{kept.stem}.{os.getpid()}.npz")
        np.savez(part, positions=positions, times=times)
        os.replace(part, kept)   # whole or absent: producers started at once each write their own part
    with np.load(kept) as f:
        return f["positions"], f["times"]


def write_h5md(out: str, delay: float, kill_after: int | None = None) -> None:
    import numpy as np

    from trajscale.pwrite import ParallelWriter

    warnings.filterwarnings("ignore")
    positions, times = adk_vacuum_frames()
    ids = np.arange(positions.shape[1])
    with ParallelWriter(out, positions.shape[1], chunks=1) as w:
        for i, (pos, t) in enumerate(zip(positions, times, strict=True)):
            w.write(step=i, time=t, ids=ids, positions=pos, box=None)
            print("wrote", i + 1, flush=True)
            hold(i + 1)
            if kill_after is not None and i + 1 == kill_after:
                time.sleep(3600)   # the test kills this process here
            time.sleep(delay)


def append_bytes(src: str, out: str, delay: float, piece: int) -> None:
    from pathlib import Path

    data = Path(src).read_bytes()
    with open(out, "wb") as fh:
        for i in range(0, len(data), piece):
            fh.write(data[i:i + piece])
            fh.flush()
            hold(i // piece + 1)
            time.sleep(delay)
    Path(out + ".done").touch()


def write_mda_xtc(out: str, delay: float, forever: bool = False) -> None:
    import signal
    from pathlib import Path

    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    warnings.filterwarnings("ignore")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    u = mda.Universe(PSF, DCD)
    n = 0
    with mda.Writer(out, u.atoms.n_atoms) as w:
        while not stop:
            for _ in u.trajectory:
                w.write(u.atoms)
                n += 1
                print("wrote", n, flush=True)
                hold(n)
                time.sleep(delay)
                if stop:
                    break
            if not forever:
                break
    if not forever:
        Path(out + ".done").touch()


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    if kind == "h5md":
        write_h5md(rest[0], float(rest[1]), int(rest[2]) if len(rest) > 2 else None)
    elif kind == "mdaxtc":
        write_mda_xtc(rest[0], float(rest[1]), rest[2:] == ["forever"])
    else:
        append_bytes(rest[0], rest[1], float(rest[2]), int(rest[3]))
