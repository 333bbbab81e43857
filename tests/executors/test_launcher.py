"""Runs started by an MPI launcher: duplicate serial runs are refused, and an MPI world of one
process under a launcher that started several (another MPI's mpiexec) is an error naming the
right launcher.  Real mpiexec where the machine has one; Open MPI, SLURM and PMIx by their
environment variables."""

from __future__ import annotations

import os

import pytest

from tests.conftest import run_cli, run_mpi
from trajscale.parallel import launched_world

LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_RANK",
                 "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_NTASKS")


def _env(**kw) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(kw)
    return env


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.mark.mpi
def test_serial_run_under_mpiexec_is_refused(tmp_path, adk_vacuum, adk_vacuum_h5md):
    out = tmp_path / "rmsd.csv"
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "run", "rmsd", adk_vacuum[0], adk_vacuum_h5md,
                       "--out", str(out)])
    assert proc.returncode != 0
    lines = _errors(proc.stderr)
    assert len(lines) == 1, proc.stderr   # rank 0 alone says it
    assert "as 2 processes" in lines[0] and "--executor mpi" in lines[0] and "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.mpi
def test_serial_run_under_mpiexec_n1_runs(tmp_path, adk_vacuum, adk_vacuum_h5md):
    out = tmp_path / "rmsd.csv"
    proc = run_mpi(1, ["-m", "trajscale.cli.main", "run", "rmsd", adk_vacuum[0], adk_vacuum_h5md,
                       "--out", str(out), "--stop", "10"])
    assert proc.returncode == 0, proc.stderr
    assert out.exists()


@pytest.mark.cli
@pytest.mark.parametrize("launcher", [
    {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"},        # Open MPI's mpirun
    {"SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "0", "SLURM_NTASKS": "4"},   # srun
])
def test_mpi_world_of_one_under_another_launcher_names_the_right_one(tmp_path, adk_vacuum, adk_vacuum_h5md,
                                                                       launcher):
    out = tmp_path / "rmsd.csv"
    proc = run_cli("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--executor", "mpi", "--out", str(out),
                   env=_env(**launcher))
    assert proc.returncode == 2, proc.stderr
    lines = _errors(proc.stderr)
    assert len(lines) == 1 and "world of 1" in lines[0] and "mpiexec.mpich -n" in lines[0], proc.stderr
    assert not out.exists()


@pytest.mark.cli
def test_serial_run_under_other_ranks_is_silent_and_refused(tmp_path, adk_vacuum, adk_vacuum_h5md):
    """Rank 1 of a PMIx job: refused, and silent (rank 0 prints the one message)."""
    out = tmp_path / "rmsd.csv"
    proc = run_cli("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--out", str(out), env=_env(PMIX_RANK="1"))
    assert proc.returncode == 2 and proc.stderr.strip() == "" and not out.exists()


def test_batch_allocation_alone_is_not_a_launcher(monkeypatch):
    """SLURM_NTASKS in an sbatch script describes the allocation: one python process is fine."""
    for k in LAUNCHER_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SLURM_NTASKS", "8")
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert launched_world() is None
    monkeypatch.setenv("PMI_SIZE", "1")
    assert launched_world() is None
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    assert launched_world() == (3, 2, "Open MPI's mpirun")
