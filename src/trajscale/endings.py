"""How a followed run (``run --follow``, an IMD stream) ended: one record per ending, with its exit status.

Every ending saves the results over the frames analysed; what differs is what a
user, or a script reading the exit status, should make of them. The last line of
a followed run (:func:`trajscale.follow.last_line`) and ``report.meta.follow``
say the ending; :attr:`Ending.status` is the command's exit status. The table is
docs/following.md's "How a run ends".
"""

from __future__ import annotations

import enum


class Ending(enum.Enum):
    """Why a followed run ended: ``(key, exit status, what the last line says)``.

    The key is what ``report.meta.follow.ended`` holds. ``{detail}`` in the
    text is filled by whoever met the ending (the idle time, the damage's frame
    and byte, what changed in a replaced file). The two endings a producer means
    (the file marked complete, the stream closed normally) exit 0; every other
    ending has a status of its own, so that a script can tell results over a
    whole trajectory from results over the part that could be read.
    """

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
        """The command's exit status; an interrupted run's is 128 + the signal that stopped it (130 for
        Ctrl-C, 143 for SIGTERM), as for any interrupted command."""
        if self is Ending.STOPPED and signal_number:
            return 128 + signal_number
        return self.status


class FollowEnded(Exception):
    """Raised by a snapshot that meets an ending a followed run cannot go past: a replaced or shrunk file
    (:attr:`Ending.REPLACED`) or damage (:attr:`Ending.DAMAGED`), with ``detail`` the one line naming it and
    ``frames`` the whole frames before it (those are analysed first)."""

    def __init__(self, ending: Ending, detail: str, frames: int = 0) -> None:
        super().__init__(detail)
        self.ending, self.detail, self.frames = ending, detail, frames


__all__ = ["Ending", "FollowEnded"]
