"""Options shared by the commands that open H5MD files: the particle group and stated units."""

from __future__ import annotations

import logging
import os

from ..executor_registry import EXECUTORS, launcher_executor, names
from ..units import ASSUMABLE

#: The destinations of every command's outputs, files and folders (``-o``, ``--out``, ``--report``,
#: ``--plot``, ``--trace``, ``--json``, ``--tee``, ``--workdir``): what :func:`refuse_url_outputs` checks.
OUTPUT_DESTS = ("output", "out", "report", "plot", "trace", "json", "tee", "workdir")


def refuse_url_outputs(args) -> None:
    """Refuse an output given as a URL, in one line, before any command starts: outputs are local paths
    (``s3://b/x`` would be taken for the folder ``s3:/b/x``), and a finished file is uploaded after."""
    from ..errors import OutputError
    from ..storage.location import Location

    for dest in OUTPUT_DESTS:
        value = getattr(args, dest, None)
        if isinstance(value, str) and not Location(value).local:
            raise OutputError(value, "outputs are written to local paths: write it here, then upload the "
                                     "finished file (e.g. `aws s3 cp FILE URL`, `aws s3 cp --recursive DIR URL` "
                                     "for a folder), which the store shows under its key only when complete")


def add_h5md_options(p, what: str = "the H5MD file") -> None:
    """``--group NAME`` and ``--assume-units {nm,Angstrom}`` (dests ``h5md_group``, ``assume_units``)."""
    p.add_argument("--group", dest="h5md_group", default=None, metavar="NAME",
                   help=f"particle group of {what} to read (needed when it has several; "
                        "`trajscale inspect FILE` lists them)")
    p.add_argument("--assume-units", default=None, choices=list(ASSUMABLE),
                   help=f"units of datasets in {what} that carry no unit attribute: nm (nm, ps, "
                        "kJ/(mol nm)) or Angstrom (A, ps, kJ/(mol A)); without it such a file is refused")
    from .storage import add_storage_option

    add_storage_option(p)   # every command that opens H5MD files opens them behind URLs too


def add_segment_options(p, what: str) -> None:
    """--executor/-n/--virtual/--resume of ``convert`` and ``rechunk``, and what an interruption keeps."""
    from .checks import positive_int

    p.add_argument("--executor", default=None, choices=names(converts=True, choosers=True),
                   help="serial (default; mpi when launched by mpiexec), auto (serial unless the work "
                        "outweighs starting a pool of processes), or processes/dask: uncompressed, "
                        "each worker writes its range of frames in place in the one output; compressed or "
                        "--precision, each worker writes a segment file, joined at the end (under mpiexec "
                        "the ranks write the one file through parallel HDF5, unless --virtual)")
    p.add_argument("-n", "--n-workers", type=positive_int, default=None,
                   help="workers of --executor processes or dask (default: the CPU count)")
    add_executor_options(p, among=names(workers=("n_workers",), converts=True))   # their own (--scheduler, ...)
    p.add_argument("--virtual", action="store_true",
                   help="keep the segments in NAME.parts/ beside the output, which maps them as HDF5 "
                        "virtual datasets (no join copy; any HDF5 reader, MDAnalysis too, reads it as one file)")
    p.add_argument("--resume", action="store_true", help=f"finish an interrupted {what} of the same inputs")
    p.set_defaults(kept_when_interrupted=kept_for_resume)


def output_spec(args):
    """The OutputSpec ``--chunks``, ``--compression``, ``--fletcher32``, ``--precision`` and ``--encoding`` give."""
    from ..convert.options import OutputSpec
    from ..h5md.layout import Layout

    return OutputSpec(layout=Layout.parse(args.chunks, args.compression, getattr(args, "fletcher32", False)),
                      precision=args.precision, encoding=args.encoding)


def write_options(args, comm):
    """The WriteOptions of ``convert`` and ``rechunk``; under mpiexec (``comm``) rank 0 shows the progress of all."""
    from ..convert.options import WriteOptions

    traits = EXECUTORS.get(args.executor) if args.executor is not None else None
    parallel = traits is not None and (traits.workers == "n_workers" or traits.chooses)   # (auto may pick a pool)
    return WriteOptions(overwrite=args.overwrite, resume=args.resume,
                        progress=not (args.no_progress or getattr(args, "quiet", False)),
                        executor=launcher_executor() if comm is not None else args.executor,
                        n_workers=(args.n_workers or os.cpu_count() or 1) if parallel else None,
                        virtual=args.virtual, comm=comm,
                        executor_options=executor_options(args, args.executor
                                                          or (launcher_executor() if comm is not None else "serial")))


