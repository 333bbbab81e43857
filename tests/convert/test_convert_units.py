"""convert --units mdanalysis|gromacs|source, and round trips through MDAnalysis and trajscale."""

from __future__ import annotations

import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from trajscale.convert.convert import convert
from trajscale.convert.verify import verify
from trajscale.errors import ConfigError
from trajscale.sources import H5MDSource

warnings.filterwarnings("ignore", module="MDAnalysis")
#: one float32 rounding on the way in (/10 in float64, rounded once) and one on the way out (x10)
RTOL = 2.5e-7


def frames(u, n=None):
    out = {"pos": [], "vel": [], "force": [], "box": [], "time": []}
    for t in u.trajectory[:n]:
        out["pos"].append(t.positions.copy())
        out["vel"].append(t.velocities.copy() if t.has_velocities else None)
        out["force"].append(t.forces.copy() if t.has_forces else None)
        out["box"].append(np.zeros(6) if t.dimensions is None else t.dimensions.copy())
        out["time"].append(t.time)
    return {k: (np.array(v) if v[0] is not None else None) for k, v in out.items()}


def units_of(path):
    with h5py.File(path) as f:
        (g,) = f["particles"].values()
        out = {fl: g[f"{fl}/value"].attrs["unit"] for fl in ("position", "velocity", "force") if fl in g}
        out["time"] = g["position/time"].attrs["unit"]
        if "edges" in g["box"]:
            out["box"] = g["box/edges/value"].attrs["unit"]
        return {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in out.items()}


def test_gromacs_units_round_trip(tmp_path):
    """An nm file written by trajscale, read by MDAnalysis and by trajscale: the original Å values."""
    top, traj = D.TPR_xvf, D.TRR_xvf   # positions, velocities and forces
    out = tmp_path / "nm.h5md"
    convert(top, [traj], str(out), units="gromacs")
    assert units_of(out) == {"position": "nm", "velocity": "nm ps-1", "force": "kJ mol-1 nm-1",
                             "time": "ps", "box": "nm"}
    original = frames(mda.Universe(top, traj))
    # the stored numbers are the original's in nm (float64 division, rounded once)
    with h5py.File(out) as f:
        stored = f["particles/all/position/value"][:]
        np.testing.assert_array_equal(stored, (original["pos"].astype(np.float64) / 10).astype(np.float32))
        np.testing.assert_allclose(f["particles/all/force/value"][:], original["force"] * 10.0, rtol=RTOL)
    for reader in ("mdanalysis", "trajscale"):
        if reader == "mdanalysis":
            back = frames(mda.Universe(top, str(out)))
        else:
            with H5MDSource(str(out)) as src:
                b = src.read(0, src.n_frames, fields=src.fields)
            back = {"pos": b.positions, "vel": b.velocities, "force": b.forces, "box": b.box, "time": b.time}
        for key in ("pos", "vel", "force"):
            np.testing.assert_allclose(back[key], original[key], rtol=RTOL, atol=1e-6, err_msg=f"{reader} {key}")
        np.testing.assert_allclose(back["box"], original["box"], rtol=1e-6)
        np.testing.assert_allclose(back["time"], original["time"], rtol=1e-9)
    rep = verify(top, [traj], str(out))
    assert rep.ok, rep.problems


def test_default_is_mdanalysis_units(tmp_path, adk_water):
    out = tmp_path / "a.h5md"
    convert(adk_water["gro"], [adk_water["xtc"]], str(out), stop=3)
    assert units_of(out) == {"position": "Angstrom", "time": "ps", "box": "Angstrom"}


@pytest.mark.parametrize("top,traj,expect", [
    (D.GRO, D.XTC, {"position": "nm", "time": "ps", "box": "nm"}),
    (D.TPR, D.TRR, {"position": "nm", "velocity": "nm ps-1", "time": "ps", "box": "nm"}),
    (D.PSF, D.DCD, {"position": "Angstrom", "time": "AKMA"}),   # DCD: AKMA time; no box
    (D.TPR_xvf, D.H5MD_xvf, {"position": "nm", "velocity": "nm ps-1", "force": "kJ mol-1 nm-1",
                            "time": "ps", "box": "nm"}),
])
@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_source_units_are_the_inputs_own(tmp_path, top, traj, expect):
    out = tmp_path / "src.h5md"
    convert(top, [traj], str(out), units="source", stop=4)
    assert units_of(out) == expect
    # the raw numbers equal the input's raw numbers (MDAnalysis without unit conversion)
    raw = mda.Universe(top, traj, convert_units=False)
    with h5py.File(out) as f:
        (g,) = f["particles"].values()   # convert keeps an H5MD source's group name
        stored = g["position/value"][:]
        times = g["position/time"][:]
    np.testing.assert_allclose(stored, raw.trajectory.timeseries(order="fac")[:4], rtol=RTOL, atol=1e-6)
    # (MDAnalysis hands out DCD times in ps even unconverted: compare the stored times through the unit)
    np.testing.assert_allclose(times * mda.units.convert(1.0, expect["time"], "ps"),
                               frames(mda.Universe(top, traj), 4)["time"], rtol=1e-6)
    # and every reader gets the original's Å and ps back
    np.testing.assert_allclose(frames(mda.Universe(top, str(out)))["pos"], frames(mda.Universe(top, traj), 4)["pos"],
                               rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(frames(mda.Universe(top, str(out)))["time"],
                               frames(mda.Universe(top, traj), 4)["time"], rtol=1e-6)


def test_mixed_source_units_are_an_error(tmp_path, adk_vacuum):
    a = tmp_path / "a.h5md"
    b = tmp_path / "b.h5md"
    top, dcd = adk_vacuum
    convert(top, [dcd], str(a), stop=3)
    convert(top, [dcd], str(b), stop=3, units="gromacs")
    with pytest.raises(ConfigError, match="different units"):
        convert(adk_vacuum[0], [str(a), str(b)], str(tmp_path / "c.h5md"), units="source")
    assert not (tmp_path / "c.h5md").exists()
    convert(adk_vacuum[0], [str(a), str(b)], str(tmp_path / "d.h5md"))   # one chosen system is fine
    with pytest.raises(ConfigError, match="unit system"):
        convert(top, [dcd], str(tmp_path / "e.h5md"), units="si")
