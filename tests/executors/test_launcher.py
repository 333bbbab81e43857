"""Runs started by an MPI launcher: duplicate serial runs are refused, and an MPI world of one
process under a launcher that started several (another MPI's mpiexec) is an error naming the
right launcher.  Real mpiexec where the machine has one; Open MPI, SLURM and PMIx by their
environment variables."""

from __future__ import annotations

import os

import pytest

from tests.conftest import run_cli, run_mpi
from trajscale.launch import from_environment

LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_RANK",
                 "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_ID", "SLURM_JOB_ID")


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
@pytest.mark.parametrize(("launcher", "fix"), [
    ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}, "mpiexec.mpich -n 2"),   # Open MPI's mpirun
    # srun --mpi=none: its tasks are independent processes, refused before MPI starts
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "0",
      "SLURM_NTASKS": "4"}, "srun --mpi=pmi2 -n 4"),
])
def test_mpi_world_of_one_under_another_launcher_names_the_right_one(tmp_path, adk_vacuum, adk_vacuum_h5md,
                                                                       launcher, fix):
    out = tmp_path / "rmsd.csv"
    proc = run_cli("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--executor", "mpi", "--out", str(out),
                   env=_env(**launcher))
    assert proc.returncode == 2, proc.stderr
    lines = _errors(proc.stderr)
    assert len(lines) == 1 and fix in lines[0], proc.stderr
    assert "world of 1" in lines[0] or "MPI cannot join" in lines[0], proc.stderr
    assert not out.exists()


@pytest.mark.cli
def test_serial_run_under_other_ranks_is_silent_and_refused(tmp_path, adk_vacuum, adk_vacuum_h5md):
    """Rank 1 of a PMIx job: refused, and silent (rank 0 prints the one message)."""
    out = tmp_path / "rmsd.csv"
    proc = run_cli("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--out", str(out), env=_env(PMIX_RANK="1"))
    assert proc.returncode == 2 and proc.stderr.strip() == "" and not out.exists()


def test_batch_allocation_alone_is_not_a_launcher():
    """SLURM_NTASKS in an sbatch script describes the allocation: one python process is fine."""
    batch = {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "8", "SLURM_PROCID": "0"}
    assert not from_environment(batch).several
    assert not from_environment({**batch, "PMI_SIZE": "1"}).several
    got = from_environment({**batch, "PMI_SIZE": "1", "OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_RANK": "2"})
    assert (got.size, got.rank, got.who) == (3, 2, "Open MPI's mpirun")
