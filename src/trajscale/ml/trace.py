"""I/O trace of a training loader: per worker opens, reads, bytes and seconds; waiting vs computing.

Devarajan, HUG 2024 found its loader's problem with DFTracer's per-process I/O events.  Here each process
that reads appends one JSON line per open and per batch read to ``trace_dir/io-<pid>.jsonl`` (unbuffered:
a killed worker loses nothing), and :class:`LoopTimer` records, in the training process, the time waiting
for each batch and the time between.  :func:`load_report` turns the folder into a
:class:`~trajscale.report.timing.RunReport`, drawn and summarised as an analysis run's.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: perf_counter -> epoch seconds in this process (traces put every process on one clock)
_EPOCH_OFFSET = time.time() - time.perf_counter()


@dataclass
class IOStats:
    """Counters of one process's opens and reads, optionally appended to a trace file."""

    path: str | None = None
    opens: int = 0
    reads: int = 0
    samples: int = 0
    bytes: int = 0
    t_open: float = 0.0
    t_read: float = 0.0
    _fh: object = field(default=None, repr=False)

    @classmethod
    def for_process(cls, trace_dir: str | None) -> IOStats:
        if not trace_dir:
            return cls()
        os.makedirs(trace_dir, exist_ok=True)
        return cls(os.path.join(trace_dir, f"io-{os.getpid()}.jsonl"))

    def _event(self, **ev) -> None:
        if self.path is None:
            return
        if self._fh is None:
            self._fh = open(self.path, "a", buffering=1)
        self._fh.write(json.dumps(ev) + "\n")

    def opened(self, path: str, t0: float, t1: float) -> None:
        self.opens += 1
        self.t_open += t1 - t0
        self._event(ev="open", pid=os.getpid(), file=path, t0=t0 + _EPOCH_OFFSET, dur=t1 - t0)

    def read(self, t0: float, t1: float, calls: int, nbytes: int, samples: int) -> None:
        self.reads += calls
        self.samples += samples
        self.bytes += nbytes
        self.t_read += t1 - t0
        self._event(ev="read", pid=os.getpid(), t0=t0 + _EPOCH_OFFSET, dur=t1 - t0, calls=calls,
                    bytes=nbytes, samples=samples)


class LoopTimer:
    """Wrap a loader in the training process: time waiting for each batch vs the time between.

    >>> timer = LoopTimer(trace_dir)
    >>> for batch in timer.iterate(loader):
    ...     step(batch)
    """

    def __init__(self, trace_dir: str | os.PathLike | None = None) -> None:
        self.trace_dir = str(trace_dir) if trace_dir else None
        self.t_wait = 0.0
        self.t_compute = 0.0
        self.batches = 0
        self._events: list[dict] = []

    def iterate(self, loader: Iterable) -> Iterator:
        """Yield ``loader``'s batches; time in ``next()`` is waiting, time until the next ask is compute."""
        it = iter(loader)
        try:
            while True:
                t0 = time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    break
                t1 = time.perf_counter()
                self.t_wait += t1 - t0
                self.batches += 1
                self._events.append({"ev": "wait", "t0": t0 + _EPOCH_OFFSET, "dur": t1 - t0})
                yield batch
                t2 = time.perf_counter()
                self.t_compute += t2 - t1
                self._events.append({"ev": "compute", "t0": t1 + _EPOCH_OFFSET, "dur": t2 - t1})
        finally:
            self._flush()

    def _flush(self) -> None:
        if not self.trace_dir or not self._events:
            return
        os.makedirs(self.trace_dir, exist_ok=True)
        with open(os.path.join(self.trace_dir, f"loop-{os.getpid()}.jsonl"), "a") as fh:
            for ev in self._events:
                fh.write(json.dumps({**ev, "pid": os.getpid()}) + "\n")
        self._events.clear()


def _read_events(trace_dir: Path) -> list[dict]:
    from ..errors import InputFileError

    events = []
    for p in sorted(trace_dir.glob("*.jsonl")):
        for line in p.read_text().splitlines():
            if line.strip():
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:   # a worker killed mid-line: keep the rest
                    continue
    if not events:
        raise InputFileError(trace_dir, "holds no loader trace (io-*.jsonl / loop-*.jsonl)")
    return events


