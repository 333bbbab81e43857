"""The codec study (issue 14): how small, and how fast to read, can coordinates be stored?

    python benchmarks/codecs.py [--repeat 7] [--copies 6] [--only SUBSTR,...]

On two real trajectories from MDAnalysisTests - the AdK-in-water XTC (10 frames
x 47,681 atoms, 100 ps apart, written at 0.001 nm; its frames repeated
``--copies`` times) and the AdK-in-vacuum DCD (98 frames x 3,341 atoms) - each
storage option is written as one HDF5 dataset (chunks of 3 frames: the planned
~2 MiB for the XTC's system) and measured against the XTC of the same frames
(the DCD's frames are written as an XTC at 0.001 nm), read by MDAnalysis in the
same run:

* size: the dataset's chunks / the XTC file(s);
* write: float32 MB/s encoded and compressed (CPU time, one process);
* read: the whole dataset decoded to float32 in slabs of two chunks (as
  trajscale's H5MD source reads), page cache warm, best of ``--repeat``
  passes; the passes of all options and of the XTC are interleaved, so a
  burst of load on the shared machine hits all of them.  ``/XTC`` is the
  ratio of wall times, ``cpu/XTC`` the ratio of CPU times (less sensitive to
  other processes);
* the largest error.

Lossy options keep 0.01 Å (XTC's 0.001 nm).  Besides zigzag uint32 differences
along atoms ("u32 deltas": ``--encoding deltas32``), the study
measures zigzag *uint16* differences (exact while every coordinate is within
+-32767 steps of the precision, +-327 Å at 0.01 Å: the running sum is taken
modulo 2^16) and the same with the atoms of large differences stored first
(a permutation per dataset, from frame 0), so that LZ4 meets long runs of zero
high bytes.  ``deltas (u16 refs, today)`` is what ``--encoding deltas``
now writes (``h5md.codecs.Deltas``: the order, plus a reference per atom, both
planned from frame 0), decoded by trajscale's own kernel.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Callable

import h5py
import numpy as np

#: frames per chunk (the planned layout of the water system) and per read slab (two chunks)
CHUNK_FRAMES, SLAB_FRAMES = 3, int(os.environ.get("SLAB_FRAMES", 6))
PRECISION = 0.01


@dataclass
class Traj:
    x: np.ndarray              # (F, N, 3) float32 positions in Å
    xtc_size: int              # bytes of the same frames as XTC
    read_xtc: Callable[[], None]


@dataclass
class Option:
    encode: Callable[[np.ndarray], np.ndarray]
    decode: Callable[[np.ndarray, np.ndarray], None] | None   # (raw slab, float32 out slab); None: floats
    kw: dict                   # h5py create_dataset filter arguments


def trajectories(tmp: str, copies: int) -> dict[str, Traj]:
    """name -> the positions, the size of the same frames as XTC, and a pass of MDAnalysis over that XTC."""
    import MDAnalysis as mda
    from MDAnalysisTests import datafiles as D

    def reader(u, times: int):
        def read() -> None:
            for _ in range(times):
                for _ in u.trajectory:
                    pass
        return read

    out = {}
    u = mda.Universe(D.TPR, D.XTC)   # (outside the clock: only decoding is compared)
    x = u.trajectory.timeseries(order="fac")
    out["AdK water XTC"] = Traj(np.concatenate([x] * copies), os.path.getsize(D.XTC) * copies, reader(u, copies))
    v = mda.Universe(D.PSF, D.DCD)
    xtc = os.path.join(tmp, "dcd.xtc")
    with mda.Writer(xtc, v.atoms.n_atoms) as w:
        for _ in v.trajectory:
            w.write(v.atoms)
    out["AdK vacuum DCD"] = Traj(v.trajectory.timeseries(order="fac"), os.path.getsize(xtc),
                                 reader(mda.Universe(D.PSF, xtc), 1))
    return out


def decode16(raw: np.ndarray, pos: np.ndarray, q: float, out: np.ndarray) -> None:
    """uint16 zigzag differences along atoms (atom ``a`` stored at row ``pos[a]``) -> float32 in ``out``.

    The running sum is taken in int16, so modulo 2^16 as the encoder wraps. (Issue 14 measured this study
    with a numba kernel; numba left the project with issue 23, and this NumPy decoder gives the same
    values: its read rates are NumPy's, not those of the study's table in docs/benchmarks.md.)
    """
    z = raw[:, pos].astype(np.int32)
    d = ((z >> 1) ^ -(z & 1)).astype(np.int16)
    np.multiply(np.cumsum(d, axis=1, dtype=np.int16), q, out=out, dtype=np.float64, casting="unsafe")


def encode_deltas16(x: np.ndarray, q: float) -> np.ndarray:
    """Zigzag uint16 differences along atoms of ``round(x / q)`` (every step count must fit int16)."""
    steps = np.rint(np.asarray(x, np.float64) / q)
    if not np.abs(steps).max() <= 2**15 - 1:
        raise ValueError("coordinates beyond +-32767 steps do not fit uint16 deltas")
    ints = steps.astype(np.int32)
    d = np.empty_like(ints)
    d[:, :1] = ints[:, :1]
    np.subtract(ints[:, 1:], ints[:, :-1], out=d[:, 1:])
    d16 = d.astype(np.int16)   # wraps: the decoder's sum is modulo 2^16 too
    return ((d16 << 1) ^ (d16 >> 15)).view(np.uint16)


def deltas16(permuted: bool) -> tuple[Callable, Callable]:
    """(encode, decode) of uint16 deltas, the atoms optionally stored large differences first."""
    state = {}

    def encode(x: np.ndarray) -> np.ndarray:
        z = encode_deltas16(x, PRECISION)
        n = z.shape[1]
        if permuted:   # atoms whose frame-0 difference needs the high byte, then the others
            big = (z[0] >= 256).any(axis=1)
            order = np.r_[np.flatnonzero(big), np.flatnonzero(~big)]
            pos = np.empty(n, np.intp)
            pos[order] = np.arange(n)
            z = np.ascontiguousarray(z[:, order])
        else:
            pos = np.arange(n)
        state["pos"] = pos
        return z

    def decode(raw: np.ndarray, out: np.ndarray) -> None:
        if len(state["pos"]) != raw.shape[1]:   # (the kernel does not check bounds)
            raise ValueError("decoding with another trajectory's permutation")
        decode16(raw, state["pos"], np.float64(PRECISION), out)

    return encode, decode


def deltas_refs() -> tuple[Callable, Callable]:
    """(encode, decode) of trajscale's ``--encoding deltas`` (h5md.codecs.Deltas), planned from frame 0."""
    from trajscale.h5md.codecs import Deltas

    state = {}

    def encode(x: np.ndarray) -> np.ndarray:
        state["codec"] = Deltas.plan(x[0], PRECISION)
        return state["codec"].encode(x)

    def decode(raw: np.ndarray, out: np.ndarray) -> None:
        state["codec"].decode(raw, out=out)

    return encode, decode


