"""``trajscale verify``: an H5MD file against the trajectories it came from."""

from __future__ import annotations

import os
import sys

from .checks import add_topology, check_topology
from .convert import add_frame_range, read_options
from .options import add_h5md_options


def add_parser(sub) -> None:
    p = sub.add_parser("verify", help="compare an H5MD file with its source trajectories",
                       description="Frame-by-frame comparison of positions (the largest difference), velocities, "
                                   "forces, time, step and box. Exit 0 only if equal within float32 round-off.")
    add_topology(p, "topology file of the source trajectories (TPR, PSF, GRO, PDB, ...)")
    p.add_argument("files", nargs="+", metavar="FILE", help="source trajectories, then the H5MD file last")
    p.add_argument("--select", default=None, help="the selection used when converting")
    add_frame_range(p)
    add_h5md_options(p, "the H5MD file (and of H5MD sources)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (none with -q either)")
    p.set_defaults(func=main)


def main(args) -> int:
    from ..convert.verify import verify
    from ..errors import ConfigError

    if len(args.files) < 2:
        raise ConfigError("give the source trajectories and then the H5MD file")
    check_topology(args)
    *sources, h5md = args.files
    rep = verify(args.topology, sources, h5md, read=read_options(args),
                 progress=not (args.no_progress or getattr(args, "quiet", False)))
    print(f"{h5md}: {rep.n_frames} frames x {rep.n_atoms} atoms; max |dx| = {rep.max_dx:.3g} A, "
          f"max |dbox| = {rep.max_dbox:.3g}, max |dt| = {rep.max_dtime:.3g} ps, "
          f"step mismatches = {rep.step_mismatches}")
    note = _unused_space(h5md)
    if note:
        print(f"NOTE: {note}")
    if rep.ok:
        print("OK: identical within float32 round-off" if rep.position_bound is None else
              f"OK: positions within their stated bound ({rep.position_bound:.3g} A), the rest within "
              "float32 round-off")
        return 0
    for p in rep.problems:
        print(f"MISMATCH {p}", file=sys.stderr)
    return 1


def _unused_space(path: str) -> str | None:
    """The inspect line about space in ``path`` that holds no data (None: little, or not an HDF5 file)."""
    import h5py

    from ..h5md.inspect import space_facts, unused_space_note

    try:
        size = os.path.getsize(path)
        with h5py.File(path, "r") as f:
            facts = space_facts(f, size)
        facts["file_bytes"] = size
    except OSError:
        return None
    return unused_space_note(facts)
