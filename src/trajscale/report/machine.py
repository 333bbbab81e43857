"""The machine a prediction is made for: cores, memory, storage and start-up costs, and where each came from
(measured here, given as ``--nodes``/``--cores-per-node``, or a ``trajscale probe`` profile), so a prediction can
print what it assumed."""

from __future__ import annotations

import json
import math
import os
import socket
from dataclasses import asdict, dataclass, fields, replace
from itertools import pairwise
from pathlib import Path

from ..errors import InputFileError
from ..timeline import parse_cpu_list
from .conditions import Load, allowed_cpus, busy_reasons

PROFILE_KIND = "trajscale machine profile"
PROFILE_VERSION = 1

MEASURED, GIVEN, DEFAULTED = "measured", "given", "defaulted"
#: Moving a pickled object between two processes on one node, when the probe did not measure it (1 GB/s).
DEFAULT_TRANSFER_S_PER_BYTE = 1e-9


@dataclass(frozen=True, slots=True)
class LaunchLine:
    """What starting an executor's workers costs on a machine, calibrated on whole runs.

    A run at N workers spends ``at_cores_s`` up to the cores; each further worker adds ``per_worker_s``
    CPU seconds (``per_worker_parts_s`` reading XTC/TRR parts) plus ``per_atom_s`` per selected atom,
    shared by the cores; under MPI-IO ``collective_open_s`` more per rank.  ``per_worker_range`` and
    ``wall_range`` are the calibration's spread and the line's own error, which a prediction's range carries."""

    executor: str
    at_cores_s: float
    per_worker_s: float
    collective_open_s: float = 0.0
    per_worker_range: tuple[float, float] = (1.0, 1.0)
    wall_range: tuple[float, float] = (1.0, 1.0)
    per_atom_s: float = 0.0
    per_worker_parts_s: float | None = None   # None: as per_worker_s

    def per_further_worker(self, h5md: bool, collective: bool = False, atoms: int = 0) -> float:
        """CPU seconds each worker beyond the cores adds on one H5MD file or parts, with ``atoms`` selected."""
        base = self.per_worker_s if h5md or self.per_worker_parts_s is None else self.per_worker_parts_s
        return base + self.per_atom_s * atoms + (self.collective_open_s if collective else 0.0)

    def scaled(self, factor: float) -> LaunchLine:
        """This line with every per-further-worker cost times ``factor`` (an end of the range)."""
        parts = self.per_worker_parts_s
        return replace(self, per_worker_s=self.per_worker_s * factor, per_atom_s=self.per_atom_s * factor,
                       collective_open_s=self.collective_open_s * factor,
                       per_worker_parts_s=None if parts is None else parts * factor)


