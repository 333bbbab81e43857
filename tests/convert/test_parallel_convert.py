"""convert/rechunk on processes and a Dask LocalCluster: segments joined by copy or kept as virtual datasets;
resumable after SIGTERM.

References: MDAnalysis reading the inputs itself (positions, box, time), ``trajscale verify`` (which
compares against the inputs read through MDAnalysis), and the serial convert/rechunk of the same input
(every dataset and attribute equal).
"""

from __future__ import annotations

import json
import logging
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
from tests.h5md.test_rechunk import assert_same_tree
from trajscale.convert import stream
from trajscale.convert.convert import convert
from trajscale.convert.frames import write_range
from trajscale.convert.rechunk import rechunk
from trajscale.convert.resume import load_record, partial_paths, save_record
from trajscale.convert.verify import verify
from trajscale.errors import ConfigError, OutputError
from trajscale.h5md.layout import Layout


def mda_frames(top, trajs):
    """Positions, box and time of every frame as MDAnalysis reads them (float64 copies)."""
    u = mda.Universe(top, *trajs) if isinstance(trajs, list) else mda.Universe(top, trajs)
    pos, box, t = [], [], []
    for ts in u.trajectory:
        pos.append(ts.positions.astype(np.float64))
        box.append(np.zeros(6) if ts.dimensions is None else ts.dimensions.astype(np.float64))
        t.append(ts.time)
    return np.array(pos), np.array(box), np.array(t)


def assert_reads_like(top, out, inputs):
    got, ref = mda_frames(top, str(out)), mda_frames(top, inputs)
    for name, a, b in zip(("positions", "box", "time"), got, ref, strict=False):
        np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.parametrize("executor", ["processes", "dask"])
def test_segments_joined_equal_serial_and_mdanalysis(tmp_path, executor):
    """AdK in water (box, 47,681 atoms), gzip chunks of 3 frames: 2 workers, joined by copying stored chunks."""
    layout = Layout.parse("3", "gzip:1")
    serial, par = tmp_path / "serial.h5md", tmp_path / "par.h5md"
    convert(D.GRO, [D.XTC], str(serial), layout=layout)
    s = convert(D.GRO, [D.XTC], str(par), layout=layout, executor=executor, n_workers=2)
    assert s.n_frames == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["par.h5md", "serial.h5md"]   # no segments left
    assert_same_tree(serial, par)
    with h5py.File(par) as f:
        ds = f["particles/all/position/value"]
        assert ds.chunks == (3, 47681, 3) and ds.compression == "gzip"
    assert_reads_like(D.GRO, par, D.XTC)
    rep = verify(D.GRO, [D.XTC], str(par))
    assert rep.ok and rep.n_frames == 10, rep.problems


def test_renumbered_concatenation_on_three_workers(tmp_path):
    """Two copies of the DCD (the second renumbered), uncompressed, 3 workers: the serial file exactly."""
    serial, par = tmp_path / "serial.h5md", tmp_path / "par.h5md"
    convert(D.PSF, [D.DCD, D.DCD], str(serial))
    convert(D.PSF, [D.DCD, D.DCD], str(par), executor="processes", n_workers=3)
    assert_same_tree(serial, par)
    rep = verify(D.PSF, [D.DCD, D.DCD], str(par))
    assert rep.ok, rep.problems


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_virtual_output_reads_identically_and_moves_with_its_parts(tmp_path):
    out = tmp_path / "v.h5md"
    r = run_cli("convert", D.GRO, D.XTC, D.XTC, "-o", str(out), "--chunks", "4", "--executor", "processes",
                "-n", "2", "--virtual", "--no-progress")
    assert r.returncode == 0, r.stderr
    parts = tmp_path / "v.parts"
    assert sorted(p.name for p in parts.iterdir()) == ["part_0000.h5md", "part_0001.h5md"]
    with h5py.File(out) as f:
        assert f["particles/all/position/value"].is_virtual
        assert f["particles/all/position/step"].is_virtual
    serial = tmp_path / "serial.h5md"
    convert(D.GRO, [D.XTC, D.XTC], str(serial), layout=Layout.parse("4"))
    # the virtual file's datasets and attributes are the serial file's (the datasets read through the VDS)
    assert_same_tree(serial, out)
    assert verify(D.GRO, [D.XTC, D.XTC], str(out)).ok
    # relocatable: the output and its parts folder moved together still read the same
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    out.rename(moved / out.name)
    parts.rename(moved / parts.name)
    pos, box, _ = mda_frames(D.GRO, str(moved / out.name))
    ref = mda_frames(D.GRO, [D.XTC, D.XTC])
    np.testing.assert_array_equal(pos, ref[0])
    np.testing.assert_array_equal(box, ref[1])


