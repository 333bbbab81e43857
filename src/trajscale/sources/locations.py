"""Where a trajectory file is, for the policy points above the Sources: whether a location is a local path (what a
URL is refused or told), and a file named beside one for a local reader. A location is made once, where it enters
trajscale (the API, the command line), as the value every process opens: a URL as given, a local path absolute
(:meth:`Location.absolute`)."""

from __future__ import annotations

import os

from ..storage.location import Location
from ..storage.location import absolute as locate


def is_local(location: Location | None) -> bool:
    """Whether ``location`` is a local path, not a URL a store serves (told without I/O, from the scheme table)."""
    return location is None or location.local


def local_beside(location: Location, name: str) -> str:
    """``name`` as a local file a file at ``location`` names: beside a local file; as given for a URL's."""
    return str(location.beside(name)) if location.local and not os.path.isabs(name) else name


__all__ = ["Location", "is_local", "local_beside", "locate"]
