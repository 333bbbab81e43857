"""Where a trajectory file is, asked by path or URL: the functions of :class:`trajscale.storage.location.Location`
for callers that hold a location's text. A location is made once, where it enters trajscale (the API, the
command line), as the value every process opens: a URL as given, a local path absolute (one rule,
:meth:`Location.absolute`). A list of URLs is a list of locations, never paths joined to the working folder."""

from __future__ import annotations

import os

from ..storage.location import Location


def is_local(location: str | os.PathLike | Location | None) -> bool:
    """Whether ``location`` is a local path, not a URL a store serves (told without I/O, from the scheme table)."""
    if location is None:
        return True
    return Location.of(location).local


def locate(trajectory: str | os.PathLike | Location) -> str:
    """``trajectory`` as every process opens it (:meth:`Location.absolute`): a URL as given, a local path absolute."""
    return Location.of(trajectory).absolute().where


def beside(location: str | os.PathLike | Location, name: str) -> str:
    """``name`` as a file beside ``location`` names it (:meth:`Location.beside`)."""
    return Location.of(location).beside(name).where


def local_beside(location: str | os.PathLike, name: str) -> str:
    """``name`` as a local file a file at ``location`` names: beside a local file; as given for a URL's."""
    where = Location.of(location)
    return str(where.beside(name)) if where.local and not os.path.isabs(name) else name


def identity(location: str | os.PathLike | Location) -> tuple | None:
    """What tells ``location``'s bytes from a replacement's now (:attr:`Location.identity`)."""
    return Location.of(location).identity


__all__ = ["Location", "beside", "identity", "is_local", "local_beside", "locate"]
