"""The options of ``convert``, ``rechunk`` and ``verify``, as frozen records that travel together.

After zarr's ``ArraySpec``/``ArrayConfig``: *what is stored* (:class:`OutputSpec`) apart from *how it is written*
(:class:`WriteOptions`); :class:`ReadOptions` is shared by ``convert`` and ``verify``, so a file is verified
against exactly what it was converted from.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import ConfigError
from ..executor_registry import EXECUTORS
from ..h5md.codecs import check_lossy_options
from ..h5md.layout import Layout

log = logging.getLogger(__name__)

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Which atoms and frames of the inputs, and how they are read and joined.

    Parameters
    ----------
    select
        MDAnalysis selection of the atoms written (None: all).
    start, stop, step
        The frames of the joined inputs, as a Python slice.
    group, assume_units
        For H5MD inputs: the particle group, and the units of datasets without a unit attribute.
    continuous
        Join parts that overlap in time, the later part's frames kept (otherwise refused).
    """

    select: str | None = None
    start: int | None = None
    stop: int | None = None
    step: int | None = None
    group: str | None = None
    assume_units: str | None = None
    continuous: bool = False


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """How the output's per-atom series are stored: the only options that decide its bytes.

    Parameters
    ----------
    layout
        Chunks, compression and checksums (:class:`~trajscale.h5md.layout.Layout`); ``Layout(remote=True)``
        plans them for a store read over the network.
    precision
        Positions rounded to this precision in Å (lossy; :mod:`trajscale.h5md.codecs`), or None.
    encoding
        With ``precision``: ``"floats"``, ``"deltas"`` or ``"deltas32"``.
    """

    layout: Layout = field(default_factory=Layout)
    precision: float | None = None
    encoding: str = "floats"

    def __post_init__(self) -> None:
        if self.layout is None:   # ``layout=None`` in a keyword call: the default layout
            object.__setattr__(self, "layout", Layout())

    def check(self, warn: bool = True) -> None:
        """Refuse a precision/encoding that cannot be written (ConfigError); ``warn`` of a useless one."""
        check_lossy_options(self.precision, self.encoding, self.layout.compression, warn=warn)

    def resume_options(self) -> dict:
        """The options a resumed output must share, by their command-line names (plain values)."""
        comp = self.layout.compression or "none"
        if self.layout.compression_opts is not None:
            comp += f":{self.layout.compression_opts}"
        out = {"chunks": self.layout.chunks, "compression": comp, "fletcher32": self.layout.fletcher32,
               "precision": self.precision, "encoding": self.encoding}
        if self.layout.remote:   # (only then: records of earlier runs, without it, still match)
            out["layout"] = "remote"
        return out


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """How the output is produced; none of these changes its bytes.

    Parameters
    ----------
    overwrite
        Replace an existing output (never an input).
    resume
        Continue an interrupted run of the same inputs and options (:mod:`trajscale.convert.resume`).
    progress
        Show progress (a bar on a terminal, log lines elsewhere).
    executor, n_workers
        ``"processes"`` or ``"dask"`` with ``n_workers`` (None: the CPU count); ``"mpi"`` with ``comm``;
        None or ``"serial"``: one pass.
    executor_options
        The executor's own options (its registry entry's: ``{"scheduler": "tcp://host:8786"}``,
        ``{"cluster": "slurm", "jobs": 4, ...}`` for Dask, ``{"start_method": "spawn"}`` for processes).
    virtual
        Keep the per-worker segments beside the output, mapped into it as HDF5 virtual datasets.
    comm
        The MPI communicator every rank calls with (a run on several ranks writes collectively).
    """

    overwrite: bool = False
    resume: bool = False
    progress: bool = False
    executor: str | None = None
    n_workers: int | None = None
    virtual: bool = False
    comm: Any = field(default=None, compare=False, repr=False)
    executor_options: dict = field(default_factory=dict, compare=False)

    @property
    def mpi(self) -> bool:
        """True when the ranks of ``comm`` (two or more) write the one output together."""
        return self._workers in (None, "launcher") and self.comm is not None and self.comm.Get_size() > 1

    @property
    def on_processes(self) -> bool:
        """True when local worker processes (or Dask's) write the output: an executor of ``-n N`` workers."""
        return self._workers == "n_workers"

    @property
    def _workers(self) -> str | None:
        """How the named executor counts its workers; None when none is named, "" for an unknown name."""
        if self.executor is None:
            return None
        traits = EXECUTORS.get(self.executor)
        return "" if traits is None else traits.workers

    @property
    def rank0(self) -> bool:
        """True in the process that speaks for the run (the only one without MPI)."""
        return self.comm is None or self.comm.Get_rank() == 0

    def workers(self) -> int:
        """Workers of a processes/Dask run (the CPU count unless ``n_workers``)."""
        return self.n_workers or os.cpu_count() or 1

    def chosen(self, n_frames: int, n_atoms: int, decode_s_per_frame: float = 0.0,
               reads_ahead: bool = False) -> WriteOptions:
        """These options with ``executor="auto"`` replaced by its choice (``trajscale run``'s rule), said in the
        log. ``reads_ahead``: the input's bytes come over a network, which more processes do not fetch faster."""
        if self.executor is None or not EXECUTORS[self.executor].chooses:
            return self
        from ..executor_registry import WorkSize, choose

        size = WorkSize(n_frames, n_atoms, None, decode_s_per_frame, reads_ahead=reads_ahead)
        name, why = choose(self.executor, size, self.n_workers)
        log.info("executor %s: %s", name, why)
        return dataclasses.replace(self, executor=name)


