"""MDAnalysis's own analysis test suite, run with trajscale's backends added to its list of backends.

MDAnalysisTests' ``analysis/conftest.py`` parametrises every parallelizable analysis's tests over the
backends MDAnalysis knows (``params_for_cls``: serial, multiprocessing, dask). A copy of that folder gets
trajscale's :class:`~trajscale.mda.backends.DaskBackend` and :class:`~trajscale.mda.backends.MPIBackend`
appended to the list, and pytest runs the copy in a subprocess, as MDAnalysis's CI runs it. Only the
tests that one of trajscale's backends parametrises are kept (the rest are MDAnalysis's own, run by
MDAnalysis's CI): each must pass with the same expected values as on MDAnalysis's backends, the
dynamically made classes of ``analysis_class(func)`` (which pickle cannot write) among them.

By default, for the suite's time: on each backend, the first test of each class's backend fixture and
every ``analysis_class`` test (40 tests, ~1.5 min on a loaded 2-core VM). ``TRAJSCALE_MDA_SUITE=full``
runs all 520 that trajscale's backends parametrise (~25 min there).

The MPI backend runs on ``COMM_WORLD`` of the pytest process (an MPI singleton: one rank, the parts
in turn, through the same gather and merge); one Dask ``LocalCluster`` of two workers serves the session.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# MDAnalysis's suite in one pytest subprocess: ~25 s idle, a minute or more on a loaded VM (the suite's order)
pytestmark = [pytest.mark.cli, pytest.mark.slow(seconds=60), pytest.mark.tool]

#: The backends appended to MDAnalysis's list, for every class that MDAnalysis parallelises.
EXTENSION = '''

# -- trajscale's backends, appended to MDAnalysis's list (tests/mda/test_mdanalysis_suite.py) -----------
import atexit as _atexit

from trajscale.mda.backends import DaskBackend as _TsDask, MPIBackend as _TsMPI

_TS_BACKENDS = {"trajscale-dask": _TsDask(n_workers=2), "trajscale-mpi": _TsMPI()}
_atexit.register(_TS_BACKENDS["trajscale-dask"].close)


def params_for_cls(cls, exclude: list[str] = None):
    params = _mdanalysis_params_for_cls(cls, exclude)
    if len(cls.get_supported_backends()) > 1:   # parallelizable: MDAnalysis's own backends run it in parts
        params += [pytest.param({"backend": b, "unsupported_backend": True}, id=name)
                   for name, b in _TS_BACKENDS.items()]
    return params


def pytest_collection_modifyitems(config, items):
    """Keep the tests one of trajscale's backends parametrises: all of them with TRAJSCALE_MDA_SUITE=full,
    else, for each backend, the first test of each class's backend fixture and every analysis_class test."""
    import os as _os

    full = _os.environ.get("TRAJSCALE_MDA_SUITE") == "full"
    keep, seen = [], set()
    for item in items:
        backend = next((b for b in _TS_BACKENDS if b in item.nodeid), None)
        if backend is None:
            continue
        fixture = next((f for f in item.fixturenames if f.startswith("client_")), item.nodeid)
        if full or "test_analysis_class" in item.nodeid or (fixture, backend) not in seen:
            keep.append(item)
            seen.add((fixture, backend))
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep

'''


def _installed_suite() -> Path:
    import MDAnalysisTests

    return Path(MDAnalysisTests.__file__).parent / "analysis"


def _extended_copy(dest: Path) -> Path:
    """A copy of MDAnalysisTests/analysis whose conftest's backend list holds trajscale's backends too."""
    suite = dest / "analysis"
    shutil.copytree(_installed_suite(), suite, ignore=shutil.ignore_patterns("__pycache__"))
    conftest = suite / "conftest.py"
    text = conftest.read_text()
    # MDAnalysis's function keeps its body under another name; ours, defined before the fixtures that call it
    # at import, adds trajscale's backends to what it returns
    assert text.count("def params_for_cls(") == 1, "MDAnalysisTests' conftest no longer defines params_for_cls"
    text = text.replace("def params_for_cls(", "def _mdanalysis_params_for_cls(")
    first_fixture = text.index("@pytest.fixture")
    conftest.write_text(text[:first_fixture] + EXTENSION + text[first_fixture:])
    return suite


def _parametrised_modules(suite: Path) -> list[Path]:
    """The suite's test modules that use a backend fixture (``client_...``): the only ones whose tests the
    copy keeps, so the subprocess collects (imports, parametrises) these alone, not all of its ~36."""
    found = sorted(p for p in suite.glob("test_*.py") if "client_" in p.read_text())
    assert any(p.name == "test_base.py" for p in found), "MDAnalysisTests' analysis_class tests moved"
    return found


def test_mdanalysis_analysis_suite_passes_with_trajscale_backends(tmp_path):
    suite = _extended_copy(tmp_path)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # the copy is its own rootdir (no project pytest.ini, no tests.tiers plugin); -n 0: one process,
    # which owns the session's Dask cluster
    cmd = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-n", "0", "-rfE",
           "-W", "ignore::DeprecationWarning", "-W", "ignore::UserWarning",
           "--rootdir", str(tmp_path), "-c", os.devnull, *map(str, _parametrised_modules(suite))]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert not re.search(r"\d+ (failed|error)", out), out[-6000:]
    passed = re.search(r"(\d+) passed", out)
    # each parallelizable class on each of trajscale's backends (520 tests with TRAJSCALE_MDA_SUITE=full)
    assert passed and int(passed.group(1)) >= 2 * 15, out[-3000:]
    for backend in ("trajscale-dask", "trajscale-mpi"):   # the dynamically made classes pickle cannot write
        assert re.search(rf"test_analysis_class\[{backend}\] PASSED", out), out[-3000:]
