"""ParallelWriter: H5MD frames from domain-decomposed or frame-parallel producers.

The file structure is ``h5md.writer.H5MDWriter``'s; this module decides who writes which rows:

* ``gather``: every rank's rows go to rank 0 (``Gatherv``), which writes the frame.
* ``independent``: each rank writes its own rows, sorted into runs of consecutive ids, with independent
  MPI-IO (one HDF5 write of a union of hyperslabs).
* ``collective``: two-phase I/O - an ``Alltoallv`` gives each rank a contiguous range of global ids, then
  one collective MPI-IO write per frame.

A frame counts only once every rank's rows are written and flushed, and by default the file counts it before
``write`` returns (``publish``). The file lives under a temporary name until its first frame is complete.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from pathlib import Path

import h5py
import numpy as np

from ..errors import ConfigError, OutputError, ParallelUnavailableError, ParallelWriteError
from ..h5md.codecs import encode, lossy_attrs_for
from ..h5md.writer import H5MDWriter, in_file_units
from ..parallel import h5py_has_mpi, when_all_arrive
from ..sharing import share_on_comm
from ..topology import atom_arrays
from ..units import factor
from ..util import check_output_path, temporary_name
from . import exchange as ex
from .settings import WriterSettings
from .slabs import merge_ranges, write_at

log = logging.getLogger(__name__)

#: Runs of consecutive ids per independent write (see ``_write_runs``).
MAX_HYPERSLAB_RUNS = 256


@functools.cache
def _say_serial(why: str) -> None:
    log.warning("ParallelWriter: %s; frames are written serially by rank 0", why)


class ParallelWriter:
    """Write one H5MD file from many ranks.

    Parameters
    ----------
    path
        Output file; it appears under this name once its first frame is complete.
    n_atoms
        Atoms per frame (global).
    comm
        MPI communicator, or None for serial writes.
    topology
        MDAnalysis Universe or AtomGroup (on rank 0 at least): names, ids,
        masses, charges and species are written once.
    reference
        The first frame's positions, for delta-coded positions written by several
        ranks (each encodes its own frames against it).
    settings
        A :class:`~trajscale.pwrite.WriterSettings`; the keyword options replace its fields (or the
        defaults' without it).
    **options
        Fields of :class:`~trajscale.pwrite.WriterSettings` (``strategy``, ``chunks``, ``compression``,
        ``precision``, ``units``, ``velocities``, ``overwrite``, ``publish``, ...), documented there; any
        other name is refused with one ``ConfigError`` naming it.
    """

    def __init__(self, path: str | os.PathLike, n_atoms: int, *, comm=None, topology=None,
                 reference: np.ndarray | None = None, settings: WriterSettings | None = None,
                 **options) -> None:
        s = self.settings = WriterSettings.of(settings, **options)
        self.path = Path(path)
        self.n_atoms = int(n_atoms)
        self.comm = comm
        self.size = comm.Get_size() if comm is not None else 1
        self.rank = comm.Get_rank() if comm is not None else 0
        self.strategy, self.check, self.fields = s.strategy, s.check, s.fields
        self.units = s.file_units()
        #: per field: value in the file = value given / factor
        self._factors = {q: factor(q, u) for q, u in self.units.items()}
        self.layout = s.file_layout()
        #: lossy positions (h5md.codecs): encoded by the rank that holds them, before any collective write
        self._lossy = None if s.precision is None else lossy_attrs_for(
            s.precision, s.encoding, self.units["position"], self._factors["position"])
        self.mpio = comm is not None and h5py_has_mpi()
        self._check_parallel()
        #: this rank has the file open (every rank under mpio, else rank 0)
        self.opens = self.mpio or self.rank == 0
        self._collective_io = self.mpio and (s.strategy == "collective" or bool(self.layout.compression))
        self._published = False
        self._ncommitted = 0   # frames complete; every rank runs the same commits
        # write_frames: step/time not yet committed (rank 0)
        self._pending: list[tuple[int, np.ndarray, np.ndarray]] = []
        self._written: list[tuple[int, int]] = []   # write_frames: merged frame ranges written
        self._w: H5MDWriter | None = None
        if s.resume_at is not None:
            self._reopen(int(s.resume_at), s.n_frames)
        else:
            self._create(topology, reference)

    def _check_parallel(self) -> None:
        """Refuse a strategy this h5py cannot write in parallel; say when frames are written serially."""
        if self.comm is not None and not self.mpio:
            if self.strategy != "gather" and self.size > 1:
                raise ParallelUnavailableError(
                    f"strategy {self.strategy!r} needs h5py built with MPI (parallel HDF5), and this h5py "
                    "has none: use strategy='gather', or build h5py against parallel HDF5")
            _say_serial("h5py is built without MPI")
        elif self.comm is None:
            log.info("ParallelWriter: no communicator; writing serially")
        if self.mpio and self.layout.compression and self.strategy == "independent":
            raise ConfigError("parallel HDF5 writes compressed data only collectively: "
                              "use strategy 'collective' or 'gather', or no compression")

    def _create(self, topology, reference: np.ndarray | None) -> None:
        """Create the file under a temporary name; rank 0's checks fail every rank together
        (:func:`~trajscale.sharing.share_on_comm`), so no rank waits for a broadcast that never comes."""
        s = self.settings

        def make() -> tuple[str, dict | None]:
            check_output_path(self.path, s.overwrite)
            tmp, meta = str(temporary_name(self.path)), atom_arrays(topology)
            if not self.mpio and self.opens:   # the file is rank 0's alone: its creation is part of the step
                self._w = self._new_writer(Path(tmp), reference, meta)
            return tmp, meta

        tmp, meta = share_on_comm(self.comm, make, f"create {self.path}")
        self._tmp = Path(tmp)
        if self.mpio:   # every rank opens the file together (MPI-IO)
            self._w = self._new_writer(self._tmp, reference, meta)
        self._share_codec()

    def _new_writer(self, tmp: Path, reference: np.ndarray | None, meta: dict | None) -> H5MDWriter:
        s = self.settings
        return H5MDWriter(tmp, self.n_atoms, n_frames=s.n_frames, layout=self.layout, fields=self.fields, box=s.box,
                          group=s.group, units=self.units, driver="mpio" if self.mpio else None,
                          comm=self.comm if self.mpio else None, mpi_info=self._hints(), precision=s.precision,
                          encoding=s.encoding, reference=reference, **(meta or {}))

    def _reopen(self, n: int, n_frames: int | None) -> None:
        """Open the file an interrupted run left at ``self.path``, its first ``n`` frames counted (rank 0's
        check, and its open when it alone holds the file, fail every rank together)."""
        def check() -> None:
            if not self.path.is_file():
                raise OutputError(self.path, "no partial file to continue")
            if not self.mpio and self.opens:
                self._w = self._reopened(n, n_frames)

        share_on_comm(self.comm, check, f"reopen {self.path}")
        if self.mpio:
            self._w = self._reopened(n, n_frames)
        self._share_codec()
        self._published = True
        self._ncommitted = n
        self._written = [(0, n)] if n else []

    def _reopened(self, n: int, n_frames: int | None) -> H5MDWriter:
        return H5MDWriter.reopen(self.path, n, n_frames, driver="mpio" if self.mpio else None,
                                 comm=self.comm if self.mpio else None, mpi_info=self._hints())

    def _share_codec(self) -> None:
        """Every rank encodes its own frames with the codec of the file rank 0 holds."""
        self._codec = self._bcast(self._w._codec if self._w is not None else None) if self._lossy else None

    # -- public API -----------------------------------------------------------------------------

    @property
    def n_frames(self) -> int:
        """Frames complete (every rank's rows written and flushed; the file counts them too with ``publish``)."""
        return self._ncommitted

    def write(self, *, step: int, time: float, ids, positions, box=None, velocities=None,
              forces=None) -> None:
        """Append one frame from domain-decomposed ranks (collective: every rank calls it).

        Parameters
        ----------
        step, time
            The frame's step and time (rank 0's are kept).
        ids
            ``(k,)`` global indices of the atoms this rank holds, any order.
        positions, velocities, forces
            ``(k, 3)`` rows for those atoms.
        box
            ``[a, b, c, alpha, beta, gamma]`` (rank 0's is kept), or None.
        """
        frame = self._ncommitted
        given = {"positions": positions, "velocities": velocities, "forces": forces}
        arrays = {n: given[n] for n, fl in zip(("positions", "velocities", "forces"),
                                                 ("position", "velocity", "force"), strict=False) if fl in self.fields}
        ids = np.asarray(ids)
        problem = ex.local_problems(self.n_atoms, ids, arrays, self.check)
        if problem is None and self.rank == 0 and box is not None and np.size(box) != 6:
            problem = f"box has shape {np.shape(box)}, expected (6,): [a, b, c, alpha, beta, gamma]"
        msg = ex.agree(self.comm, problem, ids if problem is None else np.empty(0, np.int64), self.n_atoms)
        if msg:
            self._fail(f"frame {frame}: {msg}")
        if self._lossy and self._lossy["trajscale_encoding"] != "floats":
            raise ConfigError("delta-coded positions need whole frames on one rank: use write_frames, "
                              "or encoding 'floats'")
        packed = ex.Frame(ids, [self._in_file_units(a, fl) if fl != "position" or not self._lossy
                                else encode(self._in_file_units(a, fl), self._lossy)   # floats: per value
                                for a, fl in zip(arrays.values(), self.fields, strict=False)])
        if self._w is not None:
            self._w.reserve(frame + 1)
        if self.comm is None or self.size == 1:
            rows = np.empty((self.n_atoms, packed.width), np.float32)
            ex.place(rows, packed.ids, packed.rows)
            self._write_rows(frame, 0, rows)
        elif self.strategy == "gather":
            rows = ex.gather_to_root(self.comm, packed, self.n_atoms)
            self._write_rows(frame, 0, rows)
        elif self.strategy == "collective":
            lo, rows = ex.exchange(self.comm, packed, self.n_atoms)
            self._write_rows(frame, lo, rows)
        else:
            self._write_runs(frame, *ex.sort_rows(packed, self.n_atoms))
        if self.rank == 0 and self.settings.box is not None:
            b = np.zeros((1, 6), np.float32) if box is None else np.asarray(box, np.float32).reshape(1, 6)
            self._write_box(frame, self._w.edges(b, 1))
        elif self.mpio and self.settings.box is not None and self._collective_io:
            self._write_box(frame, None)
        self._commit(frame + 1, np.array([step]) if self.rank == 0 else None,
                     np.array([time]) if self.rank == 0 else None)

    def write_frames(self, start: int, positions, *, step, time, box=None, velocities=None,
                     forces=None) -> None:
        """Write this rank's frames ``[start, start + len(positions))`` (collective).

        Every rank calls it together, each with its own frames (possibly none), which must not overlap
        another rank's or frames already written.  Frames count once every frame before them is written.
        Under MPI-IO each rank writes its own frames; without it rank 0 writes every rank's in turn.
        """
        positions = np.asarray(positions, dtype=np.float32)
        k = len(positions)
        given = {"position": positions, "velocity": velocities, "force": forces}
        problem = None
        try:
            start = int(start)
            self._check_slab(start, given, step, time, box)
            if self._lossy and k:   # here, so that a value that cannot be encoded fails every rank together
                given["position"] = self._encode_slab(positions)
        except ValueError as exc:
            problem = str(exc)
        slabs = self._agree_slabs(start, k, problem)
        if not any(n for _, _, n in slabs):
            return
        if self._w is not None:
            self._w.reserve(max(a + n for _, a, n in slabs))
        self._write_slabs(slabs, start, k, given, box)
        self._written = merge_ranges(self._written + [(a, a + n) for _, a, n in slabs if n])
        self._commit_prefix(start, step, time)

    def _check_slab(self, start: int, given: dict, step, time, box) -> None:
        """Raise ValueError naming the first array of this rank's slab with a wrong shape (or non-finite)."""
        positions = given["position"]
        k = len(positions)
        if positions.ndim != 3 or positions.shape[1:] != (self.n_atoms, 3):
            raise ValueError(f"positions has shape {positions.shape}, expected ({k}, {self.n_atoms}, 3)")
        for fl in self.fields[1:]:
            if given[fl] is None or np.shape(given[fl]) != positions.shape:
                raise ValueError(f"{fl} has shape {np.shape(given[fl])}, expected {positions.shape}")
        for name, val in (("step", step), ("time", time)):
            if np.shape(val) != (k,):
                raise ValueError(f"{name} has shape {np.shape(val)}, expected ({k},)")
        if box is not None and np.shape(box) != (k, 6):
            raise ValueError(f"box has shape {np.shape(box)}, expected ({k}, 6)")
        if self.check:
            for fl in self.fields:
                bad = ~np.isfinite(np.asarray(given[fl])).all(axis=(1, 2))
                if bad.any():
                    raise ValueError(f"non-finite {fl} in frames {ex._show(start + np.flatnonzero(bad))}")

    def _encode_slab(self, positions: np.ndarray) -> np.ndarray:
        """This rank's positions, lossy-coded in the file's units (ValueError if they cannot be)."""
        inside = self._in_file_units(positions, "position")
        if self._codec is None and self._lossy["trajscale_encoding"] != "floats":
            if self.size > 1:
                raise ValueError("delta-coded positions written by several ranks need the first "
                                 "frame as ParallelWriter(reference=...)")
            # one process holds the file: it plans the codec from this first frame
            encoded = self._w.encode_positions(inside)
            self._codec = self._w._codec
            return encoded
        return encode(inside, self._lossy, self._codec)

    def _agree_slabs(self, start: int, k: int, problem: str | None) -> list[tuple[int, int, int]]:
        """Every rank's ``(rank, start, frames)``, once every rank knows no slab is bad or overlaps another."""
        every = [(0, start, k, problem)] if self.comm is None else \
            [(r, *t) for r, t in enumerate(when_all_arrive(self.comm, self.comm.allgather, (start, k, problem)))]
        bad = [f"rank {r}, frames [{a}, {a + n}): {p}" for r, a, n, p in every if p]
        bad += self._overlaps([(r, a, n) for r, a, n, p in every if n and not p])
        if bad:
            self._fail("; ".join(bad))
        return [(r, a, n) for r, a, n, _ in every]

    def _write_slabs(self, slabs: list[tuple[int, int, int]], start: int, k: int, given: dict, box) -> None:
        """Under MPI-IO (or alone) each rank writes its own slab; else rank 0 writes each rank's in turn."""
        if self.mpio or self.comm is None or self.size == 1:
            self._write_slab(start, k, given, box)
            return
        for r, a, n in slabs:
            if not n:
                continue
            if r == self.rank == 0:
                self._write_slab(start, k, given, box)
            elif r == self.rank:
                self.comm.send((given, box), dest=0, tag=7)
            elif self.rank == 0:
                g, b = self.comm.recv(source=r, tag=7)
                self._write_slab(a, n, g, b)

    def _commit_prefix(self, start: int, step, time) -> None:
        """Gather every slab's step/time on rank 0 and commit the frames now complete from frame 0 on."""
        meta = (start, np.asarray(step, np.int64), np.asarray(time, np.float64))
        metas = [meta] if self.comm is None else self.comm.gather(meta, root=0)
        if self.rank == 0:
            self._pending = sorted(self._pending + [m for m in metas if len(m[1])], key=lambda m: m[0])
        prefix = self._written[0][1] if self._written and self._written[0][0] == 0 else 0
        if prefix > self._ncommitted:
            steps = times = None
            if self.rank == 0:   # pending pieces tile the frames from the last commit on
                done = [m for m in self._pending if m[0] < prefix]
                self._pending = [m for m in self._pending if m[0] >= prefix]
                steps = np.concatenate([m[1] for m in done])
                times = np.concatenate([m[2] for m in done])
            self._commit(prefix, steps, times)

    def close(self, error: bool = False) -> None:
        """Close the file; remove it if no frame was ever complete and this is an error exit."""
        lost = [r for r in self._written if r[1] > self._ncommitted]
        if lost and self.rank == 0:
            log.warning("%s: frames %s were written but frames before them never were: dropped",
                        self.path, ", ".join(f"[{max(a, self._ncommitted)}, {b})" for a, b in lost))
        if self._w is not None:
            self._w.close(abandoned=error)   # an error or interrupt says so itself
        if self.rank == 0:
            if not self._published and error:
                with contextlib.suppress(FileNotFoundError):
                    self._tmp.unlink()
            elif not self._published:
                os.replace(self._tmp, self.path)
                self._published = True
        if self.comm is not None:
            when_all_arrive(self.comm, self.comm.Barrier)

    def __enter__(self) -> ParallelWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(error=exc_type is not None)

    # -- internals --------------------------------------------------------------------------------

    def _hints(self):
        """MPI-IO hints: independent writes of scattered runs skip ROMIO's data sieving (which reads, patches
        and rewrites the whole span under a file lock)."""
        if not (self.mpio and self.strategy == "independent"):
            return None
        from mpi4py import MPI

        info = MPI.Info.Create()
        info.Set("romio_ds_write", "disable")
        return info

    def _in_file_units(self, arr, quantity: str) -> np.ndarray:
        return in_file_units(arr, self._factors[quantity])

    def _bcast(self, obj):
        return obj if self.comm is None else when_all_arrive(self.comm, self.comm.bcast, obj, root=0)

    def _fail(self, problem: str):
        err = ParallelWriteError(self.path, problem)
        err.reported_elsewhere = self.rank != 0
        raise err

    def _overlaps(self, ranges: list[tuple[int, int, int]]) -> list[str]:
        """Frame ranges that overlap each other or frames already written (one range per rank)."""
        out = []
        for r, a, n in ranges:
            for r2, a2, n2 in ranges:
                if r < r2 and a < a2 + n2 and a2 < a + n:
                    out.append(f"ranks {r} and {r2} both write frames [{max(a, a2)}, {min(a + n, a2 + n2)})")
            for w0, w1 in self._written:
                if a < w1 and w0 < a + n:
                    out.append(f"rank {r}: frames [{max(a, w0)}, {min(a + n, w1)}) were already written")
            if a < 0:
                out.append(f"rank {r}: negative start frame {a}")
        return out

    def _commit(self, n: int, steps, times) -> None:
        if self._w is not None:   # the first frame is always published: the rename follows
            s = self.settings
            self._w.commit(n, steps, times, publish=s.publish or not self._published, fsync=s.durable)
        self._ncommitted = n
        if not self._published:   # the first complete frame: the file takes its final name
            if self.rank == 0:
                os.replace(self._tmp, self.path)
            if self._w is not None:
                self._w.renamed(self.path)
            self._published = True
            if self.comm is not None:
                self.comm.Barrier()

    def _dxpl(self):
        if not self._collective_io:
            return None
        dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
        dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE)
        return dxpl

    def _write_rows(self, frame: int, lo: int, rows: np.ndarray | None) -> None:
        """Rows ``lo, lo + 1, ...`` of one frame, one column triple per field (None: nothing here)."""
        for i, fl in enumerate(self.fields):
            data = None if rows is None else np.ascontiguousarray(rows[None, :, 3 * i:3 * i + 3])
            if data is not None or self._collective_io:
                write_at(self._w.value(fl), (frame, lo, 0), data, self._dxpl())

    def _write_runs(self, frame: int, sorted_ids: np.ndarray, rows: np.ndarray) -> None:
        """Independent: this rank's rows, one HDF5 write per batch of id runs (HDF5 merges each hyperslab into
        a selection's union in time quadratic in its blocks; a point selection makes an MPI datatype block per
        value; docs/benchmarks.md measures it)."""
        starts, lengths = ex.runs(sorted_ids)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        for i, fl in enumerate(self.fields):
            ds = self._w.value(fl)
            for j in range(0, len(starts), MAX_HYPERSLAB_RUNS):   # one write per batch of runs
                fspace = ds.id.get_space()
                fspace.select_none()
                batch = slice(j, j + MAX_HYPERSLAB_RUNS)
                for a, n in zip(starts[batch].tolist(), lengths[batch].tolist(), strict=False):
                    fspace.select_hyperslab((frame, a, 0), (1, n, 3), op=h5py.h5s.SELECT_OR)
                r0, r1 = offsets[j], offsets[min(j + MAX_HYPERSLAB_RUNS, len(starts))]
                data = np.ascontiguousarray(rows[r0:r1, 3 * i:3 * i + 3])
                ds.id.write(h5py.h5s.create_simple(data.shape), fspace, data)

    def _write_box(self, frame: int, edges: np.ndarray | None) -> None:
        ds = self._w.value("box")
        write_at(ds, (frame,) + (0,) * (ds.ndim - 1), edges, self._dxpl())

    def _write_slab(self, start: int, k: int, given: dict, box) -> None:
        """Frames [start, start + k) of every field (and the box) from this rank."""
        for fl in self.fields:
            encoded = fl == "position" and self._lossy   # (write_frames encoded it already)
            data = np.ascontiguousarray(given[fl] if encoded else self._in_file_units(given[fl], fl)) if k else None
            write_at(self._w.value(fl), (start, 0, 0), data, self._dxpl())
        if self.settings.box is not None:
            edges = self._w.edges(np.zeros((k, 6), np.float32) if box is None else np.asarray(box), k) \
                if k else None
            self._write_box(start, edges)
