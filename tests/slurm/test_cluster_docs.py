"""The job scripts of the docs, run as written on the local SLURM: every template of docs/cluster.md, the
MPI batch script and the ``ParallelWriter`` example of docs/parallel.md (under ``srun --mpi=pmi2``, checked
with ``trajscale verify``), and docs/following.md's simulation and follower jobs (``--dependency=after:``).

What a test changes in a script is said in its ``Fit`` (each text must be in the script, so a changed page
fails here rather than being run half-changed): the ``#SBATCH`` sizes (a page asks for nodes of 32 cores;
here one node has the machine's cores) and the names of the files. The numbers each job leaves are checked
against MDAnalysis; the MPI ones against a serial run's bytes too.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests import datafiles as D

from tests.conftest import ROOT
from tests.slurm.test_jobs import (
    SLOW_CONVERT,
    assert_clean_size,
    assert_same_frames,
    frames_done,
    start_again,
    trajscale,
    wait_for_frames,
    wait_for_line,
)

pytestmark = [pytest.mark.slurm, pytest.mark.cli, pytest.mark.slow]

DOCS = ROOT / "docs"
GMX = shutil.which("gmx")
#: sbatch options that size a job for a real cluster: dropped, the test gives its own.
SIZES = ("--nodes", "--ntasks-per-node", "--ntasks", "--cpus-per-task", "--mem", "--constraint", "--partition",
         "--account", "--time")


def scripts(page: str) -> dict[str, str]:
    """The page's ```bash blocks that are batch scripts, by name (``# NAME.sbatch`` in the block)."""
    out = {}
    for block in re.findall(r"```bash\n(.*?)```", (DOCS / page).read_text(), re.S):
        if block.startswith("#!/bin/bash"):
            name = re.search(r"^# ([\w.-]+\.sbatch)", block, re.M)
            out[name.group(1) if name else f"block{len(out)}"] = block
    return out


def python_block(page: str, name: str) -> str:
    """The page's ```python block that starts with ``# NAME``."""
    for block in re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S):
        if block.startswith(f"# {name}\n"):
            return block
    raise AssertionError(f"{page}: no python block '# {name}'")


@dataclass
class Fit:
    """How a page's script is fitted to the local SLURM: ``-n ntasks`` and these text replacements."""

    ntasks: int = 1
    replace: dict[str, str] = field(default_factory=dict)

    def __call__(self, script: str) -> str:
        lines = []
        for line in script.splitlines():
            if line.startswith("#SBATCH"):
                kept = [o for o in line.split()[1:] if not o.startswith(SIZES)]
                line = " ".join(["#SBATCH", *kept, f"--ntasks={self.ntasks}", "--time=00:10:00"])
            lines.append(line)
        script = "\n".join(lines) + "\n"
        for old, new in self.replace.items():
            assert old in script, f"the page's script no longer has {old!r}:\n{script}"
            script = script.replace(old, new)
        return script


def submit(slurm, page: str, name: str, fit: Fit, cwd: Path, *args: str, env: dict | None = None) -> int:
    return slurm.sbatch(fit(scripts(page)[name]), "-o", f"{name}.log", *args, cwd=cwd, env=env)


def done(slurm, job: int, timeout: float = 180) -> str:
    """Wait for the job; assert it completed; return its log (a job still running then is cancelled)."""
    try:
        state = slurm.wait(job, timeout=timeout)
    except TimeoutError:
        slurm.cancel(job)
        raise
    log = slurm.log(job)
    assert state == "COMPLETED", f"job {job} {state}:\n{log}"
    assert "Traceback" not in without_shutdown_races(log), log
    return log


#: A logging record's first line, as dask's default logging format writes it.
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - ", re.M)


def without_shutdown_races(log: str) -> str:
    """The log without distributed's INFO records of a worker comm that closed while the scheduler wrote to it.

    When ``cluster.close()`` cancels the worker jobs, the scheduler may be writing to a worker at that moment;
    distributed logs that at INFO level with the ``CommClosedError``'s traceback (dask/distributed#7192, open).
    Only records whose traceback ends in that error are dropped; any other traceback is left for the test.
    """
    starts = [m.start() for m in RECORD.finditer(log)] + [len(log)]
    kept = [log[: starts[0]]]
    for a, b in zip(starts, starts[1:], strict=False):
        record = log[a:b]
        race = " - distributed.batched - INFO - Batched Comm Closed " in record.partition("\n")[0] \
            and re.search(r"(CommClosedError|StreamClosedError)[^\n]*\s*$", record)
        kept.append("" if race else record)
    return "".join(kept)


