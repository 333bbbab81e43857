"""trajscale's compiled XTC/TRR reader (xdrfile, as MDAnalysis's readers use it) against MDAnalysis itself.

The reference for every frame is MDAnalysis's own ``libmdaxdr`` and its ``XTCReader``/``TRRReader``:
offsets, atom counts, positions, velocities, forces, boxes, times and steps must be the same bits, on
AdK in water (47,681 atoms, compressed frames), on MDAnalysis's 5-atom XTC (fewer than 10 atoms:
stored uncompressed) and on its TRRs (single and double precision, with and without forces).
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.lib.formats.libmdaxdr import TRRFile as MDATRRFile
from MDAnalysis.lib.formats.libmdaxdr import XTCFile as MDAXTCFile
from MDAnalysisTests import datafiles as D

from trajscale.errors import InputFileError
from trajscale.xdr import _xdr
from trajscale.xdr.source import XDR_SCALE as SCALE
from trajscale.xdr.source import XDRSource, scan_part

FILES = {"adk-water": (D.GRO, D.XTC), "5-atoms": (D.COORDINATES_TOPOLOGY, D.COORDINATES_XTC)}
TRRS = {"adk-water": (D.GRO, D.TRR), "5-atoms": (D.COORDINATES_TOPOLOGY, D.COORDINATES_TRR),
        "xvf": (D.TPR_xvf, D.TRR_xvf)}


def _universe(name, files=FILES):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mda.Universe(*files[name])


@pytest.mark.parametrize("name", sorted(FILES))
def test_offsets_and_atoms_are_mdanalysis_s(name):
    path = FILES[name][1]
    n_atoms, offsets, *_ = _xdr.scan_xtc(path)
    ref = MDAXTCFile(path)
    assert n_atoms == ref.n_atoms
    np.testing.assert_array_equal(offsets, ref.offsets)
    info = scan_part(path)
    assert info["n_frames"] == len(ref.offsets) and info["n_atoms"] == ref.n_atoms


@pytest.mark.parametrize("name", sorted(FILES))
@pytest.mark.parametrize("how", ["all atoms", "selection", "first atoms", "strided"])
def test_frames_are_mdanalysis_s_bits(name, how):
    """Positions (Å), box, time and step of every frame read equal MDAnalysis's XTCReader's exactly;
    a selection decodes only up to its last atom and must not change a bit of what it decodes."""
    u = _universe(name)
    n = u.atoms.n_atoms
    sel = {"all atoms": None, "selection": np.arange(1, n, 3), "first atoms": np.arange(min(n, 3341) // 2),
           "strided": np.array([n - 1, 0])}[how]
    stride = 3 if how == "strided" else 1
    with XDRSource(FILES[name][1]) as src:
        assert src.n_frames == len(u.trajectory) and src.n_atoms == n
        block = src.read(0, src.n_frames, atoms=sel, stride=stride)
    frames = range(0, len(u.trajectory), stride)
    assert len(block.positions) == len(frames)
    for i, ts in enumerate(u.trajectory[::stride]):
        want = ts.positions if sel is None else ts.positions[sel]
        assert np.array_equal(block.positions[i], want), (how, ts.frame)
        assert np.array_equal(block.box[i], ts.dimensions.astype(np.float32)), ts.frame
        assert block.time[i] == pytest.approx(ts.time, abs=0, rel=0) and block.step[i] == ts.data["step"]


#: MDAnalysisTests' other XTCs: membrane and lipids (43,480 atoms), a solvated toxin, a random walk, 10 atoms, ...
MORE_XTCS = ["XTC_MEMPROT", "XTC_sub_sol", "RANDOM_WALK", "XTC_multi_frame", "AUX_EDR_XTC"]


def _written_xtcs(folder: Path) -> dict[str, tuple[str, np.ndarray, float]]:
    """XTCs written by MDAnalysis's writer (GROMACS's xdrfile encoder): ``{name: (path, nm, precision)}``.

    AdK in water at precisions from 10 to 1e5 (the first atom of a group in 20 to 59 bits); atoms
    thousands of nm apart (first atoms of 66 and 68 bits, and runs of more than 64 bits: decodeints'
    byte-wise path); ranges wider than 2^24 on an axis (three plain bit fields per first atom); and
    fewer than 10 atoms (stored as plain floats) next to 10 (the smallest compressed frame)."""
    rng = np.random.default_rng(11)
    water = np.array([frame.x[:3000] for _, frame in zip(range(2), MDAXTCFile(D.XTC), strict=False)])
    systems = {f"water-p{p:g}": (water, p) for p in (10.0, 100.0, 1e4, 1e5)}
    systems["apart-3000nm"] = (rng.uniform(-3000, 3000, (3, 500, 3)), 1000.0)
    systems["apart-2e4nm-p100"] = (rng.uniform(-2e4, 2e4, (3, 500, 3)), 100.0)
    systems["ranges-over-2^24"] = (rng.uniform(-1e5, 1e5, (2, 300, 3)), 100.0)
    for n in (1, 9, 10):
        systems[f"{n}-atoms"] = (rng.normal(0, 2, (3, n, 3)), 1000.0)
    out = {}
    for name, (frames, precision) in systems.items():
        path = str(folder / f"{name}.xtc")
        frames = frames.astype(np.float32)
        with MDAXTCFile(path, "w") as w:
            for i, x in enumerate(frames):
                w.write(x, np.eye(3, dtype=np.float32) * 5, i, float(i), precision)
        out[name] = (path, frames, precision)
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return _written_xtcs(tmp_path_factory.mktemp("written-xtcs"))


def _assert_mdanalysis_s_bits(path: str) -> np.ndarray:
    """Every frame's positions read by trajscale equal MDAnalysis's XTCReader's (xdrfile's decoder) exactly;
    MDAnalysis's positions, in nm."""
    from MDAnalysis.coordinates.XTC import XTCReader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = XTCReader(path)
        want = np.array([ts.positions.copy() for ts in ref])
    with XDRSource(path) as src:
        assert (src.n_frames, src.n_atoms) == want.shape[:2]
        got = src.read(0, src.n_frames).positions
        prefix = src.read(0, src.n_frames, atoms=np.arange(min(src.n_atoms, 7))).positions
    assert np.array_equal(got, want)
    assert np.array_equal(prefix, want[:, :7])
    return want / np.float32(10)


