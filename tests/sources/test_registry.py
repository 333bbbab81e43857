"""The format registry: one place decides which Source reads a file, from the file's own bytes; every caller
(run, convert, inspect, segments, following) gets that Source; other packages add Sources by entry point."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.coordinates.DCD import DCDReader
from MDAnalysisTests import datafiles as D

from trajscale.errors import ConfigError, InputFileError
from trajscale.npy.source import NumpySource
from trajscale.sources import (
    H5MDSource,
    MDAPartSource,
    MDASource,
    SegmentedSource,
    XDRSource,
    open_source,
    registry,
    source_from_config,
)
from trajscale.sources.base import OpenRequest, Source
from trajscale.storage.location import Location


@pytest.mark.parametrize("original,renamed,cls,fmt", [
    (D.XTC, "traj.dat", XDRSource, "XTC"), (D.TRR, "traj.bin", XDRSource, "TRR"),
    (D.DCD, "traj.xtc", MDAPartSource, "DCD"), (D.H5MD_xvf, "traj.nc", H5MDSource, "H5MD")])
def test_the_bytes_decide_not_the_name(tmp_path, original, renamed, cls, fmt):
    """A file under a misleading name is still read by its format's Source (and its frames are right)."""
    path = shutil.copyfile(original, tmp_path / renamed)
    match = registry.guess(Location(path))
    assert (match.source, match.format) == (cls, fmt)
    with open_source(path) as src, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = mda.coordinates.core.get_reader_for(original)(original)
        assert type(src) is cls and src.n_frames == ref.n_frames
        np.testing.assert_allclose(src.read(1, 2).positions[0], ref[1].positions, atol=1e-4)
        ref.close()


