"""The RMSD kernel against MDTraj's on the same in-memory float32 arrays, one thread each.

    python benchmarks/kernels.py [--sizes 100,564,3341,10000,47681] [--frames 1000] [--repeat 5]

Coordinates: the AdK-in-water GRO of MDAnalysisTests (47,681 atoms): its 214
CA atoms for ``n <= 214``, else its first ``n`` atoms; moved
every frame by a random rigid motion plus 0.5 Å noise, ``--frames`` frames
(fewer for the largest selections, at most ~200 MB). Per frame, best of
``--repeat``:

* ``RMSD.map``: trajscale's whole map on a Block (finite check included);
* ``superpose_rmsd``: the kernel alone (QCP, compiled C, one thread);
* ``md.rmsd``: MDTraj's SIMD QCP, ``parallel=False``, which centres a copy of
  the frames and computes their traces inside the call (as ``RMSD.map`` does);
* ``md.rmsd precentered``: the same on frames centred beforehand (its fastest use).

Prints microseconds per frame, the ratio to MDTraj (target: map <= 1.5x
``md.rmsd``), the largest difference to the Kabsch (SVD, float64) path that
preceded QCP (target <= 1e-5 Å) and to MDTraj (which sums in float32: ~1e-4 Å). MDTraj is not
a trajscale dependency: install it in the benchmark's environment
(``pip install mdtraj``); without it only trajscale's rows are printed.
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np


def best_of(fn, repeat: int) -> float:
    fn()   # warm: compilation, page faults
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def random_rotations(n: int, rng) -> np.ndarray:
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1)[:, None]
    w, x, y, z = q.T
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1)], 1)


def frames_of(coords: np.ndarray, n_frames: int, seed: int = 0) -> np.ndarray:
    """(F, N, 3) float32: ``coords`` rotated, shifted and perturbed per frame."""
    rng = np.random.default_rng(seed)
    rot = random_rotations(n_frames, rng)
    out = np.einsum("nk,fjk->fnj", coords - coords.mean(0), rot)
    out += rng.normal(scale=0.5, size=out.shape) + rng.uniform(-20, 20, size=(n_frames, 1, 3))
    out[0] = coords
    return out.astype(np.float32)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100,564,3341,10000,47681", help="selection sizes (atoms)")
    p.add_argument("--frames", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--max-mb", type=float, default=200, help="largest coordinate array per size")
    args = p.parse_args(argv)

    import os
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import GRO

    from trajscale.analysis import RMSD
    from trajscale.analysis.base import Prepared
    from trajscale.analysis.rmsd import RMSDState
    from trajscale.block import Block
    from trajscale.kernels.superpose import Reference, superpose_rmsd

    try:
        import mdtraj as md
    except ImportError:
        md = None
        print("MDTraj is not installed here (pip install mdtraj): trajscale rows only")

    u = mda.Universe(GRO)
    ca = u.select_atoms("protein and name CA").positions.astype(np.float64)
    allpos = u.atoms.positions.astype(np.float64)
    print(f"{'atoms':>7} {'frames':>6} {'map us':>8} {'kernel us':>9} {'vs SVD A':>9} {'md.rmsd us':>10} "
          f"{'precentered':>11} {'map/md':>7} {'vs MDTraj A':>11}")
    for n in (int(s) for s in args.sizes.split(",")):
        base = ca[:n] if n <= len(ca) else allpos[:n]
        f = max(10, min(args.frames, int(args.max_mb * 1e6 / (n * 12))))
        x = frames_of(base, f)
        ref = Reference.of(x[0].astype(np.float64))
        analysis = RMSD()
        prep = Prepared(atoms=np.arange(n), state=RMSDState(fit=slice(None), ref=ref, groups=(), ref_groups=(),
                                                            group_weights=(), path="memory"))
        block = Block(0, f, x, np.zeros((f, 6), np.float32), np.arange(f, dtype=np.float64),
                      np.arange(f, dtype=np.int64))
        t_map = best_of(functools.partial(analysis.map, block, prep), args.repeat) / f * 1e6
        t_k = best_of(functools.partial(superpose_rmsd, x, ref), args.repeat) / f * 1e6
        ours = superpose_rmsd(x, ref)
        kabsch = superpose_rmsd(x, ref, want_rotation=True)[0]
        row = f"{n:>7} {f:>6} {t_map:>8.2f} {t_k:>9.2f} {np.abs(ours - kabsch).max():>9.1e}"
        if md is not None:
            top = md.Topology()
            chain = top.add_chain()
            res = top.add_residue("X", chain)
            for _ in range(n):
                top.add_atom("C", md.element.carbon, res)
            traj = md.Trajectory(x / 10, top)   # MDTraj works in nm
            t_md = best_of(functools.partial(md.rmsd, traj, traj, 0, parallel=False), args.repeat) / f * 1e6
            centred = md.Trajectory(x / 10, top)
            centred.center_coordinates()
            t_pre = best_of(functools.partial(md.rmsd, centred, centred, 0, parallel=False, precentered=True),
                            args.repeat) / f * 1e6
            theirs = md.rmsd(traj, traj, 0, parallel=False) * 10
            row += f" {t_md:>10.2f} {t_pre:>11.2f} {t_map / t_md:>7.2f} {np.abs(ours - theirs).max():>11.1e}"
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
