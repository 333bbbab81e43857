"""Write one range of a conversion's output frames into a file, resumably: the worker's side.

A :class:`ConvertJob` holds, as plain values, the frames each output range takes from each file and each file's
step/time shift, so a worker opens only the files of its own range.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..h5md.layout import Layout
from ..h5md.writer import H5MDWriter
from ..util import polling_for_stop, raise_if_stopped, slow_phase_for_tests
from . import stream
from .resume import load_record, save_record

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConvertJob:
    """A conversion, as plain values: inputs, what to write, and where each output frame comes from."""

    topology: str
    trajectories: tuple[str, ...]
    lengths: tuple[int, ...]               # frames per input file
    plans: tuple[tuple[int, int, int], ...]   # per file: the (start, stop, step) range of its kept frames
    shifts: tuple                          # per file: (step, time) shift (``sources.chain.plan_join``)
    atoms: np.ndarray | None
    fields: tuple[str, ...]
    n_atoms: int                           # atoms written
    n_frames: int                          # output frames
    layout: Layout
    box: str | None
    group: str                             # the output's particle group
    units: dict
    masses: np.ndarray | None = None
    charges: np.ndarray | None = None
    observables: dict | None = None        # name -> (shape, dtype str): from a single H5MD input
    in_group: str | None = None            # --group / --assume-units for H5MD inputs
    assume_units: str | None = None
    precision: float | None = None         # lossy positions (h5md.codecs)
    encoding: str = "floats"
    reference: np.ndarray | None = None    # "deltas": the first output frame's positions (Å)
    #: per input: XTC/TRR frame offsets (``parts.encode_offsets``) scanned by the preparing process, else None
    offsets: tuple[str | None, ...] | None = None
    #: the written atoms' names, ids, species and residues (:func:`~trajscale.topology.atom_arrays`): the output
    #: is then its own topology (``trajscale.topology.h5md``)
    atom_labels: dict | None = None

    def writer(self, path, n_frames: int) -> H5MDWriter:
        """A new writer of ``n_frames`` frames with this job's structure."""
        w = H5MDWriter(path, self.n_atoms, n_frames=n_frames, layout=self.layout, fields=self.fields,
                       box=self.box, group=self.group, masses=self.masses, charges=self.charges,
                       units=self.units, precision=self.precision, encoding=self.encoding,
                       reference=self.reference, **(self.atom_labels or {}))
        for name, (shape, dtype) in (self.observables or {}).items():
            w.add_observable(name, tuple(shape), np.dtype(dtype))
        return w

    def pieces(self, i0: int, i1: int) -> list[tuple[int, range, tuple]]:
        """The (file index, its frames, shift) of output frames ``[i0, i1)``, in order."""
        out, at = [], 0
        for k, (plan, shift) in enumerate(zip(self.plans, self.shifts, strict=False)):
            frames = range(*plan)
            lo, hi = max(i0 - at, 0), min(i1 - at, len(frames))
            if hi > lo:
                out.append((k, frames[lo:hi], shift))
            at += len(frames)
        return out


# Parsed topologies of this process.  The preparing process puts its own here, so
# workers forked from it start with the topology parsed (a 47,681-atom GRO takes ~0.5 s).
def open_input(job: ConvertJob, k: int):
    """The Source of input ``k``, as the format registry decides, with the shipped XTC/TRR offsets."""
    return stream.open_input_file(job.trajectories[k], job.in_group, job.assume_units,
                                  offsets=job.offsets[k] if job.offsets else None)


def iter_slabs(job: ConvertJob, i0: int, i1: int, sources=None, opened=None):
    """Yield ``(block, step, time, observables)`` of output frames ``[i0, i1)`` in slabs of at most
    ``stream.SLAB_BYTES``, step/time shifted as the join says; inputs not open in ``sources`` are opened
    into ``opened`` (the caller closes them).  Stops between slabs on a recorded SIGTERM.
    """
    opened = {} if opened is None else opened
    for k, frames, shift in job.pieces(i0, i1):
        src = (sources or {}).get(k) or opened.get(k)
        if src is None:
            src = opened[k] = open_input(job, k)
        slab = max(1, stream.SLAB_BYTES // src.bytes_per_frame(job.atoms, job.fields))
        for a in range(0, len(frames), slab):
            raise_if_stopped()
            slow_phase_for_tests("read", "")   # TRAJSCALE_TEST_SLOW_READ: a signal's tests need time to land
            idx = frames[a:a + slab]
            b = src.read(idx.start, idx[-1] + 1, job.atoms, job.fields, stride=idx.step)
            # (a single input that keeps observables, read without a stride)
            obs = src.read_observables(job.observables, idx.start, idx[-1] + 1) if job.observables else {}
            yield b, b.step + shift[0], b.time + shift[1], obs


def write_range(job: ConvertJob, i0: int, i1: int, path: str, record_path: str, sources=None,
                bar=None) -> int:
    """Write output frames ``[i0, i1)`` to ``path``, continuing after the ``n`` frames ``record_path``'s
    ``{"done": n, ...}`` counts; return the frames written now.  ``sources``: open Sources by input index
    (others are opened here).  Stops between slabs on a recorded SIGTERM.
    """
    record = load_record(record_path) or {}
    done = int(record.get("done", 0))
    if done >= i1 - i0:
        return 0
    if done:
        writer = H5MDWriter.reopen(path, done, n_frames=i1 - i0)
    else:
        writer = job.writer(path, i1 - i0)
    opened = {}
    try:
        with writer, polling_for_stop():
            for b, step, t, obs in iter_slabs(job, i0 + done, i1, sources, opened):
                writer.write(position=b.positions, velocity=b.velocities, force=b.forces,
                             step=step, time=t, box=b.box, observables=obs)
                record["done"] = writer.n_written   # committed (flushed) before it is recorded
                save_record(record_path, record)
                if bar is not None:
                    bar.update(len(step))
            raise_if_stopped()
    finally:
        for src in opened.values():
            src.close()
    return i1 - i0 - done
