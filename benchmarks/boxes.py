"""Box conversion speed: (F, 6) dimensions to (F, 3, 3) H5MD edge vectors, every box distinct (NPT).

    python benchmarks/boxes.py [--boxes 2000 4000 8000 100000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv=None) -> int:
    from trajscale.box import dimensions_to_edges

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--boxes", type=int, nargs="+", default=[2000, 4000, 8000, 100_000])
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'boxes':>8} {'seconds':>8}")
    for n in args.boxes:
        dims = np.column_stack([rng.uniform(50, 60, (n, 3)), rng.uniform(60, 120, (n, 3))])
        t0 = time.perf_counter()
        dimensions_to_edges(dims)
        print(f"{n:>8} {time.perf_counter() - t0:>8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
