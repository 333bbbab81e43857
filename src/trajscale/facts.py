"""Records of a run's storage: the layout facts of its source and what its own reads cost.

A Source describes itself as a :class:`LayoutFacts`; a run adds the cost of its own reads
(:class:`RunRead`); the report carries them as its ``source`` section.  ``from_dict`` reads reports
of earlier versions (any key may be missing) and hand-edited ones (a value of the wrong type counts
as not recorded): the one place that checks types, so the readers need none."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

#: Chunk shape of contiguous storage (no chunks), as :attr:`LayoutFacts.chunks` holds it; the JSON
#: says ``"contiguous"``.
CONTIGUOUS: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Precision:
    """How a lossy H5MD file rounded its positions (``convert --precision``)."""

    #: Stated precision, Å: positions lie within half of it.
    angstrom: float | None
    #: Grid step, in the file's length unit.
    quantum: float | None
    #: The stored encoding, as the file names it.
    encoding: str | None
    #: The ``--encoding`` option that writes it (``floats`` or ``deltas``); None in reports of versions
    #: that did not record it.
    option: str | None = None

    def to_dict(self) -> dict:
        d = {"angstrom": self.angstrom, "quantum": self.quantum, "encoding": self.encoding}
        if self.option is not None:
            d["option"] = self.option
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> Precision:
        return cls(_num(d.get("angstrom")), _num(d.get("quantum")), _str(d.get("encoding")), _str(d.get("option")))


@dataclass(frozen=True, slots=True)
class RunRead:
    """What a run's own reads cost on its H5MD file's layout, and on the layouts a rechunk would give.

    Read amplification is bytes read and decoded / bytes asked for (:mod:`trajscale.h5md.inspect`).
    """

    #: Atoms the run read per frame.
    n_atoms: int
    #: Frames of a typical (the median) task.
    frames_per_task: int
    #: The run's frame step.
    step: int
    #: Read amplification of these reads with trajscale's reader.
    amplification: float
    #: The same with HDF5's default chunk cache (a generic reader).
    amplification_hdf5_default: float | None
    #: ``(rechunk options, amplification)`` for each layout of ``h5md.recommend.ALTERNATIVES`` that applies.
    alternatives: tuple[tuple[str, float | None], ...] = ()
    #: The run's selection in the user's own words (``h5md.recommend.run_selection``).
    selection: str | None = None
    #: The topology the run was given (for a suggested ``convert --select``).
    topology: str | None = None

    def to_dict(self) -> dict:
        return {"n_atoms": self.n_atoms, "frames_per_task": self.frames_per_task, "step": self.step,
                "amplification": self.amplification, "amplification_hdf5_default": self.amplification_hdf5_default,
                "alternatives": dict(self.alternatives), "selection": self.selection, "topology": self.topology}

    @classmethod
    def from_dict(cls, d: Mapping) -> RunRead | None:
        """The record, or None when a count or the amplification is missing (nothing to advise on)."""
        counts = [_int(d.get(k)) for k in ("n_atoms", "frames_per_task")]
        amp = _num(d.get("amplification"))
        if amp is None or None in counts:
            return None
        alts = d.get("alternatives")
        alts = tuple((str(k), _num(v)) for k, v in alts.items()) if isinstance(alts, Mapping) else ()
        return cls(counts[0], counts[1], _int(d.get("step")) or 1, amp, _num(d.get("amplification_hdf5_default")),
                   alts, _str(d.get("selection")), _str(d.get("topology")))


@dataclass(frozen=True, slots=True)
class LayoutFacts:
    """What a run's source says about its storage; None: a fact this source does not know.  Mappings are
    held as ``(key, value)`` pairs, in order, so the record is immutable all the way down."""

    #: ``h5md``, ``segments``, or the format MDAnalysis reads (``XTC``, ``DCD``, ...).
    format: str | None = None
    #: The file (the first file of several).
    path: str | None = None
    #: The H5MD particle group read.
    group: str | None = None
    n_frames: int | None = None
    #: Trajectory files given to an MDAnalysis reader.
    n_files: int | None = None
    #: Files of a segmented trajectory.
    n_segments: int | None = None
    #: The formats of a segmented trajectory's files, sorted and joined with commas (``H5MD,XTC``).
    segment_formats: str | None = None
    #: Atoms per frame in the file: a reader of a compressed format decodes all of them.
    n_atoms: int | None = None
    #: Per-atom fields stored (position, velocity, force).
    fields: tuple[str, ...] | None = None
    #: ``(quantity, unit)`` as the file stores them.
    units: tuple[tuple[str, str], ...] | None = None
    #: The ``--assume-units`` the file was read with; None when its own units were.
    assumed_units: str | None = None
    #: NumPy dtype string of the positions (``<f4``).
    dtype: str | None = None
    #: Chunk shape ``(frames, atoms, xyz)``; :data:`CONTIGUOUS` (empty) for contiguous storage.
    chunks: tuple[int, ...] | None = None
    #: Filter, with its options after a colon (``gzip:3``), or ``none``.
    compression: str | None = None
    #: ``(access pattern, read amplification)`` with trajscale's reader.
    read_amplification: tuple[tuple[str, float], ...] | None = None
    #: What ``rechunk --chunks auto`` would write: advice never suggests the layout the file has.
    planned_chunks: tuple[int, ...] | None = None
    #: How the positions were rounded; None for a lossless file.
    precision: Precision | None = None
    #: ``(access pattern, read amplification)`` with HDF5's default chunk cache.
    read_amplification_hdf5_default: tuple[tuple[str, float], ...] | None = None
    file_bytes: int | None = None
    #: Plain-language warnings about the layout.
    warnings: tuple[str, ...] | None = None
    #: Fields read at their byte addresses (``hdf5.chunks``) rather than through HDF5.
    direct_reads: tuple[str, ...] | None = None
    #: Who decodes a frame's atoms beyond those selected, and how far (the Source's
    #: :meth:`~trajscale.sources.base.Source.decoding_of`): ``prefix:WHO`` (each frame up to the last selected
    #: atom), ``whole:WHO`` (whole frames); None for a source read in place (the selected atoms' bytes only).
    decoding: str | None = None
    #: A traced data loader's trace folder (its report has no file behind it).
    trace_dir: str | None = None
    #: What the run's own reads cost, added by the run once its tasks are planned.
    run_read: RunRead | None = None
    #: True when MPI ranks open the file together (MPI-IO: a local H5MD file), False when each rank opens it
    #: alone (an object behind a URL, by requests); set by the format that read it, None where unsaid.
    collective_open: bool | None = None
    #: What tells the file's bytes from a replacement's (its store's validator, in a line), and whether it
    #: sees every replacement (False: an object on a server whose ETag is the modification second and size).
    validator: str | None = None
    validator_complete: bool | None = None

    @property
    def has_chunk_layout(self) -> bool:
        """True for an H5MD group's facts: a chunk shape (or contiguous storage) is recorded."""
        return self.chunks is not None

    def to_dict(self) -> dict:
        """The report's JSON ``source`` section; an H5MD group's ``assumed_units`` and ``precision`` even when None."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and not (f.name in _STATED_AS_NULL and self.has_chunk_layout):
                continue
            out[f.name] = _plain(f.name, value)
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> LayoutFacts:
        """The facts of a report's ``source``; a missing key or a value of the wrong type is a fact not recorded."""
        if not isinstance(d, Mapping):
            raise TypeError(f"source facts must be a JSON object, not {type(d).__name__}")
        return cls(**{name: read(d.get(name)) for name, read in _READ.items()})


