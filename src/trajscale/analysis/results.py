"""Result records shared by the analyses, and their output files (CSV, HDF5, PDB)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..util import atomic_output


@dataclass(frozen=True)
class TimeSeries:
    """A per-frame result: ``frames``, ``times`` and one named array with a row per frame.

    ``r.<name>`` (e.g. ``r.rgyr``, ``r.distances``) is the array; ``r.report`` the RunReport.
    """

    frames: np.ndarray
    times: np.ndarray
    values: np.ndarray
    name: str
    report: object = None

    def __getattr__(self, item):
        if item == self.__dict__.get("name"):
            return self.__dict__["values"]
        raise AttributeError(item)

    def table(self) -> np.ndarray:
        """Columns frame, time, then the values of each frame flattened."""
        v = self.values.reshape(len(self.frames), -1)
        return np.column_stack([self.frames, self.times, v])

    def to_csv(self, path) -> None:
        v = self.values.reshape(len(self.frames), -1)
        cols = [self.name] if v.shape[1] == 1 else [f"{self.name}_{i}" for i in range(v.shape[1])]
        fmt = ["%d", "%.6g"] + ["%.8g"] * v.shape[1]
        with atomic_output(path) as tmp:
            np.savetxt(tmp, self.table(), delimiter=",", header=",".join(["frame", "time", *cols]),
                       comments="", fmt=fmt)

    def save(self, path) -> None:
        """``.csv`` for the table, ``.h5``/``.hdf5`` for the arrays."""
        if str(path).endswith((".h5", ".hdf5")):
            write_arrays(path, {"frames": self.frames, "times": self.times, self.name: self.values})
        else:
            self.to_csv(path)


def write_arrays(path, arrays: dict, attrs: dict | None = None) -> None:
    """Named arrays into one HDF5 file (temporary name, then renamed)."""
    import h5py

    with atomic_output(path) as tmp, h5py.File(tmp, "w") as f:
        for k, v in arrays.items():
            f.create_dataset(k, data=np.asarray(v))
        for k, v in (attrs or {}).items():
            f.attrs[k] = v


def arrays_of(result) -> dict:
    """The array fields of a result dataclass, for :func:`write_arrays`."""
    return {f.name: getattr(result, f.name) for f in fields(result)
            if isinstance(getattr(result, f.name), np.ndarray)}
