"""Parallel convert and rechunk against their floors: MDAnalysis decoding the XTC, and ``cp``.

    python benchmarks/convert.py [--frames 300] [-n 2] [--workdir /tmp/trajscale-bench-convert]

Input: AdK in water (47,681 atoms) from MDAnalysisTests, its 10-frame XTC
concatenated into one XTC of ``--frames`` frames (written once with
MDAnalysis).  Every figure is a whole run measured in one Python process with its
imports done (pool start, topology parse and the final join included), page
cache warm.

* MDAnalysis on n workers: n processes, each opens the XTC and decodes its
  contiguous share of the frames (positions touched) - the issue's floor.
* ``trajscale convert --executor processes -n n``: uncompressed, the workers
  write their frames in place (``convert.direct``, the default since issue 14's
  direct writes); the segments joined by copying (forced, for comparison), with
  ``--virtual`` (no join), and serial.
* ``cp`` of the converted H5MD (from page cache; and with the fsync rechunk does
  before its rename) against ``trajscale rechunk`` of it (frame chunks -> planned
  chunks; uncompressed in place, serial and on n workers; uncompressed through
  HDF5, forced, for comparison; gzip-1), serial and on n workers.

Prints the ratios against the issue's targets (convert >= 0.8x MDAnalysis on n
workers; rechunk >= 0.5x cp) and the load average, since the machine is shared.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import shutil
import subprocess
import time
from pathlib import Path


def make_xtc(workdir: Path, n_frames: int) -> tuple[str, str]:
    import MDAnalysis as mda
    from MDAnalysisTests import datafiles as D

    out = workdir / f"adk_water_{n_frames}.xtc"
    if not out.exists():
        u = mda.Universe(D.GRO, D.XTC)
        tmp = out.with_suffix(".tmp.xtc")
        with mda.Writer(str(tmp), u.atoms.n_atoms) as w:
            for k in range(n_frames):
                ts = u.trajectory[k % u.trajectory.n_frames]
                ts.time = float(k)   # increasing, as one long run would have
                ts.data["step"] = k
                w.write(u.atoms)
        tmp.rename(out)
    return D.GRO, str(out)


def _mda_share(args) -> int:
    import MDAnalysis as mda

    top, xtc, a, b = args
    u = mda.Universe(top, xtc)
    s = 0.0
    for ts in u.trajectory[a:b]:
        s += float(ts.positions[0, 0])   # touch the decoded frame
    return b - a


def mda_rate(top: str, xtc: str, n_frames: int, n: int) -> float:
    """Frames per second of MDAnalysis alone decoding the XTC on n processes (whole run)."""
    cuts = [k * n_frames // n for k in range(n + 1)]
    t0 = time.perf_counter()
    if n == 1:
        _mda_share((top, xtc, 0, n_frames))
    else:
        with mp.get_context("fork").Pool(n) as pool:
            pool.map(_mda_share, [(top, xtc, cuts[k], cuts[k + 1]) for k in range(n)])
    return n_frames / (time.perf_counter() - t0)


def timed(fn, *args, **kw) -> float:
    """Seconds of one call (in this process: imports done, as for the MDAnalysis rows)."""
    t0 = time.perf_counter()
    fn(*args, **kw)
    return time.perf_counter() - t0


def clean(*paths: Path) -> None:
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


@contextlib.contextmanager
def forced_segments():
    """The HDF5 paths (segments joined, or the serial HDF5 copy) that uncompressed outputs took before
    direct writes: in-place writing is declared unavailable for the duration."""
    from trajscale.convert import direct

    real = direct.eligible
    direct.eligible = lambda *a, **k: False
    try:
        yield
    finally:
        direct.eligible = real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=400)
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--workdir", default="/tmp/trajscale-bench-convert")
    ap.add_argument("--repeat", type=int, default=2, help="best of this many runs per row")
    a = ap.parse_args()
    load0 = os.getloadavg()
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    top, xtc = make_xtc(work, a.frames)
    n = a.n
    mda_rate(top, xtc, a.frames, 1)   # warm the page cache and MDAnalysis's offsets
    rows = {}
    rows[f"MDAnalysis reads the XTC, {n} processes"] = max(mda_rate(top, xtc, a.frames, n) for _ in range(a.repeat))
    rows["MDAnalysis reads the XTC, serial"] = max(mda_rate(top, xtc, a.frames, 1) for _ in range(a.repeat))
    out, parts = work / "conv.h5md", work / "conv.parts"

    from trajscale.convert.convert import convert
    from trajscale.convert.rechunk import rechunk
    from trajscale.h5md.layout import Layout

    def convert_rate(**kw) -> float:
        best = 0.0
        for _ in range(a.repeat):
            clean(out, parts)
            best = max(best, a.frames / timed(convert, top, [xtc], str(out), **kw))
        return best

    rows[f"trajscale convert, processes({n}), in place (pwrite)"] = convert_rate(executor="processes", n_workers=n)
    with forced_segments():
        rows[f"trajscale convert, processes({n}), joined"] = convert_rate(executor="processes", n_workers=n)
    rows[f"trajscale convert, processes({n}), --virtual"] = convert_rate(executor="processes", n_workers=n,
                                                                        virtual=True)
    rows["trajscale convert, serial"] = convert_rate()
    # rechunk: frame chunks -> planned chunks, against cp of the same file from page cache
    src = work / f"frames_{a.frames}.h5md"
    if not src.exists():
        convert(top, [xtc], str(src), layout=Layout.parse("frame"))
    size = src.stat().st_size
    src.read_bytes()   # page cache warm
    dst, dparts = work / "re.h5md", work / "re.parts"
    cp = cp_sync = 0.0
    for _ in range(a.repeat):
        clean(dst)
        t0 = time.perf_counter()
        subprocess.run(["cp", str(src), str(dst)], check=True)
        t1 = time.perf_counter()
        fd = os.open(dst, os.O_RDONLY)
        os.fsync(fd)   # what rechunk's rename waits for: the file on disk
        os.close(fd)
        cp, cp_sync = max(cp, size / (t1 - t0)), max(cp_sync, size / (time.perf_counter() - t0))
    rech = {}
    par = {"executor": "processes", "n_workers": n}
    for name, comp, kw, forced in (("uncompressed, serial, in place", "none", {}, False),
                                   (f"uncompressed, processes({n}), in place", "none", par, False),
                                   ("uncompressed, serial, through HDF5", "none", {}, True),
                                   (f"uncompressed, processes({n}), joined", "none", par, True),
                                   (f"uncompressed, processes({n}), --virtual", "none", {**par, "virtual": True},
                                    False),
                                   ("gzip-1, serial", "gzip:1", {}, False),
                                   (f"gzip-1, processes({n}), joined", "gzip:1", par, False)):
        best = 0.0
        with forced_segments() if forced else contextlib.nullcontext():
            for _ in range(a.repeat):
                clean(dst, dparts)
                best = max(best, size / timed(rechunk, str(src), dst, Layout.parse("auto", comp), **kw))
        rech[name] = best
    clean(dst, dparts, out, parts)
    load = os.getloadavg()
    print(f"load average before the run {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f}")
    print(f"\n{a.frames} frames x 47,681 atoms; XTC {os.path.getsize(xtc) / 1e6:.0f} MB, H5MD {size / 1e6:.0f} MB; "
          f"{os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    base = rows[f"MDAnalysis reads the XTC, {n} processes"]
    print("| convert XTC -> H5MD (whole run) | frames/s | / MDAnalysis on the same workers |")
    print("|---|---|---|")
    for name, rate in rows.items():
        ref = base if f"({n})" in name or f"{n} processes" in name else rows["MDAnalysis reads the XTC, serial"]
        print(f"| {name} | {rate:.1f} | {rate / ref:.2f}x |")
    print("\n| rechunk frame -> auto chunks (whole run) | MB/s | / cp from page cache | / cp + fsync |")
    print("|---|---|---|---|")
    print(f"| cp | {cp / 1e6:.0f} | 1.00x | |")
    print(f"| cp + fsync | {cp_sync / 1e6:.0f} | {cp_sync / cp:.2f}x | 1.00x |")
    for name, rate in rech.items():
        print(f"| trajscale rechunk, {name} | {rate / 1e6:.0f} | {rate / cp:.2f}x | {rate / cp_sync:.2f}x |")
    print(f"\ntargets: convert >= 0.8x MDAnalysis on {n} workers "
          f"(in place {rows[f'trajscale convert, processes({n}), in place (pwrite)'] / base:.2f}x, "
          f"joined {rows[f'trajscale convert, processes({n}), joined'] / base:.2f}x); "
          f"rechunk >= 0.5x cp (best {max(rech.values()) / cp:.2f}x)")


if __name__ == "__main__":
    main()
