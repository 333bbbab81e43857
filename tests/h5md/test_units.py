"""Unit tables against MDAnalysis.units, both directions, and through MDAnalysis's H5MD reader."""

from __future__ import annotations

import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis import units as mda_units
from MDAnalysis.coordinates.H5MD import H5MDReader

from trajscale.errors import UnitError
from trajscale.sources import H5MDSource
from trajscale.units import (
    MDANALYSIS_NAMES,
    MDANALYSIS_QUANTITY,
    UNIT_SYSTEMS,
    UNIT_TABLES,
    factor,
    from_mdanalysis,
)

warnings.filterwarnings("ignore", module="MDAnalysis")

#: MDAnalysis's unit type of each trajscale quantity (MDAnalysis.units.conversion_factor keys).
MDA_TYPE = {"position": "length", "box": "length", "velocity": "speed", "force": "force", "time": "time"}
ALL_UNITS = [(q, u) for q, table in UNIT_TABLES.items() for u in table]


@pytest.mark.parametrize("quantity,unit", ALL_UNITS)
def test_every_unit_string_against_mdanalysis_both_ways(quantity, unit):
    """ours -> MDAnalysis's base unit and MDAnalysis's base unit -> ours, for every table entry."""
    name = MDANALYSIS_NAMES[quantity][unit]
    kind = MDA_TYPE[quantity]
    assert mda_units.unit_types[name] == kind
    base = mda_units.MDANALYSIS_BASE_UNITS[kind]
    ours = factor(quantity, unit)
    np.testing.assert_allclose(ours, mda_units.convert(1.0, name, base), rtol=1e-12)
    np.testing.assert_allclose(1.0 / ours, mda_units.convert(1.0, base, name), rtol=1e-12)
    assert from_mdanalysis(quantity, name) in UNIT_TABLES[quantity]


def test_newton_is_avogadro_times_1e_minus_13():
    """1 N = 6.022e10 kJ/(mol Å) (it was converted with 6.022e13)."""
    assert factor("force", "N") == pytest.approx(1 / mda_units.forceUnit_factor["N"], rel=1e-12)
    assert factor("force", "Newton") == pytest.approx(6.022e10, rel=1e-4)


def test_tables_cover_every_unit_mdanalysis_h5md_reader_knows():
    """Every H5MD unit string MDAnalysis's reader translates is in our tables with MDAnalysis's factor."""
    ours_of = {"time": "time", "length": "position", "velocity": "velocity", "force": "force"}
    for kind, strings in H5MDReader._unit_translation.items():
        q = ours_of[kind]
        for h5md, name in strings.items():
            assert h5md in UNIT_TABLES[q], (q, h5md)
            np.testing.assert_allclose(factor(q, h5md), mda_units.convert(1.0, name, mda_units.MDANALYSIS_BASE_UNITS[
                MDA_TYPE[q]]), rtol=1e-12)
    for q in UNIT_TABLES:
        assert set(MDANALYSIS_NAMES[q]) == set(UNIT_TABLES[q]), q   # every string has its MDAnalysis name
        assert MDANALYSIS_QUANTITY[q] in ("length", "velocity", "force", "time")


@pytest.mark.parametrize("system", UNIT_SYSTEMS)
def test_written_unit_systems_are_readable_by_mdanalysis(system):
    units = UNIT_SYSTEMS[system]
    kinds = {"position": "length", "box": "length", "velocity": "velocity", "force": "force", "time": "time"}
    for q, unit in units.items():
        assert unit in H5MDReader._unit_translation[kinds[q]]


def test_unknown_unit_is_an_error_naming_it():
    with pytest.raises(UnitError, match="furlong"):
        factor("position", "furlong")
    with pytest.raises(UnitError, match="'nm'"):
        factor("force", "nm")


def _one_unit_file(path, quantity: str, unit: str, data: np.ndarray) -> None:
    """A 3-frame H5MD file with ``quantity`` stored in ``unit`` (the rest in MDAnalysis's units)."""
    pos_unit = unit if quantity in ("position", "box") else "Angstrom"
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        g = f.create_group("particles/all")
        for fl, u in (("position", pos_unit), ("velocity", unit if quantity == "velocity" else "Angstrom ps-1"),
                      ("force", unit if quantity == "force" else "kJ mol-1 Angstrom-1")):
            el = g.create_group(fl)
            el.create_dataset("value", data=data).attrs["unit"] = u
            el.create_dataset("step", data=np.arange(3))
            el.create_dataset("time", data=np.arange(3, dtype=np.float64) * 2.5).attrs["unit"] = (
                unit if quantity == "time" else "ps")
        box = g.create_group("box")
        box.attrs["dimension"] = 3
        box.attrs["boundary"] = np.array([b"periodic"] * 3)
        e = box.create_group("edges")
        e.create_dataset("value", data=np.tile(np.array([3.0, 4.0, 5.0], np.float32), (3, 1)))
        e["value"].attrs["unit"] = pos_unit   # MDAnalysis scales the box with the positions' unit
        e["step"] = g["position/step"]


READER_KIND = {"position": "length", "velocity": "velocity", "force": "force", "time": "time"}


@pytest.mark.parametrize("quantity,unit", [(q, u) for q, u in ALL_UNITS if q in READER_KIND
                                           and u in H5MDReader._unit_translation[READER_KIND[q]]])
def test_each_unit_reads_as_mdanalysis_reads_it(tmp_path, quantity, unit):
    """Every unit string MDAnalysis's H5MD reader knows: a file in it reads the same through both."""
    path = tmp_path / "u.h5md"
    data = np.random.default_rng(1).uniform(-5, 5, (3, 4, 3)).astype(np.float32)
    _one_unit_file(path, quantity, unit, data)
    u = mda.Universe.empty(4, trajectory=True)
    u.load_new(str(path), format="H5MD")
    ref = [(ts.positions.copy(), ts.velocities.copy(), ts.forces.copy(), ts.dimensions.copy(), ts.time)
           for ts in u.trajectory]
    with H5MDSource(str(path)) as src:
        b = src.read(0, 3, fields=("position", "velocity", "force"))
    for i, (p, v, fo, dims, t) in enumerate(ref):
        np.testing.assert_allclose(b.positions[i], p, rtol=1e-6)
        np.testing.assert_allclose(b.velocities[i], v, rtol=1e-6)
        np.testing.assert_allclose(b.forces[i], fo, rtol=1e-6)
        np.testing.assert_allclose(b.box[i], dims, rtol=1e-6)
        np.testing.assert_allclose(b.time[i], t, rtol=1e-6)
