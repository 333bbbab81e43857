"""What SLURM does to trajscale's commands, done by the local SLURM: ``srun`` with ``--mpi=pmi2`` and
``--mpi=none``, a batch job requeued mid-convert (``scontrol requeue``) and a batch job told to stop
(``scancel --signal=TERM``, as ``#SBATCH --signal=TERM@60`` does before a time limit), and jobs that reach
their ``--time``, ended by SLURM itself: SIGTERM to every process of the job, SIGKILL ``KillWait`` (5 s
here) later.

SLURM counts time limits in whole minutes and looks at them about every 30 s, so a ``--time=1`` job ends
60 to 90 s after it starts: the two such jobs are submitted when this module starts, idle while they wait
(a convert slowed by a test hook that sleeps between slabs; a follower waiting for frames that never
come), and are checked by its last tests, so that the minute passes while the other tests run.

The references are independent of trajscale: MDAnalysis's RMSD and its reading of the source frames;
a serial run's CSV and a clean convert's file size are what the SLURM runs must equal.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests import datafiles as D

pytestmark = [pytest.mark.slurm, pytest.mark.cli]

#: A convert slowed to about 0.15 s per 2-frame slab (98 frames of AdK in vacuum: ~7 s), idle while it
#: waits, so that a signal or a requeue lands mid-run on a loaded machine (the pause is under KillWait).
SLOW_CONVERT = {"TRAJSCALE_CONVERT_SLAB_MB": "0.08", "TRAJSCALE_TEST_SLOW_READ": "0.15"}


def trajscale(slurm, *args: str, cwd, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI outside SLURM (a reference run), with the cluster's environment."""
    return slurm.run(sys.executable, "-m", "trajscale.cli.main", *args, cwd=cwd, timeout=timeout, env=env or {})


def source_positions(top: str, traj: str) -> np.ndarray:
    u = mda.Universe(top, traj)
    return np.array([ts.positions.copy() for ts in u.trajectory])


def assert_same_frames(path: Path, top: str, traj: str) -> None:
    """The H5MD file holds every frame of the source, as MDAnalysis reads it, and is marked complete."""
    want = source_positions(top, traj)
    with h5py.File(path, "r") as f:
        got = f["particles/all/position/value"][()]
        steps = f["particles/all/position/step"][()]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert len(steps) == len(want)


def wrote_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(r"\bwrote\b", line)]


# -- srun -----------------------------------------------------------------------------------------

@pytest.mark.mpi
def test_srun_pmi2_rmsd_equals_serial_and_mdanalysis(slurm, tmp_path):
    common = ["run", "rmsd", D.PSF, D.DCD, "--select", "name CA", "--no-progress"]
    serial = trajscale(slurm, *common, "--executor", "serial", "--out", "serial.csv", cwd=tmp_path)
    assert serial.returncode == 0, serial.stderr
    got = slurm.run("srun", "-n", "2", "--mpi=pmi2", "trajscale", *common, "--executor", "mpi",
                    "--out", "mpi.csv", "--report", "mpi.json", cwd=tmp_path, timeout=240)
    assert got.returncode == 0, got.stderr[-3000:]
    assert (tmp_path / "mpi.csv").read_bytes() == (tmp_path / "serial.csv").read_bytes()
    report = json.loads((tmp_path / "mpi.json").read_text())
    assert report["executor"] == "mpi" and report["n_workers"] == 2
    ref = rms.RMSD(mda.Universe(D.PSF, D.DCD), select="name CA").run().results.rmsd
    table = np.loadtxt(tmp_path / "mpi.csv", delimiter=",", skiprows=1)
    np.testing.assert_allclose(table[:, -1], ref[:, 2], atol=1e-4)


@pytest.mark.mpi
def test_mpiexec_inside_salloc_equals_serial(slurm, tmp_path):
    """``salloc -n 2 mpiexec.mpich -n 2 ...``: MPICH's launcher starts its proxies through SLURM."""
    common = ["run", "rmsd", D.PSF, D.DCD, "--select", "name CA", "--no-progress"]
    serial = trajscale(slurm, *common, "--executor", "serial", "--out", "serial.csv", cwd=tmp_path)
    assert serial.returncode == 0, serial.stderr
    mpiexec = shutil.which("mpiexec.mpich") or "mpiexec"
    got = slurm.run("salloc", "-n", "2", mpiexec, "-n", "2", "trajscale", *common, "--executor", "mpi",
                    "--out", "mpi.csv", "--report", "mpi.json", cwd=tmp_path, timeout=240)
    assert got.returncode == 0, got.stderr[-3000:]
    assert (tmp_path / "mpi.csv").read_bytes() == (tmp_path / "serial.csv").read_bytes()
    assert json.loads((tmp_path / "mpi.json").read_text())["n_workers"] == 2


