"""Whole processes, paired in one run: the ``trajscale`` CLI against the same CA RMSD as an MDAnalysis script.

    python benchmarks/cold.py [--frames 1000] [--pairs 5] [--warmup 1] [-n 2] [--workdir demo-output] [--smoke]

The file: AdK in water (47,681 atoms, GRO topology, so MDAnalysis guesses
types and masses), ``--frames`` frames of a frame-chunked H5MD file (one frame
per chunk), built once with ``trajscale convert`` from the whole-protein XTC
repeated (``short_runs.frame_chunked_file``). Rows, each side a new process:

* serial:  ``trajscale run rmsd GRO FILE --executor serial``
  vs ``python mda_rmsd.py`` (``rms.RMSD(mda.Universe(GRO, FILE), select=SEL).run()``);
* processes(n): ``--executor processes -n n``
  vs the same script with ``.run(backend="multiprocessing", n_workers=n)``;
* mpiexec -n n: ``mpiexec -n n trajscale run rmsd ... --executor mpi`` vs MDAnalysis serial;
* first run, empty caches: trajscale serial with every trajscale cache in a
  new empty folder, as after an install, vs MDAnalysis serial.

The sides run in turn (trajscale, MDAnalysis, trajscale, ...) after
``--warmup`` uncounted pairs; the table gives each side's median wall seconds
and the median of the pairs' ratios (MDAnalysis time / trajscale time, higher
is better for trajscale) with their range, and the same median ratio of CPU
seconds (user + system of the process and the children it reaped, as the OS
accounts them: steadier than wall on a loaded machine, but blind to waiting and
to parallel speed-up). Exit 1 if any row's two RMSD files
differ by more than 1e-4 A. The mechanics are in :mod:`trajscale.whole_runs`
(shared with ``trajscale demo``). ``--smoke``: 20 frames, one pair, no
warm-up (the test suite's size; the figures then mean nothing).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))   # short_runs, as a sibling script


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=1000)
    p.add_argument("--workdir", default="demo-output", help="where the H5MD file is built (and reused)")
    p.add_argument("--select", default="protein and name CA")
    p.add_argument("-n", "--n-workers", type=int, default=2, help="workers and MPI ranks (default 2)")
    p.add_argument("--pairs", type=int, default=5, help="counted pairs per row (median)")
    p.add_argument("--warmup", type=int, default=1, help="uncounted pairs per row first")
    p.add_argument("--rows", default="serial,processes,mpi,first",
                   help="comma-separated subset of serial,processes,mpi,first")
    p.add_argument("--smoke", action="store_true", help="20 frames, 1 pair, no warm-up: the test suite's run")
    args = p.parse_args(argv)
    if args.smoke:
        args.frames, args.pairs, args.warmup = 20, 1, 0

    from short_runs import frame_chunked_file

    from trajscale.launch import mpiexec
    from trajscale.whole_runs import Pairs

    gro, h5 = frame_chunked_file(args.workdir, args.frames)
    n, rows = args.n_workers, args.rows.split(",")
    print(f"{h5}: {args.frames} frames x 47,681 atoms, one frame per chunk; GRO topology; {args.select!r}; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}; "
          f"median of {args.pairs} pairs after {args.warmup} warm-up")
    with Pairs(args.workdir, gro, h5, args.select) as pairs:
        if "first" in rows:   # first: its first run's caches become the later rows' caches
            pairs.add("first run, empty caches (serial)", pairs.trajscale(fresh_caches=True), pairs.mdanalysis())
        if "serial" in rows:
            pairs.add("serial", pairs.trajscale(), pairs.mdanalysis())
        if "processes" in rows:
            pairs.add(f"processes({n}) vs multiprocessing({n})", pairs.trajscale("processes", n_workers=n),
                      pairs.mdanalysis(n))
        if "mpi" in rows:
            if mpiexec() is None:
                print(f"mpiexec -n {n}: skipped, no mpiexec on PATH")
            else:
                pairs.add(f"mpiexec -n {n} (mpi) vs MDAnalysis serial", pairs.trajscale("mpi", mpi_ranks=n),
                          pairs.mdanalysis())
        pairs.run(args.pairs, args.warmup,
                  progress=lambda label: print(f"  {label} ...", file=sys.stderr, flush=True))
        diff = pairs.max_difference()
        print()
        print(pairs.table())
        print(f"\nratio: MDAnalysis seconds / trajscale seconds, median of the pairs (range: lowest-highest); "
              f"max |RMSD difference| {diff:.1e} A")
    if not diff <= 1e-4:
        print(f"the RMSDs of the two sides differ by {diff:.2e} A", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
