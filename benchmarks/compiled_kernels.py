"""The RDF pair search, the delta codecs, the direct-read gather and the exact sums, kernel by kernel, one thread.

    python benchmarks/compiled_kernels.py [--frames 1000] [--repeat 5] [--only rdf,codecs,pread,sums]

Data: the AdK-in-water system of MDAnalysisTests (GRO + XTC, 47,681 atoms, a
rhombic dodecahedron box), its XTC frames repeated with 0.1 Å noise.

* ``rdf``: ``kernels.pairs.rdf_histogram`` of 276 water oxygens against 276 others
  (``--frames`` frames, r_max 15 Å, 75 bins), in the dodecahedron and in a cubic
  box of the same volume (the two code paths of the search);
* ``codecs``: ``Deltas.decode`` / ``Deltas.encode`` (``--encoding deltas``) and
  ``Deltas32.decode`` of 60 whole frames in memory, Mvalues/s (a value: one coordinate);
* ``pread``: ``ChunkReads.read`` (the compiled gather) of an uncompressed contiguous dataset of 200
  frames (page cache warm): whole frames, and 4,000 atoms spread over the system
  (runs read into the row buffer, then gathered), GB/s of the frames' bytes;
* ``sums``: ``kernels._sums.fixed_sums`` (the exact fixed-point sums of RMSF and the
  average structure) of ``--frames`` frames x 3,334 atoms x 3 values (10**7 at 1,000 frames;
  1.5 Å around each atom's shift), float64 and float32, with and without squares, at the baseline vector
  width and at AVX2's (where the CPU has it), ns per value.

Prints the best of ``--repeat`` per row, in CPU time of this process (user + system:
one thread, and the page-cache copies of ``pread`` count; other processes on a shared
machine disturb it less than wall time). The kernels were numba JIT functions until
issue 23 and are compiled Cython now; the same script measured both.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np


def best_of(fn, repeat: int) -> float:
    fn()   # warm: page faults, caches (and numba's compilation before issue 23)
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def water(frames: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(frames, 47681, 3) float32 positions, (frames, 6) box dims, oxygen indices."""
    import MDAnalysis as mda
    from MDAnalysisTests import datafiles as D

    u = mda.Universe(D.GRO, D.XTC)
    x = u.trajectory.timeseries(order="fac")
    dims = np.stack([ts.dimensions.copy() for ts in u.trajectory]).astype(np.float32)
    rng = np.random.default_rng(seed)
    pick = np.arange(frames) % len(x)
    out = x[pick] + rng.normal(0, 0.1, (frames,) + x.shape[1:]).astype(np.float32)
    return out, dims[pick], u.select_atoms("name OW").indices


def bench_rdf(args) -> None:
    from trajscale.kernels import pairs

    x, dims, ow = water(args.frames)
    rng = np.random.default_rng(1)
    pick = rng.choice(ow, 552, replace=False)
    sub = np.ascontiguousarray(x[:, pick])
    i1, i2 = np.arange(276), 276 + np.arange(276)
    edges = np.histogram_bin_edges(np.empty(0), bins=75, range=(0.0, 15.0))
    cube = dims.copy()
    cube[:, :3] = np.cbrt(np.abs(np.linalg.det(pairs.triclinic_vectors(dims))))[:, None]
    cube[:, 3:] = 90.0
    for name, d in (("dodecahedron", dims), ("cubic", cube)):
        t = best_of(lambda d=d: pairs.rdf_histogram(sub, i1, i2, d, 15.0, edges), args.repeat)
        print(f"rdf 276x276 {name:<14} {args.frames} frames  {t * 1e3:9.1f} ms  {t / args.frames * 1e6:8.1f} us/frame")


def bench_codecs(args) -> None:
    from trajscale.h5md.codecs import Deltas, Deltas32

    x, _, _ = water(60)
    x = (np.rint(x.astype(np.float64) / 0.01) * 0.01).astype(np.float32)
    n = x.size / 1e6
    d16 = Deltas.plan(x[0], 0.01)
    raw16 = d16.encode(x)
    d32 = Deltas32(0.01)
    raw32 = d32.encode(x)
    out = np.empty_like(x)
    rows = [("deltas decode (uint16 refs)", lambda: d16.decode(raw16, out=out)),
            ("deltas encode (uint16 refs)", lambda: d16.encode(x)),
            ("deltas32 decode", lambda: d32.decode(raw32, out=out))]
    for name, fn in rows:
        t = best_of(fn, args.repeat)
        print(f"{name:<30} 60 x 47681 atoms  {t * 1e3:8.2f} ms  {n / t:8.1f} Mvalues/s")


def bench_pread(args) -> None:
    import h5py

    from trajscale.hdf5.chunks import ChunkIndex, ChunkReads
    from trajscale.storage.bytestore import LocalFile

    x, _, _ = water(200)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "a.h5")
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=x)
        with h5py.File(path, "r") as f:
            reader = ChunkReads(LocalFile(path), ChunkIndex.of(f["x"]), dataset=f["x"])
            assert reader.ready() and reader.store.descriptor() >= 0, "not read at byte addresses"
            n_at = x.shape[1]
            whole = np.array([[0, n_at]])
            out = np.empty_like(x)
            picks = np.sort(np.random.default_rng(2).choice(n_at, 4000, replace=False))
            runs = np.array([[picks[0], picks[-1] + 1]])
            index = picks - picks[0]
            sel = np.empty((len(x), len(picks), 3), np.float32)
            for name, fn, nbytes in (
                    ("pread whole frames", lambda: reader.read(0, len(x), 1, whole, None, out), x.nbytes),
                    ("pread 4000-atom gather", lambda: reader.read(0, len(x), 1, runs, index, sel),
                     len(x) * len(index) * 12)):
                assert fn()
                t = best_of(fn, args.repeat)
                print(f"{name:<30} 200 frames  {t * 1e3:8.2f} ms  {x.nbytes / t / 1e9:6.2f} GB/s of frames "
                      f"({nbytes / 1e6:.0f} MB out)")
            np.testing.assert_array_equal(sel, x[:, picks])
            reader.store.close()


def bench_sums(args) -> None:
    from trajscale.kernels import _sums

    rng = np.random.default_rng(0)
    shift = rng.uniform(0, 80, (3334, 3))
    x64 = shift + rng.normal(0, 1.5, (args.frames, 3334, 3))
    out = np.zeros((4, 3334, 3), np.int64)
    for x in (x64, x64.astype(np.float32)):
        for squares in (True, False):
            for simd in sorted({0, min(2, _sums.SIMD_LEVEL), _sums.SIMD_LEVEL}):   # each width this CPU has
                t = best_of(lambda x=x, sq=squares, lv=simd: _sums.fixed_sums(x, shift, out, sq, lv), args.repeat)
                print(f"fixed_sums {x.dtype} squares={squares!s:<5} {('baseline', '', 'avx2', 'avx512')[simd]:<8} "
                      f"{x.size:.1e} values "
                      f"{t * 1e3:8.2f} ms  {t / x.size * 1e9:6.2f} ns/value")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--frames", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--only", default="rdf,codecs,pread,sums")
    args = p.parse_args()
    for name in args.only.split(","):
        {"rdf": bench_rdf, "codecs": bench_codecs, "pread": bench_pread, "sums": bench_sums}[name](args)


if __name__ == "__main__":
    main()
