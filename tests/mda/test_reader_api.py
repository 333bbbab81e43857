"""trajscale.mda.Reader/Writer pass MDAnalysis's own reader and writer test suites
(``MDAnalysisTests.coordinates.base``), on each kind of trajscale file: plain H5MD, lossy
delta-coded H5MD, and a segment index.

The reference data is MDAnalysis's own synthetic H5MD trajectory (5 frames of 5 atoms, with
velocities, forces and a changing box), converted with trajscale.
"""

from __future__ import annotations

import functools

import pytest
from MDAnalysisTests.coordinates.base import BaseWriterTest, MultiframeReaderTest
from MDAnalysisTests.coordinates.test_h5md import H5MDReference
from MDAnalysisTests.datafiles import COORDINATES_H5MD, COORDINATES_TOPOLOGY

import trajscale.mda
from trajscale.convert.convert import convert
from trajscale.convert.split import split
from trajscale.h5md.layout import Layout


@pytest.fixture(scope="session")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("mda_reader")
    plain, deltas = d / "plain.h5md", d / "deltas.h5md"
    convert(COORDINATES_TOPOLOGY, [COORDINATES_H5MD], str(plain), layout=Layout.parse("frame"))
    # values are multiples of 0.01 Å: the lossy coding stores them exactly
    convert(COORDINATES_TOPOLOGY, [COORDINATES_H5MD], str(deltas), layout=Layout.parse("frame", "blosc-lz4"),
            precision=0.01, encoding="deltas")
    split(str(plain), str(d / "parts"), n_parts=2)
    return {"plain": str(plain), "deltas": str(deltas), "segments": str(d / "parts")}


def reference(path: str):
    ref = H5MDReference()
    ref.trajectory = path
    ref.reader = trajscale.mda.Reader
    ref.writer = trajscale.mda.Writer
    return ref


class _Kind:
    kind = "plain"

    @pytest.fixture()
    def ref(self, stores):
        return reference(stores[self.kind])

    @pytest.fixture(autouse=True)
    def universe_of_the_trajectory(self, ref, monkeypatch):
        """MDAnalysis's timeseries tests build a Universe from the trajectory file alone, read by
        MDAnalysis's default reader for it, which cannot decode deltas or open an index: for those
        kinds the Universe gets the topology and this reader."""
        if self.kind == "plain":
            return
        import MDAnalysis as mda

        made = mda.Universe

        def universe(*args, **kwargs):
            if args == (ref.trajectory,):
                kwargs.pop("to_guess", None)
                return made(ref.topology, ref.trajectory, format=trajscale.mda.Reader, **kwargs)
            return made(*args, **kwargs)

        universe.empty = made.empty
        monkeypatch.setattr(mda, "Universe", universe)


class TestPlainReader(_Kind, MultiframeReaderTest):
    kind = "plain"


class TestDeltasReader(_Kind, MultiframeReaderTest):
    kind = "deltas"


class TestSegmentedReader(_Kind, MultiframeReaderTest):
    kind = "segments"


class TestWriter(_Kind, BaseWriterTest):
    """The writer, given the reference's velocities and forces to write too."""

    @pytest.fixture()
    def ref(self, stores):
        ref = reference(stores["plain"])
        ref.writer = functools.partial(trajscale.mda.Writer, velocities=True, forces=True)
        return ref

    @pytest.fixture()
    @staticmethod
    def universe(ref):
        import MDAnalysis as mda

        return mda.Universe(ref.topology, ref.trajectory, format=trajscale.mda.Reader)
