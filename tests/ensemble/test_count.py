"""Every member counted: an mdCATH glob and an XTC glob holding each kind of damage give, on every entry point
(``ts.run``, mdCATH's ``members()``, ``EnsembleDataset``, ``LaggedEnsembleDataset``, the command line), members
listed = analysed + refused, each damaged member refused with its own reason, never left out.

The count's reference is h5py's own walk of each file (every group two levels below the domain is a member; a
file HDF5 cannot open is one) and the folder's listing of XTC files."""

from __future__ import annotations

import re
import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

import trajscale as ts
from tests.conftest import run_cli_here
from trajscale.ml.ensemble import EnsembleDataset
from trajscale.ml.lagged_dataset import LaggedEnsembleDataset
from trajscale.testing.mdcath import from_universe

warnings.filterwarnings("ignore", module="MDAnalysis")

#: member -> the words its refusal must hold (None: analysed)
MDCATH_KINDS = {"1aaaA00/320/0": None, "1aaaA00/320/1": "holds no coords dataset (it holds box",
                "1aaaA00/348/0": "holds no coords dataset (it holds nothing)",
                "1aaaA00/348/1": "numFrames says 9 but coords holds 6 frames",
                "1aaaA00/379/0": "NaN/inf coordinates in frame 2", "1aaaA00/379/1": None,
                "2bbbB00": "truncated: it has"}
XTC_KINDS = {"good-0": None, "good-1": None, "cut": "has no frames", "empty": "is empty",
             "magic": "not an XTC file (magic number 1994"}


@pytest.fixture(scope="module")
def mdcath_glob(tmp_path_factory) -> str:
    return damaged_mdcath(tmp_path_factory.mktemp("count-mdcath"))


@pytest.fixture(scope="module")
def xtc_glob(tmp_path_factory) -> str:
    return damaged_xtc(tmp_path_factory.mktemp("count-xtc"))