def test_virtual_needs_a_parallel_executor_and_a_free_parts_name(tmp_path):
    with pytest.raises(ConfigError, match="--virtual"):
        convert(D.PSF, [D.DCD], str(tmp_path / "a.h5md"), virtual=True)
    (tmp_path / "b.parts").mkdir()
    with pytest.raises(OutputError, match="b.parts: already exists"):
        convert(D.PSF, [D.DCD], str(tmp_path / "b.h5md"), virtual=True, executor="processes", n_workers=2)
    assert not (tmp_path / "b.h5md").exists()


@pytest.mark.cli
def test_bad_input_on_processes_is_one_clear_error_and_leaves_nothing(tmp_path):
    """A part with another system's atom count (AdK in vacuum's DCD after AdK in water's XTC)."""
    out = tmp_path / "out.h5md"
    r = run_cli("convert", D.GRO, D.XTC, D.DCD, "-o", str(out), "--executor", "processes", "-n", "2")
    assert r.returncode != 0 and os.path.basename(D.DCD) in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_worker_memory_is_bounded_by_the_slab(tmp_path, monkeypatch):
    """A worker reads and writes at most SLAB_BYTES of frames at a time, whatever its range."""
    from trajscale.convert import segmented
    from trajscale.sources import MDAPartSource

    jobs = []
    real_write = segmented.write
    monkeypatch.setattr(segmented, "write", lambda job, *a, **k: jobs.append(job) or real_write(job, *a, **k))
    serial = tmp_path / "ref.h5md"
    convert(D.PSF, [D.DCD], str(serial))   # the job a convert builds, and its output as the reference
    sizes = []

    real_read = MDAPartSource.read   # the DCD input's Source (the format registry's), its blocks counted

    def spy(self, *a, **k):
        b = real_read(self, *a, **k)
        sizes.append(b.positions.nbytes)
        return b

    monkeypatch.setattr(stream, "SLAB_BYTES", 7 * 3341 * 12)
    monkeypatch.setattr(MDAPartSource, "read", spy)
    rec = tmp_path / "r.json"
    save_record(rec, {"done": 0})
    write_range(jobs[0], 10, 90, str(tmp_path / "seg.h5md"), str(rec))   # a worker's range
    assert max(sizes) <= 7 * 3341 * 12 and sum(sizes) == 80 * 3341 * 12, sizes
    assert load_record(rec)["done"] == 80
    with h5py.File(tmp_path / "seg.h5md") as f, h5py.File(serial) as g:
        np.testing.assert_array_equal(f["particles/all/position/value"][()], g["particles/all/position/value"][10:90])


def _wait_for_progress(proc, records, deadline_s=180):
    """Wait until some record counts frames (the conversion is mid-run)."""
    deadline = time.time() + deadline_s
    while time.time() < deadline and proc.poll() is None:
        for r in records():
            done = (load_record(r) or {}).get("done")
            if isinstance(done, int) and done > 0:
                return
        time.sleep(0.02)


