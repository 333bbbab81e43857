"""A test-only RMSD whose worker process dies (``os._exit``) on the block holding a given frame.

Registered in ``trajscale.analysis.ANALYSES`` by :func:`register`; run it on a
``fork`` pool so workers inherit the registration.
"""

from __future__ import annotations

import os

from trajscale.analysis import ANALYSES, RMSD


class DyingRMSD(RMSD):
    """RMSD that kills its own process when a block contains frame ``die_at``."""

    name = "dying_rmsd"

    def __init__(self, die_at: int = 0, **kw) -> None:
        super().__init__(**kw)
        self.die_at = int(die_at)

    def get_config(self) -> dict:
        return {**super().get_config(), "name": self.name, "die_at": self.die_at}

    def map(self, block, prep):
        if block.start <= self.die_at < block.stop:
            os._exit(7)
        return super().map(block, prep)


def register() -> None:
    ANALYSES[DyingRMSD.name] = DyingRMSD
