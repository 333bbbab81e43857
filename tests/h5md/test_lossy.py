"""Lossy storage at a stated precision (issue 14): XTC-sized delta coding, plain-float rounding,
the bound written in the file, shown by inspect and checked by verify.

References are MDAnalysis reading the original DCD/XTC (float64 differences), and the XTC file's size.
"""

from __future__ import annotations

import json
import os

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.conftest import run_cli_here
from trajscale.convert.convert import convert
from trajscale.convert.rechunk import rechunk
from trajscale.convert.verify import verify
from trajscale.errors import ConfigError, InputFileError
from trajscale.h5md.codecs import decode_deltas, encode_deltas
from trajscale.h5md.layout import Layout
from trajscale.sources import open_source
from trajscale.topology.h5md import h5md_universe

pytest.importorskip("hdf5plugin")
POS = "particles/all/position/value"


def _attrs(ds) -> dict:
    """A dataset's attributes, comparable with == (arrays as lists)."""
    return {k: np.asarray(v).tolist() for k, v in ds.attrs.items()}


@pytest.fixture(scope="module")
def water_h5md(tmp_path_factory):
    """The AdK-in-water XTC (10 frames x 47,681 atoms, written at 0.001 nm) as plain float32 H5MD."""
    out = tmp_path_factory.mktemp("lossy") / "water.h5md"
    convert(D.TPR, [D.XTC], str(out), velocities=False, forces=False)
    return str(out)


@pytest.fixture(scope="module")
def vacuum_deltas(tmp_path_factory, adk_vacuum_h5md):
    out = tmp_path_factory.mktemp("lossy") / "deltas.h5md"
    rechunk(adk_vacuum_h5md, out, Layout.parse("auto", "zstd"), precision=0.01, encoding="deltas")
    return str(out)


def test_delta_codec_round_trips_within_half_a_step():
    rng = np.random.default_rng(1)
    x = (rng.random((4, 500, 3)) * 200 - 50).astype(np.float32)
    raw = encode_deltas(x, 0.01)
    assert raw.dtype == np.uint32
    err = np.abs(decode_deltas(raw, 0.01).astype(np.float64) - x)
    assert err.max() <= 0.005 + 1e-5
    # atoms of a molecule are neighbours: their differences are small and the zigzag keeps them small
    near = np.cumsum(rng.normal(0, 1, (2, 300, 3)), axis=1).astype(np.float32)
    assert encode_deltas(near, 0.01)[:, 1:].max() < 2**12


def test_deltas_are_at_most_115_percent_of_the_xtc(tmp_path, water_h5md):
    """The issue's target, on the file the XTC's own frames came from: positions <= 1.15x the XTC."""
    out = tmp_path / "d.h5md"
    rechunk(water_h5md, out, Layout.parse("auto", "blosc-zstd"), precision=0.01, encoding="deltas")
    floats = tmp_path / "f.h5md"
    rechunk(water_h5md, floats, Layout.parse("auto", "blosc-zstd"), precision=0.01)
    with h5py.File(out) as f, h5py.File(floats) as g:
        stored = f[POS].id.get_storage_size()
        assert stored <= 1.15 * os.path.getsize(D.XTC)
        assert stored < 0.8 * g[POS].id.get_storage_size()
    # the XTC's values are multiples of 0.01 A already: deltas at 0.01 A give them back (float32 round-off)
    ref = mda.Universe(D.TPR, D.XTC).trajectory.timeseries(order="fac")
    with open_source(str(out)) as src:
        got = src.read(0, src.n_frames).positions
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4)