#: The resumed converts' inputs: 120 frames; protein only, so the files stay small.
RESUMED_INPUTS = [D.XTC] * 12


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The uninterrupted serial convert the resumed ones must equal (made once for the three executors)."""
    whole = tmp_path_factory.mktemp("uninterrupted") / "whole.h5md"
    convert(D.GRO, RESUMED_INPUTS, str(whole), select="protein", layout=Layout.parse("5", "gzip:1"))
    return whole


@pytest.mark.cli
@pytest.mark.slow
@pytest.mark.parametrize("executor", ["serial", "processes", "dask"])
def test_sigterm_then_resume_equals_uninterrupted(tmp_path, executor, uninterrupted):
    """A convert stopped by SIGTERM mid-run and resumed gives the uninterrupted file (every dataset and attr)."""
    inputs = RESUMED_INPUTS
    opts = ["--select", "protein", "--chunks", "5", "--compression", "gzip:1", "--no-progress"]
    par = ["--executor", executor, "-n", "2"] if executor != "serial" else []
    out = tmp_path / "resumed.h5md"
    tmp, record = partial_paths(out, "convert")
    parts = tmp_path / ".resumed.h5md.convert-parts"
    # slabs of 5 frames, each counted; the interrupted run reads each 0.2 s longer, so that it lasts (12 slabs
    # a worker) until the signal on a loaded machine without decoding hundreds of frames to last
    env = dict(os.environ, TRAJSCALE_CONVERT_SLAB_MB="0.2", TRAJSCALE_CONVERT_COUNT_MB="0.2")
    proc = subprocess.Popen([sys.executable, "-m", "trajscale.cli.main", "convert", D.GRO, *inputs, "-o", str(out),
                             *opts, *par], stderr=subprocess.PIPE, text=True,
                            env={**env, "TRAJSCALE_TEST_SLOW_READ": "0.2"})
    _wait_for_progress(proc, lambda: [record, *parts.glob("*.progress.json")])
    assert proc.poll() is None, "convert finished before it could be interrupted"
    assert tmp.exists() or list(parts.glob("part_*.h5md")), "no temporary output when signalled"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM and "--resume" in err and "Traceback" not in err, err
    assert not out.exists() and record.exists()
    if executor == "serial":
        done = [json.loads(record.read_text())["done"]]
    else:
        done = [load_record(r)["done"] for r in parts.glob("*.progress.json")]
    assert 0 < sum(done) < 120, done
    # a resume with other options is refused, and the partial output is kept (in a process of its own: a
    # process holds the partial output's lock for its life, even after a refusal)
    r = run_cli("convert", D.GRO, *inputs, "-o", str(out), *opts[:-1], "--chunks", "6", "--resume", *par, env=env)
    assert r.returncode != 0 and "start again without --resume" in r.stderr, r.stderr
    assert record.exists()
    r = run_cli("convert", D.GRO, *inputs, "-o", str(out), *opts, *par, "--resume", env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resumed.h5md"]
    assert_same_tree(uninterrupted, out)


def test_resume_without_a_partial_starts_the_work_and_says_so(tmp_path, caplog):
    """A requeued job gives --resume on its first start too (issue 24): the work starts, with one line."""
    caplog.set_level(logging.INFO, logger="trajscale")
    s = convert(D.PSF, [D.DCD], str(tmp_path / "x.h5md"), resume=True)
    assert "nothing to resume" in caplog.text
    assert s.n_frames == mda.Universe(D.PSF, D.DCD).trajectory.n_frames
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.h5md"]


@pytest.mark.parametrize("virtual", [False, True])
def test_parallel_rechunk_equals_serial(tmp_path, adk_vacuum_h5md, virtual):
    layout = Layout.parse("4", "gzip:2")
    serial, par = tmp_path / "serial.h5md", tmp_path / "par.h5md"
    rechunk(adk_vacuum_h5md, serial, layout, precision=0.01)
    s = rechunk(adk_vacuum_h5md, par, layout, precision=0.01, executor="processes", n_workers=2, virtual=virtual)
    assert s.n_frames == 98
    assert_same_tree(serial, par)
    with h5py.File(par) as f, h5py.File(serial) as g:
        for k, v in g["particles/all/position/value"].attrs.items():   # the precision stated, kept
            np.testing.assert_array_equal(f["particles/all/position/value"].attrs[k], v)
    assert_reads_like(D.PSF, par, str(serial))
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == (["par.h5md", "par.parts", "serial.h5md"] if virtual else ["par.h5md", "serial.h5md"])


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_rechunk_on_dask(tmp_path, adk_vacuum_h5md):
    serial, par = tmp_path / "serial.h5md", tmp_path / "par.h5md"
    rechunk(adk_vacuum_h5md, serial, Layout.parse("5", "gzip:1"))
    rechunk(adk_vacuum_h5md, par, Layout.parse("5", "gzip:1"), executor="dask", n_workers=2)
    assert_same_tree(serial, par)
    assert_reads_like(D.PSF, par, adk_vacuum_h5md)


@pytest.mark.parametrize("encoding", ["floats", "deltas"])
def test_lossy_segments_equal_serial(tmp_path, adk_vacuum_h5md, encoding):
    """--precision/--encoding on workers: the stored values and attributes are the serial run's."""
    layout = Layout.parse("4", "gzip:1")
    serial, par = tmp_path / "serial.h5md", tmp_path / "par.h5md"
    convert(D.PSF, [D.DCD], str(serial), layout=layout, precision=0.01, encoding=encoding)
    convert(D.PSF, [D.DCD], str(par), layout=layout, precision=0.01, encoding=encoding, executor="processes",
            n_workers=2)
    assert_same_tree(serial, par)
    rs, rp = tmp_path / "rs.h5md", tmp_path / "rp.h5md"
    rechunk(adk_vacuum_h5md, rs, layout, precision=0.01, encoding=encoding)
    rechunk(adk_vacuum_h5md, rp, layout, precision=0.01, encoding=encoding, executor="processes", n_workers=2)
    assert_same_tree(rs, rp)
    rep = verify(D.PSF, [D.DCD], str(par))   # within the stated bound
    assert rep.ok, rep.problems
