"""An MDAnalysis trajectory writer for trajscale's H5MD: format ``"TRAJSCALE"``, with ``convert``'s options.

Frames are gathered into slabs and written under a temporary name renamed (after an fsync) when the writer
is closed cleanly, so a failed pipeline leaves no file under the output's name. ``followable=True`` trades
that for a file others can read while it grows.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import numpy as np
from MDAnalysis.coordinates.base import WriterBase

from ..errors import ConfigError, OutputError, TrajscaleError
from ..h5md.layout import Layout
from ..units import unit_system
from ..util import check_output_path, check_writable_folder, fsync_path, temporary_name

log = logging.getLogger(__name__)

#: Bytes of frames gathered before one write.
SLAB_BYTES = 32 * 1024**2


class Writer(WriterBase):
    """Write H5MD as ``trajscale convert`` does, from any MDAnalysis pipeline.

    Parameters
    ----------
    filename
        The output; an existing file is kept unless ``overwrite=True``.
    n_atoms
        Atoms per frame; a frame with another count is refused when it comes.
    chunks, compression
        The layout, as ``convert --chunks/--compression`` (``"auto"``, ``"frame"``, ``"contiguous"``,
        a frame count; ``"gzip:4"``, ``"blosc-lz4"``, ...).
    precision, encoding
        Lossy positions, as ``convert --precision/--encoding`` (``"floats"``, ``"deltas"``, ``"deltas32"``).
    units
        ``"mdanalysis"`` (Å, ps), ``"gromacs"`` (nm, ps).
    velocities, forces
        Also write these (every frame written must then have them).
    group
        The particle group's name.
    followable
        Write each frame under the output's own name, flushed when ``write()`` returns, for ``run --follow``
        (default False: slabs in a temporary file, renamed when the writer closes).
    """

    format = "TRAJSCALE"
    multiframe = True
    units = {"time": "ps", "length": "Angstrom", "velocity": "Angstrom/ps", "force": "kJ/(mol*Angstrom)"}

    def __init__(self, filename, n_atoms: int, *, chunks: str | int = "auto", compression: str | None = None,
                 precision: float | None = None, encoding: str = "floats", units: str = "mdanalysis",
                 velocities: bool = False, forces: bool = False, group: str = "all", overwrite: bool = False,
                 slab_bytes: int = SLAB_BYTES, followable: bool = False, **kwargs) -> None:
        if n_atoms is None or int(n_atoms) < 1:
            raise ConfigError(f"{filename}: n_atoms must be a positive number of atoms, got {n_atoms!r}")
        self.filename = os.fspath(filename)
        self.n_atoms = int(n_atoms)
        self._final = check_output_path(self.filename, overwrite=overwrite)
        check_writable_folder(self._final)
        self._layout = Layout.parse(str(chunks), compression or "none")
        self._fields = ("position",) + (("velocity",) if velocities else ()) + (("force",) if forces else ())
        self._options = {"group": group, "units": unit_system(units), "precision": precision, "encoding": encoding}
        self.followable = bool(followable)
        # followed: every frame is written (and flushed) when it comes, not a slab later
        self._per_slab = 1 if self.followable else max(1, int(slab_bytes) // (self.n_atoms * 12 * len(self._fields)))
        self._rows: list[tuple] = []
        self._writer = None
        self._tmp: Path | None = None
        self._box: str | None = None

    def _start(self, first_box: np.ndarray | None, masses) -> None:
        from ..h5md.writer import H5MDWriter

        self._box = "triclinic" if first_box is not None and np.any(first_box[:3]) else None
        self._tmp = self._final if self.followable else temporary_name(self._final)
        o = self._options
        try:
            self._writer = H5MDWriter(self._tmp, self.n_atoms, layout=self._layout, fields=self._fields,
                                      box=self._box, group=o["group"], units=o["units"], masses=masses,
                                      precision=o["precision"], encoding=o["encoding"])
        except (OSError, TrajscaleError) as exc:   # the directory changed since the writer was made
            self._tmp.unlink(missing_ok=True)
            check_writable_folder(self._final)
            raise OutputError(self._final, f"cannot create its temporary file {self._tmp.name}") from exc

    def _write_next_frame(self, obj) -> None:
        from MDAnalysis.core.groups import AtomGroup

        ag = getattr(obj, "atoms", obj)
        if not isinstance(ag, AtomGroup):
            raise TypeError(f"{self.filename}: write() takes an AtomGroup or a Universe, not {type(obj).__name__}")
        ts = ag.universe.trajectory.ts
        if ag.n_atoms != self.n_atoms:
            raise ValueError(f"{self.filename}: frame {ts.frame} has {ag.n_atoms} atoms, "
                             f"the writer was made for {self.n_atoms}")
        box = None if ts.dimensions is None else np.array(ts.dimensions, np.float32)   # a copy: ts changes
        row = [ag.positions.copy()]
        for fl, attr in (("velocity", "velocities"), ("force", "forces")):
            if fl in self._fields:
                try:
                    row.append(getattr(ag, attr).copy())
                except Exception as exc:   # noqa: BLE001 - MDAnalysis's NoDataError
                    raise ValueError(f"{self.filename}: frame {ts.frame} has no {attr}: {exc}") from None
        if self._writer is None:
            masses = ag.masses if hasattr(ag, "masses") else None
            self._start(box, masses)
        self._rows.append((row, box, int(ts.data.get("step", ts.frame)), float(ts.time)))
        if len(self._rows) >= self._per_slab:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        arrays = [np.stack([r[0][i] for r in rows]) for i in range(len(self._fields))]
        data = dict(zip(self._fields, arrays, strict=False))
        box = None if self._box is None else np.stack([r[1] if r[1] is not None else np.zeros(6, np.float32)
                                                       for r in rows])
        self._writer.write(position=data["position"], velocity=data.get("velocity"), force=data.get("force"),
                           box=box, step=np.array([r[2] for r in rows]), time=np.array([r[3] for r in rows]))

    def __exit__(self, exc_type, exc_val, exc_tb) -> bool:
        # a pipeline that failed inside ``with`` leaves nothing under the output's name
        if exc_type is not None:
            self._abandon()
        else:
            self.close()
        return False

    def _abandon(self) -> None:
        """Remove the temporary file; the output is never made (a followable file keeps its frames, unmarked)."""
        self._rows = []
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close(abandoned=True)
            finally:
                if self.followable:
                    log.warning("%s: the pipeline failed; its %d frames are kept, not marked complete",
                                self._final, writer.n_written)
                else:
                    self._tmp.unlink(missing_ok=True)

    def close(self) -> None:
        """Write what is gathered, close the file and move it to its name (nothing if no frame came)."""
        if self._writer is None:
            return
        try:
            self._flush()
            self._writer.close()
        except BaseException:
            self._abandon()
            raise
        fsync_path(self._tmp)
        if not self.followable:
            os.replace(self._tmp, self._final)
            fsync_path(self._final.parent, directory=True)
        self._writer = None

    def __del__(self) -> None:
        # a writer never closed (an error in the pipeline) leaves no output, only nothing
        if getattr(self, "_writer", None) is not None:
            with contextlib.suppress(Exception):   # interpreter shutdown
                self._abandon()
