"""Convert any MDAnalysis-readable trajectory (or several, concatenated) to H5MD."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, InputFileError, OutputError
from ..sources import registry, with_parts
from ..sources.chain import JoinPlan, plan_join
from ..storage.location import Location
from ..topology import atom_arrays, written_atoms
from ..units import WRITE_UNITS, unit_system
from ..util import check_input_file, check_output_path, is_no_space, polling_for_stop
from . import direct, segmented
from .frames import ConvertJob
from .options import ConvertOptions, WriteOptions, with_options
from .pool import on_root
from .resume import Partial, ResumeKey, WriteMode, partial_paths
from .stream import frame_plan, open_inputs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConvertSummary:
    """What :func:`convert` wrote: the output, its size and layout, the frames dropped or renumbered, the time."""

    output: str
    n_frames: int
    n_atoms: int
    fields: tuple[str, ...]
    layout: str
    files_renumbered: int
    seconds: float
    bytes_written: int
    frames_dropped: int = 0   # repeated by the next part (GROMACS restart parts): the later kept
    frames_renumbered: int = 0


def convert(topology: str, trajectories: list[str], output: str, *, options: ConvertOptions | None = None,
            **kwargs) -> ConvertSummary:
    """Write ``trajectories`` (joined in order) to ``output`` as H5MD.

    ``options`` is a :class:`~trajscale.convert.options.ConvertOptions`, whose fields (and those of its
    records) may also be given as keywords (``layout=..., select="protein", executor="processes"``).

    The files are joined as :func:`~trajscale.sources.chain.plan_join` decides (a part that overlaps the
    previous one is refused unless ``continuous``: the later part wins).  The file is written under a
    temporary name and renamed only when every frame is written and counted: an error removes the
    temporary output, an interrupt keeps it with its progress record for ``resume=True``.

    ``executor="processes"`` or ``"dask"``: an output with no filter is allocated whole and each worker writes its
    frames at their byte addresses (``convert.direct``); otherwise each worker writes a segment file, joined by
    copying or, with ``virtual=True``, kept in ``NAME.parts/`` and mapped into the output (``convert.segmented``).
    With an MPI ``comm`` the ranks write slabs into the one file in rounds (``convert.parallel``).

    ``units``: ``"mdanalysis"`` (Å, ps, kJ/(mol Å)), ``"gromacs"`` (nm, ps, kJ/(mol nm)) or ``"source"``
    (the inputs' own).  ``group`` and ``assume_units`` apply to H5MD inputs.  ``precision`` (Å) and
    ``encoding`` store positions lossy (:mod:`trajscale.h5md.codecs`).
    """
    t0 = time.perf_counter()
    opts = with_options(options or ConvertOptions(), kwargs, "convert")
    read, write = opts.read, opts.write
    inputs = [topology, *trajectories]
    behind = with_parts(inputs)   # (no output is one of them, nor one of an index's parts)
    _check_options(output, behind, opts)
    # The topology's own coordinates only for a selection that may need them (a TPR's cost ~0.4 s); a
    # topology file converted before: from the caches, MDAnalysis not imported
    atoms, sel_atoms, n_atoms = written_atoms(topology, read.select, topology_coordinates=bool(read.select))
    # Under MPI rank 0 scans the XTC/TRR parts' frame offsets and ships them: a rank never rescans
    shipped = on_root(write.comm, lambda: scanned_offsets([Location(t) for t in trajectories]),
                      then_share=True) if write.mpi else None
    sources = open_inputs(topology, list(trajectories), n_atoms, read.group, read.assume_units, offsets=shipped)
    try:
        job, join = _plan_job(topology, trajectories, sources, atoms, sel_atoms, opts)
        # "auto": serial or a pool, from the conversion's size (an XTC's decoding of every atom included)
        write = write.chosen(job.n_frames, job.n_atoms, sum(s.decode_seconds_per_frame() for s in sources)
                             / len(sources), reads_ahead=any(s.reads_ahead for s in sources))
        opts = dataclasses.replace(opts, write=write)
        _check_room(output, behind, job, opts)
        key = ResumeKey.of("convert", _write_mode(job, write), [Location(p) for p in inputs],
                           _resume_options(job, opts))
        partial = Partial(check_output_path(output, write.overwrite, inputs=behind), key)
        if write.mpi:   # every rank planned the same join (the same few frames read)
            from .parallel import convert_parallel

            summary = convert_parallel(write.comm, job, sources, sel_atoms, partial, resume=write.resume,
                                       summary_cls=ConvertSummary, progress=write.progress)
            if write.rank0:
                _say_join(join)
            return dataclasses.replace(summary, files_renumbered=join.renumbered_files,
                                       frames_dropped=join.dropped, frames_renumbered=join.renumbered_frames)
        _write_local(job, partial, sources, write)
        _say_join(join)
        return ConvertSummary(str(output), job.n_frames, job.n_atoms, job.fields, job.layout.describe(),
                              join.renumbered_files, time.perf_counter() - t0, os.path.getsize(output),
                              join.dropped, join.renumbered_frames)
    finally:
        for s in sources:
            s.close()


def _check_options(output: str, inputs: list, opts: ConvertOptions) -> None:
    """Everything checked before the inputs are opened: the output's name (never an input), the lossy,
    parallel-output and unit options."""
    write = opts.write
    check_output_path(output, write.overwrite, inputs=inputs)   # never an input, even with overwrite
    opts.spec.check(warn=write.rank0)
    segmented.check_parallel_output(Path(output), inputs, write, record=partial_paths(output, "convert")[1],
                                    segment_workers=("n_workers",), command="convert")
    if opts.units != "source":
        unit_system(opts.units)   # an unknown name fails before any work


def _plan_job(topology: str, trajectories: list[str], sources, atoms, sel_atoms,
              opts: ConvertOptions) -> tuple[ConvertJob, JoinPlan]:
    """The job every writer runs (plain values: it travels to workers), and the join it follows."""
    read, spec = opts.read, opts.spec
    fields = ("position",)
    if opts.velocities and all("velocity" in s.fields for s in sources):
        fields += ("velocity",)
    if opts.forces and all("force" in s.fields for s in sources):
        fields += ("force",)
    join = plan_join(sources, read.continuous)
    plans, n_frames = frame_plan(join.lengths, read.start, read.stop, read.step)
    if n_frames == 0:
        raise InputFileError(trajectories[0], "the frame range selects no frames")
    src0, frames0 = next((s, p) for s, p in zip(sources, plans, strict=False) if len(p))
    first = src0.read(frames0[0], frames0[0] + 1, atoms)   # a kept frame: skipped ones are never read
    has_box = bool(np.any(first.box[:, :3] > 0))
    # Observables are kept from a single input read without a stride (under MPI, ParallelWriter writes none)
    observables = sources[0].observables() if len(sources) == 1 and read.step in (None, 1) \
        and not opts.write.mpi else {}
    job = ConvertJob(topology=str(topology), trajectories=tuple(str(t) for t in trajectories),
                     lengths=tuple(s.n_frames for s in sources),
                     plans=tuple((p.start, p.stop, p.step) for p in plans), shifts=tuple(join.shifts),
                     atoms=atoms, fields=fields, n_atoms=len(sel_atoms), n_frames=n_frames, layout=spec.layout,
                     box="triclinic" if has_box else None, group=sources[0].particle_group or "all",
                     units=unit_system(opts.units) if opts.units != "source" else source_units(sources, fields),
                     masses=_attr(sel_atoms, "masses"), charges=_attr(sel_atoms, "charges"),
                     atom_labels=_labels(sel_atoms),
                     observables={k: (tuple(v[0]), np.dtype(v[1]).str) for k, v in observables.items()},
                     in_group=read.group, assume_units=read.assume_units, precision=spec.precision,
                     encoding=spec.encoding,
                     # delta coding is planned from the first frame, by every writer alike
                     reference=first.positions[0] if spec.encoding == "deltas" and spec.precision is not None
                     else None,
                     offsets=tuple(s.get_config()["offsets"] if s.ships_offsets else None for s in sources))
    return job, join


def _check_room(output: str, inputs: list, job: ConvertJob, opts: ConvertOptions) -> None:
    """An output whose size is known (no filter, not virtual) must fit on its file system."""
    spec, write = opts.spec, opts.write
    if spec.layout.compression or spec.precision is not None or write.virtual:
        return
    need = job.n_frames * job.n_atoms * 12 * len(job.fields)
    have = partial_paths(output, "convert")[0]
    if write.resume and have.exists():
        need -= have.stat().st_size
    check_output_path(output, write.overwrite, inputs=inputs, need_bytes=need)


def _write_mode(job: ConvertJob, write: WriteOptions) -> WriteMode:
    """How ``job`` is written: by MPI ranks, serially, or by workers in place (no filter) or as segments."""
    if write.mpi:
        return WriteMode.COLLECTIVE
    if not write.on_processes:
        return WriteMode.SERIAL
    if not write.virtual and direct.eligible(job.layout, job.precision):   # no filter: frames written in place
        return WriteMode.DIRECT
    return WriteMode.SEGMENTS


def _resume_options(job: ConvertJob, opts: ConvertOptions) -> dict:
    """The options a resume must share with the run that made the partial output."""
    read = opts.read
    return {"select": read.select, "start": read.start, "stop": read.stop, "step": read.step,
            "fields": "+".join(job.fields), "units": opts.units, "group": read.group,
            "assume_units": read.assume_units, "continuous": read.continuous, "virtual": opts.write.virtual,
            **opts.spec.resume_options()}


def _write_local(job: ConvertJob, partial: Partial, sources, write: WriteOptions) -> None:
    """Write (or finish) ``partial`` in this process or on its workers, then rename it."""
    if partial.mode is WriteMode.DIRECT:
        fresh = direct.plan(job.n_frames, write.workers(), segmented.chunk_frames(job))
    elif partial.mode is WriteMode.SEGMENTS:
        fresh = segmented.plan(job, write.workers(), write.virtual)
    else:
        fresh = {"done": 0}
    partial.begin(write.resume, fresh)
    executor = write.executor or "serial"
    # Poll for SIGTERM for the whole life of the partial output: a signal stops
    # between slabs, leaving the frames written so far for --resume.
    with polling_for_stop():
        try:
            if partial.mode is WriteMode.DIRECT:
                direct.write(job, partial, executor=executor, n_workers=write.workers(), progress=write.progress,
                             options=write.executor_options)
            else:
                segmented.write(job, partial, executor=executor, n_workers=write.workers(),
                                progress=write.progress, sources=dict(enumerate(sources)),
                                options=write.executor_options)
        except (SystemExit, KeyboardInterrupt):
            raise   # kept for --resume
        except BaseException as exc:
            if is_no_space(exc):   # the frames counted so far are good: kept for --resume
                raise OutputError(partial.final, f"no space left in {partial.final.parent}: the frames "
                                                 "written so far are kept; free some space and run the "
                                                 "same command with --resume") from None
            partial.discard(release=True)   # an error: nothing half-written stays behind
            raise


def _say_join(join) -> None:
    said = join.describe()
    if said:
        log.warning("%s", said)


def source_units(sources, fields: tuple[str, ...]) -> dict[str, str]:
    """The units the inputs store their data in (``convert --units source``): an H5MD input's unit
    attributes, else the units MDAnalysis's reader declares; inputs that disagree are an error.  A quantity
    no input names a unit for keeps trajscale's, as MDAnalysis handed it over unconverted.
    """
    found: dict[str, dict[str, str]] = {}
    for src in sources:
        for q, unit in src.stored_units().items():
            if unit is not None and (q in fields or q in ("box", "time")):
                found.setdefault(q, {}).setdefault(unit, src.path)
    out = dict(WRITE_UNITS)
    for q, seen in found.items():
        if len(seen) > 1:
            raise ConfigError("--units source: the inputs store " + q + " in different units ("
                              + ", ".join(f"{u} in {p}" for u, p in seen.items())
                              + "); choose --units mdanalysis or gromacs")
        out[q] = next(iter(seen))
    if "box" not in found:   # a box written from a source without one: in the positions' unit
        out["box"] = out["position"]
    return out


def _attr(atoms, name: str):
    try:
        return np.asarray(getattr(atoms, name), dtype=np.float64)
    except (AttributeError, ValueError):   # MDAnalysis's NoDataError: a topology without masses/charges
        return None


def _labels(atoms) -> dict:
    """Names, ids, species and residues of the written atoms, as a convert under MPI writes them
    (:func:`~trajscale.topology.atom_arrays`): every executor writes the same file."""
    return {k: v for k, v in atom_arrays(atoms).items() if k not in ("masses", "charges")}


def scanned_offsets(trajectories: list[Location]) -> list:
    """Per input: its XTC/TRR frame offsets (``parts.encode_offsets``' string), else None."""
    out = []
    for where in trajectories:
        check_input_file(where.where)
        out.append(registry.part_record(where)["offsets"] if registry.guess(where).source.ships_offsets else None)
    return out
