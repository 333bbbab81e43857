"""uint16 delta coding with per-atom references (``--encoding deltas``, h5md.codecs.Deltas).

References: MDAnalysis reading the AdK-in-water XTC (its values are multiples of 0.01 Å, so a
0.01 Å coding must give back the very same steps), NumPy float64 for the synthetic cases.
"""

from __future__ import annotations

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from trajscale.convert.convert import convert
from trajscale.convert.rechunk import rechunk
from trajscale.errors import InputFileError
from trajscale.h5md import codecs
from trajscale.h5md.codecs import CODES, Deltas
from trajscale.h5md.layout import Layout
from trajscale.sources import open_source

pytest.importorskip("hdf5plugin")
POS = "particles/all/position/value"


@pytest.fixture(scope="module")
def water_steps():
    """The water XTC's frames in integer steps of 0.01 Å (float64 reference)."""
    x = mda.Universe(D.TPR, D.XTC).trajectory.timeseries(order="fac")
    return np.rint(x.astype(np.float64) / 0.01)


def _steps(values: np.ndarray) -> np.ndarray:
    return np.rint(values.astype(np.float64) / 0.01)


def test_water_frames_come_back_as_the_very_same_steps(water_steps):
    x = (water_steps * 0.01).astype(np.float32)
    codec = Deltas.plan(x[0], 0.01)
    raw = codec.encode(x)
    assert raw.dtype == np.uint16 and raw.shape == x.shape
    np.testing.assert_array_equal(_steps(codec.decode(raw)), water_steps)
    # each value is the float32 nearest its step count x q (as quantize rounds: a rechunk to
    # floats stores what is read)
    np.testing.assert_array_equal(codec.decode(raw), (water_steps * 0.01).astype(np.float32))
    # the format, computed independently in float64: each atom's difference from the atom its code
    # names (atom 0: from the centre), zigzag-coded modulo 2^16, the wide atoms' triples first
    off = (codec.codes & 3).astype(int)
    assert off[0] == 0 and (off[1:] >= 1).all() and (off <= 3).all()
    s = water_steps - codec.center
    d = s - s[:, np.arange(len(off)) - off]
    d[:, 0] = s[:, 0]
    z = np.mod(np.where(d >= 0, 2 * d, -2 * d - 1), 2**16)
    wide = (codec.codes & 4).astype(bool)
    np.testing.assert_array_equal(raw, np.concatenate([z[:, wide], z[:, ~wide]], axis=1))
    # mostly the first atom of each molecule is wide (a water's hydrogens refer to its oxygen)
    assert 0.1 < wide.mean() < 0.4


def _numpy_encode(codec: Deltas, values: np.ndarray) -> np.ndarray:
    """The format in NumPy (independent of the compiled coder): steps from the centre, less the
    reference atom's, int16 modulo 2^16, zigzag, the wide atoms' triples first."""
    s = np.rint(np.asarray(values, np.float64) / codec.q) - codec.center
    si = s.astype(np.int32)
    off = (codec.codes & 3).astype(int)
    d = si - si[:, np.arange(len(off)) - off]
    d[:, :1] = si[:, :1]
    d16 = d.astype(np.int16)
    z = ((d16 << 1) ^ (d16 >> 15)).view(np.uint16)
    wide = (codec.codes & 4).astype(bool)
    return np.concatenate([z[:, wide], z[:, ~wide]], axis=1)