@pytest.mark.parametrize("name", MORE_XTCS)
def test_more_xtcs_are_mdanalysis_s_bits(name):
    _assert_mdanalysis_s_bits(getattr(D, name))


@pytest.mark.parametrize("name", ["water-p10", "water-p100", "water-p10000", "water-p100000", "apart-3000nm",
                                  "apart-2e4nm-p100", "ranges-over-2^24", "1-atoms", "9-atoms", "10-atoms"])
def test_xtcs_of_every_precision_and_size_are_mdanalysis_s_bits(written, name):
    """The files hold what was written (so MDAnalysis's decoding is a reference, not garbage read alike),
    and trajscale reads MDAnalysis's bits of them."""
    path, frames, precision = written[name]
    nm = _assert_mdanalysis_s_bits(path)
    # an integer of the precision, then a float product: half a step, and a few float32 roundings
    np.testing.assert_allclose(nm, frames, rtol=2e-7 * 4, atol=0.5 / precision * 1.001)



def test_a_byte_count_short_of_the_bits_read_is_refused(written):
    """The bit reader looks up to 9 bytes ahead of the bit it reads: a frame whose byte count ends before its
    last bits (by 1 byte to more than that look-ahead) is refused, on the 64-bit and the wider paths alike,
    never decoded from the bytes after the count (which read as zeros: a last run repeated past the atom
    count, or bits past the count)."""
    for name in ("water-p100", "apart-3000nm", "ranges-over-2^24"):
        path = written[name][0]
        n_atoms, offsets, *_ = _xdr.scan_xtc(path)
        data = Path(path).read_bytes()
        count = int.from_bytes(data[88:92], "big")
        rows = {"position": np.empty((1, n_atoms, 3), np.float32)}
        out = (np.empty((1, 3, 3), np.float32), np.empty(1), np.empty(1, np.int64))
        for short in (1, 4, 9, 12):
            damaged = Path(path).with_name(f"short{short}-{name}.xtc")
            damaged.write_bytes(data[:88] + (count - short).to_bytes(4, "big") + data[92:])
            f = _xdr.XTCFile(str(damaged), n_atoms)
            try:
                with pytest.raises(_xdr.XDRFormatError, match="past their byte count|run of atoms goes past"):
                    f.read(offsets, np.array([0], np.int64), None, rows, *out, SCALE)
            finally:
                f.close()


def test_frames_read_as_blocks_across_calls_reuse_no_stale_atoms():
    """Reading a prefix selection then every atom from the same open file: the second read is whole."""
    u = _universe("adk-water")
    with XDRSource(D.XTC) as src:
        src.read(2, 5, atoms=np.arange(10))
        whole = src.read(2, 5)
    for i, ts in enumerate(u.trajectory[2:5]):
        assert np.array_equal(whole.positions[i], ts.positions)


