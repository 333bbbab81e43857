"""A Source for every trajectory format MDAnalysis reads (XTC, TRR, DCD, NetCDF, ...)."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import numpy as np

from ..block import FIELD_ATTRS, Block
from ..facts import LayoutFacts
from ..sources.base import Source
from ..topology import load_universe
from .traits import MDA

log = logging.getLogger(__name__)


def copy_frames(reader, start: int, stop: int, stride: int, sel: np.ndarray | None, out: dict[str, np.ndarray],
                box: np.ndarray, time: np.ndarray, step: np.ndarray) -> None:
    """Frames ``start:stop:stride`` of an MDAnalysis reader into preallocated rows (selected atoms only)."""
    for i, ts in enumerate(reader[start:stop:stride]):
        for fl, arr in out.items():
            src = getattr(ts, FIELD_ATTRS[fl])
            if sel is None:
                arr[i] = src
            else:
                np.take(src, sel, axis=0, out=arr[i])
        if ts.dimensions is not None:
            box[i] = ts.dimensions
        time[i] = ts.time
        step[i] = ts.data.get("step", ts.frame)


class MDASource(Source):
    """Frames from any MDAnalysis-readable trajectory, each frame's selected atoms copied from the reused Timestep."""

    traits = MDA

    def __init__(self, topology: str, trajectories, parsed_topology=None, **kw) -> None:
        self.topology = str(topology)
        given = [trajectories] if isinstance(trajectories, (str, Path)) else trajectories
        self.trajectories = [str(t) for t in given]
        # A topology already parsed (an MDAnalysis Topology) saves re-parsing it per file.
        self.universe = load_universe(self.topology, self.trajectories, parsed=parsed_topology, **kw)
        self.reader = self.universe.trajectory
        self.bytes_read = 0

    @property
    def path(self) -> str:
        return self.trajectories[0] if self.trajectories else self.topology

    @property
    def n_frames(self) -> int:
        return int(self.reader.n_frames)

    @property
    def n_atoms(self) -> int:
        return int(self.universe.atoms.n_atoms)

    @property
    def fields(self) -> tuple[str, ...]:
        ts = self.reader.ts
        return tuple(fl for fl, has in (("position", True), ("velocity", ts.has_velocities),
                                         ("force", ts.has_forces)) if has)

    @property
    def native_units(self) -> dict[str, str]:
        """The units the files store, as MDAnalysis's reader for their format declares them."""
        return dict(self.reader.units or {})

    def get_config(self) -> dict:
        return {"kind": self.kind, "topology": self.topology, "trajectories": list(self.trajectories)}

    def layout_summary(self) -> LayoutFacts:
        return LayoutFacts(format=str(self.reader.format), path=self.path, n_files=len(self.trajectories),
                           n_atoms=self.n_atoms,   # the reader decodes all of them, whatever is selected
                           decoding=self.decoding_of(str(self.reader.format)))

    def frames_universe(self):
        return self.universe

    def decode_seconds_per_frame(self) -> float:
        from ..sources.registry import decode_s_per_atom

        return decode_s_per_atom(str(self.reader.format)) * self.n_atoms

    def read(self, start: int, stop: int, atoms: np.ndarray | None = None,
             fields: tuple[str, ...] = ("position",), stride: int = 1) -> Block:
        self.check_range(start, stop)
        self.check_request(atoms, fields)
        n = len(range(start, stop, stride))
        sel = None if atoms is None else np.asarray(atoms, dtype=np.intp)
        n_sel = self.n_atoms if atoms is None else len(sel)
        out = {fl: self._out_array(fl, (n, n_sel, 3)) for fl in fields}
        box = np.zeros((n, 6), np.float32)
        time = np.empty(n, np.float64)
        step = np.empty(n, np.int64)
        copy_frames(self.reader, start, stop, stride, sel, out, box, time, step)
        self.bytes_read += sum(a.nbytes for a in out.values())
        return Block(start, stop, out["position"], box, time, step,
                     velocities=out.get("velocity"), forces=out.get("force"), stride=stride)

    def close(self) -> None:
        with contextlib.suppress(Exception):   # closing never raises: the frames were already read
            self.reader.close()
