"""``trajscale probe``: the machinery on tiny bounds (its accuracy against dd/fio is a benchmark:
``python benchmarks/predict.py --probe-check``), its profile accepted by ``report --predict``."""

from __future__ import annotations

import json

from tests.conftest import run_cli, run_mpi
from tests.report.test_predict import _serial
from trajscale.report.machine import Machine


def test_probe_writes_a_profile_that_predict_accepts(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    prof = tmp_path / "m.json"
    proc = run_cli("probe", str(store), "--seconds", "2", "--bytes", "16M", "--readers", "2", "--out", str(prof))
    assert proc.returncode == 0, proc.stderr
    assert list(store.iterdir()) == []   # its file is removed
    m = Machine.load(prof)
    assert [k for k, _ in m.read_curve] == [1, 2] and all(r > 0 for _, r in m.read_curve)
    assert m.open_ms is not None and m.open_ms > 0 and m.block_bytes > 0
    assert "cold" in m.cold or "could not tell" in m.cold
    assert m.origin_of("read_curve").startswith("measured by trajscale probe")
    rep = tmp_path / "r.json"
    _serial(imports=0.1, topology=0.05).write(rep)
    proc = run_cli("report", str(rep), "--predict", "2,8", "--machine", str(prof))
    assert proc.returncode == 0, proc.stderr
    assert "storage read GB/s by readers" in proc.stdout and "measured by trajscale probe" in proc.stdout
    # an existing profile is kept without --overwrite
    before = prof.read_bytes()
    proc = run_cli("probe", str(store), "--seconds", "1", "--bytes", "8M", "--out", str(prof))
    assert proc.returncode != 0 and "--overwrite" in proc.stderr and prof.read_bytes() == before


def test_probe_refuses_a_missing_path_and_tiny_bytes(tmp_path):
    proc = run_cli("probe", str(tmp_path / "nope"), "--seconds", "1", "--bytes", "8M")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "nope" in proc.stderr
    proc = run_cli("probe", str(tmp_path), "--seconds", "1", "--bytes", "1K")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr


def test_probe_under_mpiexec_rank_0_gathers(tmp_path):
    prof = tmp_path / "m.json"
    proc = run_mpi(2, ["-m", "trajscale.cli.main", "probe", str(tmp_path), "--seconds", "2", "--bytes", "16M",
                       "--out", str(prof)])
    assert proc.returncode == 0, proc.stderr
    d = json.loads(prof.read_text())
    assert [k for k, _ in d["read_curve"]] == [1, 2]
    assert d["nodes"] == 1 and "under MPI" in d["origin"]["read_curve"]