def test_the_whole_lossy_file_is_at_most_115_percent_of_the_xtc(tmp_path):
    """The whole lossy file, with the atoms' ids, species, names, masses and residues the XTC does not carry, is at
    most 1.15x the XTC (its positions alone 0.98x): the per-atom datasets in the smallest integer type that holds
    them, compressed by gzip, which h5py and pyh5md read without a plugin (the topology's own values; MDAnalysis
    reads such files: test_interop.py)."""
    out = tmp_path / "w.h5md"
    convert(D.TPR, [D.XTC], str(out), layout=Layout.parse("auto", "blosc-zstd"), velocities=False, forces=False,
            precision=0.01, encoding="deltas")
    assert os.path.getsize(out) <= 1.15 * os.path.getsize(D.XTC), os.path.getsize(out) / os.path.getsize(D.XTC)
    u = mda.Universe(D.TPR)
    with h5py.File(out) as f:
        pg = f["particles/all"]
        assert pg["id"].dtype == np.int32 and pg["species"].dtype == np.int8 and pg["resid"].dtype == np.int16
        assert all(pg[k].compression == "gzip" for k in ("id", "species", "resid", "name", "mass", "charge"))
        np.testing.assert_array_equal(pg["id"][()], u.atoms.ids)
        np.testing.assert_array_equal(pg["resid"][()], u.atoms.resids)
        np.testing.assert_array_equal(pg["species"][()], np.unique(u.atoms.types, return_inverse=True)[1])
    ours = h5md_universe(str(out))   # (the atoms trajscale reads from the file: as the topology's, ints as int64)
    assert ours.atoms.ids.dtype == np.int64 and np.array_equal(ours.atoms.ids, u.atoms.ids)
    np.testing.assert_array_equal(ours.atoms.masses, u.atoms.masses)
    with open_source(str(out)) as src:
        labels = src.stored_atom_labels()
    assert labels["resid"].dtype == np.int64 and np.array_equal(labels["resid"], u.atoms.resids)
    pyh5md = pytest.importorskip("pyh5md")
    with pyh5md.File(str(out), "r") as f:
        np.testing.assert_array_equal(f.particles_group("all")["id"][()], u.atoms.ids)


def test_deltas_read_back_within_the_bound_for_any_atoms_and_frames(vacuum_deltas, adk_vacuum):
    ref = mda.Universe(*adk_vacuum).trajectory.timeseries(order="fac").astype(np.float64)
    rng = np.random.default_rng(7)
    with open_source(vacuum_deltas) as src:
        assert src.n_frames == 98
        whole = src.read(0, 98).positions
        assert 0 < np.abs(whole - ref).max() <= 0.005 + 1e-5
        for _ in range(6):
            a = int(rng.integers(0, 90))
            b = int(rng.integers(a + 1, 99))
            stride = int(rng.integers(1, 4))
            atoms = np.sort(rng.choice(3341, size=int(rng.integers(1, 400)), replace=False))
            got = src.read(a, b, atoms, stride=stride).positions
            np.testing.assert_array_equal(got, whole[a:b:stride][:, atoms])
        unsorted = np.array([3000, 5, 1200, 5])
        np.testing.assert_array_equal(src.read(3, 9, unsorted).positions, whole[3:9][:, unsorted])


def test_rmsd_on_deltas_within_1e3_of_uncompressed(vacuum_deltas, adk_vacuum, adk_vacuum_h5md):
    from MDAnalysis.analysis.rms import RMSD

    import trajscale as ts

    ref = RMSD(mda.Universe(*adk_vacuum), select="name CA").run().results.rmsd[:, 2]
    plain = ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], adk_vacuum_h5md).rmsd
    lossy = ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], vacuum_deltas).rmsd
    np.testing.assert_allclose(plain, ref, atol=1e-4)
    assert np.abs(lossy - plain).max() < 1e-3


def test_mdanalysis_refuses_deltas_clearly_and_reads_them_rechunked_to_floats(tmp_path, vacuum_deltas, adk_vacuum):
    import hdf5plugin  # noqa: F401 - the filters, so that only the encoding can stop MDAnalysis

    with pytest.raises(RuntimeError, match="atom-refs-zigzag-uint16.*not recognized"):
        mda.Universe(adk_vacuum[0], vacuum_deltas)
    back = tmp_path / "floats.h5md"
    # one-frame chunks: MDAnalysis's reader reads a frame at a time and would decompress a chunk of many
    # frames once for each of them (the layout is not what is tested)
    rechunk(vacuum_deltas, back, Layout.parse("frame", "zstd"))
    with h5py.File(back) as f:
        assert f[POS].dtype == np.float32 and f[POS].attrs["unit"] == "Angstrom"
        assert "trajscale_codes" not in f["particles/all/position"] and "trajscale_center" not in f[POS].attrs
        assert f[POS].attrs["trajscale_precision"] == 0.01   # still lossy: the record stays
    got = mda.Universe(adk_vacuum[0], str(back)).trajectory.timeseries(order="fac")
    with open_source(vacuum_deltas) as src:
        np.testing.assert_array_equal(got, src.read(0, src.n_frames).positions)


