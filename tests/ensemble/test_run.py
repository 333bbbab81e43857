"""An ensemble run gives, for each trajectory, what MDAnalysis's own classes give on that trajectory alone,
on every executor; per-atom results as arrays with a trajectory dimension; the RDF aggregate has the
bits of the run over the concatenated trajectory."""

from __future__ import annotations

import numpy as np
import pytest

import trajscale as ts
from tests.ensemble.conftest import universe

SEL = "name CA"


@pytest.fixture(scope="module")
def mda_references(replicas):
    """MDAnalysis's RMSD (rms.RMSD, its first frame as reference) and radius of gyration per trajectory."""
    from MDAnalysis.analysis.rms import RMSD

    out = {}
    for name, (top, xtc, _) in replicas["members"].items():
        u = universe(top, xtc)
        rmsd = RMSD(u, select=SEL).run().results.rmsd[:, 2]
        ca = u.select_atoms(SEL)
        rgyr = np.array([ca.radius_of_gyration() for _ in u.trajectory])
        out[name] = (rmsd, rgyr)
    return out


def check_against(results, references, labels) -> None:
    rmsd, rgyr = results
    assert set(rmsd.names) == set(references)
    for name, (ref_rmsd, ref_rgyr) in references.items():
        np.testing.assert_allclose(rmsd[name].rmsd, ref_rmsd, atol=1e-4, err_msg=name)
        np.testing.assert_allclose(rgyr[name].rgyr, ref_rgyr, rtol=1e-6, err_msg=name)
        assert rmsd[name].frames.tolist() == list(range(len(ref_rmsd)))
    cols = rmsd.columns()
    for name, (ref_rmsd, _) in references.items():   # the long table: each trajectory's rows, with its labels
        rows = cols["trajectory"] == name
        np.testing.assert_allclose(cols["rmsd"][rows], ref_rmsd, atol=1e-4)
        assert set(cols["system"][rows]) == {labels[name]["system"]}


@pytest.mark.parametrize("executor", ["serial", "threads", "processes"])
def test_each_trajectory_as_mdanalysis_computes_it(replicas, mda_references, executor):
    results = ts.run([ts.RMSD(select=SEL), ts.RadiusOfGyration(select=SEL)], replicas["catalog"],
                     executor=executor, n_workers=2, round_size=2)
    labels = {n: lab for n, (_, _, lab) in replicas["members"].items()}
    check_against(results, mda_references, labels)
    assert not results[0].refused
    facts = results[0].trajectories
    assert facts.n_finished == facts.costs.n == 5 and {t["name"] for t in facts.slowest()} == set(mda_references)
    assert facts.costs.frames == sum(len(rmsd) for rmsd, _ in mda_references.values())   # (totals are exact)
    stats = [results[0].record(n).stats for n in mda_references]   # (each one's costs: kept with its results)
    assert all(t["frames"] > 0 and t["bytes"] > 0 for t in stats)
    assert facts.costs.bytes == sum(t["bytes"] for t in stats) and facts.atoms == "214-564"


def test_an_executor_object_runs_the_ensemble_as_its_name_does(replicas, mda_references):
    """``executor=`` may be an executor built by the caller, as for one trajectory: the ensemble's rounds
    take its workers from it (a name's come from ``n_workers``)."""
    from trajscale.executors.processes import ProcessExecutor
    from trajscale.executors.serial import SerialExecutor

    labels = {n: lab for n, (_, _, lab) in replicas["members"].items()}
    for ex in (SerialExecutor(), ProcessExecutor(2)):
        try:
            results = ts.run([ts.RMSD(select=SEL), ts.RadiusOfGyration(select=SEL)], replicas["catalog"],
                             executor=ex, round_size=2)
        finally:
            ex.close()
        check_against(results, mda_references, labels)
        assert not results[0].refused


@pytest.mark.slow(seconds=6)
def test_on_dask(replicas, mda_references):
    results = ts.run([ts.RMSD(select=SEL), ts.RadiusOfGyration(select=SEL)], replicas["catalog"],
                     executor="dask", n_workers=2)
    check_against(results, mda_references, {n: lab for n, (_, _, lab) in replicas["members"].items()})


def test_same_bits_however_cut(replicas):
    """Tasks cut the trajectories differently (a block budget of a few frames, many tasks): the same bits."""
    a = ts.run(ts.RMSD(select=SEL), replicas["catalog"])
    b = ts.run(ts.RMSD(select=SEL), replicas["catalog"], executor="threads", n_workers=2, n_tasks=7,
               max_block_bytes=20_000, round_size=3)
    for name in a.names:
        assert np.array_equal(a[name].rmsd, b[name].rmsd)


