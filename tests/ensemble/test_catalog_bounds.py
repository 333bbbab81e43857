"""Catalogs are read within bounds: nesting, cell and name sizes, rows and columns are checked before any member
is made, each malformed catalog refused in one line naming it (exit 2), in well under a second."""

from __future__ import annotations

import time

import pytest

from tests.conftest import run_cli
from trajscale.ensemble import Ensemble, catalog
from trajscale.errors import InputFileError

#: catalog file -> (its text, what its refusal says); each names trajectories that do not exist, so a run that
#: read as far as its members would say so instead
HOSTILE = {
    "deep.toml": ("[[members]]\ntrajectory = " + "[" * 100_000 + '"x.xtc"' + "]" * 100_000 + "\n",
                  "nested too deep"),
    "deep-key.toml": ("[[members]]\ntrajectory = 'x.xtc'\n" + "label." * 100_000 + "z = 1\n", "nested too deep"),
    "deep-table.toml": ("[[members]]\ntrajectory = 'x.xtc'\nq = " + "{a = " * 100_000 + "1" + "}" * 100_000 + "\n",
                        "nested too deep"),
    "lists.toml": ('[[members]]\ntrajectory = [[["x.xtc"]]]\n', "row 1: trajectory is a list of lists"),
    "table-label.toml": ('[[members]]\ntrajectory = "x.xtc"\nsystem = {name = "adk"}\n',
                         "row 1: label 'system' is a table"),
    "huge-cell.csv": ("name,trajectory\nm," + "x" * (129 * 1024) + ".xtc\n", "line 2: is not a CSV catalog's"),
    "huge-name.csv": ("name,trajectory\n" + "n" * 70_000 + ",x.xtc\n", "row 1: name 'nnnn"),
    "huge-label.toml": ('[[members]]\ntrajectory = "x.xtc"\nsystem = "' + "s" * 50_000_000 + '"\n',
                        "is a TOML catalog of 48 MiB"),
    "long-label.toml": ('[[members]]\ntrajectory = "x.xtc"\nsystem = "' + "s" * 200_000 + '"\n',
                        "row 1: label 'system'"),
    "huge-column.csv": ("trajectory," + "c" * 70_000 + "\nx.xtc,1\n", "a column is named by 70,000 characters"),
    "wide.csv": ("trajectory," + ",".join(f"c{i}" for i in range(300)) + "\n", "has 301 columns"),
    "long-path.csv": ("trajectory\n" + "d/" * 3000 + "x.xtc\n", "characters long: a path is at most 4096"),
}


def _write(tmp_path, name: str) -> str:
    path = tmp_path / name
    path.write_text(HOSTILE[name][0])
    return str(path)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_catalog_is_refused_in_one_line_within_a_second(tmp_path, name):
    path = _write(tmp_path, name)
    t0 = time.process_time()   # (this process's CPU: the parse's own work, whatever else the machine runs)
    with pytest.raises(InputFileError) as err:
        Ensemble.from_catalog(path)
    seconds = time.process_time() - t0
    assert str(err.value).startswith(f"{path}: ") and HOSTILE[name][1] in str(err.value), str(err.value)[:300]
    assert "\n" not in str(err.value) and len(str(err.value)) < 400
    assert seconds < 1.0, f"{name}: refused after {seconds:.2f} s"


def test_more_rows_than_the_bound_are_refused_before_they_are_held(tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "MAX_ROWS", 3)
    (tmp_path / "c.csv").write_text("trajectory\n" + "x.xtc\n" * 4)
    (tmp_path / "c.toml").write_text('[[members]]\ntrajectory = "x.xtc"\n' * 4)
    for f in ("c.csv", "c.toml"):
        with pytest.raises(InputFileError, match="has more than 3 rows"):
            Ensemble.from_catalog(tmp_path / f)
    (tmp_path / "d.csv").write_text("trajectory\n" + "".join(f"{k}.xtc\n" for k in range(3)))   # at the bound
    assert len(Ensemble.from_catalog(tmp_path / "d.csv")) == 3


def test_the_bounds_pass_every_catalog_a_user_writes(tmp_path):
    """Dots in values, a float label, a sentence of many dots, a long path, numbers as names: all are read."""
    long = "/".join(["folder"] * 500) + "/md.xtc"   # 3,500 characters
    (tmp_path / "ok.toml").write_text(
        '[defaults]\ntopology = "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.psf"\n\n'
        f'[[members]]\nname = 7\ntrajectory = ["{long}", "p.a.r.t.2.x.t.c"]\ntemperature = 310.5\n'
        f'note = "{". ".join(["A sentence"] * 40)}"\nversion = "1.2.3.4.5.6.7.8.9.10.11.12.13.14.15.16.17.18"\n')
    (m,) = Ensemble.from_catalog(tmp_path / "ok.toml")
    assert m.name == "7" and m.trajectory[0].endswith(long) and m.labels["temperature"] == 310.5
    (tmp_path / "named.csv").write_text("name,trajectory\n" + "n" * 65_536 + ",x.xtc\n")   # a 64 KiB name
    assert [m.name for m in Ensemble.from_catalog(tmp_path / "named.csv")] == ["n" * 65_536]


@pytest.mark.cli
@pytest.mark.parametrize("name", ["deep.toml", "lists.toml", "huge-cell.csv", "huge-name.csv"])
def test_the_command_refuses_a_hostile_catalog_in_one_line_with_exit_2(tmp_path, name):
    path = _write(tmp_path, name)
    r = run_cli("run", "rgyr", "--ensemble", path, "--out", str(tmp_path / "o.csv"), "--executor", "serial",
                cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-3000:]
    assert f"{path}: " in lines[0] and HOSTILE[name][1] in lines[0] and len(lines[0]) < 500, lines[0][:600]
    assert not (tmp_path / "o.csv").exists() and not (tmp_path / f"{name.split('.')[0]}-results").exists()