@pytest.mark.mpi
def test_srun_without_pmi_converts_once_or_is_refused(slurm, tmp_path):
    """``srun --mpi=none`` starts two independent tasks: the convert is refused in one line naming
    ``srun --mpi=pmi2``, or runs once; never two writers of one file, on every try."""
    for attempt in range(2):
        out = tmp_path / f"out{attempt}.h5md"
        got = slurm.run("srun", "-n", "2", "--mpi=none", "trajscale", "convert", D.TPR, D.XTC, "-o", out.name,
                        "--no-progress", cwd=tmp_path, timeout=240)
        said = got.stdout + got.stderr
        assert len(wrote_lines(said)) <= 1, said[-3000:]
        assert "another process" not in said, said[-3000:]   # no second writer met the first's lock
        assert "Traceback" not in said, said[-3000:]
        if got.returncode != 0:
            assert "--mpi=pmi2" in said, said[-3000:]
            assert not out.exists() or _complete(out, D.TPR, D.XTC)
        else:
            assert len(wrote_lines(said)) == 1, said[-3000:]
            assert_same_frames(out, D.TPR, D.XTC)
        assert not list(tmp_path.glob(f".{out.name}*")), list(tmp_path.iterdir())   # no partial left


def _complete(path: Path, top: str, traj: str) -> bool:
    assert_same_frames(path, top, traj)
    return True


@pytest.mark.mpi
def test_srun_pmi2_inspect_prints_once(slurm, tmp_path):
    got = slurm.run("srun", "-n", "2", "--mpi=pmi2", "trajscale", "inspect", D.XTC, cwd=tmp_path, timeout=240)
    assert got.returncode == 0, got.stderr[-3000:]
    assert got.stdout.count("frames x atoms 10 x 47681") == 1, got.stdout


# -- batch jobs: requeue and SIGTERM --------------------------------------------------------------

def frames_done(folder: Path, name: str = "out.h5md") -> int:
    """Frames an unfinished convert of ``name`` has counted in its progress records (0: none yet)."""
    done = 0
    for record in folder.glob(f".{name}.convert-progress*.json"):
        try:
            done = max(done, int(json.loads(record.read_text()).get("done", 0)))
        except (OSError, ValueError):   # being replaced: read it next time
            continue
    return done


def wait_for_frames(slurm, job: int, folder: Path, more_than: int, timeout: float = 180,
                    name: str = "out.h5md") -> int:
    """Wait until the job's convert of ``name`` has counted more than ``more_than`` frames; return how many."""
    deadline = time.monotonic() + timeout
    while (done := frames_done(folder, name)) <= more_than:
        state = slurm.state(job)
        assert state in ("PENDING", "RUNNING", "CONFIGURING", "REQUEUED", "COMPLETING"), \
            f"job {job} {state} before its convert got past frame {more_than}:\n{slurm.log(job)}"
        assert time.monotonic() < deadline, f"no progress past frame {more_than} in {timeout:.0f} s:\n{slurm.log(job)}"
        time.sleep(0.1)
    return done