def resumed_complete(args, inputs, unfinished) -> bool:
    """``--resume`` on a complete output (a requeued job whose work already finished): say so, write nothing.
    Complete: the output exists and nothing of an unfinished run (``unfinished``) is beside it."""
    from pathlib import Path

    if not args.resume or not Path(args.output).is_file() or any(Path(p).exists() for p in unfinished):
        return False
    from ..sources import with_parts
    from ..util import refuse_input_as_output

    refuse_input_as_output(args.output, with_parts(inputs))
    from ..launch import rank

    if rank() == 0:
        logging.getLogger("trajscale").info(
            "%s is complete: nothing to resume, not rewritten (to write it again, use --overwrite without "
            "--resume)", args.output)
    return True


def kept_for_resume(args) -> str:
    """What an interrupted convert/rechunk left: its partial output for ``--resume``, or nothing."""
    from ..storage.location import Location

    if Location(args.output).local:
        from ..convert.resume import unfinished

        if not any(p.exists() for p in unfinished(args.output, args.command)):
            return f"nothing was written yet: no partial output of {args.output} was kept"
    return f"the frames written so far are kept: run the same command with --resume to finish {args.output}"


def mpi_comm(args):
    """COMM_WORLD when the executor is none or the launcher's ranks and MPI sees several ranks; else None."""
    from ..launch import current

    if args.executor is not None and EXECUTORS[args.executor].workers != "launcher":
        return None
    launch = current()
    if not (launch.several and launch.mpi_sees):
        return None
    from ..parallel import check_mpi_world, mpi_comm_world
    from ..sharing import owe_first_share

    comm = mpi_comm_world()
    check_mpi_world(comm.Get_size())
    owe_first_share(comm)   # rank 0's interruption before its first share reaches the ranks waiting in it
    return comm


def add_continuous_option(p) -> None:
    """``--continuous``: parts that overlap are joined with the later part's frames kept (as gmx trjcat)."""
    p.add_argument("--continuous", action="store_true",
                   help="join trajectory parts that overlap in time, keeping the later part's frames "
                        "(as gmx trjcat and MDAnalysis's continuous=True do); without it an overlap is refused. "
                        "GROMACS restart parts (each starting with the previous part's last frame) need no flag")


def add_strict_option(p) -> None:
    """``--strict``: an XTC/TRR cut short is refused, not read to its last whole frame (``--ensemble``: the run)."""
    p.add_argument("--strict", action="store_true",
                   help="refuse an XTC/TRR whose last frame is cut short (a simulation killed while writing it) "
                        "or that has no frame where its next frame should start; without it the whole frames "
                        "before are read, with a warning that names the frame and byte. A frame whose own bytes "
                        "are damaged is refused either way (status 2; with --ensemble that trajectory alone, "
                        "status 8). With --ensemble: the first refused trajectory refuses the run (status 2)")


def add_executor_options(p, among: list[str] | None = None) -> None:
    """The flags of the executors' own options over ``among``, each saying which executors take it."""
    from ..executor_registry import all_options

    for flag, (opt, takers) in all_options(among).items():
        kw: dict = {"dest": f"executor_{opt.name}", "help": f"{opt.help} [--executor {' or '.join(takers)}]"}
        if opt.kind == "flag":
            p.add_argument(flag, action="store_true", default=False, **kw)
            continue
        if opt.kind == "list":
            kw.update(action="append", default=None)
        else:
            kw.update(default=None, type={"int": int, "float": float}.get(opt.kind, str))
        if opt.choices:
            kw["choices"] = list(opt.choices)
        else:
            kw["metavar"] = opt.metavar or opt.name.upper()
        p.add_argument(flag, **kw)


def executor_options(args, executor: str | None = None) -> dict:
    """The options of ``executor`` the command line gives; another executor's option is refused in one line."""
    from ..errors import ConfigError
    from ..executor_registry import all_options, options_of

    executor = executor if executor is not None else args.executor
    mine = {o.flag for o in options_of(executor)} if executor in EXECUTORS else set()
    given = {}
    for flag, (opt, takers) in all_options().items():
        value = getattr(args, f"executor_{opt.name}", None)
        if value in (None, False, []):
            continue
        if flag not in mine:
            raise ConfigError(f"{flag}: for --executor {' or '.join(takers)}; this run's executor is {executor}")
        given[opt.name] = opt.keyword_value(value)
    return given
