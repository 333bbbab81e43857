"""``trajscale split``: an H5MD file into segment files and an index."""

from __future__ import annotations

from .checks import add_output
from .options import add_h5md_options


def add_parser(sub) -> None:
    p = sub.add_parser("split", help="split an H5MD file into segment files and an index",
                       description="Write N segment files (part_NNN.h5md) and DIR/index.json; `run`, `inspect` "
                                   "and trajscale.run accept the index or the folder as a trajectory. The parts "
                                   "of a lossy file (written with --precision) keep its precision, encoding, "
                                   "units and compression.")
    p.add_argument("input", help="H5MD file")
    add_output(p, "output folder")
    p.add_argument("--parts", type=int, required=True, help="number of segments")
    p.add_argument("--chunks", default="auto", help="chunk layout of the parts (default: auto)")
    add_h5md_options(p, "the input")
    p.set_defaults(func=main_split)


def main_split(args) -> int:
    from ..convert.split import split
    from ..errors import ConfigError
    from ..h5md.layout import Layout

    if args.parts < 1:
        raise ConfigError(f"--parts must be at least 1, got {args.parts}")
    index = split(args.input, args.output, args.parts, layout=Layout.parse(args.chunks), group=args.h5md_group,
                  overwrite=args.overwrite, assume_units=args.assume_units)
    print(f"wrote {args.parts} segments and {index}")
    return 0
