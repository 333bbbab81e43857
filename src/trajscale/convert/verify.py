"""Compare an H5MD file frame by frame with the trajectories it was converted from."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import AtomCountMismatchError
from ..progress import progress_bar
from ..sources import H5MDSource, registry
from ..sources.chain import plan_join
from ..storage.location import Location
from ..topology import written_atoms
from .options import ReadOptions, with_options
from .stream import frame_plan, iter_blocks, open_inputs

#: float32 round-off allowance: a few ulp of the largest coordinate, plus unit conversion.
RTOL = 4e-7
ATOL = 1e-5


@dataclass
class VerifyReport:
    """The largest differences :func:`verify` found (positions, box, time, step) and the problems it names."""

    n_frames: int
    n_atoms: int
    max_dx: float = 0.0
    max_dbox: float = 0.0
    max_dtime: float = 0.0
    step_mismatches: int = 0
    first_bad_frame: int | None = None
    #: positions stored lossy: the bound max_dx is checked against (Å; h5md.codecs), else None
    position_bound: float | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(topology: str, trajectories: list[str], h5md: str, *, read: ReadOptions | None = None,
           progress: bool = False, **kwargs) -> VerifyReport:
    """Frame-by-frame max ``|dx|``, time, step and box of ``h5md`` against its sources.

    Positions stored at a stated precision must lie within their quantum / 2 (<= precision / 2) of the
    source's; everything else within float32 round-off.  ``read`` is the
    :class:`~trajscale.convert.options.ReadOptions` the file was converted with (its fields may also be
    given as keywords); the sources are joined as convert joins them.
    """
    read = with_options(read or ReadOptions(), kwargs, "verify")
    atoms, _, n_top = written_atoms(topology, read.select, topology_coordinates=bool(read.select))   # (as convert)
    h5_inputs = any(registry.guess(Location(t)).source.takes_h5md_options for t in trajectories)
    out = H5MDSource(h5md, group=read.group, assume_units=read.assume_units)
    try:
        sources = open_inputs(topology, list(trajectories), n_top, read.group if h5_inputs else None,
                              read.assume_units if h5_inputs else None)
    except BaseException:
        out.close()
        raise
    try:
        join = plan_join(sources, read.continuous)
        _, n = frame_plan(join.lengths, read.start, read.stop, read.step)
        n_sel = n_top if atoms is None else len(atoms)
        rep = VerifyReport(n_frames=n, n_atoms=n_sel)
        if out.info.lossy:   # quantum in the file's unit -> Å
            rep.position_bound = out.info.lossy[1] / 2 * out.info.scales.get("position", 1.0)
        if out.n_frames != n:
            rep.problems.append(f"{h5md} has {out.n_frames} frames, the sources give {n}")
        if out.n_atoms != n_sel:
            raise AtomCountMismatchError(f"{h5md} has {out.n_atoms} atoms, the sources give {n_sel}")
        if not rep.problems:
            fields = tuple(fl for fl in out.fields if all(fl in s.fields for s in sources))
            blocks = iter_blocks(sources, atoms, fields, read.start, read.stop, read.step, join)
            _compare_all(rep, out, blocks, fields, progress)
        return rep
    finally:
        out.close()
        for s in sources:
            s.close()


def _compare_all(rep: VerifyReport, out: H5MDSource, blocks, fields: tuple[str, ...], progress: bool) -> None:
    """Compare each of the sources' ``blocks`` with the same frames of ``out``, in order."""
    pos = 0
    with progress_bar(rep.n_frames, progress, desc="verify", unit="frame", leave=True) as bar:
        for ref in blocks:
            got = out.read(pos, pos + ref.n_frames, fields=fields)
            _compare(rep, pos, ref, got, fields)
            pos += ref.n_frames
            bar.update(ref.n_frames)


def _compare(rep: VerifyReport, pos: int, ref, got, fields) -> None:
    pairs = {"position": (ref.positions, got.positions), "velocity": (ref.velocities, got.velocities),
             "force": (ref.forces, got.forces)}
    for fl in fields:
        a, b = pairs[fl]
        dx = np.abs(a.astype(np.float64) - b)
        tol = ATOL + RTOL * np.abs(a)
        if fl == "position" and rep.position_bound is not None:
            tol = tol + rep.position_bound
        bad = (dx > tol).any(axis=(1, 2)) | (np.isnan(a) != np.isnan(b)).any(axis=(1, 2))
        if fl == "position":
            rep.max_dx = max(rep.max_dx, float(np.nanmax(dx)) if dx.size else 0.0)
        _flag(rep, pos, bad, f"{fl} differs")
    dbox = np.abs(ref.box.astype(np.float64) - got.box)
    rep.max_dbox = max(rep.max_dbox, float(dbox.max()) if dbox.size else 0.0)
    _flag(rep, pos, (dbox > 1e-3 + 1e-5 * np.abs(ref.box)).any(axis=1), "box differs")
    dt = np.abs(ref.time - got.time)
    rep.max_dtime = max(rep.max_dtime, float(dt.max()) if dt.size else 0.0)
    _flag(rep, pos, dt > 1e-6 * np.maximum(1.0, np.abs(ref.time)), "time differs")
    steps_bad = ref.step != got.step
    rep.step_mismatches += int(steps_bad.sum())
    _flag(rep, pos, steps_bad, "step differs")


def _flag(rep: VerifyReport, pos: int, bad: np.ndarray, what: str) -> None:
    if bad.any():
        frame = pos + int(np.argmax(bad))
        if rep.first_bad_frame is None or frame < rep.first_bad_frame:
            rep.first_bad_frame = frame
        if len(rep.problems) < 10:
            rep.problems.append(f"frame {frame}: {what}")
