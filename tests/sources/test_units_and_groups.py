"""H5MD units are never guessed, and a particle group is never picked silently."""

from __future__ import annotations

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms

import trajscale as ts
from trajscale.errors import ConfigError, InputFileError, NotH5MDError
from trajscale.h5md.inspect import inspect_file
from trajscale.sources import H5MDSource, open_source, source_from_config

RNG = np.random.default_rng(7)
DATA = RNG.uniform(-3, 3, (4, 5, 3)).astype(np.float32)
UNITS = {"position": "nm", "velocity": "nm ps-1", "force": "kJ mol-1 nm-1", "time": "ps", "box": "nm"}
#: dataset whose unit attribute a test removes, per quantity
DATASET = {"position": "particles/all/position/value", "velocity": "particles/all/velocity/value",
           "force": "particles/all/force/value", "time": "particles/all/position/time",
           "box": "particles/all/box/edges/value"}


def write_h5md(path, groups: dict, units: dict | None = UNITS, box=(3.0, 4.0, 5.0)) -> None:
    """A hand-made H5MD file: ``groups`` maps a particle group name to its (frames, atoms, 3) positions;
    the first group also gets velocities and forces (the same numbers)."""
    units = units or {}
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        for i, (name, pos) in enumerate(groups.items()):
            g = f.create_group(f"particles/{name}")
            fields = ("position", "velocity", "force") if i == 0 else ("position",)
            for fl in fields:
                el = g.create_group(fl)
                el.create_dataset("value", data=pos)
                el.create_dataset("step", data=np.arange(len(pos)))
                el.create_dataset("time", data=np.arange(len(pos), dtype=np.float64) * 10)
                if fl in units:
                    el["value"].attrs["unit"] = units[fl]
                if "time" in units:
                    el["time"].attrs["unit"] = units["time"]
            b = g.create_group("box")
            b.attrs["dimension"] = 3
            b.attrs["boundary"] = np.array([b"periodic"] * 3)
            e = b.create_group("edges")
            e.create_dataset("value", data=np.tile(np.asarray(box, np.float32), (len(pos), 1)))
            if "box" in units:
                e["value"].attrs["unit"] = units["box"]
            e["step"] = g["position/step"]


@pytest.mark.parametrize("missing", list(DATASET))
def test_dataset_without_unit_is_refused_naming_it(tmp_path, missing):
    """Each of position, velocity, force, time and box: no unit attribute -> an error naming the dataset."""
    path = tmp_path / "nounit.h5md"
    write_h5md(path, {"all": DATA}, {k: v for k, v in UNITS.items() if k != missing})
    with pytest.raises(NotH5MDError, match=f"/{DATASET[missing]} has no unit attribute.*--assume-units"):
        H5MDSource(str(path))


@pytest.mark.parametrize("system,length,force", [("nm", 10.0, 0.1), ("Angstrom", 1.0, 1.0)])
def test_assume_units_states_them(tmp_path, system, length, force):
    path = tmp_path / "nounits.h5md"
    write_h5md(path, {"all": DATA}, units=None)
    with H5MDSource(str(path), assume_units=system) as src:
        b = src.read(0, 4, fields=("position", "velocity", "force"))
        assert src.info.units == {"position": system, "velocity": f"{system} ps-1",
                                  "force": f"kJ mol-1 {system}-1", "time": "ps", "box": system}
        cfg = src.get_config()
    ref = DATA.astype(np.float64)
    np.testing.assert_allclose(b.positions, ref * length, rtol=1e-6)
    np.testing.assert_allclose(b.velocities, ref * length, rtol=1e-6)    # (length unit)/ps
    np.testing.assert_allclose(b.forces, ref * force, rtol=1e-6)
    np.testing.assert_allclose(b.box[:, :3], np.tile([3.0, 4.0, 5.0], (4, 1)) * length, rtol=1e-6)
    np.testing.assert_allclose(b.time, np.arange(4) * 10.0)
    # the stated units travel with the source's config to workers and ranks
    assert cfg["assume_units"] == system
    with source_from_config(cfg) as again:
        np.testing.assert_array_equal(again.read(0, 4).positions, b.positions)


