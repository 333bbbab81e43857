"""``trajscale repair``: truncate an interrupted H5MD file to its last complete frame."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("repair", help="truncate an interrupted H5MD file to its last complete frame",
                       description="Drop the rows a killed writer left after the last complete frame (the "
                                   "length of step/time), in place and atomically, so that every H5MD reader "
                                   "(MDAnalysis included) reads the file.")
    p.add_argument("file", help="H5MD file")
    p.set_defaults(func=main)


def main(args) -> int:
    from ..pwrite.repair import repair

    r = repair(args.file)
    if r.extended:
        print(f"{r.path}: extended by {r.extended} bytes to the size its superblock records "
              "(the writer was killed while it flushed)")
    if r.method == "none":
        print(f"{r.path}: {r.n_frames} frames, nothing to repair")
    elif r.method == "extend":
        print(f"{r.path}: {r.n_frames} complete frames, no partial rows")
    else:
        rows = max(r.dropped.values())
        print(f"{r.path}: kept {r.n_frames} complete frames, dropped {rows} partial row(s) "
              f"from {len(r.dropped)} dataset(s) ({r.method})")
    return 0
