"""Several analyses in one pass (``trajscale.run([...])``): each result has the bits of the same analysis
run alone (whose numbers are tested against MDAnalysis elsewhere), on every executor; each block is read
once, over the union of the analyses' atoms; one analysis that cannot run refuses the whole run first."""

from __future__ import annotations

from pathlib import Path

import pytest
from MDAnalysisTests import datafiles as D

import trajscale as ts
from tests.analysis.one_pass_cases import assert_same_bits, boxed_analyses, vacuum_analyses
from tests.conftest import run_mpi
from trajscale.errors import MissingBoxError

#: Blocks of a few frames and several tasks: the pass cuts its frames as a run of one analysis would not.
SPLIT = {"n_tasks": 3, "max_block_bytes": 300_000}


@pytest.fixture(scope="module")
def water_h5md(tmp_path_factory, adk_water):
    """AdK in water (TPR topology; 10 frames of 47,681 atoms, a box in each) as H5MD."""
    from trajscale.convert.convert import convert
    from trajscale.h5md.layout import Layout

    out = tmp_path_factory.mktemp("one_pass") / "adk_water.h5md"
    convert(adk_water["tpr"], [adk_water["xtc"]], str(out), layout=Layout.parse("frame"))
    return adk_water["tpr"], str(out)


@pytest.fixture(scope="module")
def alone(water_h5md):
    """Each boxed analysis run alone, serially, as its own run splits the frames."""
    top, traj = water_h5md
    return {name: ts.run(a, top, traj, **SPLIT) for name, a in boxed_analyses().items()}


def test_every_analysis_in_one_pass_has_the_bits_of_its_run_alone(water_h5md, alone):
    top, traj = water_h5md
    names = list(boxed_analyses())
    got = ts.run(list(boxed_analyses().values()), top, traj, **SPLIT)
    assert isinstance(got, list) and len(got) == len(names)
    for name, r in zip(names, got, strict=True):
        assert_same_bits(r, alone[name], name)
    report = got[0].report
    assert all(r.report is report for r in got)
    assert [a.name for a in report.meta.analyses] == [a.name for a in boxed_analyses().values()]
    assert all(a.t_compute > 0 for a in report.meta.analyses)
    # one read per block over the union of the atoms, not one per analysis
    assert report.n_atoms >= max(r.report.n_atoms for r in alone.values())
    assert report.bytes_read <= sum(r.report.bytes_read for r in alone.values()) / 3
    assert "analyses in one pass" in str(report) and "rdf" in str(report)
    assert report.to_dict()["meta"]["analyses"][0]["name"] == "rmsd"


@pytest.mark.parametrize("combo", [("rmsd", "rdf"), ("rmsf", "average", "rgyr"),
                                   ("contacts", "distances", "com_distance"), ("per_frame", "user_reduce", "rmsd"),
                                   ("rdf",)])
def test_combinations_keep_their_order_and_bits(water_h5md, alone, combo):
    top, traj = water_h5md
    made = boxed_analyses()
    got = ts.run([made[n] for n in combo], top, traj, **SPLIT)
    for name, r in zip(combo, got, strict=True):
        assert_same_bits(r, alone[name], name)


@pytest.mark.parametrize("executor", ["threads", "processes", "dask"])
def test_one_pass_on_each_executor(water_h5md, alone, executor, request):
    top, traj = water_h5md
    ex = {"processes": "pool", "dask": "dask_ex"}.get(executor)
    ex = request.getfixturevalue(ex) if ex else executor
    names = ["rmsd", "rmsf", "rdf", "contacts", "per_frame", "user_reduce"]
    made = boxed_analyses()
    got = ts.run([made[n] for n in names], top, traj, executor=ex, n_workers=2 if ex == "threads" else None,
                 **SPLIT)
    for name, r in zip(names, got, strict=True):
        assert_same_bits(r, alone[name], f"{executor}: {name}")


def test_an_analysis_that_cannot_run_refuses_the_whole_run_before_any_work(adk_vacuum):
    with pytest.raises(MissingBoxError, match="the rdf analysis needs one") as err:
        ts.run([ts.RMSD(select="name CA"), ts.RDF("name CA", "name CA")], *adk_vacuum)
    assert "\n" not in str(err.value) and "frame 0" in str(err.value)


