"""``trajscale pack``: many NPZ / .npy sample files -> one HDF5 store for training."""

from __future__ import annotations

import logging

from ..executor_registry import EXECUTORS, home_names
from .checks import add_output
from .options import add_executor_options, executor_options, resumed_complete

log = logging.getLogger("trajscale")


def add_parser(sub) -> None:
    p = sub.add_parser("pack", help="pack NPZ/.npy sample files into one HDF5 store",
                       description="Pack many NPZ or .npy files into one HDF5 store: one dataset per key, "
                                   "samples along axis 0 in input order, plus an index of origin file and "
                                   "sample number. Written under a temporary name and renamed when complete; "
                                   "an interrupted pack continues with --resume.")
    p.add_argument("samples", nargs="+", help="NPZ or .npy files (a .npy file's array is key 'arr_0')")
    add_output(p, "output HDF5 store")
    p.add_argument("--key", action="append", dest="keys", default=None,
                   help="array to pack (repeat for several; default: every array of the first file)")
    p.add_argument("--chunks", default="contiguous",
                   help="contiguous (default; fastest for block reads), auto (~4 MiB) or samples per chunk")
    p.add_argument("--compression", default="none", help="none (default), gzip[:1-9] or lzf (chunked)")
    p.add_argument("--executor", default="serial", choices=home_names(),
                   help="where the inputs are read (default serial: in this process; this process writes): "
                        + "; ".join(f"{n}: {EXECUTORS[n].summary}" for n in home_names()))
    p.add_argument("-n", "--n-workers", type=int, default=2, help="workers of a parallel --executor (default 2)")
    add_executor_options(p, among=[n for n in home_names() if not EXECUTORS[n].chooses])
    p.add_argument("--resume", action="store_true", help="continue an interrupted pack of the same inputs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=main, kept_when_interrupted=lambda a: "the files packed so far are kept: run the same "
                   f"command with --resume to finish {a.output}")


def main(args) -> int:
    from ..ml.pack import pack, partial_name

    if resumed_complete(args, args.samples, [partial_name(args.output)]):
        return 0
    s = pack(args.samples, args.output, keys=args.keys, chunks=args.chunks, compression=args.compression,
             executor=args.executor, n_workers=args.n_workers, resume=args.resume, overwrite=args.overwrite,
             progress=not args.no_progress, executor_options=executor_options(args))
    log.info("wrote %s: %d samples from %d files (%s), %.1f MB in %.1f s%s", s.output, s.n_samples, s.n_files,
             ", ".join(s.keys), s.bytes_written / 1e6, s.seconds,
             f" ({s.resumed_files} files from the interrupted pack)" if s.resumed_files else "")
    return 0