def options() -> dict[str, Option | Callable[[], Option]]:
    """name -> an option, or a function making one per trajectory (an encoding that keeps state)."""
    import hdf5plugin

    from trajscale.h5md.codecs import decode_deltas, encode_deltas, quantize, quantum

    q = quantum(PRECISION)
    B, B2 = hdf5plugin.Blosc, hdf5plugin.Blosc2

    def blosc(cname: str, level: int = 5, shuffle: int = B.SHUFFLE) -> dict:
        return dict(B(cname=cname, clevel=level, shuffle=shuffle))

    def same(x):
        return x

    def pow2(x):
        return quantize(x, q)

    def ints(x):
        return np.rint(x.astype(np.float64) * 100).astype(np.int32)

    def from_ints(a, out):
        np.multiply(a, 0.01, out=out, casting="unsafe")

    def d32(x):
        return encode_deltas(x, PRECISION)

    def from_d32(a, out):
        decode_deltas(a, PRECISION, out=out)

    zstd = dict(hdf5plugin.Zstd(clevel=3), shuffle=True)
    opts = {
        "lossless none": Option(same, None, {}),
        "lossless gzip-1 (+shuffle)": Option(same, None, dict(compression="gzip", compression_opts=1, shuffle=True)),
        "lossless zstd (+shuffle)": Option(same, None, zstd),
        "lossless lz4 (+shuffle)": Option(same, None, dict(hdf5plugin.LZ4(), shuffle=True)),
        "lossless blosc-zstd byte": Option(same, None, blosc("zstd")),
        "lossless blosc-zstd bit": Option(same, None, blosc("zstd", shuffle=B.BITSHUFFLE)),
        "lossless blosc-lz4 byte": Option(same, None, blosc("lz4")),
        "lossless blosc-lz4 bit": Option(same, None, blosc("lz4", shuffle=B.BITSHUFFLE)),
        "floats 2^-7 A + zstd": Option(pow2, None, zstd),
        "floats 2^-7 A + blosc-zstd byte": Option(pow2, None, blosc("zstd")),
        "floats 2^-7 A + blosc-zstd bit": Option(pow2, None, blosc("zstd", shuffle=B.BITSHUFFLE)),
        "HDF5 scale-offset D=2": Option(same, None, dict(scaleoffset=2)),
        "int32 x100 + blosc-zstd bit": Option(ints, from_ints, blosc("zstd", shuffle=B.BITSHUFFLE)),
        "SZ3 abs 0.005 A": Option(same, None, dict(hdf5plugin.SZ3(absolute=0.005))),
        "u32 deltas + zstd (+shuffle)": Option(d32, from_d32, zstd),
        "u32 deltas + blosc-zstd byte": Option(d32, from_d32, blosc("zstd")),
        "u32 deltas + blosc-zstd:9 byte": Option(d32, from_d32, blosc("zstd", 9)),
        "u32 deltas + blosc-lz4 byte": Option(d32, from_d32, blosc("lz4")),
        "u32 deltas + blosc-lz4hc:9 byte": Option(d32, from_d32, blosc("lz4hc", 9)),
    }
    for name, kw in {"zstd:3 (+shuffle)": zstd, "blosc-zstd:1 byte": blosc("zstd", 1),
                     "blosc-zstd:3 byte": blosc("zstd", 3), "blosc-zstd byte": blosc("zstd"),
                     "blosc-zstd:9 byte": blosc("zstd", 9), "blosc-zstd bit": blosc("zstd", shuffle=B.BITSHUFFLE),
                     "blosc2-zstd byte": dict(B2(cname="zstd", clevel=5, filters=B2.SHUFFLE)),
                     "bitshuffle-zstd": dict(hdf5plugin.Bitshuffle(cname="zstd")),
                     "blosc-lz4 byte": blosc("lz4"), "blosc-lz4 bit": blosc("lz4", shuffle=B.BITSHUFFLE),
                     "blosc-lz4hc byte": blosc("lz4hc"), "blosc-lz4hc:9 byte": blosc("lz4hc", 9),
                     "blosc-lz4hc:9 bit": blosc("lz4hc", 9, B.BITSHUFFLE),
                     "blosc2-lz4hc:9 byte": dict(B2(cname="lz4hc", clevel=9, filters=B2.SHUFFLE))}.items():
        opts[f"u16 deltas + {name}"] = lambda kw=kw: Option(*deltas16(False), kw)
    for name, kw in {"blosc-zstd byte": blosc("zstd"), "blosc-lz4 byte": blosc("lz4"),
                     "blosc-lz4hc byte": blosc("lz4hc"), "blosc-lz4hc:9 byte": blosc("lz4hc", 9)}.items():
        opts[f"u16 deltas permuted + {name}"] = lambda kw=kw: Option(*deltas16(True), kw)
    for name, kw in {"blosc-lz4 byte": blosc("lz4"), "blosc-lz4:9 byte": blosc("lz4", 9),
                     "blosc-lz4:1 byte": blosc("lz4", 1), "blosc-zstd byte": blosc("zstd"),
                     "blosc-lz4hc byte": blosc("lz4hc")}.items():
        opts[f"deltas (u16 refs, today) + {name}"] = lambda kw=kw: Option(*deltas_refs(), kw)
    return opts


