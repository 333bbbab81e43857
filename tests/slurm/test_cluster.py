"""The local SLURM itself: one idle node with this machine's CPUs, batch jobs, srun's PMI-2, and the
cluster stopped by the last process that used it."""

from __future__ import annotations

import os

import pytest

from tests.slurm import cluster

pytestmark = [pytest.mark.slurm, pytest.mark.cli]


def test_one_idle_node_with_the_machines_cpus(slurm):
    out = slurm.run("sinfo", "-h", "-N", "-o", "%N %c %t", check=True)
    node, cpus, _state = out.stdout.split()
    assert node == slurm.host and int(cpus) == os.cpu_count()
    assert slurm.run("scontrol", "show", "config", check=True).stdout.count("MpiDefault              = none") == 1


def test_a_batch_job_runs_in_its_folder_with_the_environment(slurm, tmp_path):
    job = slurm.sbatch("#!/bin/bash\necho job=$SLURM_JOB_ID restarts=${SLURM_RESTART_COUNT:-0}\n"
                       "command -v trajscale\n", cwd=tmp_path)
    assert slurm.wait(job, timeout=120) == "COMPLETED", slurm.log(job)
    text = (tmp_path / f"slurm-{job}.out").read_text()
    lines = text.splitlines()   # (a line before the job's own was seen once in a loaded run: its text is shown)
    assert f"job={job} restarts=0" in lines, text
    after = lines[lines.index(f"job={job} restarts=0") + 1]
    assert after.startswith(str(os.path.dirname(slurm.env["PATH"].split(os.pathsep)[0]))), text


def test_srun_pmi2_gives_each_task_its_rank(slurm):
    out = slurm.run("srun", "-n", "2", "--mpi=pmi2", "sh", "-c", 'echo "$PMI_RANK/$PMI_SIZE"', timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == ["0/2", "1/2"]
    out = slurm.run("srun", "-n", "2", "--mpi=none", "sh", "-c", 'echo "${PMI_SIZE:-none} $SLURM_PROCID"',
                    timeout=120)
    assert sorted(out.stdout.split("\n")[:2]) == ["none 0", "none 1"], out.stderr


def test_the_cluster_is_recorded_with_this_process_as_a_user(slurm):
    record = cluster._read()
    assert record is not None and record["conf"] == slurm.conf
    assert {"pid": os.getpid(), "start": cluster._start_time(os.getpid())} in record["users"]


def test_tiers_let_a_slurm_test_start_srun_and_sbatch():
    from tests import tiers

    assert tiers.problems({"slurm"}, [["/usr/bin/srun", "-n", "2", "true"], ["/usr/bin/sbatch", "x"]], 0.1) == []
    assert "`mpi`" in tiers.problems({"cli"}, [["/usr/bin/srun", "-n", "2", "true"]], 0.1)[0]
