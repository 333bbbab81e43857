"""How a followed run ended: one record per ending, with its exit status (docs/following.md)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .errors import ConfigError


class Ending(enum.Enum):
    """Why a followed run ended: ``(key, exit status, what the last line says)``.

    The key is ``report.meta.follow.ended``; ``{detail}`` is filled by whoever met the ending.  Only the
    endings a producer means (marked complete, stream closed) exit 0, so a script can tell results over a
    whole trajectory from results over the part that could be read."""

    COMPLETE = ("complete", 0, "the writer marked the file complete")
    STREAM_ENDED = ("stream-ended", 0, "the stream ended: the producer closed its connection")
    IDLE = ("idle", 4, "no new frame for {detail}")
    VANISHED = ("vanished", 5, "the producer vanished: {detail}")
    REPLACED = ("replaced", 6, "{detail}")
    DAMAGED = ("damaged", 7, "{detail}")
    STOPPED = ("stopped", 130, "interrupted; the results cover every frame analysed so far")

    def __init__(self, key: str, status: int, text: str) -> None:
        self.key, self.status, self.text = key, status, text

    @classmethod
    def of(cls, key: str) -> Ending:
        """The ending whose key is ``key`` (as a report stores it)."""
        for ending in cls:
            if ending.key == key:
                return ending
        raise ValueError(f"no followed run ends {key!r}; endings: {', '.join(e.key for e in cls)}")

    def why(self, detail: str = "") -> str:
        """What the last line says after ``ended:``."""
        return self.text.format(detail=detail)

    def exit_status(self, signal_number: int | None = None) -> int:
        """The command's exit status; an interrupted run's is 128 + the signal, as for any interrupted command."""
        if self is Ending.STOPPED and signal_number:
            return 128 + signal_number
        return self.status


class FollowEnded(Exception):
    """Raised at a replaced or shrunk file, or damage: ``detail`` names it, ``frames`` are the whole ones before it."""

    def __init__(self, ending: Ending, detail: str, frames: int = 0) -> None:
        super().__init__(detail)
        self.ending, self.detail, self.frames = ending, detail, frames


@dataclass(frozen=True)
class FollowOptions:
    """How a followed run polls, publishes and ends.

    Attributes
    ----------
    every_s
        Publish the results so far (``on_update``) at most this often, in seconds.
    every_frames
        ... or once this many new frames are analysed (None: by time only).
    idle
        End when no new frame has come for this many seconds.
    poll
        Seconds between looks at the trajectory when nothing is new.
    wait
        Seconds to wait for the first complete frame (default: ``idle``).
    tee
        An IMD stream (``imd://HOST:PORT``): keep every frame received in this H5MD file (None: a
        temporary file, removed when the run ends).
    overwrite
        With ``tee``: replace an existing file.
    """

    every_s: float = 30.0
    every_frames: int | None = None
    idle: float = 60.0
    poll: float = 0.5
    wait: float | None = None
    tee: str | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        for name, value in (("every_s", self.every_s), ("idle", self.idle), ("poll", self.poll)):
            if not value > 0:
                raise ConfigError(f"follow: {name} must be positive, got {value}")
        if self.every_frames is not None and self.every_frames < 1:
            raise ConfigError(f"follow: every_frames must be at least 1, got {self.every_frames}")


__all__ = ["Ending", "FollowEnded", "FollowOptions"]