class Stored:
    """One option written for one trajectory, open for reading."""

    def __init__(self, x: np.ndarray, opt: Option | Callable[[], Option], path: str) -> None:
        opt = opt if isinstance(opt, Option) else opt()
        t0 = time.process_time()
        data = opt.encode(x)
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=data, chunks=(min(CHUNK_FRAMES, len(x)), x.shape[1], 3), **opt.kw)
        self.write_mb_s = x.nbytes / 1e6 / (time.process_time() - t0)
        self.file = h5py.File(path, "r")
        self.ds = self.file["x"]
        self.size = self.ds.id.get_storage_size()
        self.decode = opt.decode
        self.out = np.empty(x.shape, np.float32)
        self.raw = np.empty((SLAB_FRAMES, *x.shape[1:]), self.ds.dtype) if opt.decode else None
        self.best = [math.inf, math.inf]   # wall, CPU seconds of one read of the whole dataset

    def read(self) -> np.ndarray:
        n = len(self.out)
        for a in range(0, n, SLAB_FRAMES):
            b = min(n, a + SLAB_FRAMES)
            if self.decode is None:
                self.ds.read_direct(self.out, np.s_[a:b], np.s_[a:b])
            else:
                self.ds.read_direct(self.raw, np.s_[a:b], np.s_[:b - a])
                self.decode(self.raw[:b - a], self.out[a:b])
        return self.out


