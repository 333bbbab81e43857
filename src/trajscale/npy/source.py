"""A stack of coordinates saved by NumPy: an ``.npy`` array of shape (frames, atoms, 3), in Å.

The file is mapped, not loaded: a range of frames is one slab read of the mapped array, and only the selected
atoms are copied out. Steps are the frame indices and times the frame indices in ps, as MDAnalysis's
``MemoryReader`` numbers an array's frames; there is no box, so an analysis that needs one refuses the file.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputFileError
from ..facts import LayoutFacts
from ..sources.base import OpenRequest, Source, file_head
from ..storage.location import Location
from .traits import NPY

#: The first bytes of every ``.npy`` file (NumPy's format specification).
NPY_MAGIC = b"\x93NUMPY"


class NumpySource(Source):
    """Frames of a ``.npy`` coordinate stack, (frames, atoms, 3) floats in Å.

    Parameters
    ----------
    path
        The ``.npy`` file.
    n_atoms
        Atoms per frame, if known (checked against the array).
    """

    traits = NPY

    def __init__(self, path: str, n_atoms: int | None = None) -> None:
        self._path = str(path)
        try:
            array = np.load(self._path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise InputFileError(self._path, f"cannot be read as NPY: {' '.join(str(exc).split())}") from None
        if not isinstance(array, np.ndarray) or array.ndim != 3 or array.shape[2] != 3 \
                or array.dtype.kind != "f" or array.shape[1] == 0:
            raise InputFileError(self._path, f"holds an array of shape {getattr(array, 'shape', None)} and dtype "
                                             f"{getattr(array, 'dtype', None)}; a trajectory is (frames, atoms, 3) "
                                             "floats")
        self._array = array
        self.bytes_read = 0
        if n_atoms is not None and int(n_atoms) != self.n_atoms:
            raise InputFileError(self._path, f"has {self.n_atoms} atoms per frame, expected {n_atoms}")

    @classmethod
    def guess_format(cls, path: str, store=None) -> str | None:
        head = file_head(path, len(NPY_MAGIC), store)
        return "NPY" if head == NPY_MAGIC else None

    @classmethod
    def open(cls, location: Location, request: OpenRequest) -> NumpySource:
        return cls(location.where, n_atoms=request.n_atoms)

    @property
    def path(self) -> str:
        return self._path

    @property
    def n_frames(self) -> int:
        return int(self._array.shape[0])

    @property
    def n_atoms(self) -> int:
        return int(self._array.shape[1])

    @property
    def native_units(self) -> dict[str, str]:
        return {"length": "Angstrom", "time": "ps"}

    def get_config(self) -> dict:
        return {"kind": self.kind, "path": self._path, "n_atoms": self.n_atoms}

    def layout_summary(self) -> LayoutFacts:
        return LayoutFacts(format="NPY", path=self._path, n_atoms=self.n_atoms)

    read = Source._read_rows

    def read_into(self, start: int, stop: int, atoms: np.ndarray | None, stride: int,
                  out: dict[str, np.ndarray], box: np.ndarray, time: np.ndarray, step: np.ndarray) -> None:
        """The frames' slab of the mapped array, its selected atoms copied (and cast to float32) into the rows."""
        rows = self._array[start:stop:stride]
        out["position"][...] = rows if atoms is None else rows[:, np.asarray(atoms, dtype=np.intp)]
        frames = np.arange(start, stop, stride, dtype=np.int64)
        step[:] = frames
        time[:] = frames
        self.bytes_read += out["position"].nbytes

    def close(self) -> None:
        self._array = None   # the mapping closes with the last reference (blocks hold copies, never views)
