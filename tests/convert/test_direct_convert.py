"""Parallel convert and rechunk of uncompressed outputs write frames in place (``convert.direct``).

References: MDAnalysis reading the inputs itself, ``verify`` (inputs read through MDAnalysis), h5py
reading the outputs, and serial convert/rechunk of the same inputs (every dataset and attribute equal).
Each test also shows that the segment-and-join path was not taken (or, for compressed outputs, was).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.conftest import run_cli
from tests.convert.test_parallel_convert import assert_reads_like
from tests.h5md.test_rechunk import assert_same_tree
from trajscale.convert import direct, segmented
from trajscale.convert import rechunk as rechunk_mod
from trajscale.convert.convert import convert
from trajscale.convert.rechunk import rechunk
from trajscale.convert.resume import WriteMode, load_record, partial_paths
from trajscale.convert.verify import verify
from trajscale.h5md.direct_write import DirectWrites
from trajscale.h5md.layout import Layout, plan_frames_per_chunk


@pytest.fixture
def no_segments(monkeypatch):
    """Fail if the segment path (per-worker files, then a join) is taken; record direct runs."""
    calls = []

    def refuse(*a, **k):
        raise AssertionError("the segment-and-join path was taken")

    real_write = segmented.write
    monkeypatch.setattr(segmented, "write", lambda job, partial, **k: refuse() if partial.mode
                        is WriteMode.SEGMENTS else real_write(job, partial, **k))   # serial runs keep their path
    monkeypatch.setattr(segmented, "_join_copy", refuse)
    monkeypatch.setattr(rechunk_mod, "_run_segments", refuse)
    monkeypatch.setattr(rechunk_mod, "copy_frames", refuse)
    real = direct.prepare
    monkeypatch.setattr(direct, "prepare", lambda *a, **k: calls.append(a[0].final) or real(*a, **k))
    return calls


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.parametrize("executor", ["processes", "dask"])
def test_convert_in_place_equals_serial_and_mdanalysis(tmp_path, executor, no_segments):
    """AdK in water (box, 47,681 atoms), chunks of 3 frames: 2 workers write their frames in place."""
    serial, par = tmp_path / "serial.h5md", tmp_path / "par.h5md"
    convert(D.GRO, [D.XTC], str(serial), layout=Layout.parse("3"))
    s = convert(D.GRO, [D.XTC], str(par), layout=Layout.parse("3"), executor=executor, n_workers=2)
    assert no_segments == [par] and s.n_frames == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["par.h5md", "serial.h5md"]   # no parts, no records
    assert_same_tree(serial, par)
    with h5py.File(par) as f:
        ds = f["particles/all/position/value"]
        assert ds.chunks == (3, 47681, 3) and ds.compression is None and ds.shape == (10, 47681, 3)
    assert_reads_like(D.GRO, par, D.XTC)
    rep = verify(D.GRO, [D.XTC], str(par))
    assert rep.ok and rep.n_frames == 10, rep.problems


def test_renumbered_concatenation_contiguous_and_planned_chunks(tmp_path, no_segments):
    """Two copies of the DCD (the second renumbered), 3 workers; contiguous and planned chunks."""
    for chunks in ("contiguous", "auto"):
        par = tmp_path / f"par_{chunks}.h5md"
        convert(D.PSF, [D.DCD, D.DCD], str(par), layout=Layout.parse(chunks), executor="processes", n_workers=3)
        u = mda.Universe(D.PSF, D.DCD)
        ref = np.array([ts.positions.copy() for ts in u.trajectory])
        with h5py.File(par) as f:
            ds = f["particles/all/position/value"]
            assert ds.chunks == (None if chunks == "contiguous" else (plan_frames_per_chunk(3341), 3341, 3))
            np.testing.assert_array_equal(ds[()], np.concatenate([ref, ref]))
            step = f["particles/all/position/step"][()]
            assert (np.diff(step) > 0).all() and len(step) == 196   # renumbered: increasing
        rep = verify(D.PSF, [D.DCD, D.DCD], str(par))
        assert rep.ok, rep.problems
    assert len(no_segments) == 2


def test_compressed_output_still_uses_segments(tmp_path, monkeypatch):
    seen = []
    real = segmented.write
    monkeypatch.setattr(segmented, "write",
                        lambda job, partial, **k: seen.append("segments") or real(job, partial, **k))
    monkeypatch.setattr(direct, "prepare", lambda *a, **k: pytest.fail("direct writes for a compressed output"))
    convert(D.PSF, [D.DCD], str(tmp_path / "z.h5md"), layout=Layout.parse("4", "gzip:1"), executor="processes",
            n_workers=2)
    convert(D.PSF, [D.DCD], str(tmp_path / "q.h5md"), precision=0.01, executor="processes", n_workers=2)
    assert seen == ["segments", "segments"]

    class SegmentsTaken(Exception):
        pass

    def taken(*a, **k):
        raise SegmentsTaken
    monkeypatch.setattr(rechunk_mod, "_run_segments", taken)
    with pytest.raises(SegmentsTaken):
        rechunk(tmp_path / "z.h5md", tmp_path / "r.h5md", Layout.parse("4", "gzip:1"), executor="processes",
                n_workers=2)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.parametrize("executor", [None, "processes", "dask"])
def test_rechunk_in_place_keeps_every_dataset_and_attribute(tmp_path, executor, no_segments):
    """The cobrotoxin H5MD (nm, velocities, forces, observables, written by another program)."""
    out = tmp_path / "re.h5md"
    s = rechunk(D.H5MD_xvf, out, Layout.parse("2"), executor=executor, n_workers=2)
    assert no_segments == [out]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["re.h5md"]
    assert_same_tree(D.H5MD_xvf, out)
    with h5py.File(out) as f:
        for fl in ("position", "velocity", "force"):
            ds = f[f"particles/trajectory/{fl}/value"]
            assert ds.chunks == (2, ds.shape[1], 3) and ds.compression is None
    u, v = mda.Universe(D.TPR_xvf, D.H5MD_xvf), mda.Universe(D.TPR_xvf, str(out))
    assert s.n_frames == u.trajectory.n_frames
    for a, b in zip(u.trajectory, v.trajectory, strict=False):
        np.testing.assert_array_equal(a.positions, b.positions)
        np.testing.assert_array_equal(a.velocities, b.velocities)
        np.testing.assert_array_equal(a.forces, b.forces)


def test_rechunk_interrupted_then_resumed_equals_uninterrupted(tmp_path, adk_vacuum_h5md, monkeypatch):
    """A stop in the third slab's sync (written, not yet counted) leaves the partial output with two slabs
    counted; the resume rewrites from there and finishes it."""
    whole, resumed = tmp_path / "whole.h5md", tmp_path / "resumed.h5md"
    rechunk(adk_vacuum_h5md, whole, Layout.parse("contiguous"))
    syncs = []
    real_sync = DirectWrites.sync

    def sync_then_stop(self):
        real_sync(self)
        syncs.append(1)
        if len(syncs) == 3:
            raise SystemExit(143)
    monkeypatch.setattr(DirectWrites, "sync", sync_then_stop)
    slab = 10 * 3341 * 12
    with pytest.raises(SystemExit):
        rechunk(adk_vacuum_h5md, resumed, Layout.parse("contiguous"), slab_bytes=slab)
    tmp, record = partial_paths(resumed, "rechunk")
    assert tmp.exists() and not resumed.exists()
    assert load_record(record.with_name(record.stem + ".0.json"))["done"] == 20
    monkeypatch.setattr(DirectWrites, "sync", real_sync)
    s = rechunk(adk_vacuum_h5md, resumed, Layout.parse("contiguous"), slab_bytes=slab, resume=True)
    assert s.resumed_from == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resumed.h5md", "whole.h5md"]
    assert_same_tree(whole, resumed)
    assert_same_tree(adk_vacuum_h5md, resumed)


def test_resume_after_every_frame_was_counted_keeps_them(tmp_path, adk_vacuum_h5md, monkeypatch):
    """Stopped between the last count and the rename: the resume rewrites nothing and changes no frame
    (the last one included, where a new file's addresses are probed)."""
    from trajscale.convert.resume import Partial

    out = tmp_path / "out.h5md"
    real_finish = Partial.finish
    monkeypatch.setattr(Partial, "finish", lambda self: (_ for _ in ()).throw(SystemExit(143)))
    with pytest.raises(SystemExit):
        rechunk(adk_vacuum_h5md, out, Layout.parse("7"), executor="processes", n_workers=2)
    monkeypatch.setattr(Partial, "finish", real_finish)
    monkeypatch.setattr(rechunk_mod, "rechunk_range_direct", lambda *a: pytest.fail("a counted range rewritten"))
    s = rechunk(adk_vacuum_h5md, out, Layout.parse("7"), executor="processes", n_workers=2, resume=True)
    assert s.resumed_from == 98
    assert_same_tree(adk_vacuum_h5md, out)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_sigterm_then_resume_equals_uninterrupted(tmp_path):
    """convert on processes(2), uncompressed, stopped by SIGTERM mid-run and resumed: the uninterrupted file."""
    inputs = [D.XTC] * 12   # 120 frames; protein only, so the files stay small
    opts = ["--select", "protein", "--chunks", "5", "--no-progress"]
    par = ["--executor", "processes", "-n", "2"]
    out = tmp_path / "resumed.h5md"
    tmp, record = partial_paths(out, "convert")
    # 2 frames a slab, counted after each: many counts to stop between; the interrupted run reads each slab
    # 0.1 s longer (30 a worker), so that it lasts until the signal without decoding hundreds of frames
    env = dict(os.environ, TRAJSCALE_CONVERT_SLAB_MB="0.1", TRAJSCALE_CONVERT_COUNT_MB="0.1")
    proc = subprocess.Popen([sys.executable, "-m", "trajscale.cli.main", "convert", D.GRO, *inputs, "-o", str(out),
                             *opts, *par], stderr=subprocess.PIPE, text=True,
                            env={**env, "TRAJSCALE_TEST_SLOW_READ": "0.1"})
    records = lambda: list(tmp_path.glob(".resumed.h5md.convert-progress.*.json"))   # noqa: E731
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None and not any(
            (load_record(r) or {}).get("done") for r in records()):
        time.sleep(0.01)
    assert proc.poll() is None, "convert finished before it could be interrupted"
    assert tmp.exists(), "no temporary output when signalled"
    assert not any(p.name.endswith("-parts") for p in tmp_path.iterdir())   # no segment folder
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM and "--resume" in err and "Traceback" not in err, err
    assert not out.exists() and record.exists() and tmp.exists()
    done = [load_record(r)["done"] for r in records()]
    assert len(done) == 2 and 0 < sum(done) < 120, done
    r = run_cli("convert", D.GRO, *inputs, "-o", str(out), *opts, *par, "--resume", env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resumed.h5md"]
    whole = tmp_path / "whole.h5md"
    convert(D.GRO, inputs, str(whole), select="protein", layout=Layout.parse("5"), executor="processes",
            n_workers=2)
    assert_same_tree(whole, out)
    serial = tmp_path / "serial.h5md"
    convert(D.GRO, inputs, str(serial), select="protein", layout=Layout.parse("5"))
    assert_same_tree(serial, out)


def test_rechunk_in_place_counts_every_count_bytes_not_every_slab(tmp_path, adk_vacuum_h5md, monkeypatch):
    """Each count waits for an fdatasync: counted every 64 MiB slab, a serial rechunk ran at 0.91x of
    cp + fsync; counted every direct.COUNT_BYTES it runs at cp + fsync's rate (docs/benchmarks.md)."""
    syncs = []
    real_sync = DirectWrites.sync
    monkeypatch.setattr(DirectWrites, "sync", lambda self: syncs.append(1) or real_sync(self))
    monkeypatch.setattr(rechunk_mod, "SLAB_BYTES", 10 * 3341 * 12)      # slabs of 10 frames
    monkeypatch.setattr(direct, "COUNT_BYTES", 200 * 3341 * 12)         # more than the file's 98
    out = tmp_path / "c.h5md"
    rechunk(adk_vacuum_h5md, out, Layout.parse("contiguous"))
    assert len(syncs) == 1
    assert_same_tree(adk_vacuum_h5md, out)
