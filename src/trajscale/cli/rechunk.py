"""``trajscale rechunk``: an H5MD file rewritten with a new layout, resumably."""

from __future__ import annotations

import logging

log = logging.getLogger("trajscale")


def add_parser(sub) -> None:
    p = sub.add_parser("rechunk", help="rewrite an H5MD file with new chunks/compression (resumable)",
                       description="Copy an H5MD file with a new layout for its per-atom time series, keeping "
                                   "every other dataset, attribute and link. An interrupted run leaves a partial "
                                   "file and a progress record; --resume finishes it.")
    p.add_argument("input", help="H5MD (HDF5) file")
    p.add_argument("-o", "--output", required=True, help="output file")
    p.add_argument("--chunks", default="auto", help="auto, frame, contiguous or frames per chunk (default auto)")
    p.add_argument("--compression", default="none", help="none, gzip[:1-9], lzf, zstd[:1-22], lz4, blosc-zstd[:0-9], blosc-lz4[:0-9] (the last four need hdf5plugin; default none)")
    p.add_argument("--precision", type=float, default=None,
                   help="round positions to this precision in Å first (lossy; 0.01 = XTC's 0.001 nm)")
    p.add_argument("--encoding", default="floats", choices=["floats", "deltas"],
                   help="with --precision: floats (plain floats every HDF5 reader reads; ~1.5x an XTC's size) or "
                        "deltas (integer differences between neighbouring atoms, like XTC: ~1.1x its size, "
                        "read back only by trajscale)")
    p.add_argument("--resume", action="store_true", help="finish an interrupted rechunk of the same input")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def main(args) -> int:
    import sys

    from ..convert.rechunk import rechunk
    from ..errors import ConfigError
    from ..store.layout import Layout

    if args.precision is not None and not args.precision > 0:
        raise ConfigError(f"--precision must be positive, got {args.precision}")
    layout = Layout.parse(args.chunks, args.compression)
    try:
        s = rechunk(args.input, args.output, layout, precision=args.precision, encoding=args.encoding,
                    overwrite=args.overwrite,
                    resume=args.resume, progress=not (args.no_progress or getattr(args, "quiet", False)) and sys.stderr.isatty())
    except SystemExit as exc:   # a signal between slabs: the work so far is kept for --resume
        if exc.code and exc.code > 128:
            print(f"trajscale rechunk: stopped by signal {exc.code - 128}; the frames written so far are "
                  f"kept: run the same command with --resume to finish {args.output}", file=sys.stderr)
            return int(exc.code)
        raise
    log.info("wrote %s: %d frames, %d series, %.1f -> %.1f MB in %.1f s%s", s.output, s.n_frames, s.datasets,
             s.bytes_in / 1e6, s.bytes_out / 1e6, s.seconds,
             f" (resumed at frame {s.resumed_from})" if s.resumed_from else "")
    return 0
