"""One trajectory file read by MDAnalysis's reader class for its format, without a topology or a Universe.

DCD (told by its header) and every other format MDAnalysis reads (told by the extension, as MDAnalysis tells
them): a whole trajectory, or one part of a chain. No topology is parsed per file or per worker.
"""

from __future__ import annotations

import logging
import struct
import warnings

import numpy as np

from ..errors import InputFileError
from ..sources.base import OneFileSource, OpenRequest, file_head
from ..storage.location import Location
from .traits import MDA_PART

log = logging.getLogger(__name__)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class MDAPartSource(OneFileSource):
    """Frames of one file in a format MDAnalysis reads (DCD, NetCDF, ...), through its reader class.

    Parameters
    ----------
    path
        The trajectory file.
    n_atoms
        Atoms per frame, if known (checked against the file; formats without an atom count need it).
    format
        MDAnalysis's format name (default: the DCD header, else MDAnalysis's guess from the extension).
    """

    traits = MDA_PART

    def __init__(self, path: str, n_atoms: int | None = None, format: str | None = None) -> None:
        self._path = str(path)
        fmt = format or self.guess_format(self._path) or self.mdanalysis_format(self._path)
        if fmt is None:
            raise InputFileError(self._path, "MDAnalysis does not know its format")
        self._format = fmt.upper()
        self._reader = None
        self.bytes_read = 0
        self._reader = self._open_reader(n_atoms)
        self._n_atoms = int(self._reader.n_atoms)
        ts = self._reader.ts
        self._fields = tuple(fl for fl, has in (("position", True), ("velocity", ts.has_velocities),
                                                ("force", ts.has_forces)) if has)
        self._n_frames = int(self._reader.n_frames)
        if n_atoms is not None and int(n_atoms) != self._n_atoms:
            self.close()
            raise InputFileError(self._path, f"has {self._n_atoms} atoms per frame, expected {n_atoms}")

    @classmethod
    def guess_format(cls, path: str, store=None) -> str | None:
        """DCD: a first Fortran record of 84 bytes (either byte order) holding ``CORD``."""
        head = file_head(path, 8, store)
        if len(head) == 8 and head[4:] == b"CORD" and 84 in (struct.unpack("<i", head[:4])[0],
                                                             struct.unpack(">i", head[:4])[0]):
            return "DCD"
        return None

    @staticmethod
    def mdanalysis_format(path: str) -> str | None:
        """MDAnalysis's name for the format of ``path`` from its extension, if it has a reader for it; else None."""
        from MDAnalysis.coordinates.core import get_reader_for
        from MDAnalysis.lib.util import guess_format

        try:
            fmt = str(guess_format(path)).upper()
            get_reader_for(path, format=fmt)   # a format MDAnalysis parses only as a topology has no reader
        except (ValueError, TypeError):
            return None
        return fmt

    @classmethod
    def open(cls, location: Location, request: OpenRequest) -> MDAPartSource:
        return cls(location.where, n_atoms=request.n_atoms, format=request.format)

    def _open_reader(self, n_atoms):
        from MDAnalysis.coordinates.core import get_reader_for

        kw = {} if n_atoms is None else {"n_atoms": int(n_atoms)}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return get_reader_for(self._path, format=self._format)(self._path, **kw)
        except Exception as exc:   # noqa: BLE001 - any reader failure is this file's
            raise InputFileError(self._path, f"MDAnalysis cannot read it as {self._format}: "
                                             f"{_one_line(exc)}") from None

    @property
    def native_units(self) -> dict[str, str]:
        """The units the file stores, as MDAnalysis's reader for its format declares them."""
        return dict(self._reader.units or {})

    def get_config(self) -> dict:
        return {"kind": self.kind, "path": self._path, "n_atoms": self._n_atoms, "format": self._format}

    read = OneFileSource._read_rows

    def read_into(self, start: int, stop: int, atoms: np.ndarray | None, stride: int,
                  out: dict[str, np.ndarray], box: np.ndarray, time: np.ndarray, step: np.ndarray) -> None:
        """Frames ``start:stop:stride`` into the given rows (``out[field]``, box, time, step: one row per frame)."""
        from .universe import copy_frames

        sel = None if atoms is None else np.asarray(atoms, dtype=np.intp)
        copy_frames(self._reader, start, stop, stride, sel, out, box, time, step)
        self.bytes_read += sum(a.nbytes for a in out.values())

    def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            try:
                reader.close()
            except Exception as exc:   # noqa: BLE001 - closing is best effort
                log.debug("closing %s: %s", self._path, exc)
