"""Checking and moving one domain-decomposed frame between ranks.

Before any byte is written the ranks agree that the frame's ids cover every atom exactly once; a frame that does
not is described by the same message on every rank, so no rank is left waiting in a collective.
"""

from __future__ import annotations

import numpy as np

#: Ids and details named in an error message (the rest are counted).
SHOW_IDS = 8


class Frame:
    """The rows one rank holds for one frame: ``ids`` (k,) int32 global atom indices, any order, and
    ``rows`` (k, 3 * len(arrays)) float32, the ``(k, 3)`` ``arrays`` side by side (positions first)."""

    def __init__(self, ids: np.ndarray, arrays: list[np.ndarray]) -> None:
        self.ids = np.asarray(ids, dtype=np.int32)
        if len(arrays) == 1:
            self.rows = np.ascontiguousarray(arrays[0], dtype=np.float32)
        else:
            self.rows = np.concatenate([np.asarray(a, dtype=np.float32) for a in arrays], axis=1)

    @property
    def width(self) -> int:
        return self.rows.shape[1]


def as_records(rows: np.ndarray) -> np.ndarray:
    """A ``(k, w)`` float32 array viewed as ``k`` opaque records: whole rows move in one indexed copy (NumPy's
    2-d fancy indexing copies rows one by one)."""
    return rows.view(np.dtype((np.void, rows.shape[1] * 4))).reshape(len(rows))


def place(out: np.ndarray, index: np.ndarray, rows: np.ndarray) -> None:
    """``out[index] = rows`` for row arrays, as one record copy."""
    if len(rows):
        np.put(as_records(out), index, as_records(np.ascontiguousarray(rows)))


def _show(ids: np.ndarray) -> str:
    ids = np.asarray(ids)
    shown = ", ".join(str(int(i)) for i in ids[:SHOW_IDS])
    return f"[{shown}{', ...' if len(ids) > SHOW_IDS else ''}] ({len(ids)} in all)"


def local_problems(n_atoms: int, ids, arrays: dict[str, object], check_finite: bool) -> str | None:
    """What is wrong with one rank's rows for one frame (None: nothing)."""
    ids = np.asarray(ids)
    if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        return f"ids must be a 1-d integer array, got shape {ids.shape} dtype {ids.dtype}"
    k = len(ids)
    for name, arr in arrays.items():
        if arr is None:
            return f"{name} missing (the file has {name})"
        shape = np.shape(arr)
        if shape != (k, 3):
            return f"{name} has shape {shape}, expected ({k}, 3) (one row per id)"
    if k and (ids.min() < 0 or ids.max() >= n_atoms):
        bad = ids[(ids < 0) | (ids >= n_atoms)]
        return f"ids {_show(bad)} outside [0, {n_atoms})"
    if check_finite:
        for name, arr in arrays.items():
            arr = np.asarray(arr)
            if not np.isfinite(arr.sum(dtype=np.float64)):   # one sum; rows only if it fails
                bad = ids[~np.isfinite(arr).all(axis=1)]
                if len(bad):
                    return f"non-finite {name} for ids {_show(bad)}"
    return None


def agree(comm, problem: str | None, ids: np.ndarray, n_atoms: int) -> str | None:
    """One message naming every rank's problem with this frame, or None; the same on every rank."""
    rank = comm.Get_rank() if comm is not None else 0
    if comm is None:
        problems = [(0, problem, len(ids))]
    else:
        problems = [(r, p, k) for r, (p, k) in enumerate(comm.allgather((problem, len(ids))))]
    bad = [f"rank {r}: {p}" for r, p, _ in problems if p]
    if bad:
        return "; ".join(bad)
    # Every atom exactly once <=> the counts sum to n_atoms and every atom is seen.
    seen = np.zeros(n_atoms, dtype=bool)
    seen[ids] = True
    bits = np.packbits(seen)
    if comm is not None:
        from mpi4py import MPI

        comm.Allreduce(MPI.IN_PLACE, bits, op=MPI.BOR)
    total = sum(k for _, _, k in problems)
    if total == n_atoms and np.unpackbits(bits, count=n_atoms).all():
        return None
    return _describe_ids(comm, ids, n_atoms, rank)


