"""``trajscale index``: existing parts (any format) described as one segmented trajectory."""

from __future__ import annotations

from .checks import add_output
from .options import add_continuous_option, add_h5md_options


def add_parser(sub) -> None:
    q = sub.add_parser("index", help="describe existing parts (any format) as one segmented trajectory",
                       description="Check the parts' atom counts and how their times join (GROMACS restart parts: "
                                   "each time once, the later part's frame; parts whose times restart: "
                                   "renumbered; overlaps: refused unless --continuous), and write a "
                                   "segment index that `run` accepts as a trajectory.")
    q.add_argument("parts", nargs="+", help="parts in order (H5MD, XTC, TRR, DCD, NetCDF, ...)")
    add_output(q, "index file to write (.json)")
    q.add_argument("--topology", default=None, help="topology for formats that need one (XTC, DCD, ...)")
    add_h5md_options(q, "H5MD parts (kept in the index for the runs that read it)")
    add_continuous_option(q)
    q.set_defaults(func=main_index)


def main_index(args) -> int:
    from ..convert.split import build_index

    if not str(args.output).endswith(".json"):
        from ..errors import ConfigError

        raise ConfigError(f"{args.output}: the index file must end in .json")
    index = build_index(args.parts, args.output, args.topology, group=args.h5md_group,
                        assume_units=args.assume_units, overwrite=args.overwrite, continuous=args.continuous)
    print(f"wrote {index} ({len(args.parts)} parts)")
    return 0
