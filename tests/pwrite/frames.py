"""Test data shared by the pwrite tests and their MPI script: real frames and scattered ownership."""

from __future__ import annotations

import numpy as np

N_FRAMES = 7


def adk_frames(n_frames: int = N_FRAMES):
    """The first frames of AdK in vacuum (PSF/DCD, 3341 atoms) as plain arrays, read by MDAnalysis.

    Velocities and forces are not in the DCD; they are made from the positions
    (float32) so the files carry all three fields.
    """
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    u = mda.Universe(PSF, DCD)
    pos, time = [], []
    for ts in u.trajectory[:n_frames]:
        pos.append(ts.positions.copy())
        time.append(ts.time)
    pos = np.array(pos, dtype=np.float32)
    # The DCD has no box: a triclinic one that changes every frame, so edges are tested in full.
    box = np.zeros((n_frames, 6), dtype=np.float32)
    box[:, :3] = np.array([70.0, 80.0, 90.0]) + np.arange(n_frames)[:, None]
    box[:, 3:] = [80.0, 95.0, 110.0]
    return {"positions": pos, "velocities": (pos[:, ::-1] * 0.25).astype(np.float32),
            "forces": (pos * -1.5).astype(np.float32), "box": box,
            "time": np.array(time, dtype=np.float64), "step": np.arange(n_frames, dtype=np.int64) * 100 + 7}


def owned(frame: int, n_atoms: int, size: int, rank: int) -> np.ndarray:
    """The ids ``rank`` holds in ``frame``: a random permutation cut at random points.

    Different for every frame (atoms migrate), scattered, in no order; uneven
    shares, an empty one included now and then.
    """
    rng = np.random.default_rng(1000 + frame)
    perm = rng.permutation(n_atoms)
    cuts = np.sort(rng.integers(0, n_atoms, size - 1))
    if frame % 3 == 2 and size > 1:
        cuts[0] = 0   # rank 0 holds no atom in this frame
    return np.split(perm, cuts)[rank]