def _describe_ids(comm, ids: np.ndarray, n_atoms: int, rank: int) -> str:
    """The slow path, taken only for a bad frame: which ids are duplicated (by whom) or missing."""
    every = [ids] if comm is None else comm.gather(np.asarray(ids, dtype=np.int64), root=0)
    msg = None
    if rank == 0:
        owner = np.concatenate([np.full(len(a), r) for r, a in enumerate(every)])
        allids = np.concatenate(every)
        counts = np.bincount(allids, minlength=n_atoms)
        parts = []
        dup = np.flatnonzero(counts > 1)
        if len(dup):
            ranks = sorted({int(r) for r in owner[np.isin(allids, dup)]})
            where = "by ranks " + ", ".join(map(str, ranks)) if len(ranks) > 1 else f"twice by rank {ranks[0]}"
            parts.append(f"atom ids {_show(dup)} given more than once ({where})")
        missing = np.flatnonzero(counts == 0)
        if len(missing):
            parts.append(f"atom ids {_show(missing)} given by no rank")
        msg = "; ".join(parts)
    return msg if comm is None else comm.bcast(msg, root=0)


def bounds(n_atoms: int, size: int) -> np.ndarray:
    """Rank r owns global ids ``[b[r], b[r + 1])``: contiguous, balanced."""
    return (np.arange(size + 1, dtype=np.int64) * n_atoms) // size


def exchange(comm, frame: Frame, n_atoms: int) -> tuple[int, np.ndarray]:
    """Alltoallv so each rank holds the rows of its own id range: ``(lo, rows)``, ``rows[i]`` atom ``lo + i``."""
    from mpi4py import MPI

    size, rank = comm.Get_size(), comm.Get_rank()
    b = bounds(n_atoms, size)
    dest = (np.searchsorted(b, frame.ids, side="right") - 1).astype(np.uint8 if size < 256 else np.int32)
    order = np.argsort(dest, kind="stable")    # a radix sort for uint8
    send_ids = frame.ids[order]
    send = np.take(as_records(frame.rows), order).view(np.float32).reshape(len(order), frame.width)
    scount = np.bincount(dest, minlength=size).astype(np.int64)
    rcount = np.empty(size, dtype=np.int64)
    comm.Alltoall(scount, rcount)
    sdisp = np.concatenate([[0], np.cumsum(scount)[:-1]])
    rdisp = np.concatenate([[0], np.cumsum(rcount)[:-1]])
    recv_ids = np.empty(int(rcount.sum()), dtype=np.int32)
    comm.Alltoallv([send_ids, (scount, sdisp), MPI.INT32_T], [recv_ids, (rcount, rdisp), MPI.INT32_T])
    w = frame.width
    recv = np.empty((len(recv_ids), w), dtype=np.float32)
    comm.Alltoallv([send, (scount * w, sdisp * w), MPI.FLOAT], [recv, (rcount * w, rdisp * w), MPI.FLOAT])
    lo = int(b[rank])
    out = np.empty((int(b[rank + 1]) - lo, w), dtype=np.float32)
    place(out, recv_ids - lo, recv)   # ids were checked: a permutation of the range
    return lo, out


def gather_to_root(comm, frame: Frame, n_atoms: int) -> np.ndarray | None:
    """Gatherv every rank's rows to rank 0, placed in id order there (None elsewhere)."""
    from mpi4py import MPI

    rank, w = comm.Get_rank(), frame.width
    counts = comm.gather(len(frame.ids), root=0)
    if rank != 0:
        comm.Gatherv(frame.ids, None, root=0)
        comm.Gatherv(frame.rows, None, root=0)
        return None
    counts = np.asarray(counts, dtype=np.int64)
    disp = np.concatenate([[0], np.cumsum(counts)[:-1]])
    ids = np.empty(int(counts.sum()), dtype=np.int32)
    comm.Gatherv(frame.ids, [ids, (counts, disp), MPI.INT32_T], root=0)
    recv = np.empty((len(ids), w), dtype=np.float32)
    comm.Gatherv(frame.rows, [recv, (counts * w, disp * w), MPI.FLOAT], root=0)
    out = np.empty((n_atoms, w), dtype=np.float32)
    place(out, ids, recv)
    return out


def sort_rows(frame: Frame, n_atoms: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's ids in increasing order and their rows (a counting sort: O(n_atoms), no argsort)."""
    where = np.full(n_atoms, -1, dtype=np.int64)
    where[frame.ids] = np.arange(len(frame.ids))
    order = where[where >= 0]
    sorted_ids = np.flatnonzero(where >= 0)
    rows = np.take(as_records(frame.rows), order).view(np.float32).reshape(len(order), frame.width)
    return sorted_ids, rows


def runs(sorted_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and lengths of the runs of consecutive ids in a sorted array."""
    if not len(sorted_ids):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    brk = np.flatnonzero(np.diff(sorted_ids) != 1) + 1
    starts = np.concatenate([[0], brk])
    lengths = np.diff(np.concatenate([starts, [len(sorted_ids)]]))
    return sorted_ids[starts].astype(np.int64), lengths.astype(np.int64)
