"""``trajscale run --plan FILE TOP TRAJ...``: the analyses a TOML file lists, in one pass, from the same
registry as ``trajscale run NAME`` and ``trajscale.NAME``; each results file has the bits of the analysis
run alone; followed files and IMD streams too."""

from __future__ import annotations

import filecmp
import warnings

import pytest
from MDAnalysisTests.datafiles import DCD, PSF

import trajscale as ts
from tests.analysis.one_pass_cases import vacuum_analyses
from tests.conftest import run_cli, run_cli_here
from trajscale.cli.main import build_parser, parse_args
from trajscale.errors import ConfigError

warnings.filterwarnings("ignore", module="MDAnalysis")

#: The plan of :func:`tests.analysis.one_pass_cases.vacuum_analyses`, as the command line writes it.
VACUUM_PLAN = """
[rmsd]
select = "name CA"
out = "rmsd.csv"

[rmsf]
select = "backbone"
fit-select = "name CA"
out = "rmsf.csv"

[[rgyr]]
select = "protein"
out = "rgyr.csv"

[[distances]]
select1 = "name CA and resid 1-10"
select2 = "name CA and resid 100-109"
no-pbc = true
out = "distances.csv"
"""


def _plan(tmp_path, text: str = VACUUM_PLAN):
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return str(path)


def _planned(argv):
    from trajscale.cli.run import planned_from_args

    return planned_from_args(parse_args(argv))


def _alone_outputs(tmp_path, traj: str, names=None) -> dict:
    """Each vacuum analysis run alone over ``traj``, its results saved as the plan names them."""
    out = {}
    for name, a in vacuum_analyses().items():
        path = tmp_path / f"alone_{name}.csv"
        ts.run(a, PSF, traj).save(str(path))
        out[name] = path
    return out


@pytest.fixture(scope="module")
def alone_on_vacuum(tmp_path_factory, adk_vacuum_h5md) -> dict:
    """:func:`_alone_outputs` over the session's AdK-in-vacuum H5MD, made once for the tests that compare with it."""
    return _alone_outputs(tmp_path_factory.mktemp("alone"), adk_vacuum_h5md)


def test_a_plan_is_the_analyses_of_its_tables_in_order(tmp_path):
    plan = _plan(tmp_path)
    for argv in (["run", "--plan", plan, PSF, DCD], ["run", PSF, DCD, "--plan", plan]):
        got = _planned(argv)
        assert [p.name for p in got] == ["rmsd", "rmsf", "rgyr", "distances"]
        assert [p.out for p in got] == ["rmsd.csv", "rmsf.csv", "rgyr.csv", "distances.csv"]
        want = list(vacuum_analyses().values())
        assert [p.analysis.get_config() for p in got] == [a.get_config() for a in want]
    args = parse_args(["run", "--plan", plan, PSF, DCD, "--executor", "dask", "--scheduler", "tcp://h:1",
                       "--follow", "--idle", "5"])
    from trajscale.cli.run import run_options

    opts = run_options(args, DCD)
    assert opts.executor_options == {"scheduler": "tcp://h:1"} and opts.follow.idle == 5


@pytest.mark.parametrize(("text", "match"), [
    ("[rmsdd]\nselect = 'name CA'\n", r"unknown analysis \[rmsdd\]; the analyses are rmsd, rmsf, rgyr"),
    ("[rmsd]\nselection = 'name CA'\n", r"\[rmsd\]: unknown key 'selection'; rmsd takes select, ref-frame, "
                                        r"groupselection, mass-weighted, allow-nan, out"),
    ("[[rdf]]\nselect1 = 'name CA'\nselect2 = 'name CA'\n[[rdf]]\nselect1 = 'name CA'\n",
     r"\[rdf\] \(the 2nd\): rdf needs select2"),
    ("[rmsd]\nref-frame = 'first'\n", r"option 'ref-frame' takes a int, got 'first'"),
    ("[rdf]\nselect1 = 'a'\nselect2 = 'b'\nrange = [0]\n", r"option 'range' takes 2 values"),
    ("", r"lists no analysis"),
    ("[rmsd\n", r"is not a valid TOML run plan"),
])
def test_a_bad_plan_is_refused_in_one_line(tmp_path, text, match):
    with pytest.raises(ts.TrajscaleError, match=match) as err:
        _planned(["run", "--plan", _plan(tmp_path, text), PSF, DCD])
    assert "\n" not in str(err.value)


def test_plan_and_an_analysis_name_or_out_exclude_each_other(tmp_path):
    plan = _plan(tmp_path)
    with pytest.raises(ConfigError, match="key out of its table"):
        _planned(["run", "--plan", plan, PSF, DCD, "--out", "x.csv"])


