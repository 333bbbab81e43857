"""A test-only RMSD whose worker process dies (``os._exit``) on the block holding a given frame.

Registered in ``trajscale.analysis.ANALYSES`` by :func:`register`; run it on a
``fork`` pool so workers inherit the registration.
"""

from __future__ import annotations

import os
import time

from trajscale.analysis import ANALYSES, RMSD


class DyingRMSD(RMSD):
    """RMSD that kills its own process when a block contains frame ``die_at``
    (and sleeps ``delay`` seconds on the block holding frame ``slow_at``)."""

    name = "dying_rmsd"

    def __init__(self, die_at: int = 0, slow_at: int = -1, delay: float = 2.0, **kw) -> None:
        super().__init__(**kw)
        self.die_at, self.slow_at, self.delay = int(die_at), int(slow_at), float(delay)

    def get_config(self) -> dict:
        return {**super().get_config(), "name": self.name, "die_at": self.die_at,
                "slow_at": self.slow_at, "delay": self.delay}

    def map(self, block, prep):
        if block.start <= self.slow_at < block.stop:
            time.sleep(self.delay)
        if block.start <= self.die_at < block.stop:
            time.sleep(0.2)   # the slow block is surely running on the other worker by now
            os._exit(7)
        return super().map(block, prep)


def register() -> None:
    ANALYSES[DyingRMSD.name] = DyingRMSD