def test_inspect_shows_and_verify_checks_the_bound(tmp_path, vacuum_deltas, adk_vacuum, adk_vacuum_h5md):
    facts = json.loads(run_cli_here("inspect", vacuum_deltas, "--json").stdout)
    assert facts["precision"]["angstrom"] == 0.01 and facts["precision"]["encoding"].startswith("atom-refs")
    assert facts["units"]["position"] == "Angstrom"
    text = run_cli_here("inspect", vacuum_deltas).stdout
    assert "within 0.005 A" in text
    rep = verify(adk_vacuum[0], [adk_vacuum[1]], vacuum_deltas)
    assert rep.ok and rep.position_bound == pytest.approx(0.005) and 0 < rep.max_dx <= 0.005 + 1e-5
    # a value moved past the bound is caught
    bad = tmp_path / "bad.h5md"
    bad.write_bytes(open(vacuum_deltas, "rb").read())
    with h5py.File(bad, "r+") as f:
        raw = f[POS][40:41]
        raw[0, 0, 0] += 2   # zigzag +2 = one more step of 0.01 A on atom 0, x
        f[POS][40:41] = raw
    rep = verify(adk_vacuum[0], [adk_vacuum[1]], str(bad))
    assert not rep.ok and rep.first_bad_frame == 40
    # a plain file has no stated bound: float32 round-off only
    assert verify(adk_vacuum[0], [adk_vacuum[1]], adk_vacuum_h5md).position_bound is None


def test_floats_encoding_stays_plain_floats_for_mdanalysis(tmp_path, adk_vacuum_h5md, adk_vacuum):
    out = tmp_path / "f.h5md"
    rechunk(adk_vacuum_h5md, out, Layout.parse("frame", "blosc-zstd"), precision=0.01)   # (as above)
    ref = mda.Universe(*adk_vacuum).trajectory.timeseries(order="fac").astype(np.float64)
    got = mda.Universe(adk_vacuum[0], str(out)).trajectory.timeseries(order="fac")
    assert 0 < np.abs(got - ref).max() <= 0.005
    assert verify(adk_vacuum[0], [adk_vacuum[1]], str(out)).ok


