"""``rechunk`` under MPI into one file: every rank rewrites its own slabs with parallel HDF5, resumably.

Parallel HDF5 writes filtered datasets only collectively, so every round is collective (a rank without frames
joins with an empty selection); each round's prefix is flushed, then counted by rank 0, so a stopped run
continues with ``--resume`` on any number of ranks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import h5py
import numpy as np

from ..hdf5.hdf5 import ensure_filters, open_h5
from ..progress import progress_bar
from ..pwrite.slabs import write_at
from ..util import polling_for_stop
from .parallel import begin_mpi_record
from .pool import on_root, stop_together
from .recode import recoder
from .resume import Partial

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .options import WriteOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectiveCopy:
    """What every rank copies: the input file, its per-atom series, the bytes of a slab, and the output's
    file options (a remote layout's metadata block), given on every open of the output."""

    src_path: str
    names: tuple[str, ...]
    slab_bytes: int
    file_kwargs: dict = field(default_factory=dict)


def rechunk_collective(copy: CollectiveCopy, partial: Partial, write: WriteOptions, create) -> int:
    """Rewrite ``copy``'s series into ``partial.tmp`` from all ranks of ``write.comm``; return the frames
    counted before this run.  ``create(h5py.File)`` writes the output's structure (rank 0)."""
    comm, src_path, names, slab_bytes = write.comm, copy.src_path, list(copy.names), copy.slab_bytes
    file_kwargs = copy.file_kwargs
    rank, size = comm.Get_rank(), comm.Get_size()
    record = on_root(comm, lambda: _begin(partial, write.resume, create, file_kwargs))
    done = int(record["done"])
    dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
    dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE)
    with open_h5(src_path) as src, h5py.File(partial.tmp, "r+", driver="mpio", comm=comm, **file_kwargs) as dst, \
            polling_for_stop():
        pairs = [(src[n], dst[n]) for n in names]
        for sds, _ in pairs:
            ensure_filters(sds)
        recodes = [recoder(sds, dds) for sds, dds in pairs]
        n_frames = max((sds.shape[0] for sds, _ in pairs), default=0)
        cf = max((dds.chunks[0] if dds.chunks else 1 for _, dds in pairs), default=1)
        frame_bytes = max(1, sum(sds.shape[1] * 3 * sds.dtype.itemsize for sds, _ in pairs))
        slab = max(cf, slab_bytes // frame_bytes // cf * cf)   # whole chunks: no chunk shared by two ranks
        bufs = [np.empty((min(slab, sds.shape[0]), *sds.shape[1:]), sds.dtype) for sds, _ in pairs]   # reused
        if rank == 0:
            partial.say_resumed(done, n_frames)
        with progress_bar(n_frames, write.progress and rank == 0, desc="rechunk", unit="frame", initial=done,
                          leave=True) as bar:
            at = done
            while at < n_frames:
                stop_together(comm)
                a = min(n_frames, at + rank * slab)
                b = min(n_frames, a + slab)
                for (sds, dds), recode, buf in zip(pairs, recodes, bufs, strict=False):
                    hi = min(b, sds.shape[0])
                    rows = None
                    if hi > a:
                        sds.read_direct(buf, np.s_[a:hi], np.s_[:hi - a])
                        rows = recode(buf[:hi - a], a)
                    write_at(dds, (a,) + (0,) * (dds.ndim - 1), rows, dxpl)
                dst.flush()   # the round's frames on disk (MPI_File_sync) before the record counts them
                at = min(n_frames, at + size * slab)
                if rank == 0:
                    partial.record["done"] = at
                    partial.save()
                    bar.update(at - bar.n)
    return done


def _begin(partial: Partial, resume: bool, create, file_kwargs: dict) -> dict:
    """Rank 0: load (``resume``) or start the record, and create the partial output with its structure."""
    record = begin_mpi_record(partial, resume)
    if not record.get("done"):
        with h5py.File(partial.tmp, "w", **file_kwargs) as dst:
            create(dst)
    return record
