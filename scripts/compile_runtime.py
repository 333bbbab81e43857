"""Byte-compile what trajscale's runs import: its own package and its runtime extras' dependency closure.

Run by scripts/setup-env.sh after the install. Where Python cannot write bytecode (``PYTHONDONTWRITEBYTECODE``
set, as on this project's machines, or a read-only software stack) every process would otherwise compile
each module it imports, every run: the ``trajscale`` command, its workers, a DataLoader's. The packages only
the test and docs extras bring (servers, linters, notebooks: about 7,500 modules) compile at their first
import, where ``make test`` lets Python write their bytecode. On the project's 2-core machine this took
13 s where compiling all ~18,000 installed modules took 37 s.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

#: trajscale's extras that a run, a Dask or MPI job, a plot, a stream or a DataLoader imports.
RUNTIME_EXTRAS = ("mpi", "dask", "plot", "stream", "ml", "xarray", "remote", "ensemble")


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(name: str, extras: tuple[str, ...]) -> set[str]:
    """The installed distributions that ``name[extras]`` requires, directly or not (itself included).

    Each (distribution, extra) is visited once (``""``: its requirements without an extra), so requirements
    that name each other with extras (``a[x]`` needs ``b[y]``, which needs ``a[x]``) end."""
    names: set[str] = set()
    visited: set[tuple[str, str]] = set()
    todo = [(name, extra) for extra in ("", *extras)]
    while todo:
        dist_name, extra = todo.pop()
        if (_key(dist_name), extra) in visited:
            continue
        visited.add((_key(dist_name), extra))
        names.add(_key(dist_name))
        try:
            requires = metadata.distribution(dist_name).requires or []
        except metadata.PackageNotFoundError:
            continue   # an optional dependency not installed here
        for req in map(Requirement, requires):
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(req.name, e) for e in ("", *req.extras)]
    return names


def main() -> int:
    names = closure("trajscale", RUNTIME_EXTRAS)
    files = []
    for name in sorted(names):
        try:
            files += [str(f.locate()) for f in metadata.distribution(name).files or () if f.suffix == ".py"]
        except metadata.PackageNotFoundError:
            continue
    # an editable install's record holds no modules: trajscale's own are where it is imported from
    files += map(str, Path(importlib.util.find_spec("trajscale").origin).parent.rglob("*.py"))
    files = list(dict.fromkeys(files))
    with ProcessPoolExecutor(os.cpu_count()) as pool:   # in chunks: a task per file costs as much as its compile
        done = list(pool.map(partial(compileall.compile_file, quiet=2), files, chunksize=64))
    # as pip's install does, a module that does not compile (a template, another Python's) is passed over
    print(f"[setup] byte-compiled {sum(done):,} modules of {len(names)} packages "
          f"({len(done) - sum(done)} passed over)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
