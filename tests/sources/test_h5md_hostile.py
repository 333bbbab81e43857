"""Hostile H5MD files and segment indexes: each is refused with one error naming the file and the
problem (never a traceback from h5py or NumPy, a crash, a hang or an allocation of what a header
claims), or read correctly where it is only unusual.

Every file is built here with h5py; each case is a fuzzer finding or a field trajscale checks
(docs/formats.md lists them).
"""

from __future__ import annotations

import json
import logging
import time

import h5py
import numpy as np
import pytest

import trajscale.mda
from trajscale.errors import InputFileError, TrajscaleError
from trajscale.sources import H5MDSource, open_source

N_FRAMES, N_ATOMS = 4, 5


def _h5md(path, pos=None, unit="nm", step=True, time_=True, **value_kw):
    """A small valid H5MD file; the cases then change one thing."""
    pos = np.arange(N_FRAMES * N_ATOMS * 3, dtype=np.float32).reshape(N_FRAMES, N_ATOMS, 3) if pos is None else pos
    with h5py.File(path, "w") as f:
        p = f.create_group("particles/all/position")
        p.create_dataset("value", data=pos, **value_kw)
        if unit is not None:
            p["value"].attrs["unit"] = unit
        if step:
            p.create_dataset("step", data=np.arange(len(pos)))
        if time_:
            p.create_dataset("time", data=np.arange(len(pos), dtype=np.float64))
            p["time"].attrs["unit"] = "ps"
    return str(path)


def _edit(path, fn):
    with h5py.File(path, "r+") as f:
        fn(f)
    return path


P = "particles/all/position"


def _replace(f, name, **kw):
    del f[name]
    f.create_dataset(name, **kw)


def _value_group(f):
    del f[f"{P}/value"]
    f.create_group(f"{P}/value")


def _external_missing(f):
    del f[f"{P}/value"]
    f[f"{P}/value"] = h5py.ExternalLink("no-such-file.h5", "/x")


def _soft_loop(f):
    del f[f"{P}/value"]
    f[f"{P}/value"] = h5py.SoftLink(f"/{P}/value")


def _virtual(target_file, target_name, shape, source_shape=None):
    def edit(f):
        del f[f"{P}/value"]
        layout = h5py.VirtualLayout(shape=shape, dtype=np.float32)
        layout[...] = h5py.VirtualSource(target_file, target_name, shape=source_shape or shape)
        f[P].create_virtual_dataset("value", layout, fillvalue=0.0)
        f[f"{P}/value"].attrs["unit"] = "nm"
    return edit


def _box(boundary, edges, td=False, unit="nm"):
    def edit(f):
        b = f.create_group("particles/all/box")
        b.attrs["boundary"] = boundary
        if td:
            e = b.create_group("edges")
            e.create_dataset("value", data=edges)
            e["value"].attrs["unit"] = unit
        else:
            b.create_dataset("edges", data=edges)
            b["edges"].attrs["unit"] = unit
    return edit


PERIODIC = np.array([b"periodic"] * 3)