def damaged_mdcath(folder) -> str:
    """Two mdCATH-shaped files: the first with a replica group without coords, an empty one, one whose
    numFrames says more frames than coords holds and one with NaN coordinates; the second cut short (told as
    mdCATH's by the layout its first bytes hold, refused whole). Their glob."""
    u = mda.Universe(D.PSF, D.DCD)
    keys = [(t, r) for t in ("320", "348", "379") for r in ("0", "1")]
    first = from_universe(folder / "mdcath_dataset_1aaaA00.h5", u, domain="1aaaA00", select="resid 1-30",
                          members=keys, n_frames=6)
    with h5py.File(first, "r+") as f:
        g = f["1aaaA00"]
        del g["320/1/coords"]
        for name in list(g["348/0"]):
            del g["348/0"][name]
        del g["348/0"].attrs["numFrames"]
        g["348/1"].attrs["numFrames"] = 9
        x = g["379/0/coords"][()]
        x[2] = np.nan
        g["379/0/coords"][...] = x
    second = from_universe(folder / "mdcath_dataset_2bbbB00.h5", u, domain="2bbbB00", select="resid 31-60",
                           members=keys[:2], n_frames=6)
    with open(second, "r+b") as fh:
        fh.truncate(fh.seek(0, 2) // 2)
    return str(folder / "mdcath_dataset_*.h5")


def damaged_xtc(folder) -> str:
    """Two sound XTC files of AdK, one cut inside its first frame, an empty one, one with a wrong magic number;
    their glob."""
    u = mda.Universe(D.PSF, D.DCD)
    for k in range(2):
        with mda.Writer(str(folder / f"good-{k}.xtc"), u.atoms.n_atoms) as w:
            for _ in u.trajectory[5 * k:5 * k + 5]:
                w.write(u.atoms)
    data = (folder / "good-0.xtc").read_bytes()
    (folder / "cut.xtc").write_bytes(data[:200])
    (folder / "empty.xtc").write_bytes(b"")
    (folder / "magic.xtc").write_bytes(b"\x00\x00\x07\xca" + data[4:])
    return str(folder / "*.xtc")


def listed_by_h5py(pattern: str) -> list[str]:
    """Every member the files hold, by h5py's own walk (a file it cannot open: one member, its domain)."""
    import glob
    import os

    out = []
    for path in sorted(glob.glob(pattern)):
        stem = os.path.basename(path)[len("mdcath_dataset_"):-len(".h5")]
        try:
            f = h5py.File(path, "r")
        except OSError:
            out.append(stem)
            continue
        with f:
            g = f[stem]
            out += [f"{stem}/{t}/{r}" for t in g if isinstance(g[t], h5py.Group) for r in g[t]
                    if isinstance(g[t][r], h5py.Group)]
    return out


def check(listed, analysed, refused: dict, kinds: dict) -> None:
    """The count holds, every member once, each refused one with its own reason."""
    assert sorted(listed) == sorted(kinds)
    assert len(analysed) + len(refused) == len(listed)
    assert set(analysed).isdisjoint(refused) and set(analysed) | set(refused) == set(listed)
    for name, words in kinds.items():
        if words is None:
            assert name in analysed, (name, refused.get(name))
        else:
            assert words in refused[name], (name, refused.get(name))


def test_every_mdcath_member_is_counted_on_every_entry_point(mdcath_glob):
    listed = listed_by_h5py(mdcath_glob)
    assert len(listed) == 7
    ens = ts.Ensemble.from_glob(mdcath_glob)
    assert sorted(ens.names) == sorted(listed)
    r = ts.run(ts.RMSD(select="name CA"), ens)
    check(ens.names, r.names, {x.member.name: x.reason for x in r.refused}, MDCATH_KINDS)
    assert (r.trajectories.n_finished, r.trajectories.n_refused, r.trajectories.n_trajectories) == (2, 5, 7)
    from trajscale.mdcath.source import members

    path = mdcath_glob.replace("*", "1aaaA00")
    assert [f"1aaaA00/{k}" for k, _ in members(path)] == [n for n in listed if n.startswith("1aaaA00/")]
    for dataset in (EnsembleDataset(mdcath_glob), LaggedEnsembleDataset(mdcath_glob, 2)):
        check(ens.names, dataset.names, {x.member.name: x.reason for x in dataset.refused}, MDCATH_KINDS)
        assert {x.member.name: x.reason for x in dataset.refused} == {x.member.name: x.reason for x in r.refused}
    assert "repair" not in " ".join(x.reason for x in r.refused)   # (trajscale repair mends H5MD files alone)


def test_every_xtc_member_is_counted_on_every_entry_point(xtc_glob):
    ens = ts.Ensemble.from_glob(xtc_glob, topology=D.PSF)
    import glob

    assert len(ens) == len(glob.glob(xtc_glob)) == 5
    r = ts.run(ts.RMSD(select="name CA"), ens)
    check(ens.names, r.names, {x.member.name: x.reason for x in r.refused}, XTC_KINDS)
    for dataset in (EnsembleDataset(ens), LaggedEnsembleDataset(ens, 2)):
        check(ens.names, dataset.names, {x.member.name: x.reason for x in dataset.refused}, XTC_KINDS)
        assert {x.member.name: x.reason for x in dataset.refused} == {x.member.name: x.reason for x in r.refused}


def counts_said(stdout: str) -> tuple[int, int, int]:
    m = re.search(r"trajectories: (\d+) analysed, (\d+) refused of (\d+)", stdout)
    assert m, stdout
    return tuple(int(v) for v in m.groups())


@pytest.mark.cli
def test_the_command_says_the_count(mdcath_glob, xtc_glob, tmp_path):
    got = run_cli_here("run", "rmsd", "--ensemble", mdcath_glob, "--select", "name CA", "--executor", "serial",
                       "--results", str(tmp_path / "a"), cwd=tmp_path)
    assert got.returncode == 8, got.stderr
    assert counts_said(got.stdout) == (2, 5, len(listed_by_h5py(mdcath_glob)))
    got = run_cli_here("run", "rmsd", "--ensemble", xtc_glob, "--topology", D.PSF, "--select", "name CA",
                       "--executor", "serial", "--results", str(tmp_path / "b"), "--report", "b.json", cwd=tmp_path)
    assert got.returncode == 8, got.stderr
    assert counts_said(got.stdout) == (2, 3, 5)
    report = run_cli_here("report", "b.json", cwd=tmp_path)   # the report says the count too
    assert report.returncode == 0 and counts_said(report.stdout) == (2, 3, 5), report.stderr


def test_a_member_refused_by_one_analysis_of_several_is_counted_once(replicas):
    """AdK's replicas have no box: the RDF refuses them and the RMSD analyses them; each is counted once,
    as analysed, and the count still holds."""
    rmsd, rdf = ts.run([ts.RMSD(select="name CA"), ts.RDF(select1="name CA", select2="name CA", nbins=5)],
                       replicas["catalog"])
    assert {x.member.name for x in rdf.refused} == {"adk-0", "adk-1", "adk-2"} and not rmsd.refused
    facts = rmsd.trajectories
    assert (facts.n_finished, facts.n_refused, facts.n_trajectories) == (5, 0, 5)
    assert facts.lines()[0].startswith("trajectories: 5 analysed of 5;")
