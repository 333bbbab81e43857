"""Unit tables: factors from the units H5MD files use to trajscale's (MDAnalysis's base units).

trajscale writes lengths in Å, time in ps, velocities in Å/ps and forces in
kJ/(mol Å), so MDAnalysis reads its files without conversion.
"""

from __future__ import annotations

LENGTH_TO_ANGSTROM = {"Angstrom": 1.0, "A": 1.0, "nm": 10.0, "pm": 0.01, "fm": 1e-5}
TIME_TO_PS = {"ps": 1.0, "fs": 1e-3, "ns": 1e3, "AKMA": 4.888821e-2, "s": 1e12, "second": 1e12}
VELOCITY_TO_A_PS = {"Angstrom ps-1": 1.0, "Angstrom/ps": 1.0, "A ps-1": 1.0, "nm ps-1": 10.0,
                    "Angstrom fs-1": 1e3, "nm fs-1": 1e4, "Angstrom AKMA-1": 1 / 4.888821e-2,
                    "m s-1": 1e-2, "pm ps-1": 1e-2}
FORCE_TO_KJ_MOL_A = {"kJ mol-1 Angstrom-1": 1.0, "kJ mol-1 nm-1": 0.1, "Newton": 6.02214076e13,
                     "N": 6.02214076e13, "kcal mol-1 Angstrom-1": 4.184}
UNIT_TABLES = {"position": LENGTH_TO_ANGSTROM, "velocity": VELOCITY_TO_A_PS,
               "force": FORCE_TO_KJ_MOL_A}
WRITE_UNITS = {"position": "Angstrom", "velocity": "Angstrom ps-1",
               "force": "kJ mol-1 Angstrom-1", "time": "ps"}
FIELDS = ("position", "velocity", "force")
#: Unit systems a writer can label its data with (the data are written as given).
UNIT_SYSTEMS = {"mdanalysis": WRITE_UNITS,
                "gromacs": {"position": "nm", "velocity": "nm ps-1", "force": "kJ mol-1 nm-1", "time": "ps"}}
