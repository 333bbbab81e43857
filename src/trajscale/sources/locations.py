"""Where a trajectory file is: located once, where it enters trajscale (the API, the command line), as the
value every process opens: a URL as given, a local path absolute.  A list of URLs is a list of locations,
never paths joined to the working folder."""

from __future__ import annotations

import os
from pathlib import Path

from ..util import scheme_of


def is_local(location: str | os.PathLike | None) -> bool:
    """Whether ``location`` is a local file's path, not an object behind a URL a store serves (told without I/O,
    from the scheme table every layer shares: :data:`trajscale.util.SCHEME_PREFIXES`)."""
    return scheme_of(os.fspath(location) if isinstance(location, os.PathLike) else location) is None


def locate(trajectory: str | os.PathLike) -> str:
    """``trajectory`` as every process opens it: a URL as given (``s3://``, ``http(s)://``: never a path,
    so nothing joins it to a folder), a local path absolute with its links resolved (workers and ranks in
    another directory open the same file)."""
    text = os.fspath(trajectory)
    return str(Path(text).resolve()) if is_local(text) else text


__all__ = ["is_local", "locate"]