def _numpy_decode(codec: Deltas, raw: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_numpy_encode` in NumPy: un-permute, unzigzag, sum along the references."""
    wide = (codec.codes & 4).astype(bool)
    order = np.argsort(~wide, kind="stable")
    u = raw[:, order.argsort()].astype(np.int32)
    acc = (u >> 1) ^ -(u & 1)
    off = (codec.codes & 3).astype(int)
    for a in range(1, len(off)):          # atom by atom: a reference comes before its atom
        acc[:, a] += acc[:, a - off[a]]
    v = acc.astype(np.int16).astype(np.float64) + codec.center
    return (v * codec.q).astype(np.float32)


def test_compiled_coder_equals_numpy(water_steps):
    x = (water_steps[:3] * 0.01).astype(np.float32)
    wide = np.zeros((2, 400, 3), np.float32)    # differences beyond int16, wrapped
    wide[:, ::2], wide[:, 1::2] = -320.004, 319.996
    for values in (x, wide, wide.astype(np.float64)):
        codec = Deltas.plan(values[0], 0.01)
        raw = codec.encode(values)
        np.testing.assert_array_equal(raw, _numpy_encode(codec, values))
        np.testing.assert_array_equal(codec.decode(raw), _numpy_decode(codec, raw))


def test_other_layouts_and_dtypes_code_alike(water_steps):
    """Big-endian, strided and float64 values, strided and big-endian stored rows, a strided ``out``:
    converted once, the same numbers as C-contiguous native float32."""
    x = (water_steps[:4, :3000] * 0.01).astype(np.float32)
    codec = Deltas.plan(x[0], 0.01)
    raw = codec.encode(x)
    np.testing.assert_array_equal(raw, _numpy_encode(codec, x))
    padded = np.zeros((4, 3000, 4), np.float32)
    padded[..., :3] = x
    for values in (x.astype(">f4"), padded[..., :3], x.astype(np.float64), x.astype(">f8")):
        np.testing.assert_array_equal(codec.encode(values), raw)
    ref = _numpy_decode(codec, raw)
    for stored in (raw.astype(">u2"), np.repeat(raw, 2, axis=0)[::2]):
        np.testing.assert_array_equal(codec.decode(stored), ref)
    out = np.zeros((8, 3000, 3), np.float32)
    assert codec.decode(raw, out=out[::2]) is not None
    np.testing.assert_array_equal(out[::2], ref)
    assert not out[1::2].any()
    with pytest.raises(ValueError, match=r"\(frames, 3000, 3\)"):
        codec.decode(raw[:, :2999])
    with pytest.raises(ValueError, match=r"\(frames, 3000, 3\)"):
        codec.encode(x[:, :10])


def test_deltas32_decode_equals_numpy_cumsum():
    rng = np.random.default_rng(4)
    x = rng.uniform(-300, 300, (3, 700, 3)).astype(np.float32)
    raw = codecs.encode_deltas(x, 0.01)
    steps = np.rint(x.astype(np.float64) / 0.01)
    ref = (steps * 0.01).astype(np.float32)
    for stored in (raw, raw.astype(">u4"), np.repeat(raw, 2, axis=1)[:, ::2]):
        np.testing.assert_array_equal(codecs.decode_deltas(stored, 0.01), ref)
    out = np.zeros((3, 700, 6), np.float32)
    codecs.decode_deltas(raw, 0.01, out=out[..., ::2])
    np.testing.assert_array_equal(out[..., ::2], ref)


@pytest.mark.cli
def test_delta_codecs_run_compiled_without_numba(tmp_path):
    """Encoding and decoding in a fresh process load no JIT: the loops are a built extension."""
    import subprocess
    import sys

    code = ("import sys, importlib.machinery\nimport numpy as np\n"
            "from trajscale.h5md import codecs, _codecs\n"
            "x = np.random.default_rng(0).uniform(0, 50, (3, 900, 3)).astype(np.float32)\n"
            "c = codecs.Deltas.plan(x[0], 0.01)\nback = c.decode(c.encode(x))\n"
            "back32 = codecs.decode_deltas(codecs.encode_deltas(x, 0.01), 0.01)\n"
            "assert abs(back - x).max() <= 0.0051 and abs(back32 - x).max() <= 0.0051\n"
            "print('numba' in sys.modules, _codecs.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]


def test_differences_wider_than_int16_wrap_and_come_back():
    """Neighbours 640 Å apart differ by 64,000 steps: stored modulo 2^16, summed modulo 2^16."""
    rng = np.random.default_rng(3)
    x = np.zeros((3, 400, 3))
    x[:, ::2] = -320 + rng.random((3, 200, 3))
    x[:, 1::2] = 320 - rng.random((3, 200, 3))
    x = x.astype(np.float32)
    codec = Deltas.plan(x[0], 0.01)
    got = codec.decode(codec.encode(x)).astype(np.float64)
    assert np.abs(got - x).max() <= 0.005 + 1e-4
    np.testing.assert_array_equal(_steps(got), np.rint(x.astype(np.float64) / 0.01))


def test_coordinates_beyond_the_window_fail_clearly():
    x = np.zeros((2, 10, 3), np.float32)
    codec = Deltas.plan(x[0], 0.01)
    x[1, 4, 1] = 400.0          # 40,000 steps from the centre (0)
    with pytest.raises(ValueError, match=r"\(400.0\).*32767 steps.*deltas32"):
        codec.encode(x)
    x[1, 4, 1] = 327.67          # the last step inside
    np.testing.assert_array_equal(_steps(codec.decode(codec.encode(x))), _steps(x))
    x[1, 4, 1] = np.nan
    with pytest.raises(ValueError, match="not finite"):
        codec.encode(x)


def test_lz4_deltas_are_within_115_percent_of_the_xtc_and_read_back_exactly(tmp_path, water_steps):
    """The issue's size target with the fast codec: the position chunks <= 1.15x the XTC file."""
    out = tmp_path / "w.h5md"
    convert(D.TPR, [D.XTC], str(out), layout=Layout.parse("auto", "blosc-lz4"), precision=0.01,
            encoding="deltas", velocities=False, forces=False)
    import os

    with h5py.File(out) as f:
        assert f[POS].dtype == np.uint16
        assert f[POS].id.get_storage_size() <= 1.15 * os.path.getsize(D.XTC)
    with open_source(str(out)) as src:
        np.testing.assert_array_equal(_steps(src.read(0, src.n_frames).positions), water_steps)
        atoms = np.array([47000, 3, 17, 3, 40001])
        np.testing.assert_array_equal(_steps(src.read(2, 9, atoms, stride=3).positions),
                                      water_steps[2:9:3][:, atoms])


@pytest.mark.parametrize("virtual", [False, True])
def test_workers_plan_alike_so_segments_join(tmp_path, adk_vacuum, adk_vacuum_h5md, virtual):
    """Parallel convert and rechunk: every worker codes its frames with the first frame's plan, so the
    joined (or virtual) file stores what a serial run stores."""
    serial = tmp_path / "s.h5md"
    lay = Layout.parse("7", "blosc-lz4")
    convert(adk_vacuum[0], [adk_vacuum[1]], str(serial), layout=lay, precision=0.01, encoding="deltas")
    par = tmp_path / "p.h5md"
    convert(adk_vacuum[0], [adk_vacuum[1]], str(par), layout=lay, precision=0.01, encoding="deltas",
            executor="processes", n_workers=2, virtual=virtual)
    re = tmp_path / "r.h5md"
    rechunk(adk_vacuum_h5md, re, lay, precision=0.01, encoding="deltas", executor="processes", n_workers=2,
            virtual=virtual)
    ref = mda.Universe(*adk_vacuum).trajectory.timeseries(order="fac").astype(np.float64)
    with h5py.File(serial) as a:
        stored, codes = a[POS][()], a["particles/all/position"][CODES][()]
    for path in (par, re):
        with h5py.File(path) as b:
            np.testing.assert_array_equal(b["particles/all/position"][CODES][()], codes)
            np.testing.assert_array_equal(b[POS][()], stored)
        with open_source(str(path)) as src:
            assert np.abs(src.read(0, src.n_frames).positions - ref).max() <= 0.005 + 1e-5


def test_missing_codes_name_the_file(tmp_path, adk_vacuum_h5md):
    out = tmp_path / "d.h5md"
    rechunk(adk_vacuum_h5md, out, Layout.parse("auto", "blosc-lz4"), precision=0.01, encoding="deltas")
    with h5py.File(out, "r+") as f:
        del f["particles/all/position"][CODES]
    with pytest.raises(InputFileError, match=f"d.h5md.*{CODES}"):
        open_source(str(out))


def test_deltas32_stays_available_for_wide_systems(tmp_path, adk_vacuum_h5md, adk_vacuum):
    out = tmp_path / "d32.h5md"
    rechunk(adk_vacuum_h5md, out, Layout.parse("auto", "blosc-zstd"), precision=0.01, encoding="deltas32")
    with h5py.File(out) as f:
        assert f[POS].dtype == np.uint32 and CODES not in f["particles/all/position"]
        assert f[POS].attrs["trajscale_encoding"] == codecs.DELTAS32
    ref = mda.Universe(*adk_vacuum).trajectory.timeseries(order="fac").astype(np.float64)
    with open_source(str(out)) as src:
        assert np.abs(src.read(0, src.n_frames).positions - ref).max() <= 0.005 + 1e-5


def test_a_selection_is_costed_and_counted_as_the_whole_frames_it_decodes(tmp_path, adk_vacuum_h5md):
    """Task sizes and the report's bytes come from what the reader really reads: every atom of a
    delta-coded frame, however few are asked for."""
    out = tmp_path / "d.h5md"
    rechunk(adk_vacuum_h5md, out, Layout.parse("auto", "blosc-lz4"), precision=0.01, encoding="deltas")
    ca = np.array([5, 1500, 3000])
    with open_source(str(out)) as src, open_source(adk_vacuum_h5md) as plain:
        assert src.bytes_per_frame(ca) >= 3341 * 12 + len(ca) * 12
        assert plain.bytes_per_frame(ca) < 3341 * 12   # read in place: the runs only
        src.read(0, 10, ca)
        assert src.bytes_read == 10 * 3341 * 12


def test_a_single_process_parallel_writer_plans_from_its_first_frames(tmp_path):
    """ParallelWriter.write_frames without a reference, one process: the codec is planned from the
    first frame it is given and stored; frames written later use that plan and read back exactly."""
    from trajscale.pwrite import ParallelWriter

    x = (np.random.default_rng(8).random((6, 40, 3)) * 60).astype(np.float32)
    out = tmp_path / "pw.h5md"
    with ParallelWriter(out, 40, precision=0.01, encoding="deltas", compression="blosc-lz4", box=None,
                        n_frames=6) as w:
        w.write_frames(0, x[:2], step=np.arange(2), time=np.arange(2.0))
        w.write_frames(2, x[2:], step=np.arange(2, 6), time=np.arange(2.0, 6.0))
    with h5py.File(out) as f:
        np.testing.assert_array_equal(f["particles/all/position"][CODES][()], Deltas.plan(x[0], 0.01).codes)
    with open_source(str(out)) as src:
        np.testing.assert_array_equal(_steps(src.read(0, 6).positions), np.rint(x.astype(np.float64) / 0.01))
