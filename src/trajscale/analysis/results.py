"""Result records shared by the analyses, and their output files (CSV, HDF5, NumPy, PDB).

An output's extension decides its format, for every analysis: each result
offers the formats that fit it (:data:`SERIES`, ...) and :func:`save_as` writes
the one ``path`` names, or refuses the path naming the formats offered.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np

from ..errors import OutputError
from ..util import save_output

#: A per-frame series: a table (CSV, or the same table as one .npy array) or named arrays (HDF5, .npz).
SERIES = (".csv", ".h5", ".hdf5", ".npz", ".npy")
#: What ``--out`` writes for a per-frame series (the extension decides).
SERIES_OUT = ".csv (frame, time, values), .npy (the same table), .h5/.hdf5/.npz (frames, times, values)"
HDF5 = (".h5", ".hdf5")


def output_format(path, offered: tuple[str, ...], what: str) -> str:
    """The extension of ``path`` if ``offered`` has it; else OutputError naming the formats offered."""
    ext = os.path.splitext(str(path))[1].lower()
    if ext not in offered:
        shown = f"'{ext}'" if ext else "no extension"
        raise OutputError(path, f"{what} results are written as {', '.join(offered)} (the extension decides "
                                f"the format); {shown} is none of them")
    return ext


def save_as(path, ext: str, *, table=None, arrays: dict | None = None, attrs: dict | None = None, npy=None,
            pdb=None) -> None:
    """Write a result to ``path`` in format ``ext`` (from :func:`output_format`): under a temporary
    name, fsynced and renamed; a folder that cannot take it at the end gets it saved in ``$TMPDIR``
    instead (:func:`~trajscale.util.save_output`).

    Parameters
    ----------
    table
        ``(header, rows, fmt)`` for ``.csv`` (``np.savetxt``).
    arrays, attrs
        Named arrays (and scalar attributes) for ``.h5``/``.hdf5`` and ``.npz``.
    npy
        The one array a ``.npy`` file holds.
    pdb
        ``fn(tmp_path)`` writing a PDB file.
    """
    save_output(path, lambda tmp: _write_as(tmp, ext, table, arrays, attrs, npy, pdb))


def _write_as(tmp, ext: str, table, arrays, attrs, npy, pdb) -> None:
    """Write a result to ``tmp`` in format ``ext`` (:func:`save_as`'s arguments)."""
    if ext == ".csv":
        header, rows, fmt = table
        np.savetxt(tmp, rows, delimiter=",", header=",".join(header), comments="", fmt=fmt)
    elif ext in HDF5:
        import h5py

        with h5py.File(tmp, "w") as f:
            for k, v in arrays.items():
                f.create_dataset(k, data=np.asarray(v))
            for k, v in (attrs or {}).items():
                f.attrs[k] = v
    elif ext == ".npz":   # through a handle: np.savez would add .npz to the temporary name
        with open(tmp, "wb") as fh:
            np.savez(fh, **{k: np.asarray(v) for k, v in {**arrays, **(attrs or {})}.items()})
    elif ext == ".npy":
        with open(tmp, "wb") as fh:
            np.save(fh, np.asarray(npy))
    else:
        pdb(tmp)


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

    formats: ClassVar[tuple[str, ...]] = SERIES

    def table(self) -> np.ndarray:
        """Columns frame, time, then the values of each frame flattened."""
        v = self.values.reshape(len(self.frames), -1)
        return np.column_stack([self.frames, self.times, v])

    def to_csv(self, path) -> None:
        """The table as CSV, whatever ``path``'s extension."""
        self._write(path, ".csv")

    def save(self, path) -> None:
        """``.csv`` (columns frame, time, values), ``.npy`` (the same table), ``.h5``/``.hdf5``/``.npz``
        (arrays ``frames``, ``times`` and ``<name>``); any other extension is refused."""
        self._write(path, output_format(path, self.formats, self.name))

    def _write(self, path, ext: str) -> None:
        v = self.values.reshape(len(self.frames), -1)
        cols = [self.name] if v.shape[1] == 1 else [f"{self.name}_{i}" for i in range(v.shape[1])]
        save_as(path, ext,
                table=(["frame", "time", *cols], self.table(), ["%d", "%.6g"] + ["%.8g"] * v.shape[1]),
                arrays={"frames": self.frames, "times": self.times, self.name: self.values}, npy=self.table())


def arrays_of(result) -> dict:
    """The array fields of a result dataclass, for :func:`save_as`."""
    return {f.name: getattr(result, f.name) for f in fields(result)
            if isinstance(getattr(result, f.name), np.ndarray)}