def test_a_cut_short_file_is_named_with_the_frame(tmp_path):
    part = tmp_path / "cut.xtc"
    shutil.copyfile(D.XTC, part)
    offsets = MDAXTCFile(D.XTC).offsets
    with open(part, "r+b") as fh:
        fh.truncate(int(offsets[7]) + 100)
    with pytest.raises(InputFileError, match=r"cut\.xtc.*frame 7 at byte \d+ is cut short"):
        scan_part(str(part), strict=True)


def test_not_an_xtc_is_one_clear_error(tmp_path):
    bad = tmp_path / "text.xtc"
    bad.write_bytes(b"this is not an XTC file at all")
    with pytest.raises(InputFileError, match=r"text\.xtc.*not an XTC file"):
        scan_part(str(bad))
    with pytest.raises(InputFileError, match=r"text\.xtc.*not an XTC file"):
        XDRSource(str(bad), offsets=np.array([0]))


def test_frames_with_another_atom_count_are_refused_under_strict(tmp_path):
    """Two XTCs glued together (47,681 then 5 atoms): the scan names the first frame that differs; without
    strict the first file's 10 frames are read."""
    glued = tmp_path / "glued.xtc"
    glued.write_bytes(Path(D.XTC).read_bytes() + Path(D.COORDINATES_XTC).read_bytes())
    with pytest.raises(InputFileError, match=r"glued\.xtc.*frame 10 at byte \d+ has 5 atoms, frame 0 has 47681"):
        scan_part(str(glued), strict=True)
    assert scan_part(str(glued))["n_frames"] == 10


def test_a_file_changed_after_its_scan_is_an_error_not_an_overrun(tmp_path):
    """Offsets shipped to a worker, then the part replaced by one with fewer atoms per frame: the
    decoder checks each frame's header before decoding into its buffer."""
    part = tmp_path / "part.xtc"
    shutil.copyfile(D.COORDINATES_XTC, part)
    cfg = XDRSource(str(part)).get_config()
    big = tmp_path / "big.xtc"
    shutil.copyfile(D.XTC, big)
    os.replace(big, part)
    with XDRSource(cfg["path"], n_atoms=cfg["n_atoms"], offsets=cfg["offsets"]) as src, \
            pytest.raises(InputFileError, match=r"part\.xtc.*frame 0 has 47681 atoms, not 5"):
        src.read(0, 1)


def test_decoder_refuses_rows_that_do_not_fit():
    n, offsets, *_ = _xdr.scan_xtc(D.XTC)
    f = _xdr.XTCFile(D.XTC, n)
    frames = np.arange(3, dtype=np.int64)
    edges, t, st = np.empty((3, 3, 3), np.float32), np.empty(3), np.empty(3, np.int64)
    with pytest.raises(ValueError, match="do not fit"):
        f.read(offsets, frames, None, {"position": np.empty((3, 10, 3), np.float32)}, edges, t, st, SCALE)
    with pytest.raises(IndexError, match="atom indices"):
        f.read(offsets, frames, np.array([n], np.intp), {"position": np.empty((3, 1, 3), np.float32)}, edges, t,
               st, SCALE)
    f.close()
    with pytest.raises(ValueError, match="closed"):
        f.read(offsets, frames, None, {"position": np.empty((3, n, 3), np.float32)}, edges, t, st, SCALE)


@pytest.mark.cli
def test_cached_run_on_an_xtc_imports_neither_mdanalysis_nor_scipy(tmp_path, monkeypatch):
    """An XTC with its topology and selection cached: no MDAnalysis, no SciPy (0.5 s of a process),
    and MDAnalysis's RMSD over the same frames."""
    from tests.topology.test_selection_cache import _mda_rmsd, _not_imported, _run

    monkeypatch.setenv("TRAJSCALE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRAJSCALE_TOPOLOGY_CACHE", raising=False)
    # (a TPR: MDAnalysis parses it the first time; a GRO or PDB is read from its columns even then)
    top, traj = tmp_path / "adk.tpr", tmp_path / "adk.xtc"
    shutil.copyfile(D.TPR, top)
    shutil.copyfile(D.XTC, traj)
    sel = "protein and name CA"
    first = _run("cli", top, traj, sel, tmp_path)
    assert "MDAnalysis" in first["modules"]   # the first run parses the topology and evaluates the selection
    second = _run("cli", top, traj, sel, tmp_path)
    assert _not_imported(second) == []
    np.testing.assert_allclose(second["rmsd"], _mda_rmsd(top, traj, sel), atol=1e-4, rtol=0)


# ------------------------------------------------------------------ TRR


