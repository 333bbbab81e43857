"""rechunk keeps every dataset, attribute and link; resumes after SIGTERM; lossy files keep their bound."""

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
from trajscale.convert.convert import convert
from trajscale.convert.rechunk import rechunk
from trajscale.convert.resume import InputIdentity, ResumeKey, WriteMode, partial_paths
from trajscale.errors import InputFileError, TrajscaleError
from trajscale.h5md.layout import Layout


def tree(path) -> dict:
    """Every object: name -> (kind, data or None, attributes) of an HDF5 file."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            attrs = {k: np.asarray(v).tolist() if not isinstance(v, bytes) else v for k, v in obj.attrs.items()}
            attrs.pop("trajscale_precision", None), attrs.pop("trajscale_quantum", None)
            data = obj[()] if isinstance(obj, h5py.Dataset) else None
            out[name] = (type(obj).__name__, data, attrs)
        f.visititems(visit)
        out["/"] = ("File", None, {k: np.asarray(v).tolist() for k, v in f.attrs.items()})
    return out


def assert_same_tree(a, b) -> None:
    ta, tb = tree(a), tree(b)
    assert ta.keys() == tb.keys()
    for k in ta:
        assert ta[k][0] == tb[k][0] and ta[k][2] == tb[k][2], k
        if ta[k][1] is not None:
            np.testing.assert_array_equal(ta[k][1], tb[k][1], err_msg=k)


def test_rechunk_keeps_everything(tmp_path):
    """The cobrotoxin H5MD (nm, velocities, forces, observables, written by another program)."""
    out = tmp_path / "re.h5md"
    s = rechunk(D.H5MD_xvf, out, Layout.parse("3", "gzip:1"))
    assert s.n_frames == mda.Universe(D.TPR_xvf, D.H5MD_xvf).trajectory.n_frames
    assert_same_tree(D.H5MD_xvf, out)
    with h5py.File(out) as f, h5py.File(D.H5MD_xvf) as g:
        pos = f["particles/trajectory/position/value"]
        assert pos.chunks[0] == min(3, g["particles/trajectory/position/value"].shape[0])
        assert pos.compression == "gzip"
    u, v = mda.Universe(D.TPR_xvf, D.H5MD_xvf), mda.Universe(D.TPR_xvf, str(out))
    for a, b in zip(u.trajectory, v.trajectory, strict=False):
        np.testing.assert_array_equal(a.positions, b.positions)
        np.testing.assert_array_equal(a.velocities, b.velocities)
        np.testing.assert_array_equal(a.forces, b.forces)


def test_rechunk_keeps_hard_links(tmp_path, water_file):
    out = tmp_path / "re.h5md"
    rechunk(water_file, out, Layout.parse("7"))
    with h5py.File(out) as f:
        pg = f["particles/all"]
        assert pg["box/edges/step"].id == pg["position/step"].id   # still one object
    assert_same_tree(water_file, out)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_lossy_precision_within_bound_and_smaller(tmp_path, adk_vacuum_h5md):
    plain, lossy = tmp_path / "plain.h5md", tmp_path / "lossy.h5md"
    rechunk(adk_vacuum_h5md, plain, Layout.parse("auto", "gzip:4"))
    rechunk(adk_vacuum_h5md, lossy, Layout.parse("auto", "gzip:4"), precision=0.01)
    ref = mda.Universe(D.PSF, adk_vacuum_h5md).trajectory.timeseries(order="fac")
    got = mda.Universe(D.PSF, str(lossy)).trajectory.timeseries(order="fac")
    err = np.abs(got.astype(np.float64) - ref).max()
    assert 0 < err <= 0.005 + 1e-6          # quantum <= 0.01 Å, error <= half of it
    assert os.path.getsize(lossy) < 0.8 * os.path.getsize(plain)
    with h5py.File(lossy) as f:
        assert f["particles/all/position/value"].attrs["trajscale_precision"] == 0.01


def test_precision_needs_the_files_length_unit(tmp_path, adk_vacuum_h5md):
    """--precision is in Å: a position dataset without a unit attribute is refused, never taken as Å."""
    nounit = tmp_path / "nounit.h5md"
    nounit.write_bytes(open(adk_vacuum_h5md, "rb").read())
    with h5py.File(nounit, "r+") as f:
        del f["particles/all/position/value"].attrs["unit"]
    with pytest.raises(InputFileError, match="position/value has no unit attribute"):
        rechunk(str(nounit), tmp_path / "out.h5md", Layout.parse("auto"), precision=0.01)
    assert not (tmp_path / "out.h5md").exists()


@pytest.fixture(scope="module")
def water_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("rc") / "water.h5md"
    convert(D.GRO, [D.XTC] * 8, str(out), layout=Layout.parse("frame"))   # 80 frames x 47,681 atoms
    return str(out)


@pytest.mark.slow
@pytest.mark.cli
def test_sigterm_then_resume_equals_uninterrupted(tmp_path, water_file):
    whole, resumed = tmp_path / "whole.h5md", tmp_path / "resumed.h5md"
    rechunk(water_file, whole, Layout.parse("4", "gzip:6"), slab_bytes=2 * 1024**2)
    tmp, record = partial_paths(resumed, "rechunk")
    code = (f"import sys; from trajscale.cli.main import main; "
            f"sys.exit(main(['rechunk', {water_file!r}, '-o', {str(resumed)!r}, '--chunks', '4', "
            f"'--compression', 'gzip:6']))")
    env = dict(os.environ, TRAJSCALE_RECHUNK_SLAB_MB="2")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 120
    while time.time() < deadline and not (record.exists() and '"done": {"/particles/all/position/value": 0'
                                           not in record.read_text()):
        time.sleep(0.02)
    assert proc.poll() is None, "rechunk finished before it could be interrupted"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "--resume" in err and "Traceback" not in err, err
    assert tmp.exists() and record.exists() and not resumed.exists()
    done = json.loads(record.read_text())["done"]["/particles/all/position/value"]
    assert 0 < done < 80
    r = run_cli("rechunk", water_file, "-o", str(resumed), "--chunks", "4", "--compression", "gzip:6", "--resume")
    assert r.returncode == 0, r.stderr
    assert not tmp.exists() and not record.exists()
    assert_same_tree(whole, resumed)
    assert done > 0


def test_resume_refuses_other_input_and_starts_without_partial(tmp_path, adk_vacuum_h5md, water_file, caplog):
    caplog.set_level(logging.INFO, logger="trajscale")
    rechunk(adk_vacuum_h5md, tmp_path / "x.h5md", Layout(), resume=True)   # a requeued job's first start
    assert "nothing to resume" in caplog.text
    assert_same_tree(adk_vacuum_h5md, tmp_path / "x.h5md")
    tmp, record = partial_paths(tmp_path / "y.h5md", "rechunk")
    tmp.write_bytes(b"")
    key = ResumeKey("rechunk", WriteMode.DIRECT, (InputIdentity("/elsewhere", 1, 1),), ())
    record.write_text(json.dumps({"key": key.to_dict(), "done": {}}))
    with pytest.raises(TrajscaleError, match="another input .*/elsewhere"):
        rechunk(adk_vacuum_h5md, tmp_path / "y.h5md", Layout(), resume=True)


@pytest.mark.cli
def test_plugin_compressed_file_reads_on_workers(tmp_path, adk_vacuum, adk_vacuum_h5md):
    """A zstd (hdf5plugin) file: worker processes load the filter themselves."""
    pytest.importorskip("hdf5plugin")
    import trajscale as ts

    out = tmp_path / "z.h5md"
    rechunk(adk_vacuum_h5md, out, Layout.parse("auto", "zstd"))
    code = ("import trajscale as ts, sys; r = ts.run(ts.RMSD(select='name CA'), sys.argv[1], sys.argv[2], "
            "executor='processes', n_workers=2); print(repr(r.rmsd.tolist()))")
    proc = subprocess.run([sys.executable, "-c", code, adk_vacuum[0], str(out)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = np.array(eval(proc.stdout.strip().splitlines()[-1]))
    ref = ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], adk_vacuum_h5md).rmsd
    np.testing.assert_array_equal(got, ref)
