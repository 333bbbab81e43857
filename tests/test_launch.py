"""How a process was launched (``trajscale.launch``), and every command run once per job under a launcher.

The launchers' environments are the variables each really sets (MPICH's hydra ``mpiexec``, ``srun --mpi=pmi2``,
``srun --mpi=none``, an ``sbatch`` script, ``salloc`` then ``mpiexec``, Open MPI's ``mpirun``, PMIx), given to
fresh interpreters that read them as they would under the launcher; real ``mpiexec.mpich -n 2`` runs show one
output and one print per job.  A PMI_FD cannot be faked for a real MPI init, so the srun cases stop at what
is decided before MPI starts (the refusals and their wording).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from tests.conftest import run_cli, run_cli_here, run_mpi
from trajscale.launch import Launch, SchedulerJob, from_environment, parse_time_left

#: Every variable a launcher or SLURM sets that the tests below control.
LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "OMPI_", "HYDI_", "HYDRA_", "MPI_LOCAL", "SLURM_")

HYDRA = {"PMI_RANK": "1", "PMI_SIZE": "2", "PMI_FD": "6", "MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1",
         "HYDI_CONTROL_FD": "7"}
STEP = {"SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0",
        "SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "2", "SLURM_NPROCS": "2", "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0"}
SRUN_NONE = {**STEP, "SLURM_PROCID": "0"}
SRUN_PMI2 = {**STEP, "SLURM_PROCID": "0", "PMI_RANK": "0", "PMI_SIZE": "2", "PMI_FD": "5", "PMI_JOBID": "4242.0"}
BATCH = {"SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_NTASKS": "8", "SLURM_NPROCS": "8",
         "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_RESTART_COUNT": "2"}


def _clean(**kw) -> dict:
    """This environment less every launcher's variables, plus ``kw``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_PREFIXES)}
    env.update(kw)
    return env


# -- what each launcher's environment says ----------------------------------------------------------------

