"""An H5MD input's observables (one value per frame) are kept by convert, frame for frame, as h5py reads them
from the input; a format that keeps none adds no observables group."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

pytest.importorskip("MDAnalysisTests")
from MDAnalysisTests import datafiles as D  # noqa: E402

from trajscale.convert.convert import convert  # noqa: E402


def test_convert_keeps_an_h5md_inputs_observables(tmp_path):
    out = tmp_path / "cobrotoxin.h5md"
    convert(D.TPR_xvf, [D.H5MD_xvf], str(out))
    with h5py.File(D.H5MD_xvf) as src, h5py.File(out) as got:
        names = list(src["observables"])
        assert names == ["lambda"] and list(got["observables"]) == names
        for name in names:
            np.testing.assert_array_equal(got[f"observables/{name}/value"][()], src[f"observables/{name}/value"][()])
        assert list(got["particles"]) == ["trajectory"]   # the input's particle group, not "all"


def test_an_xtc_input_keeps_no_observables(tmp_path):
    out = tmp_path / "coordinates.h5md"
    convert(D.COORDINATES_GRO, [D.COORDINATES_XTC], str(out))
    with h5py.File(out) as got:
        assert "observables" not in got or not list(got["observables"])
        assert list(got["particles"]) == ["all"]
