"""A followed run's task that opens its file mid-flush (the writer's metadata not yet whole) looks again."""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
import time

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms

from trajscale.analysis import RMSD
from trajscale.block import FrameRange
from trajscale.engine import prepare
from trajscale.errors import InputFileError
from trajscale.executors.base import close_cached_sources, run_task


def _half_written(good: str, path: str) -> None:
    """``path``: the first half of ``good``'s bytes, as a reader may find a file whose writer is mid-flush."""
    data = open(good, "rb").read()
    with open(path, "wb") as fh:
        fh.write(data[: len(data) // 2])


def test_a_growing_files_task_opens_it_once_it_is_whole(tmp_path, adk_vacuum, adk_vacuum_h5md):
    psf, dcd = adk_vacuum
    path = str(tmp_path / "growing.h5md")
    shutil.copy(adk_vacuum_h5md, path)
    job, facts = prepare(RMSD(select="name CA"), psf, path)
    n = facts.stop - facts.start
    close_cached_sources()
    _half_written(adk_vacuum_h5md, path)
    with pytest.raises(InputFileError, match="growing.h5md"):   # a finished file's task fails at once
        run_task(job, 0, FrameRange(0, n), "test")
    close_cached_sources()

    def finish() -> None:   # the writer's flush completes 0.6 s later
        time.sleep(0.6)
        tmp = path + ".tmp"
        shutil.copy(adk_vacuum_h5md, tmp)
        os.replace(tmp, path)

    writer = threading.Thread(target=finish)
    writer.start()
    try:
        partial, _ = run_task(dataclasses.replace(job, growing=True), 0, FrameRange(0, n), "test")
    finally:
        writer.join()
        close_cached_sources()
    rmsd = RMSD(select="name CA")
    ref = rms.RMSD(mda.Universe(psf, dcd), select="name CA").run().results.rmsd[:, 2]
    got = rmsd.result(rmsd.reduce([partial]), job.prepared).rmsd
    np.testing.assert_allclose(got, ref, atol=1e-4)
