"""The benchmarks' smoke runs share one 20-frame demo file (AdK in water) per test run, built once."""

from __future__ import annotations

from pathlib import Path

import pytest

from .smoke import F


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> Path:
    """A folder holding the demo files (``adk_20.h5md`` and the whole-protein XTC it was converted from),
    built once for the test run (:func:`tests.conftest.shared_demo_file`)."""
    from ..conftest import shared_demo_file

    return Path(shared_demo_file(tmp_path_factory, int(F))[1]).parent


@pytest.fixture(scope="module")
def work(tmp_path_factory, demo) -> Path:
    """The module's work folder, the shared demo files linked into it (the scripts find them there)."""
    folder = tmp_path_factory.mktemp("bench")
    for name in (f"adk_{F}.h5md", "adk_whole.xtc"):
        (folder / name).symlink_to(demo / name)
    return folder
