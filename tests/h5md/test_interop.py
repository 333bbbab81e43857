"""H5MD interop: trajscale <-> MDAnalysis <-> pyh5md, on MDAnalysisTests systems."""

from __future__ import annotations

import functools
import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from trajscale.convert.convert import convert
from trajscale.errors import NotH5MDError
from trajscale.h5md.layout import Layout
from trajscale.sources import H5MDSource

warnings.filterwarnings("ignore")

SYSTEMS = {
    "adk-water-trr": (D.TPR, [D.TRR]),            # velocities, nm on disk
    "adk-water-xtc": (D.GRO, [D.XTC]),
    "adk-vacuum-dcd": (D.PSF, [D.DCD]),
    "cobrotoxin-h5md": (D.TPR_xvf, [D.H5MD_xvf]),  # positions, velocities, forces, nm units
    "cobrotoxin-trr": (D.TPR_xvf, [D.TRR_xvf]),
}


def frames_of(u):
    """Every frame of a Universe as plain arrays (MDAnalysis is the reference reader)."""
    out = {"pos": [], "box": [], "time": [], "step": [], "vel": [], "force": []}
    for ts in u.trajectory:
        out["pos"].append(ts.positions.copy())
        out["box"].append(np.zeros(6) if ts.dimensions is None else ts.dimensions.copy())
        out["time"].append(ts.time)
        out["step"].append(ts.data.get("step", ts.frame))
        out["vel"].append(ts.velocities.copy() if ts.has_velocities else None)
        out["force"].append(ts.forces.copy() if ts.has_forces else None)
    return out


@functools.cache
def mdanalysis_reading(system: str) -> tuple:
    """MDAnalysis's reading of a system's own files, read once per process: every layout's test of the
    system compares with its frames (each read the system again, AdK in water's topology of 47,681 atoms
    included) and reads the converted file on its topology (parsed once: the topology is not what is tested)."""
    top, trajs = SYSTEMS[system]
    u = mda.Universe(top, *trajs)
    return frames_of(u), u._topology


def assert_same_frames(a, b, *, box_atol=2e-3):
    np.testing.assert_array_equal(np.array(a["pos"]), np.array(b["pos"]))
    np.testing.assert_allclose(np.array(a["box"]), np.array(b["box"]), atol=box_atol)
    np.testing.assert_allclose(a["time"], b["time"], rtol=1e-6)
    np.testing.assert_array_equal(a["step"], b["step"])
    for key in ("vel", "force"):
        if a[key][0] is None:
            assert b[key][0] is None
        else:
            np.testing.assert_array_equal(np.array(a[key]), np.array(b[key]))


@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("layout", ["auto", "frame", "contiguous", "gzip"])
def test_trajscale_file_read_by_mdanalysis(tmp_path, system, layout):
    top, trajs = SYSTEMS[system]
    out = tmp_path / "out.h5md"
    lay = Layout.parse("auto", "gzip:1") if layout == "gzip" else Layout.parse(layout)
    convert(top, trajs, str(out), layout=lay)
    original, topology = mdanalysis_reading(system)
    ours = frames_of(mda.Universe(topology, str(out)))
    assert_same_frames(original, ours)


