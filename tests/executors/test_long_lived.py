"""Long-lived executors: a file rewritten between runs is reread, caches are freed on close,
deterministic errors are not retried, and a dead worker's frames are named."""

from __future__ import annotations

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms

import trajscale as ts
from tests.executors import dying_analysis, fork_here
from trajscale.convert.convert import convert
from trajscale.executors.processes import ProcessExecutor
from trajscale.h5md.layout import Layout

SELECT = "name CA"


def _mda_rmsd(psf, dcd, start, stop):
    """MDAnalysis's RMSD of frames [start, stop) of the DCD against frame ``start`` (float64)."""
    u, ref = mda.Universe(psf, dcd), mda.Universe(psf, dcd)
    return rms.RMSD(u, ref, select=SELECT, ref_frame=start).run(start=start, stop=stop).results.rmsd[:, 2]


def _write(psf, dcd, out, start=None, stop=None, overwrite=False):
    convert(psf, [dcd], str(out), layout=Layout.parse("frame"), start=start, stop=stop, overwrite=overwrite)


@pytest.fixture
def rewritten(tmp_path, adk_vacuum):
    """A function rewriting one H5MD path in place: first all 98 frames, then frames 50-60."""
    path = tmp_path / "traj.h5md"
    _write(*adk_vacuum, path)
    return path, lambda: _write(*adk_vacuum, path, start=50, stop=60, overwrite=True)


def test_reused_process_pool_reads_the_rewritten_file(adk_vacuum, rewritten):
    path, rewrite = rewritten
    with ProcessExecutor(1) as ex:   # one worker: both runs go to the process that cached the old file
        first = ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], str(path), executor=ex, n_tasks=3)
        rewrite()
        second = ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], str(path), executor=ex, n_tasks=3)
    np.testing.assert_allclose(first.rmsd, _mda_rmsd(*adk_vacuum, 0, 98), atol=1e-4)
    assert len(second.rmsd) == 10
    np.testing.assert_allclose(second.rmsd, _mda_rmsd(*adk_vacuum, 50, 60), atol=1e-4)


def test_serial_run_leaves_no_open_file(adk_vacuum, adk_vacuum_h5md):
    from trajscale.executors import base

    ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], adk_vacuum_h5md)
    assert base._SOURCES == {}


@pytest.mark.fork
def test_dead_worker_names_its_frames(adk_vacuum, adk_vacuum_h5md):
    """A worker dies (os._exit) on task 1 while the other is busy with task 0: the error
    names task 1's frames, not those of the first future that happens to surface."""
    dying_analysis.register()
    with ProcessExecutor(2, start_method=fork_here()) as ex:
        ranges = ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], adk_vacuum_h5md, executor=ex,
                        n_tasks=5).report.tasks
        spans = [(t.start, t.stop) for t in ranges]
        with pytest.raises(ts.TrajscaleError) as err:
            ts.run(dying_analysis.DyingRMSD(die_at=spans[1][0], slow_at=0, select=SELECT),
                   adk_vacuum[0], adk_vacuum_h5md, executor=ex, n_tasks=5)
    msg = str(err.value)
    assert (err.value.start, err.value.stop) == spans[1], msg
    assert "exit code 7" in msg and f"frames [{spans[1][0]}, {spans[1][1]})" in msg, msg
