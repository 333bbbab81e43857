"""What the CLI tests share: checking a failed command's one error line, converting a system with the CLI,
and the small H5MD inputs (several particle groups, no unit attributes) built from AdK's frames."""

from __future__ import annotations

import MDAnalysis as mda
import numpy as np

from tests.conftest import run_cli
from tests.sources.test_units_and_groups import write_h5md

#: Unit attributes of a file that states trajscale's own units (Å, ps).
ANGSTROM = {"position": "Angstrom", "velocity": "Angstrom ps-1", "force": "kJ mol-1 Angstrom-1",
            "time": "ps", "box": "Angstrom"}


def assert_clean_failure(proc, *needles) -> str:
    """``proc`` failed with exactly one ``error:`` line holding every one of ``needles``, and no traceback;
    return that line."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1, proc.stderr
    for n in needles:
        assert n in errors[0], errors[0]
    return errors[0]


def convert_with_cli(out, topology: str, trajectory: str) -> str:
    """``trajscale -q convert topology trajectory -o out``, which must succeed; the output's path."""
    proc = run_cli("-q", "convert", topology, trajectory, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return str(out)


def adk_positions(adk_vacuum, n_frames: int = 10) -> np.ndarray:
    """The first ``n_frames`` frames of AdK in vacuum (PSF/DCD) as MDAnalysis reads them, (F, N, 3) Å."""
    return mda.Universe(*adk_vacuum).trajectory.timeseries(order="fac")[:n_frames]


def in_nm(pos: np.ndarray) -> np.ndarray:
    """Å to nm in float64, stored as float32 (what a GROMACS-unit file holds)."""
    return (pos.astype(np.float64) / 10).astype(np.float32)


def write_two_groups(path, pos: np.ndarray) -> None:
    """An H5MD file with particle groups ``protein`` (``pos``) and ``solvent`` (5 atoms), units stated."""
    write_h5md(path, {"protein": pos, "solvent": pos[:, :5] + 1}, ANGSTROM, box=(80.0, 80.0, 80.0))


def write_without_units(path, pos: np.ndarray) -> None:
    """An H5MD file of ``pos`` in nm whose datasets state no units."""
    write_h5md(path, {"all": in_nm(pos)}, units=None)


def mda_rmsd_ca(adk_vacuum, n_frames: int = 10) -> np.ndarray:
    """MDAnalysis's CA RMSD (Å) of the first ``n_frames`` frames of AdK in vacuum, the reference to compare with."""
    from MDAnalysis.analysis import rms

    u = mda.Universe(*adk_vacuum)
    u.transfer_to_memory(stop=n_frames)
    return rms.RMSD(u, select="name CA").run().results.rmsd[:, 2]
