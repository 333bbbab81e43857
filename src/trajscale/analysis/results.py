"""Result records shared by the analyses, and their output files (CSV, HDF5, NumPy, PDB).

An output's extension decides its format: each result offers the formats that fit it (:data:`SERIES`, ...)
and :func:`save_as` writes the one ``path`` names, or refuses it naming those offered.
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
    """Write a result to ``path`` in format ``ext`` (from :func:`output_format`), as
    :func:`~trajscale.util.save_output` writes every output: ``table`` ``(header, rows, fmt)`` for ``.csv``,
    named ``arrays`` (and scalar ``attrs``) for ``.h5``/``.hdf5``/``.npz``, ``npy`` for ``.npy``, ``pdb``
    (``fn(tmp_path)``) for ``.pdb``."""
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
                v = np.asarray(v)
                if v.dtype.kind == "U":   # (HDF5 has no fixed-width unicode: variable-length UTF-8 strings)
                    f.create_dataset(k, data=v.astype(object), dtype=h5py.string_dtype())
                else:
                    f.create_dataset(k, data=v)
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


@dataclass(frozen=True, eq=False)
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


@dataclass(frozen=True, eq=False)
class FeatureLabels:
    """What each feature of a :class:`Features` result is, one entry per feature, in the order of its
    ``array()``'s columns.

    Attributes
    ----------
    feature
        What it is: ``"phi"``, ``"sin(psi)"``, ``"CA 12 - CA 87"``.
    resname, resid, chain
        The residue it belongs to (of a pair's first atom): its name, number and chain (the segment's
        ID as MDAnalysis names it, which for a PDB without segment IDs is the chain ID).
    pair
        The features are atom or residue pairs (``feature`` names both ends).
    """

    feature: np.ndarray
    resname: np.ndarray
    resid: np.ndarray
    chain: np.ndarray
    pair: bool = False

    def __len__(self) -> int:
        return len(self.feature)

    def __iter__(self):
        return iter(self.text())

    def text(self) -> list[str]:
        """One string per feature: ``"MET 1 A phi"`` (residue, chain, what), or a pair's ``"CA 12 - CA 87"``."""
        if self.pair:
            return [str(f) for f in self.feature]
        return [" ".join(p for p in (str(n), str(i), str(c), str(f)) if p)
                for n, i, c, f in zip(self.resname, self.resid, self.chain, self.feature, strict=True)]

    def columns(self) -> dict[str, np.ndarray]:
        """The labels as named columns (``feature``, ``resname``, ``resid``, ``chain``)."""
        return {"feature": self.feature, "resname": self.resname, "resid": self.resid, "chain": self.chain}

    @classmethod
    def of(cls, feature, resname, resid, chain, pair: bool = False) -> FeatureLabels:
        """Labels as the plain arrays a result stores (text as ``str``, numbers as int64)."""
        return cls(np.asarray(feature, dtype=str), np.asarray(resname, dtype=str), np.asarray(resid, np.int64),
                   np.asarray(chain, dtype=str), bool(pair))


@dataclass(frozen=True, eq=False)
class Features(TimeSeries):
    """A per-frame result whose values are labelled features: ``r.<name>`` the values as the analysis shapes
    them (``(F, R, 2)`` φ/ψ, ...), :meth:`array` the same as ``(F, features)`` float64 (deeptime's input),
    :meth:`feature_labels` what each column is (stored as plain arrays, to save and load as any record).
    """

    feature: np.ndarray | None = None
    resname: np.ndarray | None = None
    resid: np.ndarray | None = None
    chain: np.ndarray | None = None
    pair: bool = False

    def array(self) -> np.ndarray:
        """``(frames, features)`` float64: each frame's values flattened in the labels' order."""
        return np.asarray(self.values, np.float64).reshape(len(self.frames), len(self.feature))

    def feature_labels(self) -> FeatureLabels:
        """What each column of :meth:`array` is."""
        return FeatureLabels(self.feature, self.resname, self.resid, self.chain, self.pair)

    def _write(self, path, ext: str) -> None:
        labels = self.feature_labels()
        save_as(path, ext,
                table=(["frame", "time", *labels.text()], self.table(), ["%d", "%.6g"] + ["%.8g"] * len(labels)),
                arrays={"frames": self.frames, "times": self.times, self.name: self.values,
                        **{f"feature_{k}": v for k, v in labels.columns().items()}}, npy=self.table())


def arrays_of(result) -> dict:
    """The array fields of a result dataclass, for :func:`save_as`."""
    return {f.name: getattr(result, f.name) for f in fields(result)
            if isinstance(getattr(result, f.name), np.ndarray)}
