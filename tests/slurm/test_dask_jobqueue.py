"""Dask workers as SLURM jobs (``--executor dask --dask-cluster slurm``, dask-jobqueue's ``SLURMCluster``)
on the suite's real one-node SLURM: the CSV equals a serial run's byte for byte, the jobs are gone after
the run, and the report counts the cluster's start and the jobs' wait in the queue as phases of their own,
never as "interpreter and imports"."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time

import pytest

if importlib.util.find_spec("dask_jobqueue") is None:   # looked up: its import (distributed's) is the tests'
    pytest.skip("dask-jobqueue is not installed", allow_module_level=True)

pytestmark = [pytest.mark.slurm, pytest.mark.cli, pytest.mark.slow]


def _trajscale(slurm, args: list[str], cwd, timeout: float = 300) -> subprocess.CompletedProcess:
    # the worker jobs (on this node) keep their Dask scratch in the test's folder, as a cluster's configured
    # node-local scratch (Dask's default: the temporary folder's dask-scratch-space); trajscale's own is its run's
    env = {**slurm.env, "DASK_JOBQUEUE__SLURM__LOCAL_DIRECTORY": str(cwd)}
    return subprocess.run([sys.executable, "-m", "trajscale.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _jobs(slurm) -> list[str]:
    out = slurm.run("squeue", "-h", "-o", "%i %j", timeout=60).stdout
    return [line for line in out.splitlines() if "dask-worker" in line]


def test_workers_as_slurm_jobs_equal_serial_and_report_the_queue_apart(slurm, tmp_path, adk_vacuum, adk_vacuum_h5md):
    shutil.copy(adk_vacuum[0], tmp_path / "adk.psf")
    shutil.copy(adk_vacuum_h5md, tmp_path / "adk.h5md")
    common = ["run", "rmsd", "adk.psf", "adk.h5md", "--select", "name CA", "--tasks", "4"]
    serial = _trajscale(slurm, [*common, "--executor", "serial", "--out", "serial.csv"], tmp_path)
    assert serial.returncode == 0, serial.stderr
    t0 = time.monotonic()
    got = _trajscale(slurm, [*common, "--executor", "dask", "--dask-cluster", "slurm", "--dask-jobs", "2",
                             "--dask-cores", "1", "--dask-memory", "500MB", "--dask-walltime", "00:10:00",
                             "--dask-wait", "240", "--out", "dask.csv", "--report", "r.json"], tmp_path)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "dask.csv").read_bytes() == (tmp_path / "serial.csv").read_bytes()
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["executor"] == "dask" and report["n_workers"] == 2
    workers = {t["worker"] for t in report["tasks"]}
    assert workers and all(w.startswith("tcp://") for w in workers)
    phases = report["process"]["phases"]
    assert phases["cluster_start"] > 0 and phases["pool_start"] > 0 and "queue_wait" in phases
    assert phases["imports"] < time.monotonic() - t0 - phases["cluster_start"]   # not counted as imports
    # the workers' jobs: those whose output SLURM wrote in the directory the run submitted them from
    assert sorted(report["meta"]["worker_jobs"]) == sorted(p.stem[6:] for p in tmp_path.glob("slurm-*.out"))
    deadline = time.monotonic() + 60   # the worker jobs are cancelled with the cluster
    while _jobs(slurm) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _jobs(slurm)


def test_convert_on_slurm_job_workers_equals_serial(slurm, tmp_path, adk_vacuum):
    """The same executor option converts: each SLURM-job worker writes its frames of the one output."""
    import h5py
    import numpy as np

    shutil.copy(adk_vacuum[0], tmp_path / "adk.psf")
    shutil.copy(adk_vacuum[1], tmp_path / "adk.dcd")
    serial = _trajscale(slurm, ["convert", "adk.psf", "adk.dcd", "-o", "serial.h5md", "--chunks", "10"], tmp_path)
    assert serial.returncode == 0, serial.stderr
    got = _trajscale(slurm, ["convert", "adk.psf", "adk.dcd", "-o", "dask.h5md", "--chunks", "10", "--executor",
                             "dask", "-n", "2", "--dask-cluster", "slurm", "--dask-memory", "500MB",
                             "--dask-wait", "240"], tmp_path)
    assert got.returncode == 0, got.stderr
    with h5py.File(tmp_path / "serial.h5md") as a, h5py.File(tmp_path / "dask.h5md") as b:
        key = "particles/all/position/value"
        np.testing.assert_array_equal(a[key][()], b[key][()])
    deadline = time.monotonic() + 60
    while _jobs(slurm) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _jobs(slurm)


def test_slurm_cluster_from_python(slurm, tmp_path, adk_vacuum, adk_vacuum_h5md, monkeypatch):
    """The same option from Python: ``DaskExecutor(cluster="slurm", jobs=..., ...)``; the executor's report
    phases name the queue's wait apart from the workers' start."""
    for k, v in slurm.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("DASK_JOBQUEUE__SLURM__LOCAL_DIRECTORY", str(tmp_path))   # (as in _trajscale)
    monkeypatch.chdir(tmp_path)   # the worker jobs' slurm-JOBID.out land where they were submitted
    import numpy as np

    import trajscale as ts
    from trajscale.executors.dask import DaskExecutor

    serial = ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], adk_vacuum_h5md, n_tasks=4)
    with DaskExecutor(cluster="slurm", jobs=1, cores=2, memory="500MB", walltime="00:10:00", wait=240) as ex:
        assert ex.n_workers == 2
        got = ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], adk_vacuum_h5md, executor=ex, n_tasks=4)
        assert set(ex.cluster.phases) == {"cluster_start", "queue_wait", "pool_start"}
        assert len(ex.cluster.job_ids) == 1
    np.testing.assert_array_equal(got.table(), serial.table())


def test_a_job_sbatch_refuses_ends_the_run_in_one_line(slurm, tmp_path, adk_vacuum):
    """A partition that does not exist: sbatch's refusal is the run's one line, at once, no traceback."""
    t0 = time.monotonic()
    got = _trajscale(slurm, ["run", "rmsd", *adk_vacuum, "--executor", "dask", "--dask-cluster", "slurm",
                             "--dask-jobs", "1", "--dask-memory", "500MB", "--dask-queue", "nosuchpartition",
                             "--out", "r.csv"], tmp_path)
    lines = got.stderr.strip().splitlines()
    assert got.returncode != 0 and "Traceback" not in got.stderr, got.stderr
    assert len(lines) == 1 and "sbatch refused the workers' job" in lines[0] and "partition" in lines[0], lines
    assert time.monotonic() - t0 < 120
    assert not _jobs(slurm)