@pytest.mark.parametrize("system", ["adk-water-trr", "cobrotoxin-h5md", "adk-vacuum-dcd"])
def test_trajscale_reads_like_mdanalysis(tmp_path, system):
    """Our H5MDSource on files written by MDAnalysis's H5MDWriter (and shipped files) matches MDAnalysis."""
    top, trajs = SYSTEMS[system]
    u = mda.Universe(top, *trajs)
    written = tmp_path / "mda.h5md"
    with mda.Writer(str(written), u.atoms.n_atoms, lengths="nm", time="ps") as w:
        for _ in u.trajectory:
            w.write(u.atoms)
    candidates = [str(written)] + [t for t in trajs if t.endswith(".h5md")]
    for path in candidates:
        ref = frames_of(mda.Universe(u._topology, path))   # (the topology parsed once)
        with H5MDSource(path) as src:
            fields = src.fields
            b = src.read(0, src.n_frames, fields=fields)
        ours = {"pos": list(b.positions), "box": list(b.box), "time": list(b.time), "step": list(b.step),
                "vel": list(b.velocities) if b.velocities is not None else [None],
                "force": list(b.forces) if b.forces is not None else [None]}
        np.testing.assert_allclose(np.array(ours["pos"]), np.array(ref["pos"]), rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(np.array(ours["box"]), np.array(ref["box"]), atol=2e-3)
        np.testing.assert_allclose(ours["time"], ref["time"], rtol=1e-6)
        np.testing.assert_array_equal(ours["step"], ref["step"])
        for key in ("vel", "force"):
            if ref[key][0] is not None:
                np.testing.assert_allclose(np.array(ours[key]), np.array(ref[key]), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", ["COORDINATES_H5MD", "H5MD_energy"])
def test_shipped_h5md_files(name):
    path = getattr(D, name)
    from MDAnalysis.coordinates.H5MD import H5MDReader

    class _U:   # frames_of needs only .trajectory
        trajectory = H5MDReader(path)

    ref = frames_of(_U)
    with H5MDSource(path) as src:
        b = src.read(0, src.n_frames)
    np.testing.assert_allclose(b.positions, np.array(ref["pos"]), rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(b.box, np.array(ref["box"]), atol=2e-3)
    np.testing.assert_allclose(b.time, ref["time"], rtol=1e-6)
    np.testing.assert_array_equal(b.step, ref["step"])


def test_pyh5md_roundtrip(tmp_path, adk_vacuum):
    """pyh5md writes (its auto chunks, fixed step/time); trajscale reads; and pyh5md reads ours."""
    pyh5md = pytest.importorskip("pyh5md")
    u = mda.Universe(*adk_vacuum)
    pos = u.trajectory.timeseries(order="fac")[:12]
    path = tmp_path / "py.h5md"
    with pyh5md.File(str(path), "w", creator="test") as f:
        g = f.particles_group("all")
        g.create_box(dimension=3, boundary=["periodic"] * 3, store="linear", data=np.array([80.0, 80, 80]), step=1)
        el = pyh5md.element(g, "position", store="linear", shape=pos.shape[1:], dtype=np.float32,
                            step=10, step_offset=5, time=0.5, time_offset=2.0)
        for frame in pos:
            el.append(frame)
        el.value.attrs["unit"] = "Angstrom"
    # pyh5md writes no unit on time and box: refused unless the user states the units
    with pytest.raises(NotH5MDError, match="no unit attribute"):
        H5MDSource(str(path))
    with H5MDSource(str(path), assume_units="Angstrom") as src:
        b = src.read(0, src.n_frames)
        assert src.info.chunks[0] == 32 and src.info.chunks[1] == 128   # pyh5md's default chunking
    np.testing.assert_array_equal(b.positions, pos)
    np.testing.assert_array_equal(b.step, 5 + 10 * np.arange(12))
    np.testing.assert_allclose(b.time, 2.0 + 0.5 * np.arange(12))
    # pyh5md's "linear" box element keeps no edges (value has 0 rows): the frames have no box
    with h5py.File(path, "r") as f:
        assert f["particles/all/box/edges/value"].shape == (0, 3)
    assert b.box.shape == (12, 6) and not b.box.any()

    ours = tmp_path / "ours.h5md"
    convert(adk_vacuum[0], [adk_vacuum[1]], str(ours), stop=12)
    with pyh5md.File(str(ours), "r") as f:
        el = pyh5md.element(f.particles_group("all"), "position")
        np.testing.assert_array_equal(el.value[:], pos)
        assert el.element_type == "TimeElement"
        np.testing.assert_array_equal(el.step[:], [ts.data.get("step", ts.frame) for ts in u.trajectory[:12]])


def test_h5md_metadata(tmp_path, adk_water):
    out = tmp_path / "m.h5md"
    convert(adk_water["tpr"], [adk_water["trr"]], str(out), layout=Layout.parse("frame"), stop=5)
    with h5py.File(out) as f:
        assert list(f["h5md"].attrs["version"]) == [1, 1]
        assert f["h5md/creator"].attrs["name"] == "trajscale"
        pos = f["particles/all/position"]
        assert pos["value"].attrs["unit"] == "Angstrom" and pos["time"].attrs["unit"] == "ps"
        assert f["particles/all/velocity/value"].attrs["unit"] == "Angstrom ps-1"
        assert pos["value"].chunks == (1, 47681, 3)
        assert f["particles/all/box/edges/value"].shape == (5, 3, 3)
        assert [b.decode() for b in f["particles/all/box"].attrs["boundary"]] == ["periodic"] * 3
        # box and velocity step/time are hard links to position's
        assert f["particles/all/box/edges/step"].id == pos["step"].id
        assert f["particles/all/velocity/time"].id == pos["time"].id
        assert "mass" in f["particles/all"] and "charge" in f["particles/all"]


def test_no_box_is_nonperiodic(tmp_path, adk_vacuum):
    out = tmp_path / "v.h5md"
    convert(adk_vacuum[0], [adk_vacuum[1]], str(out), stop=3)
    with h5py.File(out) as f:
        box = f["particles/all/box"]
        assert [b.decode() for b in box.attrs["boundary"]] == ["none"] * 3 and "edges" not in box
    assert mda.Universe(adk_vacuum[0], str(out)).dimensions is None