def ca_rmsd() -> np.ndarray:
    return rms.RMSD(mda.Universe(D.PSF, D.DCD), select="name CA").run().results.rmsd[:, 2]


def serial_csv(slurm, folder: Path, top: str, traj: str) -> bytes:
    got = trajscale(slurm, "run", "rmsd", top, traj, "--select", "name CA", "--executor", "serial", "--no-progress",
                    "--out", "serial.csv", cwd=folder)
    assert got.returncode == 0, got.stderr
    return (folder / "serial.csv").read_bytes()


def test_every_batch_script_of_the_cluster_page_is_run_here():
    names = set(scripts("cluster.md"))
    assert names == {"rmsd.sbatch", "dask.sbatch", "convert.sbatch", "md-follow.sbatch", "probe.sbatch"}, names
    for script in scripts("cluster.md").values():   # every MPI step names the PMI the tested MPI needs
        for line in script.splitlines():
            if re.match(r"\s*srun\b", line) and "trajscale" in line or "gmx_mpi" in line:
                assert "--mpi=pmi2" in line, line


# -- docs/cluster.md ------------------------------------------------------------------------------

def test_mpi_with_srun(slurm, tmp_path, adk_vacuum_h5md):
    fit = Fit(ntasks=2, replace={"topol.tpr traj.h5md": f"{D.PSF} {adk_vacuum_h5md}"})
    log = done(slurm, submit(slurm, "cluster.md", "rmsd.sbatch", fit, tmp_path))
    assert (tmp_path / "rmsd.csv").read_bytes() == serial_csv(slurm, tmp_path, D.PSF, adk_vacuum_h5md), log
    report = json.loads((tmp_path / "rmsd.json").read_text())
    assert report["executor"] == "mpi" and report["n_workers"] == 2
    table = np.loadtxt(tmp_path / "rmsd.csv", delimiter=",", skiprows=1)
    np.testing.assert_allclose(table[:, -1], ca_rmsd(), atol=1e-4)


def test_dask_cluster_on_slurm(slurm, tmp_path, adk_vacuum_h5md):
    pytest.importorskip("dask_jobqueue")
    driver = python_block("cluster.md", "rmsd_dask.py")
    for old, new in {'JOBS, CORES, MEMORY = 4, 32, "128GB"': 'JOBS, CORES, MEMORY = 2, 1, "1GB"',
                     '"topol.tpr", "traj.h5md"': f"{D.PSF!r}, {adk_vacuum_h5md!r}"}.items():
        assert old in driver, old
        driver = driver.replace(old, new)
    (tmp_path / "rmsd_dask.py").write_text(driver)
    # the driver's scheduler and its worker jobs keep their Dask scratch here, as a cluster's configured scratch
    # (Dask's default, the temporary folder's dask-scratch-space, would be left behind)
    log = done(slurm, submit(slurm, "cluster.md", "dask.sbatch", Fit(), tmp_path,
                             env={"DASK_TEMPORARY_DIRECTORY": str(tmp_path)}))
    table = np.loadtxt(tmp_path / "rmsd.csv", delimiter=",", skiprows=1)
    np.testing.assert_allclose(table[:, -1], ca_rmsd(), atol=1e-4, err_msg=log)
    left = [line for line in slurm.run("squeue", "-h", "-o", "%j %Z").stdout.splitlines()
            if line.split()[1] == str(tmp_path)]   # the worker jobs the driver submitted from here
    assert left == [], left   # cluster.close() cancelled them


