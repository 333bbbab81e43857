"""Convert any MDAnalysis-readable trajectory (or several, concatenated) to H5MD."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, InputFileError
from ..sources import H5MDSource
from ..sources.mda import load_universe
from ..sources.selection import select_atoms
from ..store.writer import H5MDWriter
from ..store.layout import Layout
from ..store.units import MDANALYSIS_QUANTITY, WRITE_UNITS, from_mdanalysis, unit_system
from ..util import atomic_output, check_output_path, polling_for_stop, raise_if_stopped
from .stream import Renumberer, frame_plan, iter_blocks, open_inputs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConvertSummary:
    output: str
    n_frames: int
    n_atoms: int
    fields: tuple[str, ...]
    layout: str
    files_renumbered: int
    seconds: float
    bytes_written: int


def convert(topology: str, trajectories: list[str], output: str, *, layout: Layout | None = None,
            select: str | None = None, start: int | None = None, stop: int | None = None,
            step: int | None = None, velocities: bool = True, forces: bool = True,
            overwrite: bool = False, progress: bool = False, units: str = "mdanalysis",
            group: str | None = None, assume_units: str | None = None, comm=None,
            precision: float | None = None, encoding: str = "floats") -> ConvertSummary:
    """Write ``trajectories`` (concatenated in order) to ``output`` as H5MD.

    The file is written under a temporary name and renamed only when complete,
    so an error or an interrupt leaves nothing under ``output``.

    ``units`` is the unit system written: ``"mdanalysis"`` (Å, ps, kJ/(mol Å);
    MDAnalysis reads it without conversion), ``"gromacs"`` (nm, ps,
    kJ/(mol nm)) or ``"source"`` (the inputs' own: an H5MD file's unit
    attributes, a format's native units as MDAnalysis knows them). ``group``
    and ``assume_units`` apply to H5MD inputs (see :class:`H5MDSource`).  With an
    MPI ``comm`` of several ranks, each rank converts its own range of frames
    into the one file (``convert.parallel``). ``precision`` (Å) and ``encoding`` store
    positions lossy (:mod:`trajscale.store.codecs`).
    """
    t0 = time.perf_counter()
    layout = layout or Layout()
    check_output_path(output, overwrite)
    if precision is not None and not precision > 0:
        raise ConfigError(f"--precision must be positive, got {precision}")
    if encoding == "deltas" and (precision is None or not layout.compression):
        raise ConfigError("--encoding deltas needs --precision and a --compression (zstd or blosc-zstd pay most)")
    if units != "source":
        unit_system(units)   # an unknown name fails before any work
    universe = load_universe(topology)
    atoms = select_atoms(universe, select, "selection").indices if select else None
    sel_atoms = universe.atoms if atoms is None else universe.atoms[atoms]
    sources = open_inputs(topology, list(trajectories), universe, group, assume_units)
    try:
        fields = ("position",)
        if velocities and all("velocity" in s.fields for s in sources):
            fields += ("velocity",)
        if forces and all("force" in s.fields for s in sources):
            fields += ("force",)
        plans, n_frames = frame_plan([s.n_frames for s in sources], start, stop, step)
        if n_frames == 0:
            raise InputFileError(trajectories[0], "the frame range selects no frames")
        src0, frames0 = next((s, p) for s, p in zip(sources, plans) if len(p))
        first = src0.read(frames0[0], frames0[0] + 1, atoms)   # a kept frame: skipped ones are never read
        has_box = bool(np.any(first.box[:, :3] > 0))
        h5 = sources[0] if isinstance(sources[0], H5MDSource) else None
        out_group = h5.info.group if h5 else "all"
        out_units = unit_system(units) if units != "source" else source_units(sources, fields)
        if comm is not None and comm.Get_size() > 1:
            from .parallel import convert_parallel

            return convert_parallel(comm, sources, sel_atoms, output, layout=layout, atoms=atoms, fields=fields,
                                    start=start, stop=stop, step=step, has_box=has_box, overwrite=overwrite,
                                    summary_cls=ConvertSummary, units=out_units, group=out_group,
                                    precision=precision, encoding=encoding)
        renumber = Renumberer()
        # Poll for SIGTERM for the whole life of the temporary file, so a signal
        # during set-up or the last block also stops before the rename.
        with polling_for_stop(), atomic_output(output, overwrite=overwrite) as tmp:
            writer = H5MDWriter(tmp, len(sel_atoms), n_frames=n_frames, layout=layout, fields=fields,
                                box="triclinic" if has_box else None, group=out_group,
                                masses=_attr(sel_atoms, "masses"), charges=_attr(sel_atoms, "charges"),
                                units=out_units, precision=precision, encoding=encoding)
            with writer:
                observables = _observable_names(sources) if step in (None, 1) else {}
                for name, (shape, dtype) in observables.items():
                    writer.add_observable(name, shape, dtype)
                from tqdm import tqdm

                with tqdm(total=n_frames, disable=not progress, unit="frame", desc="convert") as bar:
                    for block in iter_blocks(sources, atoms, fields, start, stop, step, renumber):
                        writer.write(position=block.positions, velocity=block.velocities,
                                     force=block.forces, step=block.step, time=block.time,
                                     box=block.box, observables=_read_observables(sources, block, observables))
                        bar.update(block.n_frames)
                raise_if_stopped()
        if renumber.renumbered:
            log.warning("renumbered step and time of %d input file(s) so they keep increasing "
                        "(H5MD requires increasing steps)", renumber.renumbered)
        import os

        return ConvertSummary(str(output), n_frames, len(sel_atoms), fields, layout.describe(),
                              renumber.renumbered, time.perf_counter() - t0, os.path.getsize(output))
    finally:
        for s in sources:
            s.close()


def source_units(sources, fields: tuple[str, ...]) -> dict[str, str]:
    """The units the inputs store their data in (``convert --units source``).

    An H5MD input's unit attributes; for other formats the native units
    MDAnalysis's reader declares (XTC/TRR nm, DCD Å and AKMA, ...). Inputs
    that disagree are an error. A quantity no input names a unit for (a
    reader that leaves it undeclared) keeps trajscale's, as MDAnalysis
    handed it over unconverted.
    """
    found: dict[str, dict[str, str]] = {}
    for src in sources:
        for q, unit in _native_units(src).items():
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


def _native_units(src) -> dict[str, str | None]:
    if isinstance(src, H5MDSource):
        return dict(src.info.units)
    native = getattr(src.reader, "units", None) or {}
    return {q: from_mdanalysis(q, native.get(MDANALYSIS_QUANTITY[q]))
            for q in ("position", "box", "velocity", "force", "time")}


def _attr(atoms, name: str):
    try:
        return np.asarray(getattr(atoms, name), dtype=np.float64)
    except Exception:   # topology without masses/charges
        return None


def _observable_names(sources) -> dict:
    """Observables kept from an H5MD source (only when converting a single H5MD file)."""
    if len(sources) != 1 or not isinstance(sources[0], H5MDSource):
        return {}
    f = sources[0].file
    out = {}
    for name in sources[0].info.observables:
        val = f["observables"][name]
        if hasattr(val, "keys") and "value" in val and val["value"].ndim >= 1 \
                and val["value"].shape[0] == sources[0].n_frames:
            out[name] = (val["value"].shape[1:], val["value"].dtype)
    return out


def _read_observables(sources, block, observables: dict) -> dict:
    if not observables:
        return {}
    f = sources[0].file
    # Blocks from a single source carry their source frame indices.
    return {name: f["observables"][name]["value"][block.start:block.start + block.n_frames]
            for name in observables}
