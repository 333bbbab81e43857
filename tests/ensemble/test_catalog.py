"""Catalogs (CSV, TOML, Parquet) and globs name the same members; bad catalogs are refused in one line."""

from __future__ import annotations

import pytest

from trajscale import formats
from trajscale.ensemble import Ensemble, Member, catalog
from trajscale.errors import ConfigError, InputFileError


def _files(tmp_path, names):
    for n in names:
        p = tmp_path / n
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    return tmp_path


def test_csv_toml_and_parquet_catalogs_name_the_same_members(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "c.csv").write_text("name,topology,trajectory,system,replica,temperature\n"
                                    "a,top.psf,a.xtc,adk,0,300\n"
                                    "b,top.psf,\"b1.xtc 'b 2.xtc'\",adk,1,310.5\n")
    (tmp_path / "c.toml").write_text('[defaults]\ntopology = "top.psf"\nsystem = "adk"\n\n'
                                     '[[members]]\nname = "a"\ntrajectory = "a.xtc"\nreplica = 0\n'
                                     'temperature = 300.0\n\n'
                                     '[[members]]\nname = "b"\ntrajectory = ["b1.xtc", "b 2.xtc"]\nreplica = 1\n'
                                     'temperature = 310.5\n')
    pq.write_table(pa.table({"name": ["a", "b"], "topology": ["top.psf"] * 2,
                             "trajectory": [["a.xtc"], ["b1.xtc", "b 2.xtc"]], "system": ["adk", "adk"],
                             "replica": [0, 1], "temperature": [300.0, 310.5]}), tmp_path / "c.parquet")
    got = [Ensemble.from_catalog(tmp_path / f"c.{ext}") for ext in ("csv", "toml", "parquet")]
    top = str(tmp_path / "top.psf")
    want = (Member("a", (str(tmp_path / "a.xtc"),), top, {"system": "adk", "replica": 0, "temperature": 300.0}),
            Member("b", (str(tmp_path / "b1.xtc"), str(tmp_path / "b 2.xtc")), top,
                   {"system": "adk", "replica": 1, "temperature": 310.5}))
    for ens in got:
        assert ens.members == want
        assert ens.label_names == ("system", "replica", "temperature")
        assert ens["b"].run_trajectory() == [str(tmp_path / "b1.xtc"), str(tmp_path / "b 2.xtc")]
    assert [m.name for m in got[0].where(replica=1)] == ["b"]


def test_names_default_to_the_files_and_tell_repeated_stems_apart(tmp_path):
    _files(tmp_path, ["r1/md.xtc", "r2/md.xtc", "solo.xtc"])
    (tmp_path / "c.csv").write_text("trajectory\nr1/md.xtc\nr2/md.xtc\nsolo.xtc\n")
    assert Ensemble.from_catalog(tmp_path / "c.csv").names == ("r1/md", "r2/md", "solo")


def test_glob_with_labels_from_the_path(tmp_path):
    _files(tmp_path, ["sysA/rep0.xtc", "sysA/rep1.xtc", "sysB/rep0.xtc", "sysB/notes.txt"])
    ens = Ensemble.from_glob(str(tmp_path / "*" / "rep*.xtc"), topology="top.psf",
                             labels=r"(?P<system>sys\w)/rep(?P<replica>\d+)")
    assert [(m.labels["system"], m.labels["replica"]) for m in ens] == [("sysA", 0), ("sysA", 1), ("sysB", 0)]
    assert all(m.topology == str(tmp_path.cwd() / "top.psf") for m in ens)   # located in this folder
    assert Ensemble.of(str(tmp_path / "*" / "rep*.xtc")).names == ens.names


