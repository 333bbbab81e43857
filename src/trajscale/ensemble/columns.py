"""An ensemble's members held as columns: a few references a member, whatever the number of members.

mdCATH's 134,950 trajectories in one job put every member in the root's memory for the whole run: as
:class:`~trajscale.ensemble.catalog.Member` records each costs about 400 bytes, as columns (its strings,
an entry per label, 8 bytes of numbers) about 170.  A Member is made when one is asked for, equal to the
one given.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence

from ..errors import ConfigError

_ABSENT = object()   # (a label a member does not have)


class MemberColumns(Sequence):
    """``members`` (consumed one at a time: none is kept), in order, as columns; ``member`` is their class,
    which makes them again (``member.made(...)``).  An item that is no Member, or two members of one name,
    are a ConfigError."""

    def __init__(self, members: Iterable, member: type, origin: str = "") -> None:
        self._cls = member
        self._names: list[str] = []
        self._trajectories: list = []   # a location, or a tuple of parts
        self._topology = array("i")   # its number in _topologies (-1: none)
        self._topologies: list[str] = []
        numbers: dict[str, int] = {}
        self._labels: dict[str, list] = {}   # label -> each member's value (_ABSENT: none)
        self._sources: dict[int, Mapping] = {}   # (few members carry a Source config: an expander's)
        for i, m in enumerate(members):
            if not isinstance(m, member):
                raise ConfigError(f"ensemble {origin or ''}: member {i} is a {type(m).__name__}, not a Member")
            self._names.append(m.name)
            self._trajectories.append(m.trajectory[0] if len(m.trajectory) == 1 else m.trajectory)
            if m.topology is None:
                self._topology.append(-1)
            else:
                k = numbers.get(m.topology)
                if k is None:
                    k = numbers[m.topology] = len(self._topologies)
                    self._topologies.append(m.topology)
                self._topology.append(k)
            for name, column in self._labels.items():
                column.append(m.labels.get(name, _ABSENT))
            for name, value in m.labels.items():
                if name not in self._labels:
                    self._labels[name] = [_ABSENT] * i + [value]
            if m.source is not None:
                self._sources[i] = m.source
        self._order = array("i", sorted(range(len(self._names)), key=self._names.__getitem__))
        for a, b in zip(self._order, self._order[1:], strict=False):
            if self._names[a] == self._names[b]:
                a, b = min(a, b), max(a, b)   # (named as a reader of the rows meets them)
                raise ConfigError(f"ensemble {origin or ''}: two members are named {self._names[a]!r} (rows "
                                  f"{a + 1} and {b + 1}); give each a name of its own (a name column)")

    def __len__(self) -> int:
        return len(self._names)

    def _member(self, i: int):
        t = self._trajectories[i]
        k = self._topology[i]
        labels = {n: c[i] for n, c in self._labels.items() if c[i] is not _ABSENT}
        return self._cls.made(self._names[i], (t,) if isinstance(t, str) else t,
                           None if k < 0 else self._topologies[k], labels, self._sources.get(i))

    def __getitem__(self, k):
        if isinstance(k, slice):
            return tuple(self._member(i) for i in range(*k.indices(len(self))))
        n = len(self)
        if not -n <= k < n:
            raise IndexError(f"member {k} of {n}")
        return self._member(k % n)

    def __iter__(self) -> Iterator:
        for i in range(len(self)):
            yield self._member(i)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None

    def index_of(self, name: str) -> int | None:
        """The position of the member named ``name``; None when none is."""
        names = self._names
        p = bisect.bisect_left(self._order, name, key=names.__getitem__)
        return self._order[p] if p < len(self._order) and names[self._order[p]] == name else None

    def name(self, i: int) -> str:
        return self._names[i]

    @property
    def label_names(self) -> tuple[str, ...]:
        """Every label any member has, in the order first met."""
        return tuple(self._labels)

    def __repr__(self) -> str:
        return f"<{len(self)} members as columns>"


__all__ = ["MemberColumns"]