def test_a_list_of_analyses_holds_analyses(adk_vacuum):
    with pytest.raises(ts.TrajscaleError, match="empty list"):
        ts.run([], *adk_vacuum)
    with pytest.raises(ts.TrajscaleError, match="got str in the list"):
        ts.run([ts.RMSD(), "rmsf"], *adk_vacuum)


@pytest.mark.mpi
def test_one_pass_under_mpiexec(tmp_path, water_h5md, alone):
    pytest.importorskip("mpi4py")
    import pickle

    top, traj = water_h5md
    script = Path(__file__).with_name("mpi_one_pass_script.py")
    out = tmp_path / "got.pickle"
    proc = run_mpi(2, [str(script), top, traj, str(out)], timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = pickle.loads(out.read_bytes())
    for name, r in got.items():
        assert_same_bits(r, alone[name], f"mpi: {name}")


@pytest.mark.parametrize("split", [{"n_tasks": 1}, {"n_tasks": 4}, {"n_tasks": 7, "max_block_bytes": 100_000}])
def test_any_split_of_the_frames_gives_the_bits_of_the_runs_alone(adk_vacuum_h5md, split):
    """The pass cuts its frames into other blocks than each run alone (its frames hold more atoms); the
    bits do not depend on the split."""
    top = D.PSF
    got = ts.run(list(vacuum_analyses().values()), top, adk_vacuum_h5md, **split)
    for (name, a), r in zip(vacuum_analyses().items(), got, strict=True):
        assert_same_bits(r, ts.run(a, top, adk_vacuum_h5md, n_tasks=2), name)


def test_the_report_advises_on_a_union_that_spans_the_file(adk_vacuum_h5md):
    got = ts.run([ts.RMSD(select="name CA"), ts.RadiusOfGyration(select="all")], D.PSF, adk_vacuum_h5md)
    report = got[0].report
    shares = {a.name: a.n_atoms for a in report.meta.analyses}
    assert shares == {"rmsd": 214, "rgyr": 3341} and report.n_atoms == 3341
    advice = {a["rule"]: a for a in report.to_dict()["diagnosis"]["advice"]}
    assert "rmsd (214 atoms)" in advice["union-selection"]["message"]
    assert "3341 of the file's 3341 atoms" in advice["union-selection"]["reason"]
    narrow = ts.run([ts.RMSD(select="name CA"), ts.RadiusOfGyration(select="backbone")], D.PSF, adk_vacuum_h5md)
    assert "union-selection" not in {a["rule"] for a in narrow[0].report.to_dict()["diagnosis"]["advice"]}


def test_an_analysis_that_cannot_prepare_is_named(adk_vacuum):
    with pytest.raises(ts.TrajscaleError, match=r"^rdf: .*name XYZ") as err:
        ts.run([ts.RMSD(select="name CA"), ts.RDF("name XYZ", "name CA")], *adk_vacuum)
    assert "\n" not in str(err.value)


def test_the_full_report_lists_each_analysis_of_the_pass(adk_vacuum_h5md):
    from trajscale.report.table import format_table

    got = ts.run([ts.RMSD(select="name CA"), ts.RadiusOfGyration(select="backbone")], D.PSF, adk_vacuum_h5md)
    text = format_table(got[0].report)
    assert "analysis rmsd: 214 atoms, compute" in text and "analysis rgyr: 855 atoms, compute" in text


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_each_block_is_read_once_for_every_analysis(water_h5md, monkeypatch):
    from trajscale.h5md.source import H5MDSource

    reads = []
    read = H5MDSource.read

    def counted(self, start, stop, atoms=None, *args, **kw):
        reads.append((start, stop, None if atoms is None else len(atoms)))
        return read(self, start, stop, atoms, *args, **kw)

    monkeypatch.setattr(H5MDSource, "read", counted)
    top, traj = water_h5md
    got = ts.run(list(boxed_analyses().values()), top, traj, n_tasks=3, executor="serial")
    union = got[0].report.n_atoms
    blocks = [r for r in reads if r[2] == union]
    assert len(blocks) == got[0].report.n_tasks == 3   # one read per block, over the union
    assert [b[:2] for b in blocks] == sorted(b[:2] for b in blocks) and blocks[0][0] == 0 and blocks[-1][1] == 10
    # the rest: the references the analyses prepare (frame 0, as each reads it alone) and the first box
    assert all(r[:2] == (0, 1) for r in reads if r[2] != union)