def load_report(trace_dir: str | os.PathLike, label: str = "loader"):
    """The trace folder as a RunReport: one worker per reading process (a task per batch read, ``t_io``, and
    per open, ``t_init_traj``) plus the training loop (a task per batch: ``t_wait``, ``t_compute``)."""
    from ..facts import LayoutFacts
    from ..report.summary import Report
    from ..report.timing import TaskTiming, summarize_workers

    events = _read_events(Path(trace_dir))
    host = socket.gethostname()
    loop_pids = {e["pid"] for e in events if e["ev"] in ("wait", "compute")}
    phases = {"open": "t_init_traj", "read": "t_io", "wait": "t_wait", "compute": "t_compute"}
    tasks = []
    for e in sorted(events, key=lambda e: (e["pid"], e["t0"])):
        worker = f"{'loop' if e['pid'] in loop_pids else 'reader'}-{e['pid']}"
        tasks.append(TaskTiming(task=len(tasks), start=0, stop=int(e.get("samples", 0)), worker=worker,
                                host=host, pid=e["pid"], bytes_read=int(e.get("bytes", 0)),
                                t_begin=e["t0"], t_end=e["t0"] + e["dur"], **{phases[e["ev"]]: e["dur"]}))
    t0 = min(t.t_begin for t in tasks)
    t1 = max(t.t_end for t in tasks)
    readers = {t.worker for t in tasks if t.worker.startswith("reader")}
    return Report(analysis=label, executor="dataloader", n_workers=len(readers),
                  n_frames=sum(t.frames for t in tasks if t.t_io), n_atoms=0,
                  source=LayoutFacts(trace_dir=str(trace_dir)), t_total=t1 - t0, tasks=tasks,
                  workers=summarize_workers(tasks))


def summary(trace_dir: str | os.PathLike) -> dict:
    """Seed-003-style summary: per reading process opens, reads, bytes, seconds; loop wait vs compute."""
    events = _read_events(Path(trace_dir))
    out: dict = {"processes": {}, "wait_s": 0.0, "compute_s": 0.0, "batches": 0}
    for e in events:
        if e["ev"] == "wait":
            out["wait_s"] += e["dur"]
            out["batches"] += 1
        elif e["ev"] == "compute":
            out["compute_s"] += e["dur"]
        else:
            p = out["processes"].setdefault(e["pid"], {"opens": 0, "reads": 0, "bytes": 0, "samples": 0,
                                                       "open_s": 0.0, "read_s": 0.0})
            if e["ev"] == "open":
                p["opens"] += 1
                p["open_s"] += e["dur"]
            else:
                p["reads"] += e["calls"]
                p["bytes"] += e["bytes"]
                p["samples"] += e["samples"]
                p["read_s"] += e["dur"]
    return out


def format_summary(s: dict) -> str:
    """The :func:`summary` as text, one line per reading process, like the seed's behaviour summary."""
    total = s["wait_s"] + s["compute_s"]
    lines = [f"training loop: {s['batches']} batches, waiting for data {s['wait_s']:.3f} s, "
             f"computing {s['compute_s']:.3f} s"
             + (f" ({100 * s['wait_s'] / total:.0f}% waiting)" if total > 0 else "")]
    for pid, p in sorted(s["processes"].items()):
        rate = p["bytes"] / p["read_s"] / 1e9 if p["read_s"] > 0 else 0.0
        lines.append(f"  process {pid}: {p['opens']} opens ({p['open_s']:.3f} s), {p['reads']} reads, "
                     f"{p['samples']} samples, {p['bytes'] / 1e6:.1f} MB in {p['read_s']:.3f} s ({rate:.2f} GB/s)")
    return "\n".join(lines)


def write_loader_trace(trace_dir: str | os.PathLike, path: str | os.PathLike) -> dict:
    """Write the folder's Chrome/Perfetto trace (via :func:`trajscale.report.trace.write_trace`)."""
    from ..report.trace import write_trace

    return write_trace(load_report(trace_dir), path)


__all__ = ["IOStats", "LoopTimer", "format_summary", "load_report", "summary", "write_loader_trace"]