def test_requeued_convert(slurm, tmp_path):
    """``--signal=B:TERM@300`` (here ``scancel --batch --signal=TERM``, what it does): the trap passes the signal
    to the convert, which keeps its frames, and requeues the job; its next start resumes and finishes."""
    fit = Fit(replace={"topol.tpr md.xtc": f"{D.PSF} {D.DCD}", " --resume &": " --resume --no-progress &"})
    job = submit(slurm, "cluster.md", "convert.sbatch", fit, tmp_path, env=SLOW_CONVERT)
    wait_for_line(slurm, job, tmp_path / "convert.sbatch.log", "start 0")
    wait_for_frames(slurm, job, tmp_path, more_than=0, name="md.h5md")
    slurm.cancel(job, "--batch", "--signal=TERM")
    slurm.wait(job, timeout=120, states={"PENDING"})   # requeued by the script's trap
    start_again(slurm, job)
    log = done(slurm, job)
    assert "start 1" in log and int(slurm.job(job)["Restarts"]) == 1, log
    kept = [line for line in log.splitlines() if "terminated by signal 15" in line]
    assert len(kept) == 1 and "--resume" in kept[0], log
    resumed = re.findall(r"resuming md.h5md from frame (\d+) of 98", log)
    assert len(resumed) == 1 and 0 < int(resumed[0]) < 98, log
    assert_same_frames(tmp_path / "md.h5md", D.PSF, D.DCD)
    assert_clean_size(slurm, tmp_path / "md.h5md", tmp_path)
    assert frames_done(tmp_path, "md.h5md") == 0   # no record left


WATER_TOP = """#include "oplsaa.ff/forcefield.itp"
#include "oplsaa.ff/spc.itp"

[ system ]
water

[ molecules ]
SOL {n}
"""

WATER_MDP = """integrator = md
nsteps = 100
dt = 0.002
cutoff-scheme = Verlet
rcoulomb = 0.9
rvdw = 0.9
coulombtype = PME
tcoupl = v-rescale
tc-grps = System
tau-t = 0.1
ref-t = 300
gen-vel = yes
gen-temp = 300
nstxout-compressed = 10
"""


def water_md(folder: Path) -> None:
    """``md.tpr``: 221 SPC waters in a 2 nm box (``gmx solvate``), 100 steps writing md.xtc every 10."""
    def gmx(*args):
        got = subprocess.run([GMX, "-quiet", *args], cwd=folder, capture_output=True, text=True, timeout=300)
        assert got.returncode == 0, got.stderr[-3000:]

    gmx("solvate", "-cs", "spc216.gro", "-box", "2", "2", "2", "-o", "water.gro")
    n = sum(1 for line in (folder / "water.gro").read_text().splitlines()[2:-1] if "OW" in line)
    (folder / "topol.top").write_text(WATER_TOP.format(n=n))
    (folder / "md.mdp").write_text(WATER_MDP)
    gmx("grompp", "-f", "md.mdp", "-c", "water.gro", "-p", "topol.top", "-o", "md.tpr")


#: Debian's GROMACS is ``gmx`` with thread-MPI, one thread here; a page's cluster runs ``gmx_mpi``.
GMX_HERE = "gmx mdrun -nt 1 -deffnm md"


@pytest.mark.skipif(GMX is None, reason="gmx (GROMACS) is not on PATH: apt-get install gromacs")
def test_follower_beside_mdrun_in_one_job(slurm, tmp_path):
    water_md(tmp_path)
    fit = Fit(ntasks=2, replace={"gmx_mpi mdrun -deffnm md": GMX_HERE, '--select "protein"': '--select "name OW"'})
    log = done(slurm, submit(slurm, "cluster.md", "md-follow.sbatch", fit, tmp_path))
    u = mda.Universe(str(tmp_path / "md.tpr"), str(tmp_path / "md.xtc"))
    ow = u.select_atoms("name OW")
    want = [ow.radius_of_gyration() for _ in u.trajectory]
    assert len(want) == 11
    table = np.loadtxt(tmp_path / "rgyr.csv", delimiter=",", skiprows=1)
    np.testing.assert_allclose(table[:, -1], want, rtol=1e-5, err_msg=log)
    assert "ended: the writer marked the file complete" in log, log


