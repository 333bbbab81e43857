"""Unit tables: H5MD unit strings, their exact factors to trajscale's units, and unit systems.

trajscale's units are MDAnalysis's: Å, ps, Å/ps and kJ/(mol Å).  Every entry is checked against ``MDAnalysis.units``
in tests/h5md/test_units.py.  A unit is never guessed: a dataset without a ``unit`` attribute is refused unless the
user states the unit system (:data:`ASSUMABLE`), and an unknown string is an error naming it."""

from __future__ import annotations

from .errors import UnitError

#: Avogadro's constant as MDAnalysis.units has it (CODATA 2010; SI 2019's exact 6.02214076e23
#: is 9e-8 smaller), so trajscale and MDAnalysis read the same numbers; the thermochemical calorie in J.
N_AVOGADRO = 6.02214129e23
CALORIE = 4.184
AKMA_PS = 4.888821e-2   # CHARMM's AKMA time unit in ps

LENGTH_TO_ANGSTROM = {"Angstrom": 1.0, "angstrom": 1.0, "A": 1.0, "nm": 10.0, "pm": 1e-2, "fm": 1e-5}
TIME_TO_PS = {"ps": 1.0, "fs": 1e-3, "ns": 1e3, "us": 1e6, "ms": 1e9, "s": 1e12, "sec": 1e12,
              "second": 1e12, "AKMA": AKMA_PS}
VELOCITY_TO_A_PS = {"Angstrom ps-1": 1.0, "A ps-1": 1.0, "Angstrom fs-1": 1e3, "A fs-1": 1e3,
                    "Angstrom AKMA-1": 1 / AKMA_PS, "A AKMA-1": 1 / AKMA_PS, "nm ps-1": 10.0,
                    "nm ns-1": 1e-2, "pm ps-1": 1e-2, "m s-1": 1e-2}
#: 1 N = 1 J/m = 1e-3 kJ per 1e10 Å for one particle; times N_A per mole: 6.022e10 kJ/(mol Å).
FORCE_TO_KJ_MOL_A = {"kJ mol-1 Angstrom-1": 1.0, "kJ mol-1 A-1": 1.0, "kJ mol-1 nm-1": 0.1,
                     "Newton": N_AVOGADRO * 1e-13, "N": N_AVOGADRO * 1e-13, "J m-1": N_AVOGADRO * 1e-13,
                     "kcal mol-1 Angstrom-1": CALORIE, "kcal mol-1 A-1": CALORIE}

#: quantity -> {unit string: factor to trajscale's unit}; the box is a length.
UNIT_TABLES = {"position": LENGTH_TO_ANGSTROM, "box": LENGTH_TO_ANGSTROM, "velocity": VELOCITY_TO_A_PS,
               "force": FORCE_TO_KJ_MOL_A, "time": TIME_TO_PS}

#: The same units under MDAnalysis's names (``MDAnalysis.units``, a reader's ``units`` dict):
#: every string of the tables above, and the names MDAnalysis's readers report.
MDANALYSIS_NAMES = {
    "position": {"Angstrom": "Angstrom", "angstrom": "Angstrom", "A": "A", "nm": "nm", "pm": "pm", "fm": "fm"},
    "time": {"ps": "ps", "fs": "fs", "ns": "ns", "us": "us", "ms": "ms", "s": "s", "sec": "sec",
             "second": "second", "AKMA": "AKMA"},
    "velocity": {"Angstrom ps-1": "Angstrom/ps", "A ps-1": "A/ps", "Angstrom fs-1": "Angstrom/fs",
                 "A fs-1": "A/fs", "Angstrom AKMA-1": "Angstrom/AKMA", "A AKMA-1": "A/AKMA",
                 "nm ps-1": "nm/ps", "nm ns-1": "nm/ns", "pm ps-1": "pm/ps", "m s-1": "m/s"},
    "force": {"kJ mol-1 Angstrom-1": "kJ/(mol*Angstrom)", "kJ mol-1 A-1": "kJ/(mol*A)",
              "kJ mol-1 nm-1": "kJ/(mol*nm)", "Newton": "Newton", "N": "N", "J m-1": "J/m",
              "kcal mol-1 Angstrom-1": "kcal/(mol*Angstrom)", "kcal mol-1 A-1": "kcal/(mol*Angstrom)"},
}
MDANALYSIS_NAMES["box"] = MDANALYSIS_NAMES["position"]
#: MDAnalysis's quantity names (a reader's ``units`` keys) for trajscale's.
MDANALYSIS_QUANTITY = {"position": "length", "box": "length", "velocity": "velocity", "force": "force",
                       "time": "time"}

#: Named unit systems a file is written in (``convert --units``).
UNIT_SYSTEMS = {
    "mdanalysis": {"position": "Angstrom", "box": "Angstrom", "velocity": "Angstrom ps-1",
                   "force": "kJ mol-1 Angstrom-1", "time": "ps"},
    "gromacs": {"position": "nm", "box": "nm", "velocity": "nm ps-1", "force": "kJ mol-1 nm-1",
                "time": "ps"},
}
#: What ``assume_units`` / ``--assume-units`` may state for datasets without a unit attribute.
ASSUMABLE = {"Angstrom": UNIT_SYSTEMS["mdanalysis"], "nm": UNIT_SYSTEMS["gromacs"]}
#: The units trajscale writes unless told otherwise (MDAnalysis reads them without conversion).
WRITE_UNITS = UNIT_SYSTEMS["mdanalysis"]
FIELDS = ("position", "velocity", "force")


def factor(quantity: str, unit: str) -> float:
    """Factor from ``unit`` to trajscale's unit of ``quantity`` (position, box, velocity, force, time).

    Raises
    ------
    UnitError
        ``unit`` is not a known unit of ``quantity``.
    """
    table = UNIT_TABLES[quantity]
    try:
        return table[unit]
    except KeyError:
        raise UnitError(f"unknown {quantity} unit {unit!r} (known: {', '.join(table)})") from None


def assumed_units(system: str | None) -> dict[str, str] | None:
    """The unit of each quantity when the user states ``system`` (``"nm"`` or ``"Angstrom"``)."""
    if system is None:
        return None
    try:
        return ASSUMABLE[system]
    except KeyError:
        raise UnitError(f"--assume-units must be {' or '.join(ASSUMABLE)}, got {system!r}") from None


def from_mdanalysis(quantity: str, name: str | None) -> str | None:
    """The H5MD unit string of MDAnalysis's unit ``name`` (None if MDAnalysis names none)."""
    if name is None:
        return None
    for h5md, mda in MDANALYSIS_NAMES[quantity].items():
        if mda == name:
            return h5md
    raise UnitError(f"MDAnalysis {quantity} unit {name!r} has no H5MD name in trajscale's tables")


def unit_system(name: str) -> dict[str, str]:
    """The units of a named system (``"mdanalysis"`` or ``"gromacs"``)."""
    try:
        return UNIT_SYSTEMS[name]
    except KeyError:
        raise UnitError(f"unknown unit system {name!r}; use {', '.join(UNIT_SYSTEMS)} or source") from None
