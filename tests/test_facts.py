"""Layout facts as a record: every fact survives JSON, and a report written by an earlier version
(a plain ``source`` dict, keys missing, values of any type) still loads and still gets its advice."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.report._synth import make_report
from trajscale.errors import InputFileError
from trajscale.facts import CONTIGUOUS, LayoutFacts, Precision, RunRead
from trajscale.report.advice import RULES, kept_options
from trajscale.report.diagnose import measure
from trajscale.report.timing import RunReport

EVERY_FACT = LayoutFacts(
    format="h5md", path="/data/t.h5md", group="all", n_frames=98, n_files=1, n_segments=4,
    segment_formats="H5MD,XTC", n_atoms=3341, fields=("position", "velocity"),
    units=(("position", "nm"), ("time", "ps")), assumed_units="nm", dtype="<f4", chunks=(7, 3341, 3),
    compression="gzip:3", read_amplification=(("one frame", 7.0), ("block of 98 frames", 1.02)),
    planned_chunks=(52, 3341, 3), precision=Precision(0.01, 0.001, "uint16-deltas", "deltas"),
    read_amplification_hdf5_default=(("one frame", 21.5),), file_bytes=123456, warnings=("slow",),
    direct_reads=("position",), decoding="whole:trajscale's delta decoder", trace_dir="/tmp/trace",
    run_read=RunRead(214, 25, 2, 3.5, 4.25, (("--chunks auto", 1.5), ("--chunks frame", None)),
                     "name CA", "adk.psf"),
    collective_open=True, validator="ETag \"abc\": every replacement is refused", validator_complete=True)


def test_every_fact_survives_json():
    """A record with every field set comes back equal: no field is left out of the JSON or its reading."""
    assert all(getattr(EVERY_FACT, f.name) is not None for f in dataclasses.fields(LayoutFacts))
    back = LayoutFacts.from_dict(json.loads(json.dumps(EVERY_FACT.to_dict())))
    assert back == EVERY_FACT


def test_json_keys_are_those_reports_always_had():
    d = EVERY_FACT.to_dict()
    assert d["chunks"] == [7, 3341, 3] and d["read_amplification"] == {"one frame": 7.0, "block of 98 frames": 1.02}
    assert d["precision"] == {"angstrom": 0.01, "quantum": 0.001, "encoding": "uint16-deltas", "option": "deltas"}
    assert d["run_read"] == {"n_atoms": 214, "frames_per_task": 25, "step": 2, "amplification": 3.5,
                             "amplification_hdf5_default": 4.25,
                             "alternatives": {"--chunks auto": 1.5, "--chunks frame": None},
                             "selection": "name CA", "topology": "adk.psf"}
    assert LayoutFacts(chunks=CONTIGUOUS).to_dict()["chunks"] == "contiguous"
    # an H5MD group states "no units assumed" and "lossless"; another source has neither key
    assert LayoutFacts(format="h5md", chunks=CONTIGUOUS).to_dict() == {
        "format": "h5md", "assumed_units": None, "chunks": "contiguous", "precision": None}
    assert LayoutFacts(format="XTC", path="a.xtc", n_atoms=5).to_dict() == {"format": "XTC", "path": "a.xtc",
                                                                             "n_atoms": 5}


#: The ``source`` section of a report written by the version before the record (``trajscale run rmsd
#: adk.psf gz.h5md --select "name CA" --tasks 2 --report r.json`` on a file rechunked with ``--chunks 7
#: --compression gzip:3 --precision 0.01 --encoding deltas``; paths shortened), as its JSON text.
SAVED_BY_EARLIER_VERSION = (
    '{"format": "h5md", "path": "gz.h5md", "group": "all", "n_frames": 98, "n_atoms": 3341, "fields": ["position"], '
    '"units": {"position": "Angstrom", "time": "ps"}, "assumed_units": null, "dtype": "uint16", '
    '"chunks": [7, 3341, 3], "compression": "gzip:3", "read_amplification": {"one frame": 7.0, "all 98 frames": 1.0, '
    '"150-atom subset, all 98 frames": 22.27, "scattered selection (CA + last atom), all 98 frames": 15.12}, '
    '"planned_chunks": [104, 3341, 3], "precision": {"angstrom": 0.01, "quantum": 0.01, '
    '"encoding": "atom-refs-zigzag-uint16", "option": "deltas"}, "read_amplification_hdf5_default": '
    '{"one frame": 7.0, "all 98 frames": 1.0, "150-atom subset, all 98 frames": 22.27, '
    '"scattered selection (CA + last atom), all 98 frames": 15.12}, "file_bytes": 1254762, "warnings": [], '
    '"direct_reads": [], "run_read": {"n_atoms": 214, "frames_per_task": 49, "step": 1, "amplification": 15.61, '
    '"amplification_hdf5_default": 15.61, "alternatives": {"--chunks auto": 33.14, "--chunks frame": 15.61}, '
    '"selection": "name CA", "topology": "adk.psf"}}')


def test_a_saved_source_section_is_written_back_as_it_was():
    """Same keys, same order, same values: a report's JSON does not change with the record."""
    facts = LayoutFacts.from_dict(json.loads(SAVED_BY_EARLIER_VERSION))
    assert json.dumps(facts.to_dict()) == SAVED_BY_EARLIER_VERSION
    assert facts.chunks == (7, 3341, 3) and facts.precision.option == "deltas" and facts.warnings == ()
    assert facts.run_read.alternatives == (("--chunks auto", 33.14), ("--chunks frame", 15.61))
    assert kept_options(facts) == " --compression gzip:3 --precision 0.01 --encoding deltas"