def timed(fn, best: list[float]) -> None:
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    best[0] = min(best[0], time.perf_counter() - t0)
    best[1] = min(best[1], time.process_time() - c0)


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=7, help="read passes; the best is kept")
    p.add_argument("--copies", type=int, default=6, help="copies of the water XTC's 10 frames")
    p.add_argument("--only", default=None, help="comma-separated substrings of the options to run")
    args = p.parse_args(argv)
    opts = options()
    if args.only:
        opts = {k: v for k, v in opts.items() if any(s in k for s in args.only.split(","))}
    with tempfile.TemporaryDirectory() as tmp:
        trajs = trajectories(tmp, args.copies)
        load0 = os.getloadavg()[0]
        stored = {(o, t): Stored(tr.x, opt, os.path.join(tmp, f"{i}_{j}.h5"))
                  for i, (o, opt) in enumerate(opts.items()) for j, (t, tr) in enumerate(trajs.items())}
        xtc_best = {t: [math.inf, math.inf] for t in trajs}
        for s in stored.values():   # warm: page cache
            s.read()
        for _ in range(args.repeat):   # interleaved: each pass times every option and the XTC once
            for t, tr in trajs.items():
                timed(tr.read_xtc, xtc_best[t])
            for s in stored.values():
                timed(s.read, s.best)
        print(f"{os.cpu_count()} CPUs, load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after; "
              f"best of {args.repeat} interleaved passes")
        for t, tr in trajs.items():
            w, c = xtc_best[t]
            print(f"{t}: {tr.x.shape[0]} frames x {tr.x.shape[1]} atoms; MDAnalysis reads the XTC at "
                  f"{tr.x.nbytes / 1e9 / w:.2f} GB/s of float32 (CPU {c * 1e3:.1f} ms)")
        print(f"{'option':<40}" + "".join(f"{'| ' + t[:13] + ' size':>22}{'write':>7}{'read':>6}{'/XTC':>6}"
                                          f"{'cpu/XTC':>8}{'err':>8}" for t in trajs))
        for o in opts:
            cells = []
            for t, tr in trajs.items():
                s = stored[o, t]
                err = float(np.abs(s.read().astype(np.float64) - tr.x).max())
                (xw, xc), (w, c) = xtc_best[t], s.best
                cells.append(f"{s.size / tr.xtc_size:>22.3f}{s.write_mb_s:>7.0f}{tr.x.nbytes / 1e9 / w:>6.2f}"
                             f"{xw / w:>6.2f}{xc / c:>8.2f}{err:>8.4f}")
            print(f"{o:<40}" + "".join(cells), flush=True)
        for s in stored.values():
            s.file.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