@pytest.mark.parametrize(("env", "launcher", "size", "rank", "sees"), [
    ({}, "none", 1, 0, True),
    (HYDRA, "mpiexec", 2, 1, True),
    (SRUN_PMI2, "srun", 2, 0, True),
    ({**SRUN_NONE, "SLURM_PROCID": "1"}, "srun", 2, 1, False),
    (BATCH, "none", 1, 0, True),   # a batch script's SLURM_NTASKS is the allocation's
    ({**BATCH, **HYDRA, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1"}, "mpiexec", 2, 1, True),   # salloc+mpiexec
    ({"OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_RANK": "2", "PMIX_RANK": "2"}, "mpirun", 3, 2, True),
    ({**STEP, "SLURM_PROCID": "1", "PMIX_RANK": "1"}, "srun", 2, 1, True),   # srun --mpi=pmix
    ({"PMIX_RANK": "1"}, "pmix", None, 1, True),
    ({**STEP, "SLURM_STEP_ID": "batch", "SLURM_PROCID": "0"}, "none", 1, 0, True),   # the batch step by name
])
def test_each_launcher_is_told_from_its_variables(env, launcher, size, rank, sees):
    got = from_environment(env)
    assert (got.launcher, got.size, got.rank, got.mpi_sees) == (launcher, size, rank, sees)
    assert got.several == ((size or 0) > 1 or rank > 0)
    assert got.independent == (got.several and not sees)


def test_the_scheduler_job_step_and_requeues():
    batch = from_environment({**BATCH, "SLURM_JOB_END_TIME": "2000000000"})
    assert batch.job == SchedulerJob("4242", None, 2, 2e9)
    assert batch.job.describe() == "SLURM job 4242 (requeued 2 times)"
    step = from_environment(SRUN_PMI2).job
    assert (step.job_id, step.step_id, step.restart_count, step.end_time) == ("4242", "0", 0, None)
    assert SchedulerJob.from_dict(step.to_dict()) == step
    assert SchedulerJob.from_dict(json.loads(json.dumps(batch.job.to_dict()))) == batch.job
    assert SchedulerJob.from_dict(None) is None and SchedulerJob.from_dict({}) is None
    assert from_environment({}).job is None


@pytest.mark.cli
def test_the_report_records_the_job_step_and_requeues(tmp_path, adk_vacuum, adk_vacuum_h5md):
    """A run in a requeued batch job records it in its report (``meta.job``); a report without it loads."""
    from trajscale.report.runfacts import RunFacts

    report = tmp_path / "r.json"
    proc = run_cli_here("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--stop", "10", "--out", str(tmp_path / "r.csv"),
                        "--report", str(report), env=_clean(**BATCH))
    assert proc.returncode == 0, proc.stderr
    meta = json.loads(report.read_text())["meta"]
    assert meta["job"] == {"scheduler": "slurm", "job_id": "4242", "step_id": None, "restart_count": 2,
                           "end_time": None}
    assert RunFacts.from_dict(meta).job == SchedulerJob("4242", None, 2)
    del meta["job"]   # as a report written before the job was recorded
    assert RunFacts.from_dict(meta).job is None


def test_time_left_from_the_job_end_time():
    end = time.time() + 3600
    left = SchedulerJob("1", end_time=end).time_left()
    assert 3590 < left <= 3600
    assert SchedulerJob("1", end_time=time.time() - 10).time_left() == 0.0


@pytest.mark.parametrize(("text", "seconds"), [
    ("1-02:03:04", 93784.0), ("02:03:04", 7384.0), ("03:04", 184.0), ("59", 59.0), ("0:00", 0.0),
    ("UNLIMITED", None), ("NOT_SET", None), ("INVALID", None), ("", None), ("1-2-3", None), ("1:2:3:4", None),
])
def test_squeue_time_left_is_parsed(text, seconds):
    assert parse_time_left(text) == seconds


@pytest.mark.cli
def test_time_left_unknown_without_a_controller_is_none_and_bounded(tmp_path):
    """No SLURM_JOB_END_TIME: ``squeue`` is asked (here of a job no controller knows, or with none
    running): None, within the bounded wait."""
    code = ("import time; from trajscale.launch import current; t = time.monotonic(); "
            "left = current().job.time_left(); print(left, time.monotonic() - t)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=_clean(SLURM_JOB_ID="999999999"))
    assert proc.returncode == 0, proc.stderr
    left, took = proc.stdout.split()
    assert left == "None" and float(took) < 30


def test_the_fix_names_the_launcher():
    assert from_environment(SRUN_NONE).fix() == "srun --mpi=pmi2 -n 2"
    assert "srun --mpi=pmi2 -n 2" in from_environment(SRUN_NONE).refusal()
    assert Launch("mpiexec", 2, 0, False).fix().endswith(" -n 2")   # the environment's own launcher
    assert from_environment(SRUN_PMI2).who == "srun"


@pytest.mark.cli
def test_current_reads_this_process_environment():
    code = ("import json; from trajscale.launch import current; x = current(); "
            "print(json.dumps([x.launcher, x.size, x.rank]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=_clean(**{**SRUN_NONE, "SLURM_PROCID": "1"}))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["srun", 2, 1]


# -- every command under srun --mpi=none: refused on every task, rank 0 saying why in one line ----------------

@pytest.mark.cli
@pytest.mark.parametrize("command", ["convert", "inspect", "split", "run"])
def test_srun_without_mpi_plugin_refuses_every_command(tmp_path, adk_vacuum, adk_vacuum_h5md, command):
    out = tmp_path / "out.h5md"
    args = {"convert": ["convert", *adk_vacuum, "-o", str(out)],
            "inspect": ["inspect", adk_vacuum_h5md],
            "split": ["split", adk_vacuum_h5md, "-o", str(tmp_path / "parts"), "--parts", "2"],
            "run": ["run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--executor", "mpi", "--out", str(out)]}[command]
    for rank in ("0", "1"):
        proc = run_cli(*args, env=_clean(**{**SRUN_NONE, "SLURM_PROCID": rank}), timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stdout == ""
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        if rank == "0":
            assert len(lines) == 1, proc.stderr
            assert "srun --mpi=pmi2 -n 2 trajscale" in lines[0] and "mpiexec" not in lines[0], lines[0]
        else:
            assert lines == [], proc.stderr   # one line for the job, from task 0
    assert sorted(p.name for p in tmp_path.iterdir()) == []   # nothing written


@pytest.mark.cli
def test_run_under_srun_pmi2_without_executor_names_srun(tmp_path, adk_vacuum, adk_vacuum_h5md):
    """``srun --mpi=pmi2 -n 2 trajscale run`` without --executor: refused before MPI starts, naming srun."""
    out = tmp_path / "rmsd.csv"
    proc = run_cli("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--out", str(out), env=_clean(**SRUN_PMI2),
                   timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "started by srun as 2 processes" in lines[0] and "MPICH" not in lines[0], lines
    assert "--executor mpi" in lines[0] and not out.exists()


@pytest.mark.cli
def test_convert_with_its_own_pool_under_mpiexec_is_refused(tmp_path, adk_vacuum):
    """``mpiexec -n 2 trajscale convert --executor processes`` would run a pool in each rank, both writing the
    output: refused as ``run`` is, rank 0 saying why (decided before MPI starts)."""
    out = tmp_path / "out.h5md"
    for rank, said in (("0", 1), ("1", 0)):
        proc = run_cli("convert", *adk_vacuum, "-o", str(out), "--executor", "processes", "-n", "2",
                       env=_clean(**{**HYDRA, "PMI_RANK": rank, "MPI_LOCALRANKID": rank}), timeout=120)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == said and "Traceback" not in proc.stderr, proc.stderr
        assert all("as 2 processes, but the processes executor" in line for line in lines), lines
    assert list(tmp_path.iterdir()) == []


@pytest.mark.cli
def test_commands_that_know_nothing_of_mpi_run_on_rank_0_alone(tmp_path, adk_vacuum_h5md):
    """Rank 1 of ``srun --mpi=pmi2`` ends at once, silently, writing nothing; rank 0 does the work."""
    folder = tmp_path / "parts"
    one = run_cli("split", adk_vacuum_h5md, "-o", str(folder), "--parts", "2",
                  env=_clean(**{**SRUN_PMI2, "SLURM_PROCID": "1", "PMI_RANK": "1"}), timeout=120)
    assert (one.returncode, one.stdout, one.stderr) == (0, "", "") and not folder.exists()
    zero = run_cli("split", adk_vacuum_h5md, "-o", str(folder), "--parts", "2", env=_clean(**SRUN_PMI2),
                   timeout=120)
    assert zero.returncode == 0 and zero.stdout.count("wrote 2 segments") == 1, zero.stderr
    ins = run_cli("inspect", adk_vacuum_h5md, env=_clean(**{**SRUN_PMI2, "SLURM_PROCID": "1", "PMI_RANK": "1"}),
                  timeout=120)
    assert (ins.returncode, ins.stdout, ins.stderr) == (0, "", "")


@pytest.mark.cli
def test_a_command_line_error_is_said_once_per_job(adk_vacuum_h5md):
    """A typo under a launcher: every rank exits 2, rank 0 alone prints the usage error."""
    for rank, said in (("0", True), ("1", False)):
        proc = run_cli("inspect", adk_vacuum_h5md, "--no-such-option",
                       env=_clean(**{**HYDRA, "PMI_RANK": rank, "MPI_LOCALRANKID": rank}), timeout=120)
        assert proc.returncode == 2 and ("unrecognized arguments" in proc.stderr) == said, proc.stderr
        assert said or (proc.stdout, proc.stderr) == ("", "")


def test_a_batch_script_is_a_world_of_one(tmp_path, adk_vacuum_h5md):
    """In an sbatch script SLURM_NTASKS=8 describes the allocation: the command runs, once."""
    proc = run_cli_here("inspect", adk_vacuum_h5md, env=_clean(**BATCH))
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr


def test_a_short_time_left_is_said_before_the_work(tmp_path, adk_vacuum_h5md):
    env = _clean(**BATCH, SLURM_JOB_END_TIME=str(int(time.time()) + 90))
    proc = run_cli_here("split", adk_vacuum_h5md, "-o", str(tmp_path / "parts"), "--parts", "2", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "SLURM job 4242 (requeued 2 times) ends in" in proc.stderr, proc.stderr
    far = _clean(**BATCH, SLURM_JOB_END_TIME=str(int(time.time()) + 86400))
    proc = run_cli_here("split", adk_vacuum_h5md, "-o", str(tmp_path / "more"), "--parts", "2", env=far)
    assert proc.returncode == 0 and "ends in" not in proc.stderr, proc.stderr


def test_a_prediction_longer_than_the_job_time_left_is_said(tmp_path):
    """``report --predict`` in a SLURM job that ends in 60 s: the predicted runs that would not finish in it
    are named (the 11.5 s serial run of the hand-made report predicts more than 60 s at no N here)."""
    from tests.report.test_predict import _serial
    from trajscale.report.machine import Machine
    from trajscale.report.predict import fit, wall_at

    path = tmp_path / "r.json"
    _serial(t_io=80.0, t_compute=20.0).write(path)   # 100 s of tasks on one worker
    env = _clean(**BATCH, SLURM_JOB_END_TIME=str(int(time.time()) + 60))
    proc = run_cli_here("report", str(path), "--predict", "1,64", "--storage-gbps", "1", "--metadata-ms", "1",
                        "--nodes", "1", "--cores-per-node", "64", env=env)
    assert proc.returncode == 0, proc.stderr
    machine = Machine(nodes=1, cores_per_node=64, storage_gbps=1.0, metadata_ms=1.0)
    late = [n for n in (1, 64) if wall_at(fit(_serial(t_io=80.0, t_compute=20.0), "mpi"), n, machine) > 60]
    assert late == [1]   # the model's own answer: 1 rank does not fit, 64 do
    said = [line for line in proc.stderr.splitlines() if "would not finish" in line]
    assert len(said) == 1 and "SLURM job 4242" in said[0] and "N=1 " in said[0] and "N=64" not in said[0], said
    calm = run_cli_here("report", str(path), "--predict", "1,64", env=_clean())
    assert calm.returncode == 0 and "would not finish" not in calm.stderr


# -- real mpiexec: one print, one output per job ------------------------------------------------------------

@pytest.mark.mpi
def test_inspect_under_mpiexec_prints_once(adk_vacuum_h5md):
    alone = run_cli("inspect", adk_vacuum_h5md, "--json", env=_clean(), timeout=120)
    assert alone.returncode == 0, alone.stderr
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "inspect", adk_vacuum_h5md, "--json"], env=_clean())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads(alone.stdout)   # one document, not two


@pytest.mark.mpi
def test_split_under_mpiexec_writes_each_segment_once(tmp_path, adk_vacuum_h5md):
    folder = tmp_path / "parts"
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "split", adk_vacuum_h5md, "-o", str(folder), "--parts", "3"],
                   env=_clean())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("wrote 3 segments") == 1 and "another process" not in proc.stderr, proc.stderr
    parts = sorted(folder.glob("part_*.h5md"))
    assert len(parts) == 3
    with h5py.File(adk_vacuum_h5md) as f:   # the segments, in order, hold the input's frames
        ref = f["particles/all/position/value"][()]
    got = []
    for p in parts:
        with h5py.File(p) as f:
            got.append(f["particles/all/position/value"][()])
    np.testing.assert_array_equal(np.concatenate(got), ref)


@pytest.mark.mpi
def test_convert_under_mpiexec_writes_once(tmp_path, adk_vacuum):
    out = tmp_path / "out.h5md"
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "convert", *adk_vacuum, "-o", str(out), "--no-progress"],
                   env=_clean())
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count(f"wrote {out}") == 1, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.h5md"]
    import MDAnalysis as mda

    ref = np.array([ts.positions.copy() for ts in mda.Universe(*adk_vacuum).trajectory])
    got = np.array([ts.positions.copy() for ts in mda.Universe(adk_vacuum[0], str(out)).trajectory])
    np.testing.assert_allclose(got, ref, atol=1e-4)   # MDAnalysis's own H5MD reader, in Å


@pytest.mark.mpi
def test_verify_and_pack_under_mpiexec_run_once(tmp_path, adk_vacuum, adk_vacuum_h5md):
    """Commands that know nothing of MPI, under ``mpiexec -n 2``: one report printed, one store written."""
    alone = run_cli("verify", *adk_vacuum, adk_vacuum_h5md, "--no-progress", env=_clean(), timeout=120)
    both = run_mpi(2, ["-m", "trajscale.cli.main", "verify", *adk_vacuum, adk_vacuum_h5md, "--no-progress"],
                   env=_clean())
    assert alone.returncode == both.returncode == 0, both.stderr
    assert len(both.stdout.splitlines()) == len(alone.stdout.splitlines()) > 0, both.stdout
    rng = np.random.default_rng(7)
    arrays = [rng.normal(size=(5, 3)).astype(np.float32) for _ in range(4)]
    paths = []
    for i, a in enumerate(arrays):
        paths.append(str(tmp_path / f"s{i}.npz"))
        np.savez(paths[-1], x=a)
    store = tmp_path / "store.h5"
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "pack", *paths, "-o", str(store), "--no-progress"], env=_clean())
    assert proc.returncode == 0 and proc.stderr.count(f"wrote {store}") == 1, proc.stderr
    assert "another process" not in proc.stderr
    with h5py.File(store) as f:
        np.testing.assert_array_equal(f["x"][()], np.concatenate(arrays))