def test_a_unit_attribute_wins_over_assume_units(tmp_path):
    path = tmp_path / "nm.h5md"
    write_h5md(path, {"all": DATA})
    with H5MDSource(str(path), assume_units="Angstrom") as src:
        np.testing.assert_allclose(src.read(0, 4).positions, DATA * 10.0, rtol=1e-6)


def test_unknown_units_are_errors_naming_them(tmp_path):
    for quantity, bad in (("position", "furlong"), ("box", "furlong"), ("time", "fortnight"),
                          ("force", "nm")):
        path = tmp_path / f"bad_{quantity}.h5md"
        write_h5md(path, {"all": DATA}, {**UNITS, quantity: bad})
        with pytest.raises(NotH5MDError, match=f"/{DATASET[quantity]} has an unknown {quantity} unit '{bad}'"):
            H5MDSource(str(path))
    with pytest.raises(ConfigError, match="assume-units"):
        H5MDSource(str(tmp_path / "bad_box.h5md"), assume_units="parsec")


def test_box_takes_its_own_unit_not_the_positions(tmp_path):
    path = tmp_path / "mixed.h5md"
    write_h5md(path, {"all": DATA}, {**UNITS, "box": "Angstrom"})
    with H5MDSource(str(path)) as src:
        b = src.read(0, 2)
    np.testing.assert_allclose(b.positions, DATA[:2] * 10.0, rtol=1e-6)
    np.testing.assert_allclose(b.box[0], [3.0, 4.0, 5.0, 90, 90, 90], rtol=1e-6)


def test_cobrotoxin_h5md_keeps_working():
    """MDAnalysisTests' H5MD file (nm, written by MDAnalysis): read without any option, as MDAnalysis reads it."""
    from MDAnalysisTests.datafiles import H5MD_xvf, TPR_xvf

    u = mda.Universe(TPR_xvf, H5MD_xvf)
    with H5MDSource(H5MD_xvf) as src:
        b = src.read(0, src.n_frames, fields=src.fields)
    for i, frame in enumerate(u.trajectory):
        np.testing.assert_allclose(b.positions[i], frame.positions, rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(b.forces[i], frame.forces, rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(b.box[i], frame.dimensions, rtol=1e-6)


# ---------------------------------------------------------------- particle groups

@pytest.fixture(scope="module")
def multigroup(tmp_path_factory, adk_vacuum):
    """AdK (PSF/DCD, Å) as group "protein" plus a 7-atom "solvent" group, in one H5MD file."""
    u = mda.Universe(*adk_vacuum)
    pos = u.trajectory.timeseries(order="fac")[:20]
    path = tmp_path_factory.mktemp("groups") / "multi.h5md"
    solvent = RNG.uniform(0, 40, (20, 7, 3)).astype(np.float32)
    units = {"position": "Angstrom", "velocity": "Angstrom ps-1", "force": "kJ mol-1 Angstrom-1",
             "time": "ps", "box": "Angstrom"}
    write_h5md(path, {"protein": pos, "solvent": solvent}, units, box=(80.0, 80.0, 80.0))
    return str(path), pos, solvent


def test_several_groups_and_no_choice_is_an_error_listing_them(multigroup, adk_vacuum):
    path = multigroup[0]
    with pytest.raises(InputFileError, match=r"2 particle groups \(protein, solvent\).*--group"):
        H5MDSource(path)
    with pytest.raises(InputFileError, match="protein, solvent"):
        ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], path)


def test_group_is_read_when_chosen(multigroup):
    path, pos, solvent = multigroup
    with H5MDSource(path, group="solvent") as src:
        assert (src.n_frames, src.n_atoms) == (20, 7)
        np.testing.assert_array_equal(src.read(0, 20).positions, solvent)
        cfg = src.get_config()
    with source_from_config(cfg) as again:   # the group travels with the config
        np.testing.assert_array_equal(again.read(3, 9).positions, solvent[3:9])
    with open_source(path, group="protein") as src:
        np.testing.assert_array_equal(src.read(0, 20, np.arange(10)).positions, pos[:, :10])
    with pytest.raises(NotH5MDError, match="no particle group 'water'.*protein, solvent"):
        H5MDSource(path, group="water")