def test_a_glob_gives_each_file_the_topology_its_pattern_names(tmp_path):
    _files(tmp_path, ["runs/a/md.xtc", "runs/b/md.xtc", "sysA/rep0.xtc", "sysB/rep3.xtc"])
    ens = Ensemble.of(str(tmp_path / "runs" / "*" / "md.xtc"), topology=str(tmp_path / "runs" / "*" / "md.tpr"))
    assert [m.topology for m in ens] == [str(tmp_path / "runs" / r / "md.tpr") for r in "ab"]
    ens = Ensemble.of(str(tmp_path / "sys?" / "rep*.xtc"), topology=str(tmp_path / "tops" / "{system}-{replica}.psf"),
                      labels=r"(?P<system>sys\w)/rep(?P<replica>\d+)")
    assert [m.topology for m in ens] == [str(tmp_path / "tops" / n) for n in ("sysA-0.psf", "sysB-3.psf")]
    with pytest.raises(ConfigError, match="wildcard"):
        Ensemble.of(str(tmp_path / "runs" / "*" / "md.xtc"), topology=str(tmp_path / "*" / "*" / "md.tpr"))
    with pytest.raises(ConfigError, match="no label"):
        Ensemble.of(str(tmp_path / "runs" / "*" / "md.xtc"), topology="{system}.tpr")
    with pytest.raises(ConfigError, match="catalog|glob"):
        Ensemble.of(str(tmp_path / "c.csv"), topology="md.tpr")
    one = Ensemble.of(str(tmp_path / "runs" / "a" / "md.xtc"), topology="md.tpr")   # one file: an ensemble of one
    assert one.names == ("md",) and one["md"].topology == str(tmp_path.cwd() / "md.tpr")


@pytest.mark.parametrize("text, match", [
    ("name,topology\na,top.psf\n", "row 1 names no trajectory"),
    ("name,trajectory\na,x.xtc\na,y.xtc\n", "two members are named 'a'"),
    ("trajectory,format\nx.h5,nosuch\n", "format 'nosuch'"),
    ("", "empty catalog"),
])
def test_bad_catalogs_are_refused_in_one_line(tmp_path, text, match):
    (tmp_path / "c.csv").write_text(text)
    with pytest.raises((InputFileError, ConfigError), match=match) as err:
        Ensemble.from_catalog(tmp_path / "c.csv")
    assert "\n" not in str(err.value)


def test_unknown_catalog_format_and_empty_glob(tmp_path):
    with pytest.raises(InputFileError, match=r"\.csv, \.toml, \.parquet"):
        Ensemble.from_catalog(tmp_path / "c.json")
    with pytest.raises(InputFileError, match="matches no file"):
        Ensemble.from_glob(str(tmp_path / "*.xtc"))


def expand_two(location, base):
    """An expander for the test: every file holds two trajectories, A and B."""
    return [Member(f"{base.name}/{k}", (location.where,), None, {**base.labels, "part": k},
                   source={"kind": "test", "path": location.where, "part": k}) for k in "AB"]


def test_an_expander_makes_several_members_of_one_file(tmp_path, monkeypatch):
    _files(tmp_path, ["one.dat", "two.dat"])
    # a format whose declared traits say its files hold several members (asked beside trajscale's own)
    two = formats.FormatTraits(kind="two", source="", members=f"{__name__}:expand_two", member_patterns=("*.dat",))
    own = formats.expanders()
    monkeypatch.setattr(catalog, "expanders", lambda: {**own, "two": two})
    (tmp_path / "c.csv").write_text("trajectory,system\none.dat,s1\ntwo.dat,s2\n")
    ens = Ensemble.from_catalog(tmp_path / "c.csv")
    assert ens.names == ("one/A", "one/B", "two/A", "two/B")
    assert ens["two/B"].labels == {"system": "s2", "part": "B"}
    assert ens["one/A"].source == {"kind": "test", "path": str(tmp_path / "one.dat"), "part": "A"}
    # a row with a topology is one trajectory (no expander asked), unless its format column names one
    (tmp_path / "d.csv").write_text("trajectory,topology\none.dat,top.pdb\n")
    assert Ensemble.from_catalog(tmp_path / "d.csv").names == ("one",)
    (tmp_path / "e.csv").write_text("trajectory,topology,format\none.dat,top.pdb,two\n")
    assert len(Ensemble.from_catalog(tmp_path / "e.csv")) == 2
