"""The installed distribution's version (package metadata), importable from any layer."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("trajscale")
except PackageNotFoundError:   # running from a source tree that was never installed
    __version__ = "0+unknown"
