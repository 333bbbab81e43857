"""An ensemble's files (CSV, Parquet, NetCDF) written a batch of trajectories at a time: each read back by
another library (pandas, pyarrow, h5py, xarray) and checked against distances computed here from the
positions written; the same files however the batches fall; a long member name costs its length once."""

from __future__ import annotations

import csv
import io
import tracemalloc

import numpy as np
import pytest

import trajscale as ts
from trajscale.ensemble.catalog import Member

from ..support.ensembles import tiny_ensemble

N = 12
DIST = {"select1": "index 0 1", "select2": "index 1 2", "pbc": False}   # two features: atoms 0-1 and 1-2


def members(folder, n: int, long_name: int = 0) -> list[Member]:
    """``n`` tiny members with a number label, a text label and a label some members lack."""
    out = []
    for i in range(n):
        name = "x" * long_name if long_name and i == n // 2 else f"m{i}"
        labels = {"k": i, "system": "abc"[i % 3], "temp": 300.5 + i if i % 2 else None}
        out.append(Member(name, (str(folder / f"t{i:05d}.xtc"),), str(folder / "top.pdb"), labels))
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    _, pos = tiny_ensemble(folder, N)
    ens = ts.Ensemble(members(folder, N), origin="tiny")
    return {"folder": folder, "pos": pos, "ensemble": ens,
            "dist": ts.run(ts.Distances(**DIST), ens, executor="serial", results=folder / "res")}


def expected_rows(tiny) -> list[list]:
    """The long table made here, row by row: each value the distance computed from the positions written."""
    r, pos = tiny["dist"], tiny["pos"].astype(np.float64)
    d = np.linalg.norm(pos[:, :, [0, 1]] - pos[:, :, [1, 2]], axis=-1)   # (member, frame, feature), Å
    rows = []
    for i, m in enumerate(tiny["ensemble"]):
        own = r[m.name]
        for f in range(2):
            for j in range(2):
                rows.append([m.name, m.labels["k"], m.labels["system"], m.labels["temp"], f, float(f), j,
                             own.feature[j], "ALA", 1, own.chain[j], d[i, f, j]])
    return rows


COLUMNS = ["trajectory", "k", "system", "temp", "frame", "time", "feature_index", "feature", "resname", "resid",
           "chain", "value"]


def test_csv_is_the_table_row_by_row(tiny, tmp_path):
    """Every row as a CSV writer writes it from the rows made here (numbers as ``repr``, a missing label
    empty), the values those of each trajectory's own result, which equal the distances computed here."""
    r = tiny["dist"]
    path = r.save(tmp_path / "d.csv")
    rows = expected_rows(tiny)
    ref = io.StringIO()
    w = csv.writer(ref, lineterminator="\n")
    w.writerow(COLUMNS)
    own = {m.name: r[m.name].array() for m in tiny["ensemble"]}
    w.writerows([*row[:-1], float(own[row[0]][row[4], row[6]])] for row in rows)
    assert path.read_text() == ref.getvalue()
    import pandas as pd

    back = pd.read_csv(path)
    np.testing.assert_allclose(back["value"], [row[-1] for row in rows], atol=1e-4)
    assert back["trajectory"].tolist() == [row[0] for row in rows]