# -- one module reads the launchers' variables --------------------------------------------------------------

#: What only trajscale.launch reads: the variables launchers and SLURM set in the processes they start.
LAUNCHER_VARIABLES = ("SLURM_", "PMI_", "PMIX_", "OMPI_COMM_WORLD", "OMPI_")


def test_launcher_variables_are_read_in_launch_only():
    """Every string constant in src/ that names a launcher's variable (an ``os.environ`` key, a prefix to
    filter) is in ``trajscale/launch.py``: the other modules ask it."""
    import ast
    from pathlib import Path

    pkg = Path(__file__).resolve().parents[1] / "src" / "trajscale"
    found = []
    for path in sorted(pkg.rglob("*.py")):
        if path == pkg / "launch.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    node.value.startswith(LAUNCHER_VARIABLES):
                found.append(f"{path.relative_to(pkg)}:{node.lineno}: {node.value!r}")
    assert found == [], "launcher variables read outside trajscale/launch.py:\n" + "\n".join(found)


def test_the_rule_finds_a_reader(tmp_path):
    """The rule above sees a read written as code usually writes it."""
    import ast

    tree = ast.parse('import os\nsize = int(os.environ.get("PMI_SIZE", 1))\n')
    assert [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and n.value.startswith(LAUNCHER_VARIABLES)] == ["PMI_SIZE"]


