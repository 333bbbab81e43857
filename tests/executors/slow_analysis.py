"""A test-only RMSD that sleeps in ``map``, importable by Dask workers.

Workers rebuild analyses from ``trajscale.analysis.ANALYSES``; :func:`register`
adds ``SlowRMSD`` there, and :class:`RegisterSlow` (a worker plugin) runs it
on every worker, including one the nanny restarts after a crash.
"""

from __future__ import annotations

import time

from trajscale.analysis import ANALYSES, RMSD


class SlowRMSD(RMSD):
    """RMSD that sleeps ``delay`` seconds per block (same numbers as RMSD)."""

    name = "slow_rmsd"

    def __init__(self, delay: float = 0.1, **kw) -> None:
        super().__init__(**kw)
        self.delay = float(delay)

    def get_config(self) -> dict:
        return {**super().get_config(), "name": self.name, "delay": self.delay}

    def map(self, block, prep):
        time.sleep(self.delay)
        return super().map(block, prep)


def register() -> None:
    ANALYSES[SlowRMSD.name] = SlowRMSD


def worker_plugin():
    """A ``distributed.WorkerPlugin`` registering SlowRMSD on each (re)started worker."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class RegisterSlow(WorkerPlugin):
        def setup(self, worker) -> None:
            import sys

            sys.path[:0] = [p for p in PATHS if p not in sys.path]
            from tests.executors.slow_analysis import register as reg

            reg()

    return RegisterSlow()


#: Where ``tests`` is importable from (handed to workers with the plugin).
PATHS: list[str] = [__file__.rsplit("/tests/", 1)[0]]
