"""Worker start-up for the analysis executors.

The mechanics (start method, fork safety, SIGINT while workers start) live in
:mod:`trajscale.pools`, shared with the conversion pool; this module adds
what only analysis workers do: load the compiled kernels before the first
timed task.
"""

from __future__ import annotations

import logging
import os

from ..pools import fork_is_safe, main_not_reimported, quiet_worker, sigint_blocked  # noqa: F401 (re-exported)

log = logging.getLogger(__name__)


def warm_up() -> int:
    """First task of a new worker: load the compiled kernels now, not inside a timed task;
    the worker is then ready (its ``t_start`` in the report ends here)."""
    from ..kernels.superpose import preload_kernels
    from ..report.process import mark_ready

    preload_kernels()
    mark_ready()
    return os.getpid()
