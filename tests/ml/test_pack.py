"""trajscale pack: NPZ / .npy -> one HDF5 store, checked against np.load of the originals."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from tests.conftest import run_cli_here
from trajscale.errors import InputFileError
from trajscale.ml.pack import pack, partial_name

from .conftest import write_npz_set


def test_store_equals_originals_and_index_points_back(tmp_path, npz_set):
    paths, originals = npz_set
    out = tmp_path / "s.h5"
    s = pack(paths, out)
    assert s.n_samples == sum(len(o["x"]) for o in originals)
    with h5py.File(out) as f:
        assert f["x"].chunks is None   # contiguous by default
        np.testing.assert_array_equal(f["x"][()], np.concatenate([np.load(p)["x"] for p in paths]))
        np.testing.assert_array_equal(f["y"][()], np.concatenate([np.load(p)["y"] for p in paths]))
        assert f["y"].dtype == np.int32
        files = [n.decode() for n in f["index/files"][()]]
        fi, si = f["index/file"][()], f["index/sample"][()]
        for row in (0, 39, 40, 117, len(fi) - 1):
            np.testing.assert_array_equal(f["x"][row], np.load(files[fi[row]])["x"][si[row]])
    assert not partial_name(out).exists()


def test_npy_files_and_key_selection(tmp_path):
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((n, 4, 3)).astype(np.float32) for n in (5, 7, 1)]
    paths = []
    for i, a in enumerate(arrays):
        np.save(tmp_path / f"a{i}.npy", a)
        paths.append(str(tmp_path / f"a{i}.npy"))
    pack(paths, tmp_path / "npy.h5", chunks="auto", compression="gzip:1")
    with h5py.File(tmp_path / "npy.h5") as f:
        assert f["arr_0"].compression == "gzip"
        np.testing.assert_array_equal(f["arr_0"][()], np.concatenate(arrays))
    npz, _ = write_npz_set(tmp_path, n_files=2)
    pack(npz, tmp_path / "only_y.h5", keys=["y"])
    with h5py.File(tmp_path / "only_y.h5") as f:
        assert "x" not in f and f["y"].shape == (80, 2)


def test_processes_executor_equals_serial(tmp_path, npz_set):
    paths, _ = npz_set
    pack(paths, tmp_path / "a.h5")
    pack(paths, tmp_path / "b.h5", executor="processes", n_workers=2)
    with h5py.File(tmp_path / "a.h5") as a, h5py.File(tmp_path / "b.h5") as b:
        for k in ("x", "y", "index/file", "index/sample"):
            np.testing.assert_array_equal(a[k][()], b[k][()])


@pytest.mark.parametrize("bad", ["shape", "dtype", "missing"])
def test_mismatch_is_one_error_naming_file_and_key(tmp_path, npz_set, bad):
    paths, originals = npz_set
    o = originals[3]
    if bad == "shape":
        np.savez(paths[3], x=o["x"][:, :-1], y=o["y"])
    elif bad == "dtype":
        np.savez(paths[3], x=o["x"].astype(np.float32), y=o["y"])
    else:
        np.savez(paths[3], y=o["y"])
    out = tmp_path / "s.h5"
    r = run_cli_here("pack", *paths, "-o", str(out), "--no-progress")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert paths[3] in lines[0] and "'x'" in lines[0]
    assert not out.exists() and not partial_name(out).exists()


def test_counts_must_agree_across_keys(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.zeros((4, 2)), y=np.zeros((3, 2)))
    with pytest.raises(InputFileError, match=r"a\.npz.*'y' has 3 samples"):
        pack([str(tmp_path / "a.npz")], tmp_path / "s.h5")


def _corrupt_member_data(path):
    """Flip a byte inside the stored (uncompressed) x.npy data: headers read fine, the CRC fails."""
    raw = bytearray(open(path, "rb").read())
    raw[600] ^= 0xFF
    open(path, "wb").write(bytes(raw))


def test_interrupted_pack_resumes_to_the_same_store(tmp_path, npz_set):
    paths, originals = npz_set
    pack(paths, tmp_path / "whole.h5")
    good = open(paths[4], "rb").read()
    _corrupt_member_data(paths[4])
    out = tmp_path / "s.h5"
    r = run_cli_here("pack", *paths, "-o", str(out), "--no-progress")
    assert r.returncode == 2 and paths[4] in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not out.exists() and partial_name(out).exists()
    with h5py.File(partial_name(out)) as f:
        assert f["index/done"][()].tolist() == [True] * 4 + [False] * 2
    # Without --resume the unfinished pack is not silently replaced.
    r = run_cli_here("pack", *paths, "-o", str(out), "--no-progress")
    assert r.returncode == 2 and "--resume" in r.stderr
    open(paths[4], "wb").write(good)
    with pytest.raises(InputFileError, match="other inputs or options"):   # same inputs, another layout
        pack(paths, out, resume=True, chunks="auto")
    r = run_cli_here("pack", *paths, "-o", str(out), "--resume", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "4 files from the interrupted pack" in r.stderr
    with h5py.File(out) as a, h5py.File(tmp_path / "whole.h5") as b:
        for k in ("x", "y", "index/file", "index/sample", "index/done"):
            np.testing.assert_array_equal(a[k][()], b[k][()])
    assert not partial_name(out).exists()


def test_resume_refuses_a_packed_file_that_changed(tmp_path, npz_set):
    paths, originals = npz_set
    _corrupt_member_data(paths[4])
    out = tmp_path / "s.h5"
    with pytest.raises(InputFileError):
        pack(paths, out)
    np.savez(paths[0], x=originals[0]["x"] + 1, y=originals[0]["y"])   # same shapes, new contents
    with pytest.raises(InputFileError, match="changed since the unfinished pack"):
        pack(paths, out, resume=True)


def test_cli_help_and_bad_input():
    r = run_cli_here("pack", "--help")
    assert r.returncode == 0 and "--resume" in r.stdout
    r = run_cli_here("pack", "/nonexistent.npz", "-o", "/tmp/x.h5")
    assert r.returncode == 2 and "/nonexistent.npz: no such file" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.cli
def test_sigterm_mid_pack_then_resume_equals_uninterrupted(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    paths, _ = write_npz_set(tmp_path, n_files=60, per_file=400, width=300)   # ~1 MB each
    pack(paths, tmp_path / "whole.h5")
    out = tmp_path / "s.h5"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "trajscale.cli.main", "-v", "pack", *paths, "-o", str(out),
                             "--no-progress"], stderr=subprocess.PIPE, text=True, env=env)
    for line in proc.stderr:   # the first file is in: stop it
        if "packed " in line:
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.stderr.read()
    assert proc.wait(60) == 128 + signal.SIGTERM, rest
    assert "--resume" in rest and not out.exists()
    assert "no partial output was kept" not in rest, rest   # it was kept, for --resume
    with h5py.File(partial_name(out)) as f:
        n_done = int(f["index/done"][()].sum())
    assert 1 <= n_done < 60
    r = run_cli_here("pack", *paths, "-o", str(out), "--resume", "--no-progress")
    assert r.returncode == 0, r.stderr
    with h5py.File(out) as a, h5py.File(tmp_path / "whole.h5") as b:
        for k in ("x", "y", "index/file", "index/sample"):
            np.testing.assert_array_equal(a[k][()], b[k][()])


@pytest.mark.cli
def test_pack_and_numpy_batches_work_without_torch(tmp_path, npz_set):
    import subprocess
    import sys

    paths, _ = npz_set
    code = f"""
import sys
sys.modules["torch"] = None   # any 'import torch' now fails
import numpy as np
from trajscale.ml import BlockBatchSampler, H5Dataset, pack
pack({paths!r}, {str(tmp_path / 's.h5')!r})
ds = H5Dataset({str(tmp_path / 's.h5')!r})
s = BlockBatchSampler(len(ds), 64, seed=1)
got = np.concatenate([b["x"] for b in ds.batches(s)])
ref = np.concatenate([np.load(p)["x"] for p in {paths!r}])
assert np.array_equal(got, ref[np.concatenate(list(s))])
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    r = run_cli_here("pack", *paths, "-o", str(tmp_path / "cli.h5"), "--no-progress")
    assert r.returncode == 0, r.stderr
