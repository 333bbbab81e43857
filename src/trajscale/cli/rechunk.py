"""``trajscale rechunk``: an H5MD file rewritten with a new layout, resumably."""

from __future__ import annotations

import logging

from .checks import add_output
from .convert import add_written_layout, output_settings
from .options import add_segment_options, resumed_complete
from .storage import add_storage_option

log = logging.getLogger("trajscale")


def add_parser(sub) -> None:
    p = sub.add_parser("rechunk", help="rewrite an H5MD file with new chunks/compression (resumable)",
                       description="Copy an H5MD file with a new layout for its per-atom time series, keeping "
                                   "every other dataset, attribute and link. An interrupted run leaves a partial "
                                   "file and a progress record; --resume finishes it.")
    p.add_argument("input", help="H5MD (HDF5) file, a path or a URL (s3://, gs://, az://, https://)")
    add_output(p, "output file")
    add_written_layout(p, "auto, frame, contiguous or frames per chunk (default auto)",
                       "floats (plain floats every HDF5 reader reads; ~1.5x an XTC's size), deltas (integer "
                       "differences between neighbouring atoms, like XTC: with blosc-lz4 ~1.1x its size and read "
                       "~5x faster, read back only by trajscale; coordinates within +-32767 steps of the first "
                       "frame's centre) or deltas32 (the same without that bound, ~1.3x)")
    add_storage_option(p)   # the input may be behind a URL, as every command's
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_segment_options(p, "rechunk")
    p.set_defaults(func=main)


def main(args) -> int:
    from ..convert.options import RechunkOptions
    from ..convert.rechunk import rechunk
    from ..convert.resume import unfinished

    if resumed_complete(args, [args.input], unfinished(args.output, "rechunk")):
        return 0
    comm, spec, write = output_settings(args)
    options = RechunkOptions(spec=spec, write=write)
    s = rechunk(args.input, args.output, options=options)
    if comm is not None and comm.Get_rank() != 0:
        return 0
    log.info("wrote %s: %d frames, %d series, %.1f -> %.1f MB in %.1f s%s", s.output, s.n_frames, s.datasets,
             s.bytes_in / 1e6, s.bytes_out / 1e6, s.seconds,
             f" (resumed at frame {s.resumed_from})" if s.resumed_from else "")
    return 0
