"""Every Source passes the conformance suite in trajscale.testing, on real MDAnalysisTests systems."""

from __future__ import annotations

import MDAnalysis as mda
import pytest
from MDAnalysisTests import datafiles as D

from trajscale.convert.convert import convert
from trajscale.h5md.layout import Layout
from trajscale.sources import H5MDSource, MDAPartSource, MDASource
from trajscale.testing import SourceConformance


@pytest.fixture(scope="module")
def vacuum_auto(tmp_path_factory):
    out = tmp_path_factory.mktemp("conf") / "adk_auto.h5md"
    convert(D.PSF, [D.DCD], str(out), layout=Layout.parse("auto"))
    return str(out)


@pytest.fixture(scope="module")
def water_h5md(tmp_path_factory):
    out = tmp_path_factory.mktemp("conf") / "adk_water.h5md"
    convert(D.GRO, [D.XTC], str(out), layout=Layout.parse("frame"))
    return str(out)


class TestH5MDFromDCD(SourceConformance):
    """PSF/DCD (98 frames, 3,341 atoms) converted by trajscale, planned chunks."""

    @pytest.fixture
    def make_source(self, vacuum_auto):
        return lambda: H5MDSource(vacuum_auto)

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.PSF, D.DCD)


class TestH5MDWaterBox(SourceConformance):
    """AdK in water (47,681 atoms, periodic box) converted by trajscale, frame chunks."""

    n_cases = 2

    @pytest.fixture
    def make_source(self, water_h5md):
        return lambda: H5MDSource(water_h5md)

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.GRO, D.XTC)


@pytest.fixture(scope="module")
def water_deltas(tmp_path_factory, water_h5md):
    """The water XTC's frames as uint16 deltas at 0.01 Å (its own precision) with blosc-lz4."""
    pytest.importorskip("hdf5plugin")
    from trajscale.convert.rechunk import rechunk

    out = tmp_path_factory.mktemp("conf") / "adk_water_deltas.h5md"
    rechunk(water_h5md, out, Layout.parse("auto", "blosc-lz4"), precision=0.01, encoding="deltas")
    return str(out)


class TestH5MDWaterDeltas(SourceConformance):
    """The same water box stored lossy as delta-coded uint16 (h5md.codecs.Deltas), decoded through Blosc
    chunks read straight into the decoder (hdf5.blosc): the XTC's values come back."""

    n_cases = 2

    @pytest.fixture
    def make_source(self, water_deltas):
        return lambda: H5MDSource(water_deltas)

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.GRO, D.XTC)


class TestH5MDCobrotoxin(SourceConformance):
    """An H5MD file written by another program (nm, velocities and forces)."""

    @pytest.fixture
    def make_source(self):
        return lambda: H5MDSource(D.H5MD_xvf)

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.TPR_xvf, D.H5MD_xvf)


class TestMDAPsfDcd(SourceConformance):
    @pytest.fixture
    def make_source(self):
        return lambda: MDASource(D.PSF, [D.DCD])

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.PSF, D.DCD)


class TestMDATrrFields(SourceConformance):
    """TRR: velocities and forces through MDAnalysis's reader."""

    n_cases = 2

    @pytest.fixture
    def make_source(self):
        return lambda: MDASource(D.GRO, [D.TRR])

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.GRO, D.TRR)


class TestMDATriclinicDcd(SourceConformance):
    @pytest.fixture
    def make_source(self):
        return lambda: MDASource(D.PSF_TRICLINIC, [D.DCD_TRICLINIC])

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.PSF_TRICLINIC, D.DCD_TRICLINIC)


class TestMDAPartDcd(SourceConformance):
    """DCD, the format every command reads through MDAPartSource (MDAnalysis's DCDReader for the file alone)."""

    @pytest.fixture
    def make_source(self):
        return lambda: MDAPartSource(D.DCD)

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.PSF, D.DCD)


class TestMDAPartNetCDF(SourceConformance):
    """AMBER NetCDF, told by its extension (MDAnalysis's format table), not by a Source's own formats."""

    n_cases = 2

    @pytest.fixture
    def make_source(self):
        return lambda: MDAPartSource(D.NCDF)

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.PRMncdf, D.NCDF)


class TestGrowingH5MD(SourceConformance):
    """The followed-file source (``growing_h5md``) on a finished PSF/DCD file: it reads as H5MDSource does."""

    @pytest.fixture
    def make_source(self, vacuum_auto):
        from trajscale.h5md.follow import GrowingH5MDSource

        return lambda: GrowingH5MDSource(vacuum_auto)

    @pytest.fixture
    def universe(self):
        return mda.Universe(D.PSF, D.DCD)