def test_every_analysis_of_the_registry_has_its_command_and_name():
    from trajscale.analysis import ANALYSES, BUILTIN
    from trajscale.cli.run import command_analyses

    assert "com_distance" in command_analyses()
    assert ts.CentreOfMassDistance is ANALYSES["com_distance"]
    assert set(command_analyses()) == {n for n, c in ANALYSES.items() if c.command is not None}
    assert {"per_frame", "user_reduce"} <= set(ANALYSES) - set(command_analyses())   # they take a function
    for name in BUILTIN:   # the package's own (a test may register one of its own in this process)
        cls = ANALYSES[name]
        assert getattr(ts, cls.__name__) is cls and cls.__name__ in ts.__all__
    got = _planned(["run", "com_distance", PSF, DCD, "--select1", "resid 1-60", "--select2", "resid 100-200",
                    "--geometric", "--no-pbc"])
    assert got[0].analysis.get_config() == ts.CentreOfMassDistance("resid 1-60", "resid 100-200", weights=None,
                                                                   pbc=False).get_config()


def test_a_new_analysis_reaches_the_command_line_from_its_module_and_one_registry_line(monkeypatch, tmp_path):
    from tests.analysis import plugin_analysis
    from trajscale.analysis import ANALYSES

    monkeypatch.setitem(ANALYSES, "mean_z", plugin_analysis.MeanZ)   # the one line
    run = next(a for a in build_parser()._subparsers._group_actions[0].choices["run"]._actions
               if a.dest == "analysis")
    assert "mean_z" in run.choices
    assert "mean z of the atoms per frame" in run.choices["mean_z"].format_help()
    assert "(default: 'name CA')" in run.choices["mean_z"].format_help()
    got = _planned(["run", "mean_z", PSF, DCD, "--select", "backbone"])
    assert got[0].analysis.select == "backbone"
    plan = _plan(tmp_path, "[mean_z]\nout = 'z.csv'\n[rmsd]\n")
    got = _planned(["run", "--plan", plan, PSF, DCD])
    assert [p.name for p in got] == ["mean_z", "rmsd"] and got[0].analysis.select == "name CA"
    r = ts.run([got[0].analysis, got[1].analysis], PSF, DCD)
    assert r[0].values.shape == (98,)


def test_one_default_per_analysis_from_python_and_the_command_line():
    """Each analysis built by the command line with none of its options is the one Python's constructor
    makes with no keywords (the required ones given to both); the docs' table says each default."""
    from trajscale.analysis.options import build, defaults_table
    from trajscale.cli.run import command_analyses

    required = {"select1": "name CA", "select2": "name CA"}
    table = defaults_table()
    for name, cls in command_analyses().items():
        given = {o.name: required[o.name] for o in cls.command.options if o.required}
        kw = {o.kw: given[o.name] for o in cls.command.options if o.required}
        if name == "contacts":
            kw = {}
            given = {"select1": "protein", "select2": "protein"}
        assert build(cls, given, name).get_config() == cls(**kw).get_config(), name
        assert f"| `{name}` | `trajscale.{cls.__name__}` |" in table
        for o in cls.command.options:
            assert f"`--{o.name}`" in table
    assert ts.RMSD().select == "protein and name CA" == _planned(["run", "rmsd", PSF, DCD])[0].analysis.select
    assert "| `--select` | `select` | `'protein and name CA'` |" in table


