"""An ensemble run requeued by the local SLURM mid-run: ``sbatch --requeue`` runs ``trajscale run rmsd
--ensemble CATALOG --results DIR --resume``, ``scontrol requeue`` stops it once some trajectories' results
are saved, and the job's next start skips those and ends with the outputs of a run that was never stopped.

The references: the same command run once outside SLURM, uninterrupted (its Parquet and CSV, byte for
byte), and MDAnalysis's own ``rms.RMSD`` on each trajectory.
"""

from __future__ import annotations

import json
import os
import shlex
import time
import warnings
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests import datafiles as D

from tests.slurm.test_jobs import requeue_now, trajscale, wait_for_line
from trajscale.ensemble.saved import saved_names

pytestmark = [pytest.mark.slurm, pytest.mark.cli, pytest.mark.slow]

#: Twenty short trajectories cut from AdK in vacuum (98 frames): 6 to 15 frames each, overlapping.
PIECES = [(3 * k, 3 * k + 6 + k % 10) for k in range(20)]
#: Each block's read sleeps (a test hook), so that the requeue lands with some trajectories saved and others
#: not on a loaded machine; one trajectory per round, so each is saved as it finishes.
SLOW = {"TRAJSCALE_TEST_SLOW_READ": "0.3"}
COMMON = ["--select", "name CA", "--executor", "serial", "--round-size", "1", "--no-progress"]


@pytest.fixture
def catalog(tmp_path) -> Path:
    """The twenty trajectories (XTC written by MDAnalysis) and their CSV catalog, in ``tmp_path/data``."""
    data = tmp_path / "data"
    data.mkdir()
    rows = ["name,topology,trajectory,replica"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(D.PSF, D.DCD)
        for k, (a, b) in enumerate(PIECES):
            with mda.Writer(str(data / f"piece-{k:02d}.xtc"), u.atoms.n_atoms) as w:
                for _ in u.trajectory[a:b]:
                    w.write(u.atoms)
            rows.append(f"piece-{k:02d},{D.PSF},piece-{k:02d}.xtc,{k}")
    (data / "catalog.csv").write_text("\n".join(rows) + "\n")
    return data / "catalog.csv"


def saved_files(results: Path) -> list[str]:
    """The results folder's whole files (several trajectories each)."""
    folder = results / "trajectories"
    if not folder.is_dir():
        return []
    return sorted(f for f in os.listdir(folder) if f.endswith(".npz") and ".tmp-" not in f)


def wait_for_saved(slurm, job: int, results: Path, at_least: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(saved_names(results)) < at_least:
        state = slurm.state(job)
        assert state in ("PENDING", "RUNNING", "CONFIGURING"), f"job {job} {state}:\n{slurm.log(job)}"
        assert time.monotonic() < deadline, f"fewer than {at_least} saved in {timeout:.0f} s:\n{slurm.log(job)}"
        time.sleep(0.05)


def test_requeued_ensemble_resumes_to_the_outputs_of_an_uninterrupted_run(slurm, tmp_path, catalog):
    # the reference: the same run, outside SLURM, never stopped
    for out in ("whole.parquet", "whole.csv"):
        got = trajscale(slurm, "run", "rmsd", "--ensemble", str(catalog), "--results", f"{out}-results",
                        *COMMON, "--out", out, cwd=tmp_path)
        assert got.returncode == 0, got.stderr

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    run = f"trajscale run rmsd --ensemble {catalog} --results res --resume {shlex.join(COMMON)}"
    script = ("#!/bin/bash\n"
              "echo start restart=${SLURM_RESTART_COUNT:-0}\n"
              f"{run} --out rmsd.parquet --report report.json\n"
              "echo run exited $?\n"
              f"{run} --out rmsd.csv\n"   # every trajectory saved: the CSV is made from the saved files
              "echo csv exited $?\n")
    job = slurm.sbatch(script, "--requeue", "--open-mode=append", "-o", "job.log", cwd=job_dir, env=SLOW)
    wait_for_line(slurm, job, job_dir / "job.log", "start restart=0")
    wait_for_saved(slurm, job, job_dir / "res", at_least=3)
    kept_before = saved_files(job_dir / "res")
    names_before = saved_names(job_dir / "res")
    stamps = {f: (job_dir / "res" / "trajectories" / f).stat().st_mtime_ns for f in kept_before}
    requeue_now(slurm, job)
    assert slurm.wait(job, timeout=180) == "COMPLETED", slurm.log(job)

    log = (job_dir / "job.log").read_text()
    assert "start restart=1" in log and int(slurm.job(job)["Restarts"]) == 1, log
    assert "run exited 0" in log and log.rstrip().endswith("csv exited 0"), log
    kept = saved_names(job_dir / "res")
    assert len(set(kept)) == 20 and set(names_before) <= set(kept), kept
    # the first start was stopped midway: it had saved some trajectories, and not all
    report = json.loads((job_dir / "report.json").read_text())["ensemble"]
    assert 3 <= len(names_before) <= report["n_skipped"] < 20, (names_before, report)
    assert report["n_finished"] == 20 - report["n_skipped"], report
    # the trajectories saved before the requeue were not computed again: their files were not written again
    # (a small round's file that the first start gathered into its next one before the requeue is gone: its
    # trajectories are in that next file, which is among those kept)
    survived = {f for f in kept_before if (job_dir / "res" / "trajectories" / f).exists()}
    assert {f: (job_dir / "res" / "trajectories" / f).stat().st_mtime_ns for f in survived} == \
        {f: stamps[f] for f in survived}

    # the outputs of the requeued job are the uninterrupted run's, byte for byte
    assert (job_dir / "rmsd.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()
    assert (job_dir / "rmsd.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()

    # and MDAnalysis's RMSD of each trajectory, computed on its own
    table = np.genfromtxt(job_dir / "rmsd.csv", delimiter=",", names=True, dtype=None, encoding="utf-8")
    for k in range(20):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            u = mda.Universe(D.PSF, str(catalog.parent / f"piece-{k:02d}.xtc"))
        want = rms.RMSD(u, select="name CA").run().results.rmsd[:, 2]
        got = table["rmsd"][table["trajectory"] == f"piece-{k:02d}"]
        np.testing.assert_allclose(got, want, atol=1e-4, err_msg=f"piece-{k:02d}")