#: Facts an H5MD group states even when they are None.
_STATED_AS_NULL = ("assumed_units", "precision")
#: Facts held as ``(key, value)`` pairs, written as JSON objects.
_MAPPINGS = ("units", "read_amplification", "read_amplification_hdf5_default")


def _plain(name: str, value):
    """A fact as JSON holds it."""
    if isinstance(value, Precision | RunRead):
        return value.to_dict()
    if name in _MAPPINGS:
        return dict(value)
    if name == "chunks" and value == CONTIGUOUS:
        return "contiguous"
    return list(value) if isinstance(value, tuple) else value


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _num(v) -> float | None:
    return v if isinstance(v, int | float) and not isinstance(v, bool) else None


def _str(v) -> str | None:
    return None if v is None else str(v)


def _strs(v) -> tuple[str, ...] | None:
    return tuple(str(x) for x in v) if isinstance(v, list | tuple) else None


def _ints(v) -> tuple[int, ...] | None:
    if not isinstance(v, list | tuple) or not all(_int(x) is not None for x in v):
        return None
    return tuple(v)


def _pairs(v, value) -> tuple[tuple, ...] | None:
    """A JSON object as ``(key, value)`` pairs, leaving out values of the wrong type."""
    if not isinstance(v, Mapping):
        return None
    return tuple((str(k), value(x)) for k, x in v.items() if value(x) is not None)


def _chunks(v) -> tuple[int, ...] | None:
    return CONTIGUOUS if v == "contiguous" else _ints(v) or None


def _record(cls):
    """A reader of a nested record's JSON object (None for anything else)."""
    return lambda v: cls.from_dict(v) if isinstance(v, Mapping) else None


#: How each fact is read from JSON, field by field.
_READ = {
    "format": _str, "path": _str, "group": _str, "n_frames": _int, "n_files": _int, "n_segments": _int,
    "segment_formats": _str, "n_atoms": _int, "fields": _strs, "units": lambda v: _pairs(v, _str),
    "assumed_units": _str, "dtype": _str, "chunks": _chunks, "compression": _str,
    "read_amplification": lambda v: _pairs(v, _num), "planned_chunks": _ints, "precision": _record(Precision),
    "read_amplification_hdf5_default": lambda v: _pairs(v, _num), "file_bytes": _int, "warnings": _strs,
    "direct_reads": _strs, "decoding": _str, "trace_dir": _str, "run_read": _record(RunRead),
    "collective_open": lambda v: v if isinstance(v, bool) else None, "validator": _str,
    "validator_complete": lambda v: v if isinstance(v, bool) else None,
}