@dataclass(frozen=True, slots=True)
class ConvertOptions:
    """Everything :func:`~trajscale.convert.convert.convert` is asked to do besides its files.

    Parameters
    ----------
    read, spec, write
        See :class:`ReadOptions`, :class:`OutputSpec`, :class:`WriteOptions`.
    velocities, forces
        Write them when every input has them.
    units
        ``"mdanalysis"`` (Å, ps, kJ/(mol Å)), ``"gromacs"`` (nm, ps, kJ/(mol nm)) or ``"source"``.
    """

    read: ReadOptions = field(default_factory=ReadOptions)
    spec: OutputSpec = field(default_factory=OutputSpec)
    write: WriteOptions = field(default_factory=WriteOptions)
    velocities: bool = True
    forces: bool = True
    units: str = "mdanalysis"


@dataclass(frozen=True, slots=True)
class RechunkOptions:
    """Everything :func:`~trajscale.convert.rechunk.rechunk` is asked to do besides its files.

    Parameters
    ----------
    spec, write
        See :class:`OutputSpec`, :class:`WriteOptions`.
    slab_bytes
        Bytes copied per slab and counted at a time (None: the module's defaults).
    """

    spec: OutputSpec = field(default_factory=OutputSpec)
    write: WriteOptions = field(default_factory=WriteOptions)
    slab_bytes: int | None = None


def with_options(record: R, kwargs: dict, call: str) -> R:
    """``record`` with ``kwargs`` set, each a field of ``record`` or of one of its records
    (``layout=L`` sets ``spec.layout``); an unknown name is one ConfigError naming it and ``call``."""
    if not kwargs:
        return record
    own = {f.name for f in dataclasses.fields(record)}
    nested = {f.name: {g.name for g in dataclasses.fields(getattr(record, f.name))}
              for f in dataclasses.fields(record) if dataclasses.is_dataclass(getattr(record, f.name))}
    top: dict = {}
    inner: dict[str, dict] = {}
    for name, value in kwargs.items():
        owner = next((sub for sub, names in nested.items() if name in names), None)
        if name in own:
            top[name] = value
        elif owner is not None:
            inner.setdefault(owner, {})[name] = value
        else:
            known = sorted(own.union(*nested.values()))
            raise ConfigError(f"{call}() got an unknown option {name!r} (options: {', '.join(known)})")
    for owner, values in inner.items():
        top[owner] = dataclasses.replace(top.get(owner, getattr(record, owner)), **values)
    return dataclasses.replace(record, **top)