def test_a_run_predicted_longer_than_the_job_time_left_says_so_before_it_starts(tmp_path, adk_vacuum, adk_vacuum_h5md):
    """``run --predict-from``: in a SLURM job ending in 60 s, a run whose report (220 s of serial tasks, 200 s of
    them compute: no storage case makes it fit) predicts more says so in one line before it starts, and still
    runs; in a job ending tomorrow it says nothing; with no time limit known the report is not even read (a
    path that does not exist passes)."""
    from tests.report.test_predict import _serial

    path = tmp_path / "r.json"
    _serial(t_io=20.0, t_compute=200.0).write(path)
    cmd = ["run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--executor", "serial", "--predict-from", str(path)]
    env = _clean(**BATCH, SLURM_JOB_END_TIME=str(int(time.time()) + 60))
    proc = run_cli_here(*cmd, "--out", str(tmp_path / "a.csv"), env=env)
    assert proc.returncode == 0 and (tmp_path / "a.csv").exists(), proc.stderr
    said = [line for line in proc.stderr.splitlines() if "predicted" in line or "ends in" in line]
    assert len(said) == 1 and "SLURM job 4242 (requeued 2 times) ends in" in said[0], proc.stderr
    took = said[0].split("predicted to take ")[1].split(",")[0]   # "4 min": minutes from 120 s on
    assert said[0].startswith("trajscale: trajscale run is predicted") and took.endswith(" min"), said[0]
    assert float(took.split()[0]) * 60 >= 200 - 30, said[0]
    far = _clean(**BATCH, SLURM_JOB_END_TIME=str(int(time.time()) + 86400))
    proc = run_cli_here(*cmd, "--out", str(tmp_path / "b.csv"), env=far)
    assert proc.returncode == 0 and "predicted" not in proc.stderr and "ends in" not in proc.stderr, proc.stderr
    nowhere = ["--predict-from" if a == "--predict-from" else str(tmp_path / "none.json") if a == str(path) else a
               for a in cmd]
    proc = run_cli_here(*nowhere, "--out", str(tmp_path / "c.csv"), env=_clean())
    assert proc.returncode == 0 and (tmp_path / "c.csv").exists(), proc.stderr
    proc = run_cli_here(*nowhere, "--out", str(tmp_path / "d.csv"), env=env)   # in the job: read, refused
    assert proc.returncode != 0 and "none.json" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_the_report_summary_names_the_job_it_ran_in(tmp_path, adk_vacuum, adk_vacuum_h5md):
    """A run in step 0 of SLURM job 4242, requeued twice: its report records the job, and ``trajscale report``'s
    text says it in one line; a report without the record (written before it was kept) loads and says none."""
    step = _clean(**BATCH, SLURM_STEP_ID="0", SLURM_STEPID="0", SLURM_STEP_NUM_TASKS="1",
                  SLURM_JOB_END_TIME=str(int(time.time()) + 86400))
    report = tmp_path / "r.json"
    proc = run_cli_here("run", "rmsd", adk_vacuum[0], adk_vacuum_h5md, "--executor", "serial", "--report", str(report),
                        env=step)
    assert proc.returncode == 0, proc.stderr
    recorded = json.loads(report.read_text())["meta"]
    assert recorded["job"]["job_id"] == "4242" and recorded["job"]["step_id"] == "0"
    assert recorded["job"]["restart_count"] == 2 and "worker_jobs" not in recorded   # (no Dask workers' jobs)
    text = run_cli_here("report", str(report), env=_clean())
    assert text.returncode == 0, text.stderr
    assert [line for line in text.stdout.splitlines() if line.startswith("job ")] == \
        ["job 4242 step 0, requeued 2 time(s)"], text.stdout
    old = json.loads(report.read_text())
    old["meta"]["worker_jobs"] = ["11", "12"]   # (Dask workers' SLURM jobs: tests/slurm records real ones)
    (tmp_path / "dask.json").write_text(json.dumps(old))
    text = run_cli_here("report", str(tmp_path / "dask.json"), env=_clean())
    assert "workers' jobs: 11, 12" in text.stdout.splitlines(), text.stdout + text.stderr
    del old["meta"]["job"], old["meta"]["worker_jobs"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    text = run_cli_here("report", str(tmp_path / "old.json"), env=_clean())
    assert text.returncode == 0 and not [line for line in text.stdout.splitlines() if line.startswith("job")], \
        text.stdout + text.stderr


def test_the_workers_jobs_are_kept_in_the_report_record():
    from trajscale.report.runfacts import RunFacts

    facts = RunFacts(worker_jobs=("11", "12"), job=None)
    assert RunFacts.from_dict(facts.to_dict()) == facts and facts.to_dict()["worker_jobs"] == ["11", "12"]
    assert RunFacts.from_dict({"n_tasks": 3}).worker_jobs == ()   # an older report