@pytest.mark.parametrize("name", ["COORDINATES_TRR", "SURFACE_TRR", "TRR", "TRR_multi_frame", "TRR_sub_sol",
                                  "TRR_xvf"])
def test_trr_offsets_atoms_and_fields_are_mdanalysis_s(name):
    path = getattr(D, name)
    n_atoms, offsets, fields, *_ = _xdr.scan_trr(path)
    ref = MDATRRFile(path)
    assert n_atoms == ref.n_atoms
    np.testing.assert_array_equal(offsets, ref.offsets)
    first = next(iter(MDATRRFile(path)))
    has_fields = (first.hasx, first.hasv, first.hasf)
    assert fields == tuple(f for f, has in zip(_xdr.TRR_FIELDS, has_fields, strict=False) if has)
    assert scan_part(path)["n_frames"] == len(ref.offsets)


@pytest.mark.parametrize("name", sorted(TRRS))
@pytest.mark.parametrize("how", ["all atoms", "selection", "strided"])
def test_trr_frames_are_mdanalysis_s_bits(name, how):
    """Positions, velocities and forces (MDAnalysis's units), box, time and step of every frame equal
    MDAnalysis's TRRReader's exactly."""
    u = _universe(name, TRRS)
    n = u.atoms.n_atoms
    sel = {"all atoms": None, "selection": np.arange(1, n, 3), "strided": np.array([n - 1, 0])}[how]
    stride = 2 if how == "strided" else 1
    with XDRSource(TRRS[name][1]) as src:
        fields = src.fields
        block = src.read(0, src.n_frames, atoms=sel, fields=fields, stride=stride)
    pick = slice(None) if sel is None else sel
    got = {"position": block.positions, "velocity": block.velocities, "force": block.forces}
    for i, ts in enumerate(u.trajectory[::stride]):
        want = {"position": ts.positions, "velocity": ts.velocities if ts.has_velocities else None,
                "force": ts.forces if ts.has_forces else None}
        for field in fields:
            assert np.array_equal(got[field][i], want[field][pick]), (field, ts.frame)
        assert np.array_equal(block.box[i], ts.dimensions.astype(np.float32)), ts.frame
        assert block.time[i] == ts.time and block.step[i] == ts.data["step"]


def _trr_with_forces_in_frame_0_only(path):
    rng = np.random.default_rng(5)
    box = np.eye(3, dtype=np.float32) * 3
    with MDATRRFile(str(path), "w") as w:
        x = rng.random((7, 3), dtype=np.float32)
        w.write(x, x, x, box, 0, 0.0, 0.0, 7)
        w.write(x, x, None, box, 1, 1.0, 0.0, 7)


def test_a_trr_frame_without_a_wanted_field_is_named(tmp_path):
    part = tmp_path / "mixed.trr"
    _trr_with_forces_in_frame_0_only(part)
    with XDRSource(str(part)) as src:
        assert src.fields == ("position", "velocity", "force")   # the first frame's
        assert np.array_equal(src.read(0, 2, fields=("position",)).positions[1],
                              next(iter(MDATRRFile(str(part)))).x * np.float32(10))
        with pytest.raises(InputFileError, match=r"mixed\.trr.*frame 1 has no force data"):
            src.read(0, 2, fields=("position", "force"))


def test_a_cut_short_trr_and_not_a_trr_are_named(tmp_path):
    part = tmp_path / "cut.trr"
    shutil.copyfile(D.TRR, part)
    offsets = MDATRRFile(D.TRR).offsets
    with open(part, "r+b") as fh:
        fh.truncate(int(offsets[4]) + 500)
    with pytest.raises(InputFileError, match=r"cut\.trr.*frame 4 at byte \d+ is cut short"):
        scan_part(str(part), strict=True)
    bad = tmp_path / "text.trr"
    bad.write_bytes(b"this is not a TRR file at all, nor anything else")
    with pytest.raises(InputFileError, match=r"text\.trr.*not a TRR file"):
        scan_part(str(bad))


def test_a_trr_changed_after_its_scan_is_an_error_not_an_overrun(tmp_path):
    part = tmp_path / "part.trr"
    shutil.copyfile(D.COORDINATES_TRR, part)
    cfg = XDRSource(str(part)).get_config()
    shutil.copyfile(D.TRR, tmp_path / "big.trr")
    os.replace(tmp_path / "big.trr", part)
    with pytest.raises(InputFileError, match=r"part\.trr.*has 47681 atoms per frame, expected 5"):
        XDRSource(cfg["path"], n_atoms=cfg["n_atoms"], offsets=cfg["offsets"]).read(0, 1)
