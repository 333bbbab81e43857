"""A test-only RMSD whose prepared state notes every time it is unpickled.

Its state carries a :class:`Marker`: each unpickling writes one empty file, named by the
unpickling process's pid, in the folder ``$TRAJSCALE_TEST_UNPICKLES`` names; ``pad`` bytes
make the pickled job as large as a test needs.  Registered in ``trajscale.analysis.ANALYSES``
by :func:`register`; run it on a ``fork`` pool so workers inherit the registration.
"""

from __future__ import annotations

import dataclasses
import os
import uuid

from trajscale.analysis import ANALYSES, RMSD
from trajscale.analysis.base import Prepared
from trajscale.analysis.rmsd import RMSDState

ENV = "TRAJSCALE_TEST_UNPICKLES"


class Marker:
    """Counts its unpicklings (files in ``$TRAJSCALE_TEST_UNPICKLES``), carrying ``pad`` bytes."""

    def __init__(self, pad: bytes) -> None:
        self.pad = pad

    def __reduce__(self):
        return _unpickled, (self.pad,)


def _unpickled(pad: bytes) -> Marker:
    folder = os.environ.get(ENV)
    if folder:
        open(os.path.join(folder, f"{os.getpid()}-{uuid.uuid4().hex}"), "w").close()
    return Marker(pad)


@dataclasses.dataclass(frozen=True)
class CountedState(RMSDState):
    marker: Marker | None = None


class CountedRMSD(RMSD):
    """RMSD whose prepared state holds a :class:`Marker` of ``pad`` bytes (same numbers as RMSD)."""

    name = "counted_rmsd"

    def __init__(self, pad: int = 0, **kw) -> None:
        super().__init__(**kw)
        self.pad = int(pad)

    def get_config(self) -> dict:
        return {**super().get_config(), "name": self.name, "pad": self.pad}

    def prepare(self, universe, source) -> Prepared:
        prep = super().prepare(universe, source)
        fields = {f.name: getattr(prep.state, f.name) for f in dataclasses.fields(RMSDState)}
        return Prepared(atoms=prep.atoms, state=CountedState(**fields, marker=Marker(bytes(self.pad))))


def register() -> None:
    ANALYSES[CountedRMSD.name] = CountedRMSD


def unpickles(folder) -> dict[int, int]:
    """How many times each process unpickled a marker, by pid."""
    out: dict[int, int] = {}
    for name in os.listdir(folder):
        pid = int(name.split("-")[0])
        out[pid] = out.get(pid, 0) + 1
    return out
