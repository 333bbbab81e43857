"""Peak memory of ``trajscale run rmsd`` against the number of frames.

    python benchmarks/memory.py [--frames 1000 4000 16000] [--workdir demo-output]
        [--select "name CA or index 47680"] [--executors serial processes] [--max-block-mb 256]

For each frame count, the demo trajectory (AdK in water, 47,681 atoms, copies
of MDAnalysisTests' XTC; 572 kB a frame) is built if missing and the CLI runs
the RMSD of ``--select`` over it on each executor.  The peak RSS is the
kernel's high-water mark of the largest process of the run (the CLI process,
or a pool worker), measured with :func:`tests.support.peak_rss.peak_rss`.
The default selection is scattered: the CA atoms at the start of each frame
and one atom at its very end, the case where reading the atom span would
allocate whole frames.  Memory must stay flat as the frames grow.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests.support (peak_rss), beside the benchmarks

MB = 1024**2


def main(argv=None) -> int:
    from tests.support.peak_rss import peak_rss
    from trajscale.demo import build_demo_file

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, nargs="+", default=[1000, 4000, 16000])
    p.add_argument("--workdir", default="demo-output")
    p.add_argument("--select", default="name CA or index 47680")
    p.add_argument("--executors", nargs="+", default=["serial", "processes"])
    p.add_argument("-n", "--n-workers", type=int, default=2)
    p.add_argument("--max-block-mb", type=float, default=None, help="default: the CLI's (256)")
    args = p.parse_args(argv)
    print(f"selection {args.select!r}, block budget {args.max_block_mb or 'default'} MB")
    print(f"{'frames':>7} {'file GB':>8} {'executor':>10} {'peak RSS MB':>12} {'seconds':>8}")
    for n in args.frames:
        tpr, h5 = build_demo_file(args.workdir, n, progress=False)
        for ex in args.executors:
            cmd = [sys.executable, "-m", "trajscale.cli.main", "run", "rmsd", tpr, h5, "--select", args.select,
                   "--executor", ex, "--no-progress"]
            if args.max_block_mb:
                cmd += ["--max-block-mb", str(args.max_block_mb)]
            if ex != "serial":
                cmd += ["-n", str(args.n_workers)]
            peak, done = peak_rss(cmd)
            if done.returncode:
                print(done.stderr, file=sys.stderr)
                return 1
            secs = next((ln.split()[0] for ln in done.stdout.splitlines() if " s total" in ln), "?")
            print(f"{n:>7} {n * 47681 * 12 / 1e9:>8.2f} {ex:>10} {peak / MB:>12.0f} {secs:>8}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