def test_serial_rounds_are_prepared_in_turn(replicas):
    """On the serial executor a round is prepared when it is taken, not by a thread beside the one worker that
    runs the round before (which would only share its CPU); threads prepare ahead; the bits are the same."""
    import threading

    started: list[str] = []
    threading.setprofile(lambda *_: started.append(threading.current_thread().name))
    try:
        a = ts.run(ts.RMSD(select=SEL), replicas["catalog"], executor="serial", round_size=2)
        in_turn = set(started)
        b = ts.run(ts.RMSD(select=SEL), replicas["catalog"], executor="threads", n_workers=2, round_size=2)
    finally:
        threading.setprofile(None)
    assert not {n for n in in_turn if n.startswith("ensemble-prepare")}, in_turn
    assert {n for n in started if n.startswith("ensemble-prepare")}
    assert a.names == b.names and all(np.array_equal(a[n].rmsd, b[n].rmsd) for n in a.names)


def test_short_trajectories_prepared_by_their_workers(replicas, mda_references, tmp_path, monkeypatch):
    """Trajectories short enough that a task holds several are prepared by the worker whose task reads
    them (the root only sizes them, and prepares the first to learn what preparing imports); a long one,
    cut into tasks by its frames, on the root. Each has MDAnalysis's numbers, and the bits of a run over
    that trajectory alone."""
    from trajscale.ensemble import prepare, rounds

    on_root = []
    real = prepare.prepare_member
    spy = lambda i, m, *a, **k: on_root.append(m.name) or real(i, m, *a, **k)   # noqa: E731
    monkeypatch.setattr(prepare, "prepare_member", spy)
    monkeypatch.setattr(rounds, "prepare_member", spy)
    top, short, _ = replicas["members"]["adk-1"]
    long = replicas["members"]["adk-2"][1]
    catalog = tmp_path / "many.csv"
    catalog.write_text("name,topology,trajectory\n" + "".join(f"s{k},{top},{short}\n" for k in range(15))
                       + f"long,{top},{long}\n")
    rmsd, rgyr = ts.run([ts.RMSD(select=SEL), ts.RadiusOfGyration(select=SEL)], str(catalog),
                        executor="threads", n_workers=2)
    assert on_root == ["s0", "long"]
    for name, ref in [*((f"s{k}", "adk-1") for k in range(15)), ("long", "adk-2")]:
        np.testing.assert_allclose(rmsd[name].rmsd, mda_references[ref][0], atol=1e-4, err_msg=name)
        np.testing.assert_allclose(rgyr[name].rgyr, mda_references[ref][1], rtol=1e-6, err_msg=name)
    alone = ts.run(ts.RMSD(select=SEL), top, short)
    assert np.array_equal(rmsd["s3"].rmsd, alone.rmsd)
    assert all(rmsd.record(n).stats["t_prepare"] > 0 for n in rmsd.names)
    # one preparation: a frame of a member its worker prepared is priced as the root priced s0 (the same file),
    # the analyses' declared work included
    priced = {rmsd.record(f"s{k}").stats["frame_work_s"] for k in range(15)}
    assert len(priced) == 1 and priced.pop() > 0, priced
    # the report's frames are those analysed (a task's range holds a short trajectory as one position)
    assert rmsd.report.n_frames == 15 * len(mda_references["adk-1"][0]) + len(mda_references["adk-2"][0])


def test_frames_apply_to_each_trajectory(replicas):
    r = ts.run(ts.RadiusOfGyration(select=SEL), replicas["catalog"], start=1, step=2)
    for name, (top, xtc, _) in replicas["members"].items():
        u = universe(top, xtc)
        ca = u.select_atoms(SEL)
        ref = np.array([ca.radius_of_gyration() for _ in u.trajectory[1::2]])
        np.testing.assert_allclose(r[name].rgyr, ref, rtol=1e-6)
        assert r[name].frames.tolist() == list(range(1, len(u.trajectory), 2))


def test_a_member_is_prepared_as_a_run_over_its_file_alone(replicas):
    """A member is prepared by the engine's one preparation: its atoms, reference, frames, the bytes a frame
    costs and the work declared equal those of a run over the same file alone."""
    import pickle

    from trajscale.analysis.group import AnalysisGroup
    from trajscale.engine import prepare
    from trajscale.ensemble.catalog import Member
    from trajscale.ensemble.prepare import prepare_member
    from trajscale.runspec import RunOptions

    top, xtc, _ = replicas["members"]["adk-2"]
    group = AnalysisGroup([ts.RMSD(select=SEL), ts.Contacts(select=(SEL, SEL), radius=8.0, pbc=False)])
    options = RunOptions(start=3, stop=-2, step=2)
    member = prepare_member(0, Member("adk-2", (xtc,), top), group, options)
    job, facts = prepare(group, top, xtc, options)
    assert (member.read.start, member.read.n, member.read.step) == (facts.start, facts.n_frames, facts.step)
    assert pickle.dumps(member.prepared) == pickle.dumps(job.prepared)   # (atoms, reference, contacts' pairs)
    assert member.frame_bytes == facts.frame_bytes + group.block_bytes_per_frame(job.prepared)
    assert (member.cost, member.decode_s, member.reads_ahead) == (facts.cost, facts.decode_s_per_frame,
                                                                  job.reads_ahead)


