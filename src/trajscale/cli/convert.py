"""``trajscale convert``: any trajectory MDAnalysis reads -> H5MD with a chosen layout."""

from __future__ import annotations

import logging

from .checks import add_output, add_topology, check_topology
from .options import (
    add_continuous_option,
    add_h5md_options,
    add_segment_options,
    add_strict_option,
    mpi_comm,
    output_spec,
    resumed_complete,
    write_options,
)

log = logging.getLogger("trajscale")


def add_frame_range(p) -> None:
    p.add_argument("--start", type=int, default=None,
                   help="first frame of the joined input (negative counts from the end, as Python slices)")
    p.add_argument("--stop", type=int, default=None, help="frame to stop before (negative counts from the end)")
    p.add_argument("--step", type=int, default=None, help="take every STEP-th frame")
    add_continuous_option(p)


def add_parser(sub) -> None:
    p = sub.add_parser("convert", help="convert trajectories to H5MD",
                       description="Convert one or more trajectories (joined in order) to an H5MD "
                                   "file with a layout chosen for analysis. GROMACS restart parts give "
                                   "each time once (the later part's frame); step and time are renumbered "
                                   "where whole parts restart or repeat.")
    add_topology(p)
    p.add_argument("trajectories", nargs="+", help="trajectory files (XTC, TRR, DCD, NetCDF, H5MD, ...)")
    add_output(p, "output .h5md file")
    add_written_layout(p, "auto (frames per chunk planned for ~2 MiB, whole frames), frame (1, n_atoms, 3), "
                          "contiguous, h5py (h5py's own guess) or a number of frames per chunk (default auto)",
                       "floats (plain floats for every HDF5 reader), deltas (XTC-sized, read back only by "
                       "trajscale) or deltas32 (for coordinates beyond +-32767 steps); see `trajscale rechunk --help`")
    p.add_argument("--fletcher32", action="store_true", help="add checksums to chunks")
    p.add_argument("--select", default=None, help="write only these atoms (MDAnalysis selection)")
    p.add_argument("--units", default="mdanalysis", choices=["mdanalysis", "gromacs", "source"],
                   help="units written: mdanalysis (A, ps, kJ/(mol A); the default), gromacs (nm, ps, "
                        "kJ/(mol nm)) or source (the input's own: an H5MD file's, a format's native units)")
    add_h5md_options(p, "H5MD inputs")
    add_frame_range(p)
    p.add_argument("--no-velocities", action="store_true", help="drop velocities")
    p.add_argument("--no-forces", action="store_true", help="drop forces")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (none with -q either)")
    add_segment_options(p, "convert")
    p.set_defaults(func=main)
    add_strict_option(p)


def main(args) -> int:
    from ..convert.convert import convert
    from ..convert.options import ConvertOptions
    from ..convert.resume import unfinished

    check_topology(args)
    if resumed_complete(args, [args.topology, *args.trajectories], unfinished(args.output, "convert")):
        return 0
    comm, spec, write = output_settings(args)
    options = ConvertOptions(read=read_options(args), spec=spec, write=write,
                             velocities=not args.no_velocities, forces=not args.no_forces, units=args.units)
    s = convert(args.topology, args.trajectories, args.output, options=options)
    if comm is not None and comm.Get_rank() != 0:
        return 0
    log.info("wrote %s: %d frames x %d atoms (%s), %s, %.1f MB in %.1f s", s.output, s.n_frames,
             s.n_atoms, "+".join(s.fields), s.layout, s.bytes_written / 1e6, s.seconds)
    return 0


def add_written_layout(p, chunks: str, encodings: str) -> None:
    """How convert and rechunk lay out what they write: ``--chunks`` (its help ``chunks``), ``--compression``,
    ``--layout``, ``--precision`` and ``--encoding`` (the help of its choices ``encodings``)."""
    p.add_argument("--chunks", default="auto", help=chunks)
    p.add_argument("--compression", default="none",
                   help="none, gzip[:1-9], lzf, zstd[:1-22], lz4, blosc-zstd[:0-9], blosc-lz4[:0-9] "
                        "(the last four need hdf5plugin; default none)")
    p.add_argument("--precision", type=float, default=None,
                   help="store positions rounded to this precision in Å (lossy; 0.01 = XTC's 0.001 nm); "
                        "saves space only with --compression")
    p.add_argument("--encoding", default="floats", choices=["floats", "deltas", "deltas32"],
                   help=f"with --precision: {encodings}")
    p.add_argument("--layout", default="disk", choices=["disk", "remote"],
                   help="disk (the default) or remote: a store to be read over the network (s3://, http(s)://): "
                        "--chunks auto plans ~8 MiB chunks for range requests, and HDF5's metadata is "
                        "gathered in one block at the file's start, so opening it costs one request")


def output_settings(args):
    """What convert and rechunk write with: the MPI communicator, the output's planned spec, the write options."""
    comm = mpi_comm(args)
    return comm, layout_target(args, output_spec(args)), write_options(args, comm)


def layout_target(args, spec):
    """``spec`` with its layout planned for ``--layout``."""
    import dataclasses

    from ..h5md.layout import Layout

    if args.layout == "disk":
        return spec
    lay = spec.layout
    Layout.parse(str(lay.chunks), target=args.layout)   # refuses what the target cannot plan
    return dataclasses.replace(spec, layout=dataclasses.replace(lay, remote=True))


def read_options(args):
    """The ReadOptions of ``convert`` and ``verify``: selection, frame range, H5MD group and units, join."""
    from ..convert.options import ReadOptions

    return ReadOptions(select=args.select, start=args.start, stop=args.stop, step=args.step, group=args.h5md_group,
                       assume_units=args.assume_units, continuous=args.continuous)
