"""Run every task in this process, one after the other."""

from __future__ import annotations

from ..block import FrameRange
from ..progress import progress_bar
from ..timeline import mark_ready
from ..util import raise_if_stopped
from .base import Executor, Homecoming, Job, TaskResults, close_cached_sources, io_of, run_in_turn


class SerialExecutor(Executor):
    """The reference executor: same tasks, same wrapper, no parallelism."""

    polls_for_stop = True   # checks for a recorded Ctrl-C between tasks
    adopts_sources = True   # tasks run here: the launcher's open source serves them
    root_worker = "serial"

    def __init__(self, n_workers: int = 1) -> None:
        super().__init__(1)

    def start(self, modules: tuple[str, ...] = (), late: bool = False) -> None:
        """The calling process is the worker: its start-up ends here, its reader's modules imported."""
        mark_ready()

    def map_tasks(self, job: Job, ranges: list[FrameRange], progress: bool = False) -> TaskResults:
        home = Homecoming(job, len(ranges))
        with progress_bar(len(ranges), progress) as bar:
            # each task told the next (a source behind a URL reads ahead); a recorded Ctrl-C is acted on between tasks
            for i, result in run_in_turn(job, enumerate(ranges), self.root_worker,
                                         before=lambda _: raise_if_stopped()):
                home.add(i, result)
                bar.update(1)
        return home.results(io=io_of(self.source_options))

    def close(self, wait: bool = True) -> None:
        """Close the files the tasks opened in this process and free their buffers."""
        close_cached_sources()