#: name -> (edit of the valid file, words the error must hold)
REFUSED = {
    "value is a group": (_value_group, "is not a dataset"),
    "external link to a missing file": (_external_missing, "cannot be opened"),
    "soft link to itself": (_soft_loop, "cannot be opened"),
    "virtual source file missing": (_virtual("missing.h5", "/x", (N_FRAMES, N_ATOMS, 3)), "source file missing.h5"),
    "integer positions": (lambda f: _replace(f, f"{P}/value", data=np.zeros((N_FRAMES, N_ATOMS, 3), np.int32)),
                          "expected float32 or float64"),
    "complex positions": (lambda f: _replace(f, f"{P}/value", data=np.zeros((N_FRAMES, N_ATOMS, 3), np.complex64)),
                          "expected float32 or float64"),
    "no atoms": (lambda f: _replace(f, f"{P}/value", data=np.zeros((N_FRAMES, 0, 3), np.float32)), "0 atoms"),
    "unit an integer": (lambda f: f[f"{P}/value"].attrs.__setitem__("unit", 7), "expected a string"),
    "unit two strings": (lambda f: f[f"{P}/value"].attrs.__setitem__("unit", np.array([b"nm", b"A"])),
                         "2 values in its unit attribute"),
    "unknown unit": (lambda f: f[f"{P}/value"].attrs.modify("unit", "furlong"), "furlong"),
    "float steps": (lambda f: _replace(f, f"{P}/step", data=np.arange(N_FRAMES, dtype=np.float64)),
                    "expected one integer per frame"),
    "2-D steps": (lambda f: _replace(f, f"{P}/step", data=np.zeros((N_FRAMES, 2), np.int64)),
                  "expected one integer per frame"),
    "string times": (lambda f: (_replace(f, f"{P}/time", data=np.array([b"a"] * N_FRAMES)),
                                f[f"{P}/time"].attrs.create("unit", "ps")), "expected one number per frame"),
    "fixed time NaN": (lambda f: (_replace(f, f"{P}/time", data=np.nan), f[f"{P}/time"].attrs.create("unit", "ps")),
                       "not finite"),
    "fixed time offset a string": (lambda f: (_replace(f, f"{P}/time", data=1.0),
                                              f[f"{P}/time"].attrs.create("unit", "ps"),
                                              f[f"{P}/time"].attrs.create("offset", "x")), "expected one number"),
    "boundary of two": (_box(np.array([b"periodic"] * 2), np.ones(3)), "boundary"),
    "boundary words": (_box(np.array([b"periodic", b"open", b"none"]), np.ones(3)), "boundary"),
    "box edges (2,)": (_box(PERIODIC, np.ones(2)), "expected (3,) or (3, 3)"),
    "box edges strings": (_box(PERIODIC, np.array([b"a", b"b", b"c"])), "expected (3,) or (3, 3)"),
    "box with fewer frames": (_box(PERIODIC, np.ones((N_FRAMES - 1, 3)), td=True), "has 3 frames"),
    "velocities of other atoms": (lambda f: (f.create_dataset("particles/all/velocity/value",
                                                              data=np.zeros((N_FRAMES, N_ATOMS + 1, 3), np.float32)),
                                             f["particles/all/velocity/value"].attrs.create("unit", "nm ps-1")),
                                  "the positions' is"),
    "lossy quantum zero": (lambda f: (f[f"{P}/value"].attrs.create("trajscale_quantum", 0.0),
                                      f[f"{P}/value"].attrs.create("trajscale_precision", 0.01)),
                           "finite and positive"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_with_one_line(tmp_path, case):
    edit, words = REFUSED[case]
    path = _edit(_h5md(tmp_path / "bad.h5md"), edit)
    with pytest.raises(InputFileError) as err:
        H5MDSource(path, assume_units="nm").read(0, N_FRAMES)
    msg = str(err.value)
    assert msg.startswith(path) and words in msg and "\n" not in msg, msg
    with pytest.raises(IOError, match="bad.h5md"):   # MDAnalysis's convention for a reader's refusal
        trajscale.mda.Reader(path, assume_units="nm")


def test_times_shorter_than_frames_end_the_frames_read(tmp_path, caplog):
    """A frame without a time (a writer killed between growing step and time) is not read, with a warning."""
    path = _edit(_h5md(tmp_path / "short.h5md"), lambda f: (_replace(f, f"{P}/time", data=np.arange(2.0)),
                                                           f[f"{P}/time"].attrs.create("unit", "ps")))
    caplog.set_level(logging.WARNING)
    with H5MDSource(path, assume_units="nm") as src:
        assert src.n_frames == 2
        np.testing.assert_array_equal(src.read(0, 2).time, [0.0, 1.0])
    assert "trajscale repair" in caplog.text


def test_virtual_source_smaller_than_mapped(tmp_path):
    """A virtual dataset mapping 4 frames from a 3-frame file: HDF5 would fail the read (or fill in zeros)."""
    other = _h5md(tmp_path / "other.h5md", pos=np.zeros((3, N_ATOMS, 3), np.float32))
    path = _edit(_h5md(tmp_path / "bad.h5md"), _virtual(other, f"/{P}/value", (N_FRAMES, N_ATOMS, 3)))
    with pytest.raises(InputFileError, match="smaller than the virtual dataset maps"):
        H5MDSource(path)


def test_virtual_dataset_claiming_a_billion_atoms(tmp_path):
    """A fuzzer finding: a virtual dataset of (4, 10^9, 3) filled from 60 values was read into a 45 GiB array."""
    other = _h5md(tmp_path / "other.h5md")
    path = _edit(_h5md(tmp_path / "bad.h5md"),
                 _virtual(other, f"/{P}/value", (N_FRAMES, 10**9, 3)))
    with pytest.raises(InputFileError):
        H5MDSource(path).read(0, N_FRAMES)


def test_virtual_mapping_too_large_to_count(tmp_path):
    """A fuzzer finding: a (10^12, 10^9, 3) virtual dataset whose mapped values HDF5 cannot count
    was taken as an unlimited mapping, and its frames read into a 45 GiB array."""
    other = _h5md(tmp_path / "other.h5md")
    path = _edit(_h5md(tmp_path / "bad.h5md", step=False, time_=False),
                 _virtual(other, f"/{P}/value", (10**12, 10**9, 3)))
    with h5py.File(path, "r+") as f:
        f[P].create_dataset("step", shape=(10**12,), chunks=(64,), dtype=np.uint8)
    with pytest.raises(InputFileError, match="bad.h5md: .*virtual dataset"):
        H5MDSource(path).read(0, N_FRAMES)


def test_header_claiming_a_trillion_frames_is_refused_fast(tmp_path):
    """Chunked, never written: 10^12 frames claimed, none stored.  Refused before any read or allocation."""
    path = tmp_path / "huge.h5md"
    with h5py.File(path, "w") as f:
        p = f.create_group(P)
        p.create_dataset("value", shape=(10**12, N_ATOMS, 3), chunks=(64, N_ATOMS, 3), dtype=np.float32)
        p["value"].attrs["unit"] = "nm"
        p.create_dataset("step", shape=(10**12,), chunks=(1024,), dtype=np.int64)
        p.create_dataset("time", shape=(10**12,), chunks=(1024,), dtype=np.float64)
        p["time"].attrs["unit"] = "ps"
    started = time.monotonic()
    with pytest.raises(InputFileError, match="claims 1000000000000 frames"):
        H5MDSource(str(path))
    assert time.monotonic() - started < 10


def test_rows_reserved_past_the_last_frame_allocate_nothing(tmp_path):
    """A fuzzer finding: 3 complete frames (step) in a dataset of 10^12 rows made the direct reader
    allocate an address per chunk of all 10^12 rows (116 GiB)."""
    path = tmp_path / "reserved.h5md"
    pos = np.random.default_rng(1).random((3, N_ATOMS, 3), dtype=np.float32)
    with h5py.File(path, "w") as f:
        p = f.create_group(P)
        p.create_dataset("value", shape=(10**12, N_ATOMS, 3), maxshape=(None, N_ATOMS, 3),
                         chunks=(1, N_ATOMS, 3), dtype=np.float32)
        p["value"][:3] = pos
        p["value"].attrs["unit"] = "Angstrom"
        p.create_dataset("step", data=np.arange(3))
    with H5MDSource(str(path)) as src:
        assert src.n_frames == 3
        np.testing.assert_array_equal(src.read(0, 3).positions, pos)


def test_no_frames_and_a_billion_atoms_allocates_nothing(tmp_path):
    """A fuzzer finding: 0 complete frames (an empty step) of 10^9 atoms, stored nowhere, made
    mda.Reader allocate a 12 GB Timestep before it found no frame to read."""
    path = tmp_path / "nothing.h5md"
    with h5py.File(path, "w") as f:
        p = f.create_group(P)
        p.create_dataset("value", shape=(1, 10**9, 3), chunks=(1, 64, 1), dtype=np.float32)
        p["value"].attrs["unit"] = "nm"
        p.create_dataset("step", data=np.zeros(0, np.int64))
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(IOError, match="nothing.h5md: no frames to read"):
        trajscale.mda.Reader(str(path))
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 1024**2   # KiB: under 1 GiB


def test_damaged_chunk_names_the_frame(tmp_path):
    path = _h5md(tmp_path / "gz.h5md", chunks=(1, N_ATOMS, 3), compression="gzip")
    with h5py.File(path, "r") as f:
        at = f[f"{P}/value"].id.get_chunk_info(2).byte_offset
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(b"\xff" * 8)
    with H5MDSource(path) as src:
        src.read(0, 2)   # frames before the damage still read
        with pytest.raises(InputFileError, match=r"gz.h5md: cannot read frame 2 \(.*\): the file is damaged"):
            src.read(0, N_FRAMES)


def test_damaged_symbol_table_is_one_line(tmp_path):
    """A fuzzer finding: HDF5's RuntimeError for a damaged group B-tree node escaped the open."""
    path = _h5md(tmp_path / "snod.h5md")
    raw = bytearray(open(path, "rb").read())
    k = raw.find(b"SNOD", raw.find(b"SNOD") + 1)   # the second group's symbol table node
    assert k > 0
    raw[k:k + 4] = b"XXXX"
    open(path, "wb").write(bytes(raw))
    with pytest.raises(TrajscaleError, match="snod.h5md"):
        H5MDSource(path).read(0, N_FRAMES)


def test_empty_file_layout_summary(tmp_path):
    """A fuzzer finding: a file of 0 frames had no one-frame access pattern, and inspect's warnings
    looked it up (KeyError)."""
    path = _h5md(tmp_path / "empty.h5md", pos=np.zeros((0, N_ATOMS, 3), np.float32), chunks=(2, 2, 3),
                 maxshape=(None, N_ATOMS, 3))   # chunks that split frames: the warning that looked it up
    with H5MDSource(path) as src:
        assert src.n_frames == 0 and src.layout_summary().warnings == ()


def test_box_never_written_reads_as_no_box(tmp_path):
    """pyh5md's "linear" box leaves edges/value with 0 rows: no box, not a box of 0 frames."""
    path = _edit(_h5md(tmp_path / "b.h5md"), _box(PERIODIC, np.zeros((0, 3)), td=True))
    with H5MDSource(path) as src:
        b = src.read(0, N_FRAMES)
    assert b.box.shape == (N_FRAMES, 6) and not b.box.any()


# ---------------------------------------------------------------- segment indexes
def _index(tmp_path, **change):
    seg = _h5md(tmp_path / "s0.h5md")
    segment = {"path": "s0.h5md", "start": 0, "n_frames": N_FRAMES}
    index = {"format": "trajscale-segments", "version": 1, "n_atoms": N_ATOMS, "segments": [segment]}
    for key, val in change.items():
        (segment if key in segment or key.startswith(("file_", "shift_")) else index)[key] = val
    p = tmp_path / "index.json"
    p.write_text(json.dumps(index))
    return seg, str(p)


@pytest.mark.parametrize("change, words", [
    ({"n_frames": "4"}, "n_frames '4'"),
    ({"n_frames": None}, "n_frames None"),
    ({"start": None}, "start None"),
    ({"path": 5}, "the path 5"),
    ({"path": ""}, "the path ''"),
    ({"n_atoms": "5"}, "'n_atoms' is '5'"),
    ({"n_atoms": None}, "'n_atoms' is None"),
    ({"n_atoms": 10**12}, "'n_atoms' is 1000000000000"),   # a fuzzer finding: a 10.9 TiB Timestep
    ({"file_frames": 2}, "file_frames 2"),
    ({"shift_time": "y"}, "shift_time 'y'"),
    ({"shift_step": 2**70}, "shift_step"),
    ({"topology": 3}, "'topology' is 3"),
    ({"fields": "position"}, "'fields' is 'position'"),
])
def test_index_fields_checked(tmp_path, change, words):
    _, index = _index(tmp_path, **change)
    with pytest.raises(InputFileError) as err:
        open_source(index)
    assert str(err.value).startswith(index) and words in str(err.value), str(err.value)


def test_index_claiming_other_atoms_allocates_nothing(tmp_path):
    """An index that says 2 * 10^9 atoms over a 5-atom segment: refused when the segment opens,
    before a block of 4 frames x 2 * 10^9 atoms (96 GB) is allocated."""
    _, index = _index(tmp_path, n_atoms=2 * 10**9, fields=["position"])   # (no open to learn the fields)
    with open_source(index) as src, pytest.raises(InputFileError, match="s0.h5md: has 4 frames x 5 atoms"):
        src.read(0, N_FRAMES)


def test_index_reads_when_valid(tmp_path):
    seg, index = _index(tmp_path)
    with open_source(index) as src, H5MDSource(seg) as ref:
        np.testing.assert_array_equal(src.read(0, N_FRAMES).positions, ref.read(0, N_FRAMES).positions)


def test_fuzz_targets_read_their_seeds():
    """The fuzz targets (benchmarks/fuzz_targets/h5md.py) accept their seed corpus: MDAnalysisTests'
    H5MD and trajscale's files are read, not refused, and every recipe runs to an answer."""
    import importlib.util
    from pathlib import Path

    here = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_targets" / "h5md.py"
    spec = importlib.util.spec_from_file_location("fuzz_h5md", here)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for seeds, run in mod.TARGETS.values():
        for seed in seeds():
            run(seed if isinstance(seed, bytes) else Path(seed).read_bytes())
    for path in mod.seed_files():   # the real files are valid: read as trajscale reads them
        with open_source(path) as src:
            assert src.n_frames >= 3 and src.read(0, 2).positions.shape == (2, src.n_atoms, 3)