def test_a_single_group_is_used(tmp_path):
    path = tmp_path / "one.h5md"
    write_h5md(path, {"water": DATA})
    with H5MDSource(str(path)) as src:
        assert src.info.group == "water"


@pytest.mark.parametrize("executor", ["serial", "processes"])
def test_run_on_a_chosen_group_equals_mdanalysis(multigroup, adk_vacuum, executor):
    path, _, _ = multigroup
    r = ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], path, group="protein", executor=executor,
               n_workers=2 if executor == "processes" else None)
    u = mda.Universe(*adk_vacuum)
    u.transfer_to_memory(stop=20)
    ref = rms.RMSD(u, select="name CA").run().results.rmsd
    np.testing.assert_allclose(r.rmsd, ref[:, 2], atol=1e-4)


def test_run_with_assumed_units_on_workers(tmp_path, adk_vacuum):
    """A unit-less nm file: refused by run, and read right on process workers with assume_units="nm"."""
    u = mda.Universe(*adk_vacuum)
    pos = u.trajectory.timeseries(order="fac")[:12]
    path = tmp_path / "nm_nounit.h5md"
    write_h5md(path, {"all": (pos.astype(np.float64) / 10).astype(np.float32)}, units=None)
    with pytest.raises(NotH5MDError, match="no unit attribute"):
        ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], str(path))
    r = ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], str(path), assume_units="nm",
               executor="processes", n_workers=2)
    u.transfer_to_memory(stop=12)
    ref = rms.RMSD(u, select="name CA").run().results.rmsd
    np.testing.assert_allclose(r.rmsd, ref[:, 2], atol=1e-4)


def test_group_and_assume_units_are_for_h5md_only(adk_vacuum):
    with pytest.raises(ConfigError, match="H5MD"):
        open_source(adk_vacuum[1], adk_vacuum[0], group="protein")


def test_inspect_lists_every_group(multigroup):
    path, _, _ = multigroup
    facts = inspect_file(path)
    assert facts["group"] is None
    assert facts["particle_groups"]["protein"]["n_atoms"] == 3341
    assert facts["particle_groups"]["solvent"]["n_atoms"] == 7
    assert facts["particle_groups"]["protein"]["fields"] == ["position", "velocity", "force"]
    assert facts["particle_groups"]["solvent"]["fields"] == ["position"]
    assert facts["particle_groups"]["solvent"]["units"]["position"] == "Angstrom"
    chosen = inspect_file(path, "solvent")
    assert chosen["group"] == "solvent" and chosen["n_atoms"] == 7 and "read_amplification" in chosen


def test_segments_pass_group_and_units_to_their_h5md_parts(tmp_path):
    """A segment index over unit-less two-group H5MD parts: the group and stated units reach every part."""
    from trajscale.sources.segments import write_index

    parts = []
    for k in range(2):
        p = tmp_path / f"part_{k}.h5md"
        write_h5md(p, {"protein": DATA + k, "solvent": DATA[:, :2]}, units=None)
        parts.append({"path": str(p), "start": 4 * k, "n_frames": 4, "first_time": 0.0, "last_time": 30.0})
    index = tmp_path / "index.json"
    write_index(index, parts, n_atoms=5)
    with pytest.raises(InputFileError, match="protein, solvent"):
        with open_source(str(index)) as src:
            src.read(0, 8)
    with open_source(str(index), group="protein", assume_units="nm") as src:
        got = src.read(0, 8).positions
        cfg = src.get_config()
    np.testing.assert_allclose(got, np.concatenate([DATA, DATA + 1]).astype(np.float64) * 10, rtol=1e-6)
    with source_from_config(cfg) as again:
        np.testing.assert_array_equal(again.read(2, 7).positions, got[2:7])