def test_parquet_dictionary_encoded_and_equal_to_the_rows(tiny, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(tiny["dist"].save(tmp_path / "d.parquet"))
    assert t.column_names == COLUMNS
    assert t.schema.field("trajectory").type == pa.dictionary(pa.int32(), pa.string())
    assert t.schema.field("temp").type == pa.float64() and t.schema.field("k").type == pa.int64()
    rows = expected_rows(tiny)
    got = t.to_pylist()
    assert len(got) == len(rows)
    for g, row in zip(got, rows, strict=True):
        assert [g[c] for c in COLUMNS[:-1]] == row[:-1]
        assert g["value"] == pytest.approx(row[-1], abs=1e-4)
    assert tiny["dist"].table().equals(t)


def test_netcdf_read_by_h5py_equals_the_dataset(tiny, tmp_path):
    """The NetCDF-4 file, read as HDF5 by h5py: the distances computed here, with the names and labels;
    xarray reads back what ``dataset()`` holds in memory."""
    import h5py
    import xarray as xr

    r = tiny["dist"]
    path = r.save(tmp_path / "d.nc")
    pos = tiny["pos"].astype(np.float64)
    d = np.linalg.norm(pos[:, :, [0, 1]] - pos[:, :, [1, 2]], axis=-1)
    with h5py.File(path, "r") as f:
        np.testing.assert_allclose(f["distances"][()], d, atol=1e-4)
        assert f["trajectory"].asstr()[()].tolist() == [m.name for m in tiny["ensemble"]]
        assert f["system"].asstr()[()].tolist() == ["abc"[i % 3] for i in range(N)]
        assert f["k"][()].tolist() == list(range(N))
        assert f["feature_name"].asstr()[0].tolist() == list(r["m0"].feature)
    with xr.open_dataset(path) as back:
        xr.testing.assert_identical(back.load(), r.dataset())


@pytest.mark.parametrize(("rows", "trajectories", "groups"), [(2, 2048, 2 * N), (1 << 16, 5, 3)])
def test_same_files_however_the_batches_fall(tiny, tmp_path, monkeypatch, rows, trajectories, groups):
    """Batches of one frame (each trajectory cut between its frames) or of 5 trajectories give the same CSV
    bytes, the same Parquet rows (in more row groups) and the same NetCDF (one trajectory at a time) as
    the default batches."""
    import pyarrow.parquet as pq
    import xarray as xr

    from trajscale.ensemble import padded, table

    r = tiny["dist"]
    whole = {ext: r.save(tmp_path / f"whole{ext}") for ext in (".csv", ".parquet", ".nc")}
    monkeypatch.setattr(table, "BATCH_ROWS", rows)
    monkeypatch.setattr(table, "BATCH_TRAJECTORIES", trajectories)
    monkeypatch.setattr(padded, "BATCH_BYTES", 1)
    cut = {ext: r.save(tmp_path / f"cut{ext}") for ext in (".csv", ".parquet", ".nc")}
    assert cut[".csv"].read_bytes() == whole[".csv"].read_bytes()
    assert pq.ParquetFile(cut[".parquet"]).num_row_groups == groups
    assert pq.ParquetFile(whole[".parquet"]).num_row_groups == 1
    assert pq.read_table(cut[".parquet"]).to_pylist() == pq.read_table(whole[".parquet"]).to_pylist()
    with xr.open_dataset(cut[".nc"]) as a, xr.open_dataset(whole[".nc"]) as b:
        xr.testing.assert_identical(a.load(), b.load())


def test_batches_stream_the_table(tiny, monkeypatch):
    from trajscale.ensemble import table

    monkeypatch.setattr(table, "BATCH_ROWS", 8)
    got = list(tiny["dist"].batches())
    assert [b.num_rows for b in got] == [8] * (N // 2)
    assert len({b.schema for b in got}) == 1


def test_per_atom_results_padded_in_netcdf(tiny, tmp_path, monkeypatch):
    """RMSF (a result per trajectory) written one trajectory at a time: xarray reads back the dataset."""
    import xarray as xr

    from trajscale.ensemble import padded

    r = ts.run(ts.RMSF(select="all"), tiny["ensemble"], executor="serial")
    monkeypatch.setattr(padded, "BATCH_BYTES", 1)
    with xr.open_dataset(r.save(tmp_path / "rmsf.nc")) as back:
        xr.testing.assert_identical(back.load(), r.dataset())
        pos = tiny["pos"].astype(np.float64)
        ref = np.sqrt(((pos - pos.mean(axis=1, keepdims=True)) ** 2).sum(-1).mean(1))
        np.testing.assert_allclose(back["rmsf"].values, ref, atol=1e-4)


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    """150 tiny members, one of them named with 64 KiB, and the same with short names: their distances."""
    folder = tmp_path_factory.mktemp("named")
    tiny_ensemble(folder, 150)
    return [ts.run(ts.Distances(**DIST), ts.Ensemble(members(folder, 150, long_name), origin="named"),
                   executor="serial") for long_name in (0, 65536)]


@pytest.mark.parametrize("ext", [".csv", ".parquet", ".nc"])
def test_a_long_name_costs_its_length_once(named, tmp_path, ext):
    """What writing holds (NumPy's and Python's allocations, as tracemalloc sees them) grows by a few copies
    of a 64 KiB name, not by one a row (a fixed-width column of 600 rows would be 150 MB)."""
    peaks = []
    for k, r in enumerate(named):
        tracemalloc.start()
        try:
            r.save(tmp_path / f"out-{k}{ext}")
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert peaks[1] - peaks[0] < 4 * 2**20, peaks


def test_a_label_has_one_type_in_the_table_the_arrays_and_the_training_data(tmp_path):
    """A true/false, a whole-number, a number and a text label: bool, int64, float64 and text in the table
    (Arrow's types), in the padded dataset (also as the NetCDF file reads back) and in the ML dataset's
    columns and samples; the CSV writes the values as Python does."""
    import pyarrow as pa
    import xarray as xr

    from trajscale.ml import EnsembleDataset

    tiny_ensemble(tmp_path, 4)
    labels = [{"flag": i % 2 == 0, "k": i, "temp": 300.5 + i, "system": "abc"[i % 3], "big": 10**30 if i else 1}
              for i in range(4)]   # (a whole number beyond int64's: text, not an overflow)
    ens = ts.Ensemble([Member(f"m{i}", (str(tmp_path / f"t{i:05d}.xtc"),), str(tmp_path / "top.pdb"), labels[i])
                       for i in range(4)], origin="typed")
    r = ts.run(ts.Distances(**DIST), ens, executor="serial", results=tmp_path / "res")
    want = {"flag": "bool", "k": "int64", "temp": "float64", "system": "text", "big": "text"}

    def kind(dtype) -> str:
        return "text" if dtype.kind in "OU" else str(dtype)

    schema = r.table().schema
    arrow = {pa.bool_(): "bool", pa.int64(): "int64", pa.float64(): "float64",
             pa.dictionary(pa.int32(), pa.string()): "text"}
    assert {k: arrow.get(schema.field(k).type) for k in want} == want, schema
    ds = r.dataset()
    assert {k: kind(ds[k].dtype) for k in want} == want, ds
    with xr.open_dataset(r.save(tmp_path / "d.nc")) as back:
        assert {k: kind(back[k].dtype) for k in want} == want, back
        assert back["flag"].values.tolist() == [True, False, True, False]
    ml = EnsembleDataset(ens)
    assert {k: "text" if isinstance(ml.labels[k], list) else kind(ml.labels[k].dtype) for k in want} == want
    sample = ml.read([0, 2, 4, 6])   # (each member's first frame)
    assert [sample[k] if isinstance(sample[k], list) else sample[k].tolist() for k in want] == \
        [[lab[k] for lab in labels] for k in want]
    assert {k: kind(np.asarray(sample[k]).dtype) if not isinstance(sample[k], list) else "text" for k in want} == want
    header, first = r.save(tmp_path / "d.csv").read_text().splitlines()[:2]
    assert header.split(",")[1:6] == list(want) and first.split(",")[1:6] == ["True", "0", "300.5", "a", "1"]
