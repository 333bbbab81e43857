"""The installed distribution's version (package metadata), importable from any layer.

Read on first use (``__version__`` through PEP 562, or :func:`version`): ``importlib.metadata`` scans every
``sys.path`` folder for distributions, so a process that never prints or writes the version does not pay for it.
"""

from __future__ import annotations

import functools


@functools.cache
def version() -> str:
    """trajscale's version from its installed metadata (``"0+unknown"`` in a never-installed tree)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("trajscale")
    except PackageNotFoundError:   # running from a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
