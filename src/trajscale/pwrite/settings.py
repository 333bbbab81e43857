"""WriterSettings: how a ParallelWriter lays out, converts and commits its file, checked once where made, so a
writer never starts on a file it cannot finish."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..errors import ConfigError
from ..h5md.layout import Layout
from ..units import WRITE_UNITS, unit_system

#: The write strategies :class:`~trajscale.ParallelWriter` accepts (see :mod:`trajscale.pwrite.writer`).
STRATEGIES = ("gather", "independent", "collective")


@dataclass(frozen=True, slots=True)
class WriterSettings:
    """The options of a :class:`~trajscale.ParallelWriter`, checked once (its keyword options, or
    ``settings=``, whose fields keyword options replace).

    Attributes
    ----------
    strategy
        Who writes which rows: ``"gather"``, ``"independent"`` or ``"collective"``
        (see :mod:`trajscale.pwrite.writer`).
    layout
        A :class:`~trajscale.h5md.layout.Layout` for the per-atom datasets; None: from ``chunks``, ``compression``.
    chunks, compression
        As ``trajscale convert`` takes them (``"auto"``, ``"frame"``, ``"contiguous"`` or a frame count;
        ``None``, ``"gzip:4"``, ...).  Compressed data is written collectively.
    precision, encoding
        Lossy positions (:mod:`trajscale.h5md.codecs`): the largest error in Å (None: float32 as given) and
        how they are coded (``"floats"``, ``"deltas"``, ...).
    units
        Units of the file: ``"mdanalysis"`` (Å, ps), ``"gromacs"`` (nm, ps), or a unit string per quantity.
        Data is always given in trajscale's units (Å, ps, Å/ps, kJ/(mol Å)) and converted.
    velocities, forces
        Whether frames carry velocities / forces.
    box
        ``"triclinic"``, ``"cuboid"`` or None.
    group
        Particle group name.
    n_frames
        Total frames if known: the datasets are sized once.
    check
        Also refuse non-finite values.
    overwrite
        Replace an existing file; without it an existing file is refused with ``OutputError`` (naming it)
        before anything is written, and left as it was.
    publish
        Every commit is in the file for readers when the write returns: its data flushed, then its
        step/time grown and flushed, so a follower sees the frame at once and a producer killed afterwards
        leaves it.  False saves the second flush: the file counts a frame from the next commit on.
    durable
        Every commit is also fsynced before the writer counts it (under MPI-IO each flush already is an
        ``MPI_File_sync``): a power loss keeps what a progress record saved after a commit counts.
    resume_at
        Continue a file a ParallelWriter wrote (an interrupted ``write_frames`` run whose first
        ``resume_at`` frames a progress record counted): reopened under its name, the next frames follow.
    """

    strategy: str = "collective"
    layout: Layout | None = None
    chunks: str | int = "auto"
    compression: str | None = None
    precision: float | None = None
    encoding: str = "floats"
    units: str | Mapping[str, str] = "mdanalysis"
    velocities: bool = False
    forces: bool = False
    box: str | None = "triclinic"
    group: str = "all"
    n_frames: int | None = None
    check: bool = False
    overwrite: bool = False
    publish: bool = True
    durable: bool = False
    resume_at: int | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown strategy {self.strategy!r}: use one of {', '.join(STRATEGIES)}")
        if isinstance(self.units, Mapping):   # a copy: the caller's dict may change later
            object.__setattr__(self, "units", dict(self.units))
        self.file_units()   # an unknown unit system is refused here (UnitError)
        self.file_layout()   # and so are bad chunks and compression

    @classmethod
    def of(cls, settings: WriterSettings | None = None, /, **options) -> WriterSettings:
        """``settings`` (or the defaults) with ``options`` replacing its fields (an unknown one refused)."""
        unknown = sorted(set(options) - set(cls.names()))
        if unknown:
            raise ConfigError(f"ParallelWriter has no option {', '.join(map(repr, unknown))}: "
                              f"use {', '.join(cls.names())}")
        return cls(**options) if settings is None else replace(settings, **options)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The field names, which are ParallelWriter's keyword options."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @property
    def fields(self) -> tuple[str, ...]:
        """The per-atom fields of every frame: ``("position",)``, then velocity and force if carried."""
        return ("position",) + (("velocity",) if self.velocities else ()) + (("force",) if self.forces else ())

    def file_layout(self) -> Layout:
        """``layout``, or the one ``chunks`` and ``compression`` describe."""
        return self.layout or Layout.parse(str(self.chunks), self.compression or "none")

    def file_units(self) -> dict[str, str]:
        """The unit of each quantity in the file."""
        return unit_system(self.units) if isinstance(self.units, str) else {**WRITE_UNITS, **self.units}