def test_rmsf_as_arrays_with_a_trajectory_dimension(replicas, tmp_path):
    """Ragged atom counts (214 and 564 CA): padded, with each row's atom index in its own topology."""
    import xarray as xr
    from MDAnalysis.analysis.rms import RMSF

    r = ts.run(ts.RMSF(select=SEL), replicas["catalog"], executor="processes", n_workers=2)
    ds = r.dataset()
    assert list(ds["trajectory"].values) == list(replicas["members"])
    for i, (_, (top, xtc, lab)) in enumerate(replicas["members"].items()):
        u = universe(top, xtc)
        ca = u.select_atoms(SEL)
        ref = RMSF(ca).run().results.rmsf
        n = int(ds["n_atoms"][i])
        assert n == len(ca)
        np.testing.assert_allclose(ds["rmsf"][i, :n], ref, atol=1e-4)
        assert np.isnan(ds["rmsf"][i, n:]).all() and (ds["atom_index"][i, n:] == -1).all()
        assert ds["atom_index"][i, :n].values.tolist() == ca.indices.tolist()
        assert ds["system"][i] == lab["system"]
    out = r.save(tmp_path / "rmsf.nc")
    back = xr.open_dataset(out)
    np.testing.assert_array_equal(back["rmsf"].values, ds["rmsf"].values)
    back.close()


def test_rdf_over_replicas_is_the_concatenated_run(replicas):
    """The aggregate of the YiiP replicas has the bits of trajscale's RDF over their concatenation (the two
    files as parts of one trajectory), and MDAnalysis's InterRDF's numbers on the trajectory they were cut from."""
    from MDAnalysis.analysis.rdf import InterRDF
    from MDAnalysisTests.datafiles import GRO_MEMPROT, XTC_MEMPROT

    rdf = ts.RDF(select1="name P", select2="name P", nbins=50, range=(2.0, 15.0), exclusion_block=(1, 1))
    ens = ts.Ensemble.from_catalog(replicas["catalog"]).where(system="yiip")
    r = ts.run(rdf, ens, executor="processes", n_workers=2)
    parts = [replicas["members"][n][1] for n in ("yiip-0", "yiip-1")]
    whole = ts.run(rdf, GRO_MEMPROT, parts)
    agg = r.aggregate()
    assert agg.n_frames == whole.n_frames == 5
    assert np.array_equal(agg.count, whole.count) and np.array_equal(agg.rdf, whole.rdf)
    u = universe(GRO_MEMPROT, XTC_MEMPROT)
    p = u.select_atoms("name P")
    ref = InterRDF(p, p, nbins=50, range=(2.0, 15.0), exclusion_block=(1, 1)).run()
    np.testing.assert_allclose(agg.rdf, ref.results.rdf, rtol=1e-6)
    by = r.aggregate(by="system")
    assert list(by) == ["yiip"] and np.array_equal(by["yiip"].count, whole.count)


def test_no_aggregate_where_it_is_not_defined(replicas):
    r = ts.run(ts.RadiusOfGyration(select=SEL), replicas["catalog"])
    with pytest.raises(ts.TrajscaleError, match="no aggregate"):
        r.aggregate()


def test_tables_written_as_parquet_and_csv(replicas, tmp_path):
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    r = ts.run(ts.RMSD(select=SEL), replicas["catalog"])
    table = r.table()
    pq_back = pq.read_table(r.save(tmp_path / "rmsd.parquet"))
    assert pq_back.equals(table)
    csv_back = pcsv.read_csv(r.save(tmp_path / "rmsd.csv"))
    assert csv_back.column_names == table.column_names == ["trajectory", "system", "replica", "frame", "time", "rmsd"]
    np.testing.assert_allclose(csv_back["rmsd"].to_numpy(), table["rmsd"].to_numpy(), rtol=1e-12)
    with pytest.raises(ts.TrajscaleError, match=r"\.parquet, \.csv"):
        r.save(tmp_path / "rmsd.nc")


def test_no_conversion_advised_for_a_catalog(replicas):
    """An ensemble run read as I/O-bound gets no advice to convert: its catalog is no trajectory, and
    ``trajscale convert TOPOLOGY replicas.csv`` could only fail."""
    import dataclasses

    from trajscale.report.advice import advise, diagnose
    from trajscale.report.summary import run_summary

    report = ts.run(ts.RMSD(select=SEL), replicas["catalog"]).report
    io_bound = dataclasses.replace(diagnose(report), r_comp_io=0.1)   # the conversion rule's condition
    said = [a.message for a in advise(report, io_bound)] + [run_summary(report)]
    assert not [m for m in said if "convert" in m or "replicas.csv" in m], said