def test_a_segment_index_is_told_by_its_marker(tmp_path):
    parts = [str(shutil.copyfile(D.XTC, tmp_path / f"p{i}.xtc")) for i in range(2)]
    from trajscale.sources.segments import write_index

    with SegmentedSource.from_parts(parts) as src:
        write_index(tmp_path / "chain.listing", src.segments, src.n_atoms)
    assert registry.guess(Location(tmp_path / "chain.listing")).source is SegmentedSource
    (tmp_path / "other.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(InputFileError, match="segment index"):   # a .json that is not one: the index's error
        open_source(tmp_path / "other.json")


def test_an_unknown_format_is_one_line_listing_what_is_read(tmp_path):
    junk = tmp_path / "notes.bin"
    junk.write_bytes(b"these are not coordinates\n" * 10)
    with pytest.raises(InputFileError) as err:
        open_source(junk)
    msg = str(err.value)
    assert "\n" not in msg and str(junk) in msg
    for fmt in [f for cls in registry.format_sources() for f in cls.formats] + ["MDAnalysis"]:
        assert fmt in msg


def test_damaged_files_get_their_formats_own_error(tmp_path):
    """No magic number to tell the format by: the name ending picks the Source, whose reader names the damage."""
    bad = tmp_path / "cut.xtc"
    bad.write_bytes(b"\0" * 100)
    with pytest.raises(InputFileError, match="cannot be read as XTC"):
        open_source(bad)
    empty = tmp_path / "empty.dcd"
    empty.write_bytes(b"")
    with pytest.raises(InputFileError, match="empty"):
        open_source(empty)


def test_h5md_options_for_another_format_are_refused():
    with pytest.raises(ConfigError, match="apply to H5MD"):
        open_source(D.DCD, group="protein")


def test_every_format_has_one_source_and_declares_itself():
    """Each registered Source names its formats, its suffixes map to them, and no format has two Sources."""
    seen: dict[str, str] = {}
    for cls in registry.format_sources():
        assert issubclass(cls, Source) and cls.formats and cls.description and cls.kind
        assert set(cls.suffixes.values()) <= set(cls.formats), cls
        for fmt in cls.formats:
            assert fmt not in seen, f"{fmt} read by {seen.get(fmt)} and {cls.__name__}"
            seen[fmt] = cls.__name__
        assert registry.for_format(cls.formats[0]) is cls
    assert registry.for_format("NCDF") is MDAPartSource   # a format only MDAnalysis names
    assert registry.source_class("mda") is MDASource      # made by callers, reopened from configs


def test_every_kind_is_one_record_its_source_restates_nothing():
    """Every kind of Source trajscale has (its formats' and those made by other Sources or from configs) is found
    from its record alone, and its class reads that record: no class between it and :class:`Source` sets a
    trait itself (a growing H5MD file's differs from H5MD's by its own record, not by an attribute)."""
    import dataclasses

    from trajscale.formats import FormatTraits, own_kinds
    from trajscale.sources.base import Trait

    traits = {f.name for f in dataclasses.fields(FormatTraits)} & {n for n, v in vars(Source).items()
                                                                      if isinstance(v, Trait)}
    assert {"kind", "formats", "supports_mpio", "decode_s_per_atom", "snapshots", "worker_modules", "reads_urls",
            "kept_on_node", "replaced_each_round"} <= traits
    assert not hasattr(registry, "OTHER_SOURCES")
    assert {"mda", "growing_h5md", "ensemble"} <= set(own_kinds())
    for kind in own_kinds():
        cls = registry.source_class(kind)
        assert cls.kind == cls.traits.kind == kind
        restated = {(k.__name__, n) for k in cls.__mro__ if issubclass(k, Source) and k is not Source
                    for n in (traits | {"decoding_of"}) & set(vars(k))}   # (nor says one in code)
        assert not restated, restated
        assert all(getattr(cls, n) == getattr(cls.traits, n) for n in traits)
    assert registry.decoding_of("DCD") == registry.decoding_of("NCDF") == "whole:MDAnalysis"   # (every format's)
    growing, h5md = registry.source_class("growing_h5md"), registry.source_class("h5md")
    assert issubclass(growing, h5md) and h5md.supports_mpio and not growing.supports_mpio


def test_the_root_registers_every_record_in_the_package():
    """Every FormatTraits a ``traits.py`` declares is registered by the package's root (no layer below names a
    format: registration points down), each kind once, files matched only to the formats (a kind made by
    another Source is never asked about a file), and the engine's own analyses are found by name."""
    import importlib
    from pathlib import Path

    import trajscale
    from trajscale import registered
    from trajscale.formats import FormatTraits, own_kinds, own_traits, traits_of

    declared, pkg = {}, Path(trajscale.__file__).parent
    for path in sorted(pkg.rglob("traits.py")):
        module = importlib.import_module("trajscale." + ".".join(path.relative_to(pkg).with_suffix("").parts))
        declared.update({f"{module.__name__}:{n}": v for n, v in vars(module).items() if isinstance(v, FormatTraits)})
    assert set(declared) == set(registered.FORMATS) | set(registered.KINDS)
    assert not set(registered.FORMATS) & set(registered.KINDS)
    assert sorted(own_kinds()) == sorted({t.kind for t in declared.values()})
    assert {t.kind for t in own_traits()} == {declared[t].kind for t in registered.FORMATS}
    assert all(traits_of(t.kind) is t for t in declared.values())
    from trajscale.analysis import analysis_class

    assert [analysis_class(n).__module__ for n in registered.ANALYSES] == \
        [t.partition(":")[0] for t in registered.ANALYSES.values()]


def test_what_a_format_declares_is_what_its_source_says(tmp_path):
    """The registry passes a file by the Sources whose declared first bytes it lacks, without importing them
    (each format's :class:`~trajscale.formats.FormatTraits`): each of its own Sources carries its format's
    record, whose formats and name endings are the class's, and no Source recognises a file (of every format
    here) that begins otherwise than its record declares."""
    from trajscale.formats import own_traits
    from trajscale.sources.segments import write_index

    np.save(tmp_path / "x.npy", np.zeros((2, 3, 3), np.float32))
    with SegmentedSource.from_parts([D.XTC]) as src:
        write_index(tmp_path / "chain.listing", src.segments, src.n_atoms)
    files = [D.XTC, D.TRR, D.DCD, D.H5MD_xvf, D.PSF, str(tmp_path / "x.npy"), str(tmp_path / "chain.listing"),
             str(tmp_path)]
    recognised = set()
    for traits in own_traits():
        cls = registry.source_class(traits.kind)
        assert cls.traits is traits and cls.formats == traits.formats and cls.suffixes == traits.suffixes
        for path in files:
            if cls.guess_format(path) is not None:
                recognised.add(cls.guess_format(path))
                head = open(path, "rb").read(registry.HEAD_BYTES) if os.path.isfile(path) else b""
                assert traits.begins is None or head.startswith(traits.begins), (traits.kind, path)
    assert recognised >= {"XTC", "TRR", "DCD", "H5MD", "NPY", "SEGMENTS"}
    # mdCATH is asked before H5MD (any HDF5 file), and MDAnalysis's one-file reader after every other
    kinds = [t.kind for t in own_traits()]
    assert kinds.index("mdcath") < kinds.index("h5md") and kinds[-1] == "mda_part"


def test_following_is_what_the_sources_declare():
    """Every Source that says it can be followed names how a snapshot is taken, and that function exists; no
    other Source names one (sources.follow asks the Source, never its format's name)."""
    from trajscale.sources.follow import snapshot_taker

    sources = registry.format_sources()
    assert {cls.kind for cls in sources if cls.snapshots} == {cls.kind for cls in sources if cls.supports_following}
    assert {"xdr", "h5md", "segments"} <= {cls.kind for cls in sources if cls.supports_following}
    assert all(callable(snapshot_taker(cls)) for cls in sources if cls.supports_following)


def test_following_a_format_that_cannot_be_followed_is_one_line():
    from trajscale.sources.follow import snapshot

    with pytest.raises(InputFileError, match="cannot be followed: DCD") as err:
        snapshot(D.DCD)
    assert "XTC" in str(err.value) and "H5MD" in str(err.value)


# ------------------------------------------------------------------ DCD: one Source in run, convert and inspect


@pytest.fixture
def opened(monkeypatch):
    """Every Source class made in this process while the test runs (the classes themselves are real)."""
    made: list[type] = []
    for cls in (MDAPartSource, MDASource, XDRSource, H5MDSource):
        real = cls.__init__

        def spy(self, *a, _real=real, **k):
            made.append(type(self))
            _real(self, *a, **k)
        monkeypatch.setattr(cls, "__init__", spy)
    return made


def test_dcd_is_read_by_one_source_in_run_convert_and_inspect(tmp_path, opened, capsys):
    from MDAnalysis.analysis import rms

    import trajscale
    from trajscale.cli.inspect import main as inspect_main
    from trajscale.cli.main import build_parser
    from trajscale.convert.convert import convert

    u = mda.Universe(D.PSF, D.DCD)
    ref = DCDReader(D.DCD)
    expect = np.array([ts.positions.copy() for ts in ref])
    times = np.array([ts.time for ts in ref])
    done = trajscale.run(trajscale.RMSD(select="name CA"), D.PSF, D.DCD, executor="serial")
    assert set(opened) == {MDAPartSource}, opened
    ref_rmsd = rms.RMSD(u, select="name CA").run().results.rmsd[:, 2]
    np.testing.assert_allclose(done.rmsd, ref_rmsd, atol=1e-4)

    opened.clear()
    out = tmp_path / "adk.h5md"
    convert(D.PSF, [D.DCD], str(out))
    assert set(opened) == {MDAPartSource}, opened
    with h5py_file(out) as f:
        np.testing.assert_array_equal(f["particles/all/position/value"][()], expect)

    opened.clear()
    args = build_parser("inspect").parse_args(["inspect", D.DCD, "--json"])   # the CLI's own options, all of them
    assert inspect_main(args) == 0
    assert set(opened) == {MDAPartSource}, opened
    facts = json.loads(capsys.readouterr().out)
    assert (facts["format"], facts["source"]) == ("dcd", "MDAPartSource")
    assert (facts["n_frames"], facts["n_atoms"]) == (ref.n_frames, ref.n_atoms)
    assert facts["units"] == DCDReader.units
    assert facts["time"]["first"] == pytest.approx(times[0]) and facts["time"]["last"] == pytest.approx(times[-1])
    ref.close()


def h5py_file(path):
    import h5py

    return h5py.File(path, "r")


# ------------------------------------------------------------------ a Source from another package


PLUGIN = '''
"""A real third-party Source: raw little-endian float32 frames after a 16-byte header."""
import numpy as np
from trajscale.sources.base import Source, file_head
from trajscale.block import Block

MAGIC = b"RAWF32\\0\\0"


class RawSource(Source):
    kind = "rawf32"
    formats = ("RAWF32",)
    description = "raw float32 frames"
    supports_parts = True

    def __init__(self, path, n_atoms=None):
        self._path = str(path)
        head = np.fromfile(self._path, dtype="<i4", count=4)
        self._frames = np.memmap(self._path, dtype="<f4", mode="r", offset=16,
                                 shape=(int(head[2]), int(head[3]), 3))

    @classmethod
    def guess_format(cls, path):
        return "RAWF32" if file_head(path, 8) == MAGIC else None

    @classmethod
    def open(cls, path, request):
        return cls(path, request.n_atoms)

    path = property(lambda self: self._path)
    n_frames = property(lambda self: self._frames.shape[0])
    n_atoms = property(lambda self: self._frames.shape[1])

    def get_config(self):
        return {"kind": self.kind, "path": self._path}

    def read(self, start, stop, atoms=None, fields=("position",), stride=1):
        self.check_range(start, stop)
        rows = np.array(self._frames[start:stop:stride] if atoms is None else self._frames[start:stop:stride][:, atoms])
        n = len(rows)
        return Block(start, stop, rows, np.zeros((n, 6), np.float32), np.arange(start, stop, stride, dtype=float),
                     np.arange(start, stop, stride, dtype=np.int64), stride=stride)
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A package installed the way pip leaves one (a module and its dist-info with an entry point), found
    through ``sys.path``: nothing is installed into the environment."""
    site = tmp_path / "site"
    (site / "rawplugin-1.0.dist-info").mkdir(parents=True)
    (site / "rawplugin.py").write_text(textwrap.dedent(PLUGIN))
    (site / "rawplugin-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: rawplugin\nVersion: 1.0\n")
    (site / "rawplugin-1.0.dist-info" / "entry_points.txt").write_text(
        f"[{registry.ENTRY_POINT_GROUP}]\nrawf32 = rawplugin:RawSource\n")
    monkeypatch.syspath_prepend(str(site))
    registry.plugin_targets.cache_clear()
    yield
    registry.plugin_targets.cache_clear()


def test_a_source_added_by_entry_point_is_asked_by_every_caller(tmp_path, plugin):
    frames = np.random.default_rng(7).normal(size=(6, 5, 3)).astype("<f4")
    path = tmp_path / "traj.raw"
    with open(path, "wb") as fh:
        fh.write(b"RAWF32\0\0" + np.array([frames.shape[0], frames.shape[1]], "<i4").tobytes() + frames.tobytes())
    assert registry.guess(Location(path)).format == "RAWF32"
    with open_source(path) as src:
        assert type(src).__name__ == "RawSource" and src.n_frames == 6
        np.testing.assert_array_equal(src.read(1, 4, np.array([0, 4])).positions, frames[1:4][:, [0, 4]])
        with source_from_config(src.get_config()) as again:   # a worker reopens it by its kind
            np.testing.assert_array_equal(again.read(0, 6).positions, frames)
    with open_source([path, path], continuous=True) as chain:   # its parts join a chain like any other
        assert isinstance(chain, SegmentedSource)
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"nothing" * 20)
    with pytest.raises(InputFileError, match="RAWF32"):
        open_source(junk)
    assert "rawf32" in {row["kind"] for row in registry.capabilities()}


def test_opening_through_the_registry_checks_the_atom_count(tmp_path):
    npy = tmp_path / "adk.npy"
    np.save(npy, mda.Universe(D.PSF, D.DCD).trajectory.timeseries(order="fac")[:3])
    assert registry.open_file(Location(npy), OpenRequest(n_atoms=3341)).n_atoms == 3341
    with pytest.raises(InputFileError, match="expected 10"):
        registry.open_file(Location(npy), OpenRequest(n_atoms=10))
    assert isinstance(open_source(npy), NumpySource)


def test_the_docs_formats_table_is_made_from_the_registry():
    """docs/formats.md holds the marker that the docs build replaces with the registry's own table."""
    import importlib.util
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    spec = importlib.util.spec_from_file_location("trajscale_docs_conf", docs / "conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    page = [(docs / "formats.md").read_text()]
    conf._formats_table(None, "formats", page)
    assert conf.FORMATS_TABLE not in page[0]
    for cls in registry.format_sources():
        row = next(ln for ln in page[0].splitlines() if f"`{cls.__name__}` (`{cls.kind}`)" in ln)
        assert row.startswith(f"| {', '.join(cls.formats)} |") and cls.description in row
        marks = [c.strip() for c in row.strip("|").split("|")[3:]]
        assert marks == ["yes" if on else "-" for on in (cls.supports_parts, cls.supports_following,
                                                         cls.supports_slab_reads, cls.supports_mpio)]


@pytest.mark.cli
def test_an_h5md_file_is_told_without_the_mdcath_module_and_an_mdcath_file_still_is(tmp_path):
    """mdCATH's files are HDF5 too, so its Source is asked before H5MD's; a file named ``.h5md`` is H5MD's
    and its open imports no mdCATH module (a run's start pays for no reader it does not use), while an
    mdCATH-shaped ``.h5`` file is told as MDCATH from its layout."""
    import subprocess
    import sys

    from trajscale.testing.mdcath import from_universe

    code = ("import sys; from trajscale.sources import registry; from trajscale.storage.location import Location; "
            f"m = registry.guess(Location({D.H5MD_xvf!r})); print(m.format, 'trajscale.mdcath.source' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["H5MD", "False"], out
    domain = from_universe(tmp_path / "mdcath_dataset_1adkA00.h5", mda.Universe(D.PSF, D.DCD), n_frames=2,
                           select="resid 1-5")
    assert registry.guess(Location(domain)).format == "MDCATH"