def test_bad_lossy_requests_are_clear(tmp_path, adk_vacuum_h5md):
    with pytest.raises(ConfigError, match="--encoding deltas needs --precision"):
        rechunk(adk_vacuum_h5md, tmp_path / "a.h5md", Layout.parse("auto", "zstd"), encoding="deltas")
    with pytest.raises(ConfigError, match="needs --precision and a --compression"):
        rechunk(adk_vacuum_h5md, tmp_path / "a.h5md", Layout.parse("auto"), precision=0.01, encoding="deltas")
    # 2^30 steps of 1e-6 A is ~1,074 A: AdK's coordinates fit, a far-away atom does not
    far = tmp_path / "far.h5md"
    far.write_bytes(open(adk_vacuum_h5md, "rb").read())
    with h5py.File(far, "r+") as f:
        f[POS][5, 7] = [5000.0, 0, 0]
    with pytest.raises(InputFileError, match="exceeds"):
        rechunk(str(far), tmp_path / "b.h5md", Layout.parse("auto", "zstd"), precision=1e-6, encoding="deltas32")
    assert not (tmp_path / "b.h5md").exists()
    # uint16 deltas: within 32767 steps of the first frame's centre (+-327 A at 0.01 A); the message
    # names the way out
    with pytest.raises(InputFileError, match="32767 steps.*--encoding deltas32"):
        rechunk(str(far), tmp_path / "b.h5md", Layout.parse("auto", "zstd"), precision=0.01, encoding="deltas")
    assert not (tmp_path / "b.h5md").exists()
    r = run_cli_here("rechunk", adk_vacuum_h5md, "-o", str(tmp_path / "c.h5md"), "--precision", "0.01",
                     "--encoding", "deltas")
    assert r.returncode != 0 and "Traceback" not in r.stderr and "--compression" in r.stderr


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.parametrize("encoding", ["floats", "deltas"])
def test_convert_writes_lossy_directly_and_verify_passes(tmp_path, adk_vacuum, encoding):
    out = tmp_path / f"{encoding}.h5md"
    r = run_cli_here("convert", *adk_vacuum, "-o", str(out), "--compression", "blosc-zstd", "--precision", "0.01",
                     "--encoding", encoding, "--units", "gromacs", "--no-progress")
    assert r.returncode == 0, r.stderr
    with h5py.File(out) as f:
        ds = f[POS]
        assert ds.attrs["trajscale_precision"] == 0.01
        assert (ds.attrs["trajscale_unit"] if encoding == "deltas" else ds.attrs["unit"]) == "nm"
    rep = verify(adk_vacuum[0], [adk_vacuum[1]], str(out))   # the bound is 0.005 A whatever the file's unit
    assert rep.ok and 0 < rep.max_dx <= 0.005 + 1e-5, rep.problems
    v = run_cli_here("verify", *adk_vacuum, str(out))
    assert v.returncode == 0 and "within their stated bound" in v.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("encoding", ["floats", "deltas"])
def test_mpi_convert_writes_the_same_lossy_file_as_serial(tmp_path, adk_vacuum, encoding):
    """Under mpiexec -n 2 each rank encodes its own frames; the stored values equal a serial convert's."""
    pytest.importorskip("mpi4py")
    from tests.conftest import run_mpi

    serial, out = tmp_path / "s.h5md", tmp_path / "m.h5md"
    convert(*adk_vacuum[:1], [adk_vacuum[1]], str(serial), layout=Layout.parse("5", "blosc-zstd"),
            precision=0.01, encoding=encoding)
    r = run_mpi(2, ["-m", "trajscale.cli.main", "convert", *adk_vacuum, "-o", str(out), "--chunks", "5",
                    "--compression", "blosc-zstd", "--precision", "0.01", "--encoding", encoding, "--no-progress"],
                timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    with h5py.File(serial) as a, h5py.File(out) as b:
        np.testing.assert_array_equal(b[POS][()], a[POS][()])
        assert _attrs(b[POS]) == _attrs(a[POS])
    rep = verify(adk_vacuum[0], [adk_vacuum[1]], str(out))
    assert rep.ok and 0 < rep.max_dx <= 0.005 + 1e-5


def test_parallel_writer_append_mode_rounds_floats_and_refuses_deltas(tmp_path):
    """ParallelWriter.write (atoms of a frame spread over ranks): per-value rounding works anywhere; a
    difference needs the previous atom, so deltas are refused there with a clear message."""
    from trajscale.h5md.codecs import quantize, quantum
    from trajscale.pwrite import ParallelWriter

    x = (np.random.default_rng(3).random((3, 50, 3)) * 50).astype(np.float32)
    out = tmp_path / "p.h5md"
    with ParallelWriter(out, 50, precision=0.01, box=None) as w:
        for i in range(3):
            w.write(step=i, time=float(i), ids=np.arange(50)[::-1], positions=x[i, ::-1])
    with h5py.File(out) as f:
        got = f[POS][()]
    np.testing.assert_array_equal(got, quantize(x, quantum(0.01)))
    assert np.abs(got.astype(np.float64) - x).max() <= 0.005
    with pytest.raises(ConfigError, match="need whole frames"):
        with ParallelWriter(tmp_path / "d.h5md", 50, precision=0.01, encoding="deltas", compression="zstd",
                            box=None) as w:
            w.write(step=0, time=0.0, ids=np.arange(50), positions=x[0])
