"""What a run's job and partial results weigh pickled, measured once by the run, for the prediction."""

from __future__ import annotations

import pickle
from dataclasses import dataclass


def pickled_bytes(obj) -> int:
    """Bytes of ``obj`` pickled (protocol 5), counted without copying its large arrays."""
    buffers: list = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return len(head) + sum(b.raw().nbytes for b in buffers)


@dataclass(frozen=True, slots=True)
class Payload:
    """Pickled sizes: the job, and the reduced partial result of ``frames`` frames; ``per_frame``: the
    partial holds one row per frame, else every task's partial is as large as the reduced one."""

    job_bytes: int
    partial_bytes: int
    frames: int
    per_frame: bool

    def to_dict(self) -> dict:
        return {"job_bytes": self.job_bytes, "partial_bytes": self.partial_bytes, "frames": self.frames,
                "per_frame": self.per_frame}

    @classmethod
    def from_dict(cls, d: dict | None) -> Payload | None:
        """The record of a report's ``meta.payload`` (None: a report written before it was measured)."""
        if not isinstance(d, dict):
            return None
        try:
            p = cls(int(d["job_bytes"]), int(d["partial_bytes"]), int(d["frames"]), bool(d["per_frame"]))
        except (KeyError, TypeError, ValueError):
            return None
        return p if min(p.job_bytes, p.partial_bytes, p.frames) >= 0 else None


def payload_of(job, reduced, frames: int, per_frame: bool) -> Payload | None:
    """The :class:`Payload` of a run; None when either cannot be pickled (measuring never fails a run)."""
    try:
        return Payload(pickled_bytes(job), pickled_bytes(reduced), frames, per_frame)
    except Exception:  # noqa: BLE001 (pickle raises what the object's __reduce__ raises)
        return None


__all__ = ["Payload", "payload_of", "pickled_bytes"]