#: A report's ``source`` section as versions before the layout facts' record wrote it: no run_read,
#: planned_chunks, precision or option; a hand-edited value of the wrong type.
OLD_SOURCE = {"format": "h5md", "path": "slow.h5md", "chunks": [32, 1000, 3], "n_atoms": 3341,
              "compression": "gzip:4", "read_amplification": {"one frame": 8.0, "block of 100 frames": 1.28,
                                                              "150-atom subset, 100 frames": 21.0,
                                                              "broken": "n/a"},
              "warnings": ["chunks hold 32 frames"], "n_frames": "ninety-eight"}


def test_a_report_of_an_earlier_version_loads_and_gets_its_advice(tmp_path):
    rep = make_report(n_workers=2, n_atoms=214)
    d = rep.to_dict()
    d["source"] = OLD_SOURCE
    path = tmp_path / "old.json"
    path.write_text(json.dumps(d))
    back = RunReport.load(path)
    src = back.source
    assert src.chunks == (32, 1000, 3) and src.n_atoms == 3341 and src.compression == "gzip:4"
    assert src.n_frames is None and src.run_read is None and src.precision is None and src.planned_chunks is None
    assert dict(src.read_amplification) == {"one frame": 8.0, "block of 100 frames": 1.28,
                                            "150-atom subset, 100 frames": 21.0}
    assert kept_options(src) == " --compression gzip:4"
    # no cost of the run's own reads: the advice works from the file's patterns (the subset's 21x)
    advice = RULES["chunk-amplification"](back, measure(back))
    assert advice is not None and "--chunks auto --compression gzip:4" in advice.message
    # an earlier report records no read of its own: the advice names the file's test read as such
    assert ('chunks (32, 1000, 3): the file\'s test read "150-atom subset, 100 frames" (trajscale inspect) '
            'costs 21.0x') in advice.reason


@pytest.mark.parametrize("source", [None, {}, {"format": 7, "path": None, "chunks": "odd", "precision": "lossy",
                                               "run_read": {"amplification": "high"}, "units": ["nm"]}])
def test_missing_or_odd_facts_are_facts_not_recorded(tmp_path, source):
    d = make_report().to_dict()
    d["source"] = source
    path = tmp_path / "r.json"
    path.write_text(json.dumps(d))
    src = RunReport.load(path).source
    assert src.chunks is None and src.precision is None and src.run_read is None and src.units is None
    assert src.format in (None, "7") and src.path is None


@pytest.mark.parametrize("source", [[1, 2], "h5md", 3])
def test_a_source_section_that_is_no_object_is_a_bad_report(tmp_path, source):
    d = make_report().to_dict()
    d["source"] = source
    path = tmp_path / "r.json"
    path.write_text(json.dumps(d))
    with pytest.raises(InputFileError, match="not a trajscale run report"):
        RunReport.load(path)


def test_old_precision_without_option_still_keeps_the_encoding():
    """Reports of before ``option`` was recorded: a delta encoding is rewritten with ``--encoding deltas``."""
    src = LayoutFacts.from_dict({"compression": "blosc-lz4",
                                 "precision": {"angstrom": 0.01, "quantum": 0.001, "encoding": "uint16-deltas"}})
    assert src.precision == Precision(0.01, 0.001, "uint16-deltas", None)
    assert kept_options(src) == " --compression blosc-lz4 --precision 0.01 --encoding deltas"


def test_records_are_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        EVERY_FACT.n_atoms = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        EVERY_FACT.run_read.amplification = 1.0
    hash(EVERY_FACT)   # plain values all the way down
