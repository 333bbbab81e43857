"""A serial run opens and describes its H5MD file once; a file rewritten in place is described anew."""

from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest

import trajscale as ts
from tests.executors.test_long_lived import SELECT, _mda_rmsd, rewritten  # noqa: F401 (fixture)
from trajscale.executors.serial import SerialExecutor
from trajscale.h5md import source as h5md
from trajscale.hdf5 import files


def test_serial_run_opens_the_file_once(adk_vacuum, adk_vacuum_h5md):
    """The source the job was prepared with runs the tasks: one open, not one per phase."""
    with mock.patch.object(files, "open_h5", wraps=files.open_h5) as spy:
        r = ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], adk_vacuum_h5md, executor="serial", n_tasks=3)
    np.testing.assert_allclose(r.rmsd, _mda_rmsd(*adk_vacuum, 0, 98), atol=1e-4)
    assert spy.call_count == 1


def test_unchanged_file_is_described_once(adk_vacuum_h5md):
    h5md._DESCRIBED.clear()
    with mock.patch.object(h5md, "describe", wraps=h5md.describe) as spy:
        for _ in range(3):
            h5md.H5MDSource(adk_vacuum_h5md).close()
    assert spy.call_count == 1


def test_a_report_cannot_edit_the_memoised_layout_facts(adk_vacuum, adk_vacuum_h5md):
    """The memoised layout facts are immutable all the way down: a report shares them safely."""
    first = ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], adk_vacuum_h5md)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.report.source.n_frames = -1
    assert isinstance(first.report.source.read_amplification, tuple)
    second = ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], adk_vacuum_h5md)
    assert second.report.source.n_frames == 98 and second.report.source.read_amplification


def test_reused_serial_executor_reads_the_rewritten_file(adk_vacuum, rewritten):  # noqa: F811
    """Same path, new file (convert --overwrite): neither the kept source nor the schema memo is reused."""
    path, rewrite = rewritten
    with SerialExecutor() as ex:
        first = ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], str(path), executor=ex)
        rewrite()
        second = ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], str(path), executor=ex)
    assert len(first.rmsd) == 98 and len(second.rmsd) == 10
    np.testing.assert_allclose(second.rmsd, _mda_rmsd(*adk_vacuum, 50, 60), atol=1e-4)


def test_serial_run_reads_other_formats_without_a_universe(adk_vacuum):
    """A DCD is read by its file's own reader (MDAPartSource): the only Universe is the one that prepares the
    job; the frames are read without building another one in the source."""
    from trajscale.mdareaders import universe as mda_source

    with mock.patch.object(mda_source, "load_universe", wraps=mda_source.load_universe) as spy:
        r = ts.run(ts.RMSD(select=SELECT), adk_vacuum[0], adk_vacuum[1], executor="serial", n_tasks=2)
    np.testing.assert_allclose(r.rmsd, _mda_rmsd(*adk_vacuum, 0, 98), atol=1e-4)
    assert spy.call_count == 0
