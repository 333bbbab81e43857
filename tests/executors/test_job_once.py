"""The processes executor sends a large job to each worker once per run, not with every task:
each worker unpickles it once, a reused pool's next run with another job loads that one, and the
numbers are serial's, bit for bit."""

from __future__ import annotations

import os

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms

import trajscale as ts
from tests.executors import counted_analysis, dying_analysis, fork_here
from tests.executors.counted_analysis import CountedRMSD, unpickles
from trajscale.executors.jobfile import INLINE_BYTES, ship, ships
from trajscale.executors.processes import ProcessExecutor

N_TASKS = 20
PAD = 256 * 1024   # the pickled job is well over the size that travels with each task


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """The folder where each unpickling of a CountedRMSD's state leaves a file (set before the pool forks)."""
    counted_analysis.register()
    folder = tmp_path / "unpickles"
    folder.mkdir()
    monkeypatch.setenv(counted_analysis.ENV, str(folder))
    return folder


def _clear(folder) -> None:
    for name in os.listdir(folder):
        os.unlink(folder / name)


def _job_files(ex: ProcessExecutor) -> list[str]:
    """The run's job files, where the pool writes them (its shared-memory folder, else its marks folder)."""
    return [n for folder in (ex._marks, ex._home) if folder for n in os.listdir(folder) if n.startswith("job-")]


@pytest.mark.fork
def test_large_job_is_unpickled_once_per_worker_per_run(counted, adk_vacuum, adk_vacuum_h5md):
    psf, dcd = adk_vacuum
    serial = {f: ts.run(CountedRMSD(pad=PAD, select="all", ref_frame=f), psf, adk_vacuum_h5md) for f in (0, 10)}
    assert unpickles(counted) == {}   # serial sends nothing
    u, ref = mda.Universe(psf, dcd), mda.Universe(psf, dcd)
    expected = rms.RMSD(u, ref, select="all", ref_frame=0).run().results.rmsd[:, 2]
    np.testing.assert_allclose(serial[0].rmsd, expected, atol=1e-4)   # independent of trajscale
    with ProcessExecutor(2, start_method=fork_here()) as ex:
        # Three runs on the same workers: another job in the second, the first one again in the third.
        for frame in (0, 10, 0):
            _clear(counted)
            got = ts.run(CountedRMSD(pad=PAD, select="all", ref_frame=frame), psf, adk_vacuum_h5md,
                         executor=ex, n_tasks=N_TASKS)
            assert len(got.report.tasks) == N_TASKS
            assert np.array_equal(got.frames, serial[frame].frames)
            assert np.array_equal(got.rmsd, serial[frame].rmsd)   # bit for bit
            counts = unpickles(counted)
            assert os.getpid() not in counts, counts
            assert 1 <= len(counts) <= 2 and set(counts.values()) == {1}, counts   # N_TASKS before
            assert _job_files(ex) == []   # the run's job file is gone with the run


@pytest.mark.fork
def test_mid_size_job_handed_out_many_times_is_unpickled_once_per_worker(counted, adk_vacuum, adk_vacuum_h5md):
    """A job under INLINE_BYTES whose copies with every task would add up (an ensemble's round lists its
    members: 50 kB for 128, with each of 8 tasks) is written once too."""
    psf = adk_vacuum[0]
    pad = 40 * 1024   # (with the CA reference about 55 kB: under INLINE_BYTES)
    assert ships(pad, N_TASKS) and not ships(pad, 1)
    serial = ts.run(CountedRMSD(pad=pad, select="name CA"), psf, adk_vacuum_h5md)
    with ProcessExecutor(2, start_method=fork_here()) as ex:
        got = ts.run(CountedRMSD(pad=pad, select="name CA"), psf, adk_vacuum_h5md, executor=ex, n_tasks=N_TASKS)
        assert _job_files(ex) == []
    assert len(got.report.tasks) == N_TASKS
    assert np.array_equal(got.rmsd, serial.rmsd)   # bit for bit
    counts = unpickles(counted)
    assert 1 <= len(counts) <= 2 and set(counts.values()) == {1}, counts   # not N_TASKS


@pytest.mark.fork
def test_small_job_travels_with_each_task(counted, adk_vacuum, adk_vacuum_h5md):
    psf = adk_vacuum[0]
    serial = ts.run(CountedRMSD(select="name CA"), psf, adk_vacuum_h5md)
    with ProcessExecutor(2, start_method=fork_here()) as ex:
        got = ts.run(CountedRMSD(select="name CA"), psf, adk_vacuum_h5md, executor=ex, n_tasks=N_TASKS)
    assert np.array_equal(got.rmsd, serial.rmsd)
    assert sum(unpickles(counted).values()) == N_TASKS   # a job of a few kilobytes is not written to a file


@pytest.mark.fork
def test_dead_worker_of_a_shipped_job_names_its_frames(adk_vacuum, adk_vacuum_h5md):
    """As in test_long_lived, with an all-atom job (sent once per run): the error names the dead task's frames,
    and the pool's folder, the job file with it, is removed."""
    dying_analysis.register()
    psf = adk_vacuum[0]
    with ProcessExecutor(2, start_method=fork_here()) as ex:
        ranges = ts.run(ts.RMSD(select="all"), psf, adk_vacuum_h5md, executor=ex, n_tasks=5).report.tasks
        spans = [(t.start, t.stop) for t in ranges]
        marks = ex._marks
        with pytest.raises(ts.TrajscaleError) as err:
            ts.run(dying_analysis.DyingRMSD(die_at=spans[1][0], slow_at=0, select="all"),
                   psf, adk_vacuum_h5md, executor=ex, n_tasks=5)
        assert not os.path.exists(marks)
    msg = str(err.value)
    assert (err.value.start, err.value.stop) == spans[1], msg
    assert "exit code 7" in msg and f"frames [{spans[1][0]}, {spans[1][1]})" in msg, msg


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_shipped_job_on_a_started_worker(method, adk_vacuum, adk_vacuum_h5md, monkeypatch):
    """Workers that did not fork from this process load the run's job from its file too; a second run
    with another job on the same workers gets that job's numbers."""
    from trajscale.executors import processes

    shipped = []
    monkeypatch.setattr(processes, "ship", lambda blob, folder: shipped.append(len(blob)) or ship(blob, folder))
    psf = adk_vacuum[0]
    with ProcessExecutor(2, start_method=method) as ex:
        for frame in (0, 10):
            serial = ts.run(ts.RMSD(select="all", ref_frame=frame), psf, adk_vacuum_h5md)
            got = ts.run(ts.RMSD(select="all", ref_frame=frame), psf, adk_vacuum_h5md, executor=ex, n_tasks=8)
            assert np.array_equal(got.rmsd, serial.rmsd)
            assert _job_files(ex) == []
    assert len(shipped) == 2 and min(shipped) > INLINE_BYTES   # an all-atom reference is sent once a run