def wait_for_line(slurm, job: int, log: Path, line: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not (log.exists() and line in log.read_text().splitlines()):
        assert time.monotonic() < deadline, f"no line {line!r} from job {job} in {timeout:.0f} s:\n{slurm.log(job)}"
        time.sleep(0.1)


def requeue_now(slurm, job: int, timeout: float = 120) -> None:
    """``scontrol requeue JOB``, then start it again at once."""
    got = slurm.run("scontrol", "requeue", str(job), timeout=60)
    assert got.returncode == 0, got.stderr
    slurm.wait(job, timeout=timeout, states={"PENDING"})
    start_again(slurm, job, timeout)


def job_processes(job: int) -> list[int]:
    """The processes of a job's running instance on this node (its batch shell and what it started)."""
    needle = f"\0SLURM_JOB_ID={job}\0".encode()
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if needle in b"\0" + (d / "environ").read_bytes():
                    found.append(int(d.name))
            except OSError:
                continue
    return found


def start_again(slurm, job: int, timeout: float = 120) -> None:
    """Start a requeued job without its wait: SLURM holds a requeued job (``Reason=BeginTime``) before it
    may start again; ``scontrol update StartTime=now``, a user's command, lifts that. Only once the last
    instance has ended on the node, and a second later: a job started again within the second its last
    instance ended is refused by the node ("Job credential revoked") and fails. Call it once the job is
    pending; it returns once the job runs again (or has run)."""
    deadline = time.monotonic() + timeout
    while job_processes(job):
        assert time.monotonic() < deadline, f"job {job}'s last instance still runs after {timeout:.0f} s"
        time.sleep(0.1)
    time.sleep(1.5)
    while True:
        fields = slurm.job(job)
        if fields["JobState"] not in ("PENDING", "REQUEUED", "COMPLETING"):
            return
        if fields["JobState"] == "PENDING" and fields.get("Reason") == "BeginTime":
            slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now", timeout=60)
        assert time.monotonic() < deadline, f"job {job} not started again in {timeout:.0f} s: {fields}"
        time.sleep(0.2)


def _clean_convert_size(slurm, tmp_path: Path, *options: str) -> int:
    clean = tmp_path / "clean"
    clean.mkdir()
    got = trajscale(slurm, "convert", D.PSF, D.DCD, "-o", "clean.h5md", "--no-progress", *options, cwd=clean)
    assert got.returncode == 0, got.stderr
    return (clean / "clean.h5md").stat().st_size


@pytest.mark.slow
def test_requeued_convert_resumes_to_the_frames_and_size_of_a_clean_one(slurm, tmp_path):
    """``sbatch --requeue`` and ``scontrol requeue`` twice mid-convert: each start runs the same command with
    ``--resume``; the last finishes with every frame, at the size of a clean convert (not growing per cycle)."""
    script = ("#!/bin/bash\n"
              "echo start restart=${SLURM_RESTART_COUNT:-0}\n"
              f"trajscale convert {D.PSF} {D.DCD} -o out.h5md --resume --no-progress\n"
              "echo convert exited $?\n")
    job = slurm.sbatch(script, "--requeue", "--open-mode=append", "-o", "job.log", cwd=tmp_path, env=SLOW_CONVERT)
    for cycle in range(2):
        wait_for_line(slurm, job, tmp_path / "job.log", f"start restart={cycle}")
        done = wait_for_frames(slurm, job, tmp_path, more_than=frames_done(tmp_path))   # this start's own
        assert done < 98
        requeue_now(slurm, job)
    assert slurm.wait(job, timeout=240) == "COMPLETED", slurm.log(job)
    log = (tmp_path / "job.log").read_text()
    for n in range(3):
        assert f"start restart={n}" in log, log
    assert int(slurm.job(job)["Restarts"]) == 2
    resumed = [int(m) for m in re.findall(r"resuming out.h5md from frame (\d+)", log)]
    assert len(resumed) == 2 and 0 < resumed[0] < resumed[1] < 98, log
    assert log.rstrip().endswith("convert exited 0"), log
    assert len(wrote_lines(log)) == 1, log
    assert_same_frames(tmp_path / "out.h5md", D.PSF, D.DCD)
    assert not list(tmp_path.glob(".out.h5md*")), list(tmp_path.iterdir())
    verify = trajscale(slurm, "verify", D.PSF, D.DCD, "out.h5md", cwd=tmp_path)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert_clean_size(slurm, tmp_path / "out.h5md", tmp_path)


def assert_clean_size(slurm, path: Path, tmp_path: Path) -> None:
    """``path`` is the size of a clean convert of the same source: the frames written once, and none of a
    cycle's space left behind. (A resumed file is 120 bytes larger than a clean one, once, whatever the
    number of cycles: HDF5 metadata of the finishing session; the bound is a metadata page.)"""
    size, clean = path.stat().st_size, _clean_convert_size(slurm, tmp_path)
    assert clean <= size <= clean + 4096, f"{path.name}: {size} bytes, a clean convert {clean}"


@pytest.mark.slow
def test_sigterm_to_a_job_step_keeps_a_partial_that_the_rerun_finishes(slurm, tmp_path):
    """``scancel --signal=TERM`` signals the job's steps, as ``#SBATCH --signal=TERM@60`` does before the
    time limit: the convert in the step stops with one line and keeps what it wrote; the same job script
    submitted again finishes the file with ``--resume``."""
    script = ("#!/bin/bash\n"
              f"srun -n 1 trajscale convert {D.PSF} {D.DCD} -o out.h5md --resume --no-progress\n"
              "echo convert exited $?\n")
    job = slurm.sbatch(script, "-o", "first.log", cwd=tmp_path, env=SLOW_CONVERT)
    wait_for_frames(slurm, job, tmp_path, more_than=0)
    slurm.cancel(job, "--signal=TERM")
    assert slurm.wait(job, timeout=120) == "COMPLETED", slurm.log(job)   # the script itself was not signalled
    first = (tmp_path / "first.log").read_text()
    assert "convert exited 143" in first, first
    assert not (tmp_path / "out.h5md").exists(), first
    assert 0 < frames_done(tmp_path) < 98, first
    said = [line for line in first.splitlines() if line.startswith("trajscale convert:")]
    assert len(said) == 1 and "--resume" in said[0], first
    assert "Traceback" not in first, first
    again = slurm.sbatch(script, "-o", "again.log", cwd=tmp_path)
    assert slurm.wait(again, timeout=240) == "COMPLETED", slurm.log(again)
    log = (tmp_path / "again.log").read_text()
    assert "convert exited 0" in log and "resuming out.h5md from frame" in log, log
    assert_same_frames(tmp_path / "out.h5md", D.PSF, D.DCD)
    assert_clean_size(slurm, tmp_path / "out.h5md", tmp_path)


# -- jobs that reach their --time (submitted when the module starts) -------------------------------

#: One DCD frame per slab and 1.5 s idle before each: 98 frames take ~150 s, far past the limit, and each
#: pause is well under KillWait, so the convert sees the SIGTERM between two slabs and saves its partial.
SLOWER_CONVERT = {"TRAJSCALE_CONVERT_SLAB_MB": "0.04", "TRAJSCALE_TEST_SLOW_READ": "1.5"}

#: At the limit SLURM sends SIGTERM to every process of the job, the batch shell too. A shell without a trap
#: dies at once, and slurmstepd then SIGKILLs what is left of the step (the command, in the middle of its
#: save); with a trap, the shell waits for its foreground command, which saves and exits (docs/cluster.md).
WAIT_ON_TERM = "trap 'echo job: SIGTERM' TERM\n"


@pytest.fixture(scope="module", autouse=True)
def time_limited(request, tmp_path_factory):
    """Two ``--time=1`` jobs submitted when the module starts (when its time-limit tests are selected): a
    convert and a follower. The tests at the end of the module wait for them (:func:`timed_out`)."""
    if not any(item.module is request.module and "time_limit" in item.name for item in request.session.items):
        return {}
    slurm = request.getfixturevalue("slurm")
    convert_dir = tmp_path_factory.mktemp("limit-convert")
    follow_dir = tmp_path_factory.mktemp("limit-follow")
    shutil.copy(D.XTC, follow_dir / "md.xtc")   # a trajectory nobody marks complete (no md.xtc.done)
    jobs = {
        "convert": (convert_dir, slurm.sbatch(
            "#!/bin/bash\n" + WAIT_ON_TERM +
            f"trajscale convert {D.PSF} {D.DCD} -o out.h5md --resume --no-progress\n"
            "echo convert exited $?\n", "--time=1", "-o", "job.log", cwd=convert_dir, env=SLOWER_CONVERT)),
        "follow": (follow_dir, slurm.sbatch(
            "#!/bin/bash\n" + WAIT_ON_TERM +
            f"{sys.executable} -m trajscale.cli.main run rmsd {D.TPR} md.xtc --select 'name CA' --follow "
            "--idle 600 --every 5 --out rmsd.csv\n"
            "echo follow exited $?\n", "--time=1", "-o", "job.log", cwd=follow_dir)),
    }
    return jobs


@pytest.fixture(scope="module")
def timed_out(slurm, time_limited):
    """The ``--time=1`` jobs once SLURM has ended them: name -> (folder, job, state, log)."""
    states = {name: slurm.wait(job, timeout=240) for name, (_, job) in time_limited.items()}
    return {name: (folder, job, states[name], (folder / "job.log").read_text())
            for name, (folder, job) in time_limited.items()}


@pytest.mark.slow
def test_a_convert_at_its_time_limit_keeps_a_partial_that_resume_finishes(slurm, timed_out):
    folder, job, state, log = timed_out["convert"]
    assert state == "TIMEOUT", log
    assert "DUE TO TIME LIMIT" in log and "job: SIGTERM" in log, log
    assert "convert exited 143" in log, log
    assert 0 < frames_done(folder) < 98, log
    said = [line for line in log.splitlines() if line.startswith("trajscale convert:")]
    assert len(said) == 1 and "terminated by signal 15" in said[0] and "--resume" in said[0], log
    assert not (folder / "out.h5md").exists()
    again = trajscale(slurm, "convert", D.PSF, D.DCD, "-o", "out.h5md", "--resume", "--no-progress", cwd=folder)
    assert again.returncode == 0, again.stderr
    assert "resuming out.h5md from frame" in again.stderr, again.stderr
    assert_same_frames(folder / "out.h5md", D.PSF, D.DCD)
    assert_clean_size(slurm, folder / "out.h5md", folder)


@pytest.mark.slow
def test_a_follower_at_its_time_limit_saves_what_it_analysed(timed_out):
    folder, job, state, log = timed_out["follow"]
    assert state == "TIMEOUT", log
    assert "DUE TO TIME LIMIT" in log and "follow exited 143" in log, log
    assert "interrupted; the results cover every frame analysed so far" in log, log
    table = np.loadtxt(folder / "rmsd.csv", delimiter=",", skiprows=1)
    ref = rms.RMSD(mda.Universe(D.TPR, D.XTC), select="name CA").run().results.rmsd
    assert table.shape[0] == len(ref)
    np.testing.assert_allclose(table[:, -1], ref[:, 2], atol=1e-4)
