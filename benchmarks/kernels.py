"""The RMSD kernel against MDTraj's, and the RDF's pair search against freud's and an older tree's, one thread.

    python benchmarks/kernels.py [--sizes 100,564,3341,10000,47681] [--frames 1000] [--repeat 5]
    python benchmarks/kernels.py --only rdf [--old-tree DIR] [--runs] [--workdir DIR] [--frames 1000] [--repeat 5]

``rmsd`` (the first table). Coordinates: the AdK-in-water GRO of MDAnalysisTests (47,681 atoms): its 214
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

``rdf`` (the second table): the RDF's search (``kernels.pairs.rdf_histogram``, what ``RDF.map`` calls) on
coordinates in memory, for the shapes of selections it chooses its plan by: on YiiP in its membrane
(MDAnalysisTests' ``GRO_MEMPROT``, 43,480 atoms, a hexagonal box; its 5 frames over and over), 75 bins to
15 Å, P x P (276 x 276), protein heavy atoms x P (4,372 x 276), CA x P (564 x 276) and a small x small
(Zn sites x POPG phosphorus, 56 x 55); on AdK in water (10 frames, a dodecahedron), 75 bins to 8 Å, the
water oxygens against themselves (11,084 x 11,084) and the CA atoms against them (214 x 11,084). Each
shape's frames (1,000, 200, 1,000, 1,000, 10, 100; at most ``--frames``), CPU ms, best of ``--repeat``:

* ``trajscale``: this tree's search;
* ``--old-tree DIR``: the search of another checkout, built in place (``git worktree add DIR REV``, then
  ``python setup.py build_ext --inplace`` in it), loaded into this process beside this tree's and
  called in turn with it; its counts must equal this tree's (exit 1 otherwise);
* ``freud``: ``freud.density.RDF`` on one thread (``freud.parallel.set_num_threads(1)``), each frame's
  box built and both selections wrapped into it (as the search wraps them), in the order of the
  selections that is faster for it. freud is not a trajscale dependency (``pip install freud-analysis``);
  without it its columns are left out.

``--runs`` adds the third table: ``trajscale.run(RDF(s1, s2, nbins=75, range=(0, cut-off)), TOPOLOGY,
STORE, executor="serial", stop=FRAMES)`` in a running process (wall ms, best of ``--repeat``, after one
warm-up run), on H5MD stores made with ``trajscale convert`` in ``--workdir`` (YiiP 1,000 frames, AdK
100). With ``--old-tree`` each tree runs in a process of its own (``PYTHONPATH=TREE/src``), the two
alternated ``--repeat`` times, each process one warm-up and one timed run of every shape.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

PROG = Path(__file__).name

#: The RDF's shapes: name -> (system, select1, select2, cut-off in Å, frames).
RDF_SHAPES = {
    "P x P": ("yiip", "name P", "name P", 15.0, 1000),
    "protein heavy x P": ("yiip", "protein and not name H*", "name P", 15.0, 200),
    "CA x P": ("yiip", "protein and name CA", "name P", 15.0, 1000),
    "small x small": ("yiip", "resname ZNM", "resname POPG and name P", 15.0, 1000),
    "water O x O": ("adk", "name OW", "name OW", 8.0, 10),
    "CA x water O": ("adk", "protein and name CA", "name OW", 8.0, 100),
}
#: Frames of each system's H5MD store for --runs.
STORE_FRAMES = {"yiip": 1000, "adk": 100}


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


def rmsd_table(args) -> None:
    """The RMSD kernel against MDTraj's (the first table)."""
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


# ---------------------------------------------------------------- the RDF's search

def system_files(system: str) -> tuple[str, str]:
    from MDAnalysisTests.datafiles import GRO_MEMPROT, TPR, XTC, XTC_MEMPROT

    return {"yiip": (GRO_MEMPROT, XTC_MEMPROT), "adk": (TPR, XTC)}[system]


@functools.lru_cache(maxsize=None)
def system_frames(system: str):
    """(universe, (F, N, 3) float32 positions, (F, 6) float32 boxes) of every frame of the system's trajectory."""
    import MDAnalysis as mda

    u = mda.Universe(*system_files(system))
    x = np.stack([ts.positions.copy() for ts in u.trajectory]).astype(np.float32)
    return u, x, np.stack([ts.dimensions.copy() for ts in u.trajectory]).astype(np.float32)


def old_kernels(tree: Path):
    """``trajscale.kernels.pairs`` of the checkout ``tree``, built in place, imported beside this tree's (as
    the package ``old_tree_kernels``: its compiled extension keeps its own name only where this tree's was
    imported first)."""
    import trajscale.kernels.pairs  # noqa: F401  (first: see above)

    folder = tree / "src" / "trajscale" / "kernels"
    if not list(folder.glob("_pairs*.so")) + list(folder.glob("_pairs*.pyd")):
        raise SystemExit(f"{PROG}: {tree}: no compiled search in {folder} (build it in place: "
                         f"cd {tree} && python setup.py build_ext --inplace)")
    package = types.ModuleType("old_tree_kernels")
    package.__path__ = [str(folder)]
    sys.modules["old_tree_kernels"] = package
    return importlib.import_module("old_tree_kernels.pairs")


