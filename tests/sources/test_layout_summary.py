"""Each source kind states its layout facts: against h5py's view of the file and MDAnalysis's reader,
under the JSON keys run reports have always had, and unchanged through a report's JSON."""

from __future__ import annotations

import json
import os

import h5py
import MDAnalysis as mda
import pytest
from MDAnalysisTests import datafiles as D

import trajscale as ts
from trajscale.convert.rechunk import rechunk
from trajscale.convert.split import split
from trajscale.facts import CONTIGUOUS, LayoutFacts
from trajscale.h5md.layout import Layout
from trajscale.report.timing import RunReport
from trajscale.sources import MDASource, SegmentedSource, XDRSource, open_source

POS = "particles/all/position/value"

#: The keys of each kind's ``source`` section, in order, as reports wrote them before the record.
H5MD_KEYS = ["format", "path", "group", "n_frames", "n_atoms", "fields", "units", "assumed_units", "dtype", "chunks",
             "compression", "read_amplification", "planned_chunks", "precision", "read_amplification_hdf5_default",
             "file_bytes", "warnings", "direct_reads", "collective_open"]
KEYS = {"part": ["format", "path", "n_atoms", "decoding"], "mda": ["format", "path", "n_files", "n_atoms", "decoding"],
        "segments": ["format", "path", "n_segments", "segment_formats", "n_atoms"]}


def _round_trip(facts: LayoutFacts) -> dict:
    """``facts`` as a report's JSON holds it, checked to read back as the same record."""
    d = json.loads(json.dumps(facts.to_dict()))
    assert LayoutFacts.from_dict(d) == facts
    return d


@pytest.fixture(scope="module")
def gzip_deltas(tmp_path_factory, adk_vacuum_h5md):
    """The PSF/DCD trajectory in chunks of 7 frames, gzip level 3, positions rounded to 0.01 Å as deltas."""
    out = tmp_path_factory.mktemp("facts") / "gz.h5md"
    rechunk(adk_vacuum_h5md, out, Layout.parse("7", "gzip:3"), precision=0.01, encoding="deltas")
    return str(out)


@pytest.mark.parametrize("which", ["frame chunks", "gzip deltas"])
def test_h5md_facts_are_the_files(which, adk_vacuum, adk_vacuum_h5md, gzip_deltas):
    path = adk_vacuum_h5md if which == "frame chunks" else gzip_deltas
    u = mda.Universe(*adk_vacuum)
    with open_source(path) as src:
        facts = src.layout_summary()
    with h5py.File(path, "r") as f:
        ds = f[POS]
        chunks, comp, opts, dtype = ds.chunks, ds.compression, ds.compression_opts, str(ds.dtype)
    assert (facts.format, facts.path, facts.group) == ("h5md", path, "all")
    assert (facts.n_frames, facts.n_atoms) == (u.trajectory.n_frames, u.atoms.n_atoms)
    assert facts.chunks == chunks and facts.dtype == dtype and facts.file_bytes == os.path.getsize(path)
    assert facts.compression == ("none" if comp is None else f"{comp}:{opts}")
    d = _round_trip(facts)
    assert list(d) == H5MD_KEYS and d["chunks"] == list(chunks)
    if which == "frame chunks":
        assert chunks == (1, u.atoms.n_atoms, 3) and facts.precision is None and d["precision"] is None
    else:
        assert comp == "gzip" and opts == 3 and chunks[0] == 7
        assert facts.precision.angstrom == pytest.approx(0.01) and facts.precision.option == "deltas"
        assert d["precision"]["option"] == "deltas"


def test_contiguous_h5md(tmp_path, adk_vacuum_h5md):
    out = tmp_path / "flat.h5md"
    rechunk(adk_vacuum_h5md, out, Layout.parse("contiguous", "none"))
    with h5py.File(out, "r") as f:
        assert f[POS].chunks is None
    with open_source(str(out)) as src:
        facts = src.layout_summary()
    assert facts.chunks == CONTIGUOUS and _round_trip(facts)["chunks"] == "contiguous"


def test_xtc_part_facts(adk_water):
    u = mda.Universe(adk_water["gro"], adk_water["xtc"])
    with XDRSource(adk_water["xtc"]) as src:
        facts = src.layout_summary()
    assert facts == LayoutFacts(format="XTC", path=adk_water["xtc"], n_atoms=u.atoms.n_atoms,
                                decoding="prefix:trajscale's XTC decoder")   # up to the last selected atom
    assert list(_round_trip(facts)) == KEYS["part"]


@pytest.mark.parametrize("trajectories", [[D.DCD], [D.DCD, D.DCD]])
def test_mdanalysis_format_facts(trajectories):
    u = mda.Universe(D.PSF, trajectories)
    with MDASource(D.PSF, trajectories) as src:
        facts = src.layout_summary()
    assert facts == LayoutFacts(format="DCD" if len(trajectories) == 1 else "CHAIN", path=D.DCD,
                                n_files=len(trajectories), n_atoms=u.atoms.n_atoms, decoding="whole:MDAnalysis")
    assert list(_round_trip(facts)) == KEYS["mda"]


def test_segment_facts(tmp_path, adk_vacuum, adk_vacuum_h5md):
    u = mda.Universe(*adk_vacuum)
    folder = split(adk_vacuum_h5md, tmp_path / "parts", 4)
    with SegmentedSource(folder) as src:
        facts = src.layout_summary()
        n_segments = len(src.segments)
    assert n_segments == 4
    assert (facts.format, facts.n_segments, facts.segment_formats, facts.n_atoms) == ("segments", 4, "H5MD",
                                                                                      u.atoms.n_atoms)
    assert list(_round_trip(facts)) == KEYS["segments"]


def test_xtc_parts_facts(tmp_path):
    u = mda.Universe(D.GRO, D.XTC)
    parts = []
    for k, (a, b) in enumerate([(0, 4), (4, 10)]):
        parts.append(str(tmp_path / f"traj.part{k + 1:04d}.xtc"))
        with mda.Writer(parts[-1], u.atoms.n_atoms) as w:
            for _ in u.trajectory[a:b]:
                w.write(u.atoms)
    with SegmentedSource.from_parts(parts, D.GRO) as src:
        facts = src.layout_summary()
    assert facts == LayoutFacts(format="segments", path=parts[0], n_segments=2, segment_formats="XTC",
                                n_atoms=u.atoms.n_atoms, decoding="prefix:trajscale's XTC decoder")


def test_a_run_records_its_own_reads_and_the_report_keeps_them(tmp_path, adk_vacuum, adk_vacuum_h5md):
    """The run adds what its reads cost; the report's JSON carries the same facts back."""
    r = ts.run(ts.RMSD(select="name CA"), adk_vacuum[0], adk_vacuum_h5md, n_tasks=2)
    own = r.report.source.run_read
    n_ca = mda.Universe(*adk_vacuum).select_atoms("name CA").n_atoms
    assert own is not None and own.n_atoms == n_ca and own.frames_per_task == 49 and own.selection == "name CA"
    assert own.topology == adk_vacuum[0] and own.amplification >= 1.0
    path = tmp_path / "r.json"
    r.report.write(path)
    assert RunReport.load(path).source == r.report.source
    assert json.loads(path.read_text())["source"]["run_read"]["frames_per_task"] == 49