@dataclass(frozen=True, slots=True)
class Machine:
    """The target machine of a prediction.

    ``read_curve``: (readers, aggregate bytes/s) pairs measured by ``trajscale probe``.  ``start_s``: an
    executor's CPU seconds for one fresh worker to start.  ``transfer_s_per_byte``: moving a pickled object
    to another process.  ``launch``: a :class:`LaunchLine` per executor.  ``origin``: where each field came from."""

    name: str = ""
    nodes: int = 1
    cores_per_node: int = 1
    threads_per_core: int = 1
    memory_bytes: int = 0
    storage_gbps: float | None = None   # aggregate bandwidth of the shared storage (a ceiling), GB/s
    metadata_ms: float | None = None    # one open at a metadata server serving one at a time
    read_curve: tuple[tuple[int, float], ...] = ()
    block_bytes: int = 0                # the block size the read curve was measured at
    cold: str = ""                      # how the probe's reads bypassed the page cache, or why they could not
    cached_read_bps: float | None = None   # one reader's rate from the page cache (the probe's warm reads)
    open_ms: float | None = None
    stat_ms: float | None = None
    start_s: tuple[tuple[str, float], ...] = ()
    transfer_s_per_byte: float | None = None   # moving a pickled object to another process (None: not measured)
    launch: tuple[LaunchLine, ...] = ()
    loads: tuple[Load, ...] = ()        # what else ran while the profile was measured (probe, launch calibration)
    origin: tuple[tuple[str, str], ...] = ()

    @property
    def cores(self) -> int:
        """Cores of the whole machine (nodes x cores per node)."""
        return max(1, self.nodes) * max(1, self.cores_per_node)

    @property
    def busy(self) -> str:
        """Why the profile was measured on a busy machine ('' when it was not, or was not measured)."""
        return busy_reasons(self.loads)

    @property
    def cold_read_bps(self) -> float | None:
        """One reader's cold rate (the read curve's first point), if the probe measured one."""
        return min(self.read_curve)[1] if self.read_curve else None

    def origin_of(self, name: str) -> str:
        return dict(self.origin).get(name, DEFAULTED)

    def worker_start_s(self, executor: str) -> float | None:
        """CPU seconds one fresh worker of ``executor`` takes to start, if measured or given."""
        return dict(self.start_s).get(executor)

    @property
    def transfer_s(self) -> float:
        """Seconds per byte moved between processes: measured, given, or :data:`DEFAULT_TRANSFER_S_PER_BYTE`."""
        return self.transfer_s_per_byte if self.transfer_s_per_byte is not None else DEFAULT_TRANSFER_S_PER_BYTE

    def launch_line(self, executor: str) -> LaunchLine | None:
        """The calibrated launch line of ``executor``, if there is one."""
        return next((line for line in self.launch if line.executor == executor), None)

    def read_bps(self, readers: int) -> float:
        """Aggregate bytes/s of the storage with ``readers`` concurrent readers (inf: not known): interpolated
        between measured counts, the largest measured rate beyond them, capped by ``storage_gbps``."""
        cap = self.storage_gbps * 1e9 if self.storage_gbps else math.inf
        if not self.read_curve:
            return cap
        pts = sorted(self.read_curve)
        readers = max(1, readers)
        if readers <= pts[0][0]:
            agg = pts[0][1] * readers / pts[0][0]
        elif readers >= pts[-1][0]:
            agg = max(r for _, r in pts)
        else:
            agg = pts[-1][1]
            for (k0, r0), (k1, r1) in pairwise(pts):
                if k0 <= readers <= k1:
                    agg = r0 + (r1 - r0) * (readers - k0) / (k1 - k0)
                    break
        return min(agg, cap)

    def with_given(self, **values) -> Machine:
        """This machine with the values a user gave on the command line (None: not given)."""
        given = {k: v for k, v in values.items() if v is not None}
        if not given:
            return self
        origin = dict(self.origin)
        origin.update(dict.fromkeys(given, GIVEN))
        return replace(self, **given, origin=tuple(origin.items()))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["read_curve"] = [list(p) for p in self.read_curve]
        d["start_s"] = dict(self.start_s)
        d["launch"] = {line.executor: {k: v for k, v in asdict(line).items() if k != "executor"}
                       for line in self.launch}
        d["origin"] = dict(self.origin)
        d["loads"] = [x.to_dict() for x in self.loads]
        return {"kind": PROFILE_KIND, "version": PROFILE_VERSION, **d}

    @classmethod
    def from_dict(cls, d: dict) -> Machine:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["read_curve"] = tuple((int(k), float(r)) for k, r in kw.get("read_curve") or ())
        kw["start_s"] = tuple((str(k), float(v)) for k, v in dict(kw.get("start_s") or {}).items())
        ranges = ("per_worker_range", "wall_range")
        kw["launch"] = tuple(LaunchLine(str(e), **{k: (tuple(float(y) for y in x) if k in ranges
                                                       else None if x is None else float(x))
                                                   for k, x in dict(v).items()})
                             for e, v in dict(kw.get("launch") or {}).items())
        kw["origin"] = tuple((str(k), str(v)) for k, v in dict(kw.get("origin") or {}).items())
        kw["loads"] = tuple(Load.from_dict(x) for x in kw.get("loads") or ())
        for name in ("nodes", "cores_per_node", "threads_per_core", "memory_bytes", "block_bytes"):
            if name in kw:
                kw[name] = int(kw[name])
        for name in ("transfer_s_per_byte", "cached_read_bps"):
            if kw.get(name) is not None:
                kw[name] = float(kw[name])
        m = cls(**kw)
        if m.transfer_s_per_byte is not None and not (math.isfinite(m.transfer_s_per_byte)
                                                      and m.transfer_s_per_byte > 0):
            raise ValueError("transfer_s_per_byte must be finite and positive")
        if m.cached_read_bps is not None and not (math.isfinite(m.cached_read_bps) and m.cached_read_bps > 0):
            raise ValueError("cached_read_bps must be finite and positive")
        if m.nodes < 1 or m.cores_per_node < 1 or any(r <= 0 or k < 1 for k, r in m.read_curve):
            raise ValueError("nodes, cores_per_node, readers and rates must be positive")
        if any(not (math.isfinite(v) and v >= 0) for line in m.launch
               for v in (line.at_cores_s, line.per_worker_s, line.collective_open_s, *line.per_worker_range,
                         *line.wall_range, line.per_atom_s, line.per_worker_parts_s or 0.0)):
            raise ValueError("launch seconds must be finite and not negative")
        if any(len(line.per_worker_range) != 2 or len(line.wall_range) != 2 for line in m.launch):
            raise ValueError("per_worker_range and wall_range must be two factors (low, high)")
        return m

    def write(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write the profile as JSON: a temporary name, fsync, rename."""
        from ..util import atomic_output

        with atomic_output(path, overwrite=overwrite) as tmp:
            Path(tmp).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> Machine:
        """A profile written by ``trajscale probe`` (or by hand); a bad file is an InputFileError."""
        try:
            d = json.loads(Path(path).read_text())
        except OSError as exc:
            raise InputFileError(str(path), f"cannot read ({exc.strerror or exc})") from None
        except ValueError:
            raise InputFileError(str(path), "not JSON (a machine profile from `trajscale probe` was expected)") \
                from None
        if not isinstance(d, dict) or d.get("kind") != PROFILE_KIND:
            raise InputFileError(str(path), "not a machine profile (written by `trajscale probe`)")
        try:
            m = cls.from_dict(d)
        except (TypeError, ValueError, KeyError) as exc:
            raise InputFileError(str(path), f"not a valid machine profile ({exc})") from None
        origin = {k: (f"{v} ({m.name})" if v == MEASURED and m.name else v) for k, v in m.origin}
        return replace(m, origin=tuple(origin.items()))

    def assumptions(self) -> list[tuple[str, str, str]]:
        """(what, value, origin) rows: the block a prediction prints and writes to its JSON."""
        rows = [("machine", self.name or "unnamed", self.origin_of("name")),
                ("nodes", str(self.nodes), self.origin_of("nodes")),
                ("cores per node", str(self.cores_per_node), self.origin_of("cores_per_node")),
                ("threads per core", str(self.threads_per_core), self.origin_of("threads_per_core")),
                ("memory", f"{self.memory_bytes / 2**30:.3g} GiB" if self.memory_bytes else "not known",
                 self.origin_of("memory_bytes"))]
        if self.read_curve:
            curve = ", ".join(f"{k}: {r / 1e9:.3g}" for k, r in sorted(self.read_curve))
            value = (f"{curve} (blocks of {self.block_bytes / 2**20:.3g} MiB; "
                     f"{self.cold or 'cache state not known'})")
            if self.cached_read_bps and "page cache" not in self.cold:
                value += f"; page cache {self.cached_read_bps / 1e9:.3g} GB/s for one reader"
            rows.append(("storage read GB/s by readers", value, self.origin_of("read_curve")))
        else:
            rows.append(("storage read", "each rank at the report's own read rate (no probe profile)", DEFAULTED))
        rows.append(("storage ceiling", f"{self.storage_gbps:.4g} GB/s" if self.storage_gbps else "none",
                     self.origin_of("storage_gbps") if self.storage_gbps else DEFAULTED))
        rows.append(("file open", f"{self.open_ms:.3g} ms" if self.open_ms is not None
                     else "the report's own open time", self.origin_of("open_ms") if self.open_ms else DEFAULTED))
        if self.metadata_ms is not None:
            rows.append(("metadata server", f"{self.metadata_ms:.3g} ms per open, one at a time",
                         self.origin_of("metadata_ms")))
        starts = ", ".join(f"{k} {v:.3g} s" for k, v in self.start_s)
        rows.append(("worker start", starts or "the report's launcher imports, per worker",
                     self.origin_of("start_s") if starts else DEFAULTED))
        rows.append(("moving a pickled object between processes",
                     f"{1e-9 / self.transfer_s:.3g} GB/s", self.origin_of("transfer_s_per_byte")
                     if self.transfer_s_per_byte is not None else DEFAULTED))
        if self.loads:
            rows.append(("machine load while measured",
                         f"BUSY, the profile's times are those of a machine with fewer free cores: {self.busy}"
                         if self.busy else "idle enough: " + "; ".join(x.describe() for x in self.loads),
                         self.origin_of("loads")))
        if self.launch:
            lines = "; ".join(f"{x.executor} {x.at_cores_s:.3g} s up to the cores + {x.per_worker_s:.3g} s"
                              + (f" (parts: {x.per_worker_parts_s:.3g} s)" if x.per_worker_parts_s is not None
                                 else "")
                              + (f" + {x.per_atom_s * 1e6:.3g} us per selected atom" if x.per_atom_s else "")
                              + " per further worker"
                              + (f" (+ {x.collective_open_s:.3g} s with a collective open)"
                                 if x.collective_open_s else "")
                              for x in self.launch)
            rows.append(("launch", lines, self.origin_of("launch")))
        return rows

    def format_assumptions(self, extra: list[tuple[str, str, str]] | None = None) -> str:
        rows = self.assumptions() + list(extra or ())
        width = max(len(r[0]) for r in rows)
        return "\n".join(["assumptions:"] + [f"  {w:<{width}}  {v}  [{o}]" for w, v, o in rows])


def _threads_per_core(cpus: set[int]) -> int:
    """Logical CPUs per core among ``cpus``, from the kernel's thread sibling lists (1 if not readable)."""
    best = 1
    for cpu in cpus:
        try:
            text = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text()
        except OSError:
            continue
        best = max(best, len(parse_cpu_list(text.strip())))
    return best


def _memory_bytes() -> int:
    try:   # (the kernel's MemTotal)
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def this_machine() -> Machine:
    """This machine, measured: the CPUs this process may run on, hyperthreads and memory."""
    cpus = allowed_cpus()
    host = socket.gethostname()
    origin = {k: f"{MEASURED} on {host}" for k in ("name", "nodes", "cores_per_node", "threads_per_core",
                                                   "memory_bytes")}
    return Machine(name=host, nodes=1, cores_per_node=len(cpus), threads_per_core=_threads_per_core(cpus),
                   memory_bytes=_memory_bytes(), origin=tuple(origin.items()))


__all__ = ["DEFAULTED", "DEFAULT_TRANSFER_S_PER_BYTE", "GIVEN", "MEASURED", "LaunchLine", "Machine", "this_machine"]
