"""The codec study (issue 14): how small, and how fast to read, can coordinates be stored?

    python benchmarks/codecs.py [--repeat 3]

On two real trajectories from MDAnalysisTests - the AdK-in-water XTC (10 frames
x 47,681 atoms, 100 ps apart, written at 0.001 nm) and the AdK-in-vacuum DCD
(98 frames x 3,341 atoms) - each storage option is written as one HDF5 dataset
(chunks of 3 frames: the planned ~2 MiB for the XTC's system) and measured:
size of the dataset's chunks relative to the XTC file (the DCD's frames are
written as an XTC at 0.001 nm for the comparison), read rate of the whole
dataset decoded to float32 (page cache warm, best of ``--repeat``), and the
largest error.  Lossy options keep 0.01 Å (XTC's 0.001 nm).
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
import warnings

import h5py
import numpy as np


def trajectories(tmp: str) -> dict[str, tuple[np.ndarray, int]]:
    """name -> (positions (F, N, 3) float32 in Å, size of the same frames as an XTC in bytes)."""
    import MDAnalysis as mda
    from MDAnalysisTests import datafiles as D

    out = {}
    u = mda.Universe(D.TPR, D.XTC)
    out["AdK water XTC"] = (u.trajectory.timeseries(order="fac"), os.path.getsize(D.XTC))
    v = mda.Universe(D.PSF, D.DCD)
    xtc = os.path.join(tmp, "dcd.xtc")
    with mda.Writer(xtc, v.atoms.n_atoms) as w:
        for _ in v.trajectory:
            w.write(v.atoms)
    out["AdK vacuum DCD"] = (v.trajectory.timeseries(order="fac"), os.path.getsize(xtc))
    return out


def options():
    """name -> (encode(x) -> array stored, h5py filter kwargs, decode(array) -> float32)."""
    import hdf5plugin

    from trajscale.store.codecs import decode_deltas, encode_deltas, quantize, quantum

    q = quantum(0.01)
    blosc = hdf5plugin.Blosc
    same = (lambda x: x, lambda a: a)
    pow2 = (lambda x: quantize(x, q), lambda a: a)
    ints = (lambda x: np.rint(x.astype(np.float64) * 100).astype(np.int32), lambda a: (a * 0.01).astype(np.float32))
    deltas = (lambda x: encode_deltas(x, 0.01), lambda a: decode_deltas(a, 0.01))
    zstd = dict(hdf5plugin.Zstd(clevel=3), shuffle=True)
    return {
        "lossless none": (*same, {}),
        "lossless gzip-1 (+shuffle)": (*same, dict(compression="gzip", compression_opts=1, shuffle=True)),
        "lossless zstd (+shuffle)": (*same, zstd),
        "lossless lz4 (+shuffle)": (*same, dict(hdf5plugin.LZ4(), shuffle=True)),
        "lossless blosc-zstd byte-shuffle": (*same, dict(blosc(cname="zstd", clevel=5, shuffle=blosc.SHUFFLE))),
        "lossless blosc-zstd bit-shuffle": (*same, dict(blosc(cname="zstd", clevel=5, shuffle=blosc.BITSHUFFLE))),
        "lossless blosc-lz4 byte-shuffle": (*same, dict(blosc(cname="lz4", clevel=5, shuffle=blosc.SHUFFLE))),
        "lossless blosc-lz4 bit-shuffle": (*same, dict(blosc(cname="lz4", clevel=5, shuffle=blosc.BITSHUFFLE))),
        "floats 2^-7 A + zstd": (*pow2, zstd),
        "floats 2^-7 A + blosc-zstd byte": (*pow2, dict(blosc(cname="zstd", clevel=5, shuffle=blosc.SHUFFLE))),
        "floats 2^-7 A + blosc-zstd bit": (*pow2, dict(blosc(cname="zstd", clevel=5, shuffle=blosc.BITSHUFFLE))),
        "HDF5 scale-offset D=2": (*same, dict(scaleoffset=2)),
        "HDF5 scale-offset D=2 + zstd": (*same, dict(scaleoffset=2, **hdf5plugin.Zstd(clevel=3))),
        "int32 x100 + blosc-zstd bit": (*ints, dict(blosc(cname="zstd", clevel=5, shuffle=blosc.BITSHUFFLE))),
        "SZ3 abs 0.005 A": (*same, dict(hdf5plugin.SZ3(absolute=0.005))),
        "deltas 0.01 A + zstd (+shuffle)": (*deltas, zstd),
        "deltas 0.01 A + blosc-zstd byte": (*deltas, dict(blosc(cname="zstd", clevel=5, shuffle=blosc.SHUFFLE))),
        "deltas 0.01 A + blosc-zstd:9 byte": (*deltas, dict(blosc(cname="zstd", clevel=9, shuffle=blosc.SHUFFLE))),
        "deltas 0.01 A + blosc-lz4 byte": (*deltas, dict(blosc(cname="lz4", clevel=5, shuffle=blosc.SHUFFLE))),
    }


def measure(x: np.ndarray, encode, decode, kw: dict, path: str, repeat: int) -> tuple[int, float, float]:
    data = encode(x)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(min(3, len(x)), x.shape[1], 3), **kw)
    with h5py.File(path, "r") as f:
        ds = f["x"]
        size = ds.id.get_storage_size()
        best = math.inf
        for _ in range(repeat):
            t0 = time.perf_counter()
            got = decode(ds[()])
            best = min(best, time.perf_counter() - t0)
    return size, x.nbytes / 1e9 / best, float(np.abs(got.astype(np.float64) - x).max())


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        trajs = trajectories(tmp)
        print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; size = the dataset's chunks / the XTC "
              f"file; read = decoded float32 GB/s, one process")
        print(f"{'option':<36}" + "".join(f"{n + ': size':>24}{'read':>7}{'max err':>9}" for n in trajs))
        for name, (enc, dec, kw) in options().items():
            cells = []
            for x, xtc in trajs.values():
                size, rate, err = measure(x, enc, dec, kw, os.path.join(tmp, "t.h5"), args.repeat)
                cells.append(f"{size / xtc:>24.2f}{rate:>7.2f}{err:>9.4f}")
            print(f"{name:<36}" + "".join(cells), flush=True)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