@pytest.mark.cli
def test_a_plan_run_saves_each_result_with_the_bits_of_its_run_alone(tmp_path, adk_vacuum_h5md, alone_on_vacuum):
    plan = _plan(tmp_path)
    proc = run_cli("run", "--plan", plan, PSF, adk_vacuum_h5md, "--executor", "processes", "-n", "2",
                   "--report", "r.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "4 analyses in one pass" in proc.stdout and "rmsd selection: 'name CA'" in proc.stdout
    for name, path in alone_on_vacuum.items():
        assert filecmp.cmp(tmp_path / f"{name}.csv", path, shallow=False), name
    again = run_cli_here("run", "--plan", plan, PSF, adk_vacuum_h5md, cwd=tmp_path)
    assert again.returncode != 0 and "rmsd.csv: " in again.stderr and "Traceback" not in again.stderr


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_a_followed_plan_equals_its_analyses_run_alone_on_the_finished_file(tmp_path):
    from tests.sources.test_follow import producer

    traj = tmp_path / "growing.h5md"
    writer = producer("h5md", str(traj), "0.02")
    try:
        proc = run_cli_here("run", "--plan", _plan(tmp_path), PSF, str(traj), "--follow", "--every-frames", "30",
                            "--idle", "120", "--executor", "serial", cwd=tmp_path)
    finally:
        assert writer.wait(timeout=300) == 0
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "followed 98 frames; ended: the writer marked the file complete"
    for name, path in _alone_outputs(tmp_path, str(traj)).items():
        assert filecmp.cmp(tmp_path / f"{name}.csv", path, shallow=False), name


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_a_plan_over_an_imd_stream_equals_its_analyses_run_alone_on_the_teed_file(tmp_path):
    pytest.importorskip("imdclient")
    from tests.sources.test_follow_imd import _stream_into_cli

    tee = tmp_path / "stream.h5md"
    plan = _plan(tmp_path, VACUUM_PLAN.replace('"rmsd.csv"', f'"{tmp_path}/rmsd.csv"')
                 .replace('"rmsf.csv"', f'"{tmp_path}/rmsf.csv"').replace('"rgyr.csv"', f'"{tmp_path}/rgyr.csv"')
                 .replace('"distances.csv"', f'"{tmp_path}/distances.csv"'))
    proc = _stream_into_cli(["--plan", plan, PSF, "imd://{port}", "--tee", str(tee), "--idle", "120",
                             "--executor", "processes", "-n", "2"])
    assert proc.returncode == 0, proc.stderr_text
    for name, path in _alone_outputs(tmp_path, str(tee)).items():
        assert filecmp.cmp(tmp_path / f"{name}.csv", path, shallow=False), name


def test_the_docs_page_on_plans_gets_the_defaults_table_from_the_registry():
    import importlib.util

    from tests.conftest import ROOT
    from trajscale.analysis.options import defaults_table

    spec = importlib.util.spec_from_file_location("trajscale_docs_conf", ROOT / "docs" / "conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    page = [(ROOT / "docs" / "plans.md").read_text()]
    assert conf.DEFAULTS_TABLE in page[0] and "--plan" in page[0]
    conf._defaults_table(None, "plans", page)
    assert conf.DEFAULTS_TABLE not in page[0] and defaults_table() in page[0]


@pytest.mark.mpi
def test_a_plan_under_mpiexec(tmp_path, adk_vacuum_h5md, alone_on_vacuum):
    pytest.importorskip("mpi4py")
    from tests.conftest import run_mpi

    proc = run_mpi(2, ["-m", "trajscale.cli.main", "run", "--plan", _plan(tmp_path), PSF, adk_vacuum_h5md,
                       "--executor", "mpi", "--tasks", "4"], cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("4 analyses in one pass") == 1   # rank 0 says it
    for name, path in alone_on_vacuum.items():
        assert filecmp.cmp(tmp_path / f"{name}.csv", path, shallow=False), name


def _installed_plugin(where) -> dict:
    """An environment in which another package registers ``mean_z`` (tests.analysis.plugin_analysis) under
    trajscale's entry-point group, as ``pip install`` of it would (a dist-info folder on the path)."""
    import os

    from tests.conftest import ROOT

    info = where / "meanz_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: meanz-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[trajscale.analyses]\nmean_z = tests.analysis.plugin_analysis:MeanZ\n")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(where), str(ROOT), str(ROOT / "src")]))


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_an_installed_analysis_reaches_the_command_line_and_the_workers(tmp_path, monkeypatch):
    env = _installed_plugin(tmp_path / "site")
    help_ = run_cli("run", "mean_z", "--help", env=env)
    assert help_.returncode == 0 and "mean z of the atoms per frame" in help_.stdout
    proc = run_cli("run", "mean_z", PSF, DCD, "--select", "backbone", "--out", "z.csv", "--executor", "processes",
                   "-n", "2", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    from tests.analysis.plugin_analysis import MeanZ
    from trajscale.analysis import ANALYSES

    monkeypatch.setitem(ANALYSES, "mean_z", MeanZ)   # this process has no such entry point
    ts.run(MeanZ(select="backbone"), PSF, DCD).save(str(tmp_path / "alone.csv"))
    assert filecmp.cmp(tmp_path / "z.csv", tmp_path / "alone.csv", shallow=False)
    plan = _plan(tmp_path, "[mean_z]\nselect = 'backbone'\nout = 'zz.csv'\n[rmsd]\nselect = 'name CA'\n")
    proc = run_cli("run", "--plan", plan, PSF, DCD, "--executor", "serial", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert filecmp.cmp(tmp_path / "zz.csv", tmp_path / "alone.csv", shallow=False)