def tree_name(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() or tree.name


def search_counts(pairs, x, dims, i1, i2, edges) -> np.ndarray:
    """The counts of the search of a tree's ``kernels.pairs``, to the last of ``edges``."""
    return pairs.rdf_histogram(x, i1, i2, dims, float(edges[-1]), edges)[0]


def freud_rdf(x, dims, i1, i2, cutoff: float):
    """freud's RDF of atoms i1 against i2 over the frames (its neighbour structure on i2), one thread."""
    import freud
    from MDAnalysis.lib.mdamath import triclinic_vectors

    rdf = freud.density.RDF(bins=75, r_max=cutoff)
    for f in range(len(x)):
        box = freud.box.Box.from_matrix(triclinic_vectors(dims[f]).T.astype(np.float64))
        rdf.compute((box, box.wrap(x[f, i2])), query_points=box.wrap(x[f, i1]), reset=False)
    return rdf


def rdf_table(args) -> None:
    """The RDF's search against freud's and an older tree's, in memory (the second table)."""
    from trajscale.kernels import pairs

    old = old_kernels(Path(args.old_tree).resolve()) if args.old_tree else None
    try:
        import freud

        freud.parallel.set_num_threads(1)
    except ImportError:
        freud = None
        print("freud is not installed here (pip install freud-analysis): no freud columns")
    name = tree_name(Path(args.old_tree)) if old else ""
    head = f"{'shape':<18} {'atoms':>15} {'frames':>6} {'trajscale ms':>12}"
    if old:
        head += f" {name + ' ms':>12} {'/' + name:>9}"
    if freud:
        head += f" {'freud 1t ms':>11} {'freud/trajscale':>15}"
    print(f"RDF search, one thread, CPU ms per run, best of {args.repeat}; "
          f"load average before {os.getloadavg()[0]:.2f}")
    print(head)
    for shape, (system, s1, s2, cutoff, frames) in RDF_SHAPES.items():
        u, x0, d0 = system_frames(system)
        n = min(frames, args.frames)
        reps = -(-n // len(x0))
        x = np.ascontiguousarray(np.tile(x0, (reps, 1, 1))[:n])
        dims = np.tile(d0, (reps, 1))[:n]
        i1, i2 = u.select_atoms(s1).indices, u.select_atoms(s2).indices
        edges = np.histogram_bin_edges(np.empty(0), bins=75, range=(0.0, cutoff))
        sides = {"trajscale": functools.partial(search_counts, pairs, x, dims, i1, i2, edges)}
        if old:
            sides["old"] = functools.partial(search_counts, old, x, dims, i1, i2, edges)
        if freud:
            sides["freud"] = functools.partial(freud_rdf, x, dims, i1, i2, cutoff)
            sides["freud swapped"] = functools.partial(freud_rdf, x, dims, i2, i1, cutoff)
        best = {side: np.inf for side in sides}
        counts = {side: fn() for side, fn in sides.items()}   # warm: page faults, freud's first call
        for _ in range(args.repeat):   # the sides in turn, so that a busy spell slows each alike
            for side, fn in sides.items():
                t0 = time.process_time()
                fn()
                best[side] = min(best[side], time.process_time() - t0)
        if old and not np.array_equal(counts["old"], counts["trajscale"]):
            raise SystemExit(f"{PROG}: {shape}: the counts of {name}'s search differ from this tree's")
        ours = best["trajscale"] * 1e3
        row = f"{shape:<18} {f'{len(i1):,} x {len(i2):,}':>15} {n:>6} {ours:>12.2f}"
        if old:
            row += f" {best['old'] * 1e3:>12.2f} {ours / (best['old'] * 1e3):>8.2f}x"
        if freud:
            theirs = min(best["freud"], best["freud swapped"]) * 1e3
            row += f" {theirs:>11.2f} {theirs / ours:>14.1f}x"
        print(row, flush=True)


def make_stores(workdir: Path) -> dict[str, tuple[str, str]]:
    """system -> (topology, H5MD store of STORE_FRAMES frames), converted once into ``workdir``."""
    exe = Path(sys.executable).with_name("trajscale")
    cli = [str(exe)] if exe.exists() else [sys.executable, "-m", "trajscale.cli.main"]
    workdir.mkdir(parents=True, exist_ok=True)
    out = {}
    for system, frames in STORE_FRAMES.items():
        top, trj = system_files(system)
        store = workdir / f"{system}-{frames}.h5md"
        if not store.exists():
            import MDAnalysis as mda

            copies = -(-frames // mda.Universe(top, trj).trajectory.n_frames)
            cmd = [*cli, "-q", "convert", top, *[trj] * copies, "-o", str(store), "--stop", str(frames)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode:
                raise SystemExit(f"{PROG}: trajscale convert ... -o {store}: {done.stderr.strip()[-400:]}")
        out[system] = (top, str(store))
    return out


def time_runs(stores: dict[str, tuple[str, str]], max_frames: int, repeat: int) -> dict[str, float]:
    """shape -> wall seconds of trajscale.run of the RDF on its store, in this process, best of ``repeat``
    after one warm-up run."""
    import trajscale
    from trajscale.analysis import RDF

    best = {}
    for shape, (system, s1, s2, cutoff, frames) in RDF_SHAPES.items():
        top, store = stores[system]
        stop = min(frames, max_frames, STORE_FRAMES[system])
        for k in range(repeat + 1):
            t0 = time.perf_counter()
            trajscale.run(RDF(s1, s2, nbins=75, range=(0, cutoff)), top, store, executor="serial", stop=stop)
            if k:
                best[shape] = min(best.get(shape, np.inf), time.perf_counter() - t0)
    return best


def runs_table(args) -> None:
    """trajscale.run of the RDF on H5MD stores, in a running process, this tree and --old-tree (the third)."""
    stores = make_stores(Path(args.workdir))
    load = os.getloadavg()[0]
    if args.old_tree:   # each tree in its own processes, alternated
        trees = {"trajscale": Path(__file__).resolve().parents[1], "old": Path(args.old_tree).resolve()}
        best: dict[str, dict[str, float]] = {side: {} for side in trees}
        for _ in range(args.repeat):
            for side, tree in trees.items():
                env = dict(os.environ, PYTHONPATH=str(tree / "src"), OPENBLAS_NUM_THREADS="1")
                done = subprocess.run([sys.executable, __file__, "--run-child", json.dumps(stores),
                                       "--frames", str(args.frames)], env=env, capture_output=True, text=True,
                                      check=False)
                if done.returncode:
                    raise SystemExit(f"{PROG}: the runs of {tree}: {done.stderr.strip()[-400:]}")
                for shape, t in json.loads(done.stdout.splitlines()[-1]).items():
                    best[side][shape] = min(best[side].get(shape, np.inf), t)
    else:
        best = {"trajscale": time_runs(stores, args.frames, args.repeat)}
    name = tree_name(Path(args.old_tree)) if args.old_tree else ""
    print(f"trajscale.run(RDF(...), TOP, H5MD, executor='serial') in a running process, wall ms, best of "
          f"{args.repeat}; load average before {load:.2f}, after {os.getloadavg()[0]:.2f}")
    old_head = f" {name + ' ms':>12} {'/' + name:>9}" if name else ""
    print(f"{'shape':<18} {'frames':>6} {'trajscale ms':>12}{old_head}")
    for shape, (system, *_, frames) in RDF_SHAPES.items():
        ours = best["trajscale"][shape] * 1e3
        row = f"{shape:<18} {min(frames, args.frames, STORE_FRAMES[system]):>6} {ours:>12.1f}"
        if name:
            row += f" {best['old'][shape] * 1e3:>12.1f} {ours / (best['old'][shape] * 1e3):>8.2f}x"
        print(row, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="rmsd,rdf", help="tables: rmsd, rdf (comma-separated)")
    p.add_argument("--sizes", default="100,564,3341,10000,47681", help="RMSD selection sizes (atoms)")
    p.add_argument("--frames", type=int, default=1000, help="most frames of a table's row")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--max-mb", type=float, default=200, help="largest RMSD coordinate array per size")
    p.add_argument("--old-tree", metavar="DIR", help="a checkout built in place whose RDF search to time beside")
    p.add_argument("--runs", action="store_true", help="also time whole RDF runs on H5MD stores (--workdir)")
    p.add_argument("--workdir", default="bench-kernels", help="where --runs makes its stores (kept)")
    p.add_argument("--run-child", metavar="STORES", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    import warnings

    warnings.filterwarnings("ignore")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.run_child:   # one tree's runs, for runs_table: one line of JSON
        print(json.dumps(time_runs({k: tuple(v) for k, v in json.loads(args.run_child).items()}, args.frames, 1)))
        return 0
    only = set(args.only.split(","))
    if not only <= {"rmsd", "rdf"}:
        p.error(f"--only takes rmsd and rdf, got {args.only}")
    if args.old_tree and not (Path(args.old_tree) / "src" / "trajscale").is_dir():
        p.error(f"--old-tree {args.old_tree}: not a trajscale checkout (no src/trajscale)")
    if "rmsd" in only:
        rmsd_table(args)
    if "rdf" in only:
        rdf_table(args)
        if args.runs:
            runs_table(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
