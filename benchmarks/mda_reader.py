"""MDAnalysis loops through trajscale's reader against MDAnalysis's own H5MDReader, on the same file.

    python benchmarks/mda_reader.py [--frames 1000] [--workdir demo-output] [--repeat 3] [--smoke]

The file is the demo's AdK in water (47,681 atoms) over ``--frames`` frames, frame-chunked plain
H5MD (``short_runs.frame_chunked_file``).  Both sides run in one process, interleaved, page cache
warm (an in-process, warm figure: what an MDAnalysis script's loop costs once it runs):

* iterate: ``for ts in u.trajectory: ts.positions`` (the Universe is built before the clock)
  (format ``TRAJSCALE`` vs MDAnalysis's ``H5MD``);
* raw: h5py ``read_direct`` of 100-frame slabs (the ceiling);
* rmsd: ``rms.RMSD(u, select="protein and name CA").run()``.

Prints ms per frame, the speed-ups over H5MDReader, and checks that both sides give the same RMSDs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=1000)
    p.add_argument("--workdir", default="demo-output")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="20 frames, one repeat (the test suite's size)")
    a = p.parse_args(argv)
    if a.smoke:
        a.frames, a.repeat = 20, 1
    warnings.filterwarnings("ignore")
    import h5py
    import MDAnalysis as mda
    import numpy as np
    from MDAnalysis.analysis import rms
    from short_runs import frame_chunked_file

    import trajscale.mda  # noqa: F401 - registers TRAJSCALE

    Path(a.workdir).mkdir(parents=True, exist_ok=True)
    gro, h5 = frame_chunked_file(a.workdir, a.frames)

    universes = {fmt: mda.Universe(gro, h5, format=fmt) for fmt in ("H5MD", "TRAJSCALE")}   # parsed once

    def iterate(fmt):
        u = universes[fmt]
        for ts in u.trajectory:
            ts.positions  # noqa: B018 - the loop's work
        return u.trajectory.n_frames

    def raw(_):
        with h5py.File(h5, "r") as f:
            ds = f["particles/all/position/value"]
            buf = np.empty((100, *ds.shape[1:]), np.float32)
            for s in range(0, ds.shape[0], 100):
                n = min(100, ds.shape[0] - s)
                ds.read_direct(buf[:n], np.s_[s:s + n])
            return ds.shape[0]

    rmsds = {}

    def rmsd(fmt):
        r = rms.RMSD(universes[fmt], select="protein and name CA").run()
        rmsds[fmt] = r.results.rmsd[:, 2]
        return len(r.results.rmsd)

    rows = {(k, fmt): [] for k in ("iterate", "rmsd") for fmt in ("H5MD", "TRAJSCALE")}
    rows[("raw", "h5py")] = []
    for _ in range(a.repeat):
        for (k, fmt), times in rows.items():
            fn = {"iterate": iterate, "rmsd": rmsd, "raw": raw}[k]
            t0 = time.perf_counter()
            n = fn(fmt)
            times.append((time.perf_counter() - t0) / n * 1e3)
    med = {key: statistics.median(v) for key, v in rows.items()}
    print(f"MDAnalysis loops, {a.frames} frames x 47,681 atoms, frame-chunked H5MD; in-process, warm, "
          f"median of {a.repeat} (ms per frame)")
    print(f"{'loop':<10} {'H5MDReader':>11} {'TRAJSCALE':>10} {'h5py slabs':>11} {'speed-up':>9}")
    for k in ("iterate", "rmsd"):
        print(f"{k:<10} {med[(k, 'H5MD')]:>11.3f} {med[(k, 'TRAJSCALE')]:>10.3f} "
              f"{med[('raw', 'h5py')] if k == 'iterate' else float('nan'):>11.3f} "
              f"{med[(k, 'H5MD')] / med[(k, 'TRAJSCALE')]:>8.1f}x")
    err = float(np.abs(rmsds["H5MD"] - rmsds["TRAJSCALE"]).max())
    print(f"largest RMSD difference between the two readers: {err:.2g} Å")
    return 0 if err < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
