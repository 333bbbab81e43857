"""NumPy ``.npy`` coordinate stacks (``npy/``): the conformance suite against MDAnalysis's MemoryReader
over the same array, as one file and as the parts of a chain."""

from __future__ import annotations

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.coordinates.memory import MemoryReader
from MDAnalysisTests import datafiles as D

from trajscale.errors import InputFileError
from trajscale.npy.source import NumpySource
from trajscale.sources import open_source, registry
from trajscale.storage.location import Location
from trajscale.testing import SourceConformance


@pytest.fixture(scope="module")
def adk_frames():
    """AdK in vacuum (PSF/DCD), 98 frames x 3,341 atoms, as MDAnalysis reads them (float32, Å)."""
    return mda.Universe(D.PSF, D.DCD).trajectory.timeseries(order="fac")


@pytest.fixture(scope="module")
def stack(tmp_path_factory, adk_frames):
    path = tmp_path_factory.mktemp("npy") / "adk.npy"
    np.save(path, adk_frames)
    return str(path)


class TestNumpyStack(SourceConformance):
    """A float32 stack written by ``numpy.save``, against MemoryReader over the same frames (dt 1 ps, no box)."""

    @pytest.fixture
    def make_source(self, stack):
        return lambda: NumpySource(stack)

    @pytest.fixture
    def universe(self, adk_frames):
        return mda.Universe(D.PSF, adk_frames, format=MemoryReader, order="fac")


@pytest.fixture(scope="module")
def parts(tmp_path_factory, adk_frames):
    """The frames as float64, in three ``.npy`` files (each part's times restart: the chain renumbers them)."""
    root = tmp_path_factory.mktemp("npyparts")
    paths = []
    for k, rows in enumerate(np.array_split(adk_frames.astype(np.float64), 3)):
        paths.append(str(root / f"part{k}.npy"))
        np.save(paths[-1], rows)
    return paths


class TestNumpyFloat64Parts(SourceConformance):
    """A float64 stack split into three ``.npy`` parts, opened as one chain (each part by NumpySource)."""

    n_cases = 2

    @pytest.fixture
    def make_source(self, parts):
        return lambda: open_source(parts, continuous=True)

    @pytest.fixture
    def universe(self, adk_frames):
        return mda.Universe(D.PSF, adk_frames.astype(np.float64), format=MemoryReader, order="fac")


def test_the_registry_reads_npy_by_its_magic(tmp_path, stack):
    renamed = tmp_path / "adk.coords"
    renamed.write_bytes(open(stack, "rb").read())
    assert registry.guess(Location(renamed)).source is NumpySource and isinstance(open_source(renamed), NumpySource)


@pytest.mark.parametrize("array", [np.zeros((4, 5)), np.zeros((4, 5, 2), np.float32), np.zeros((2, 3, 3), np.int32)])
def test_an_array_that_is_not_a_trajectory_is_one_line(tmp_path, array):
    path = tmp_path / "x.npy"
    np.save(path, array)
    with pytest.raises(InputFileError, match=r"\(frames, atoms, 3\) floats") as err:
        open_source(path)
    assert "\n" not in str(err.value)