def test_probe_and_prediction_for_an_allocation(slurm, tmp_path, adk_vacuum_h5md):
    got = trajscale(slurm, "run", "rmsd", D.PSF, adk_vacuum_h5md, "--select", "name CA", "--executor", "serial",
                    "--no-progress", "--report", "rmsd.json", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    (tmp_path / "scratch").mkdir()
    fit = Fit(ntasks=2, replace={"--seconds 40 --bytes 16G": "--seconds 4 --bytes 64M"})
    log = done(slurm, submit(slurm, "cluster.md", "probe.sbatch", fit, tmp_path,
                             env={"SCRATCH": str(tmp_path / "scratch")}))
    profile = json.loads((tmp_path / "machine.json").read_text())
    assert profile["kind"] and profile["nodes"] == 1, log
    assert "probe: 2 ranks" in log, log   # one probe on both ranks, not two probes of one reader each
    assert "nodes                                      1  [given]" in log, log
    for n in ("64", "128", "256"):   # a predicted wall time for each N
        assert re.search(rf"^\s+{n}\s+\d", log, re.M), log
    assert not list((tmp_path / "scratch" / "probe").iterdir())   # the probe's file is removed


# -- docs/parallel.md and docs/following.md -------------------------------------------------------

def test_parallel_page_mpi_batch_script(slurm, tmp_path, adk_vacuum_h5md):
    fit = Fit(ntasks=2, replace={"module load hdf5/parallel": "true", "top.tpr /scratch/traj.h5md":
                                 f"{D.PSF} {adk_vacuum_h5md} --select 'name CA'"})
    log = done(slurm, submit(slurm, "parallel.md", "block0", fit, tmp_path))
    assert (tmp_path / "rmsd.csv").read_bytes() == serial_csv(slurm, tmp_path, D.PSF, adk_vacuum_h5md), log
    assert json.loads((tmp_path / "r.json").read_text())["n_workers"] == 2


def test_parallel_writer_example_under_srun_verifies(slurm, tmp_path):
    """docs/parallel.md's ``ParallelWriter`` example on two ranks of ``srun --mpi=pmi2``: the file it writes
    has the source's frames, time and step (``trajscale verify`` finds no difference). The source is the
    first 20 frames of AdK in vacuum (the example writes one collective frame at a time)."""
    short = trajscale(slurm, "convert", D.PSF, D.DCD, "--stop", "20", "-o", "short.h5md", "--no-progress",
                      cwd=tmp_path)
    assert short.returncode == 0, short.stderr
    adk_vacuum_h5md = str(tmp_path / "short.h5md")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", (DOCS / "parallel.md").read_text(), re.S)
              if "ParallelWriter(" in b and "universe.trajectory" in b]
    assert len(blocks) == 1
    code = blocks[0].replace('"top.tpr"', repr(D.PSF)).replace('"traj.h5md"', repr(adk_vacuum_h5md))
    (tmp_path / "writer.py").write_text(code)
    job = slurm.sbatch(f"#!/bin/bash\nsrun --mpi=pmi2 -n 2 {sys.executable} writer.py\n", "-n", "2", cwd=tmp_path)
    done(slurm, job)
    verify = trajscale(slurm, "verify", D.PSF, adk_vacuum_h5md, "out.h5md", cwd=tmp_path)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert not re.search(r"\b[1-9]\d* step", verify.stdout + verify.stderr), verify.stdout


@pytest.mark.skipif(GMX is None, reason="gmx (GROMACS) is not on PATH: apt-get install gromacs")
def test_following_page_simulation_and_follower_jobs(slurm, tmp_path):
    water_md(tmp_path)
    pages = scripts("following.md")
    md = Fit(replace={"gmx_mpi mdrun -deffnm md": GMX_HERE})(pages["md.sbatch"])
    (tmp_path / "md.sbatch").write_text(md)
    follow = Fit(ntasks=2, replace={"topol.tpr md.xtc": "md.tpr md.xtc --select 'name OW'"})(pages["follow.sbatch"])
    (tmp_path / "follow.sbatch").write_text(follow)
    submit_both = re.search(r"```bash\n(jobid=\$\(sbatch.*?)```", (DOCS / "following.md").read_text(), re.S).group(1)
    got = slurm.run("bash", "-c", submit_both.replace("sbatch ", "sbatch -o %x.log ") + "echo md=$jobid\n",
                    cwd=tmp_path, timeout=60)
    assert got.returncode == 0, got.stderr
    jobs = {"md": int(re.search(r"md=(\d+)", got.stdout).group(1)),
            "follow": int(re.search(r"Submitted batch job (\d+)", got.stdout).group(1))}
    log = done(slurm, jobs["follow"])
    done(slurm, jobs["md"])
    u = mda.Universe(str(tmp_path / "md.tpr"), str(tmp_path / "md.xtc"))
    assert len(u.trajectory) == 11
    ref = rms.RMSF(u.select_atoms("name OW")).run().results.rmsf
    import h5py

    with h5py.File(tmp_path / "rmsf.h5", "r") as f:
        np.testing.assert_allclose(f["rmsf"][()], ref, rtol=1e-4, atol=1e-4, err_msg=log)
