"""The package as users get it: ``python -m build`` gives an sdist and a wheel with the compiled
kernels; the wheel installs into a fresh venv without MPI (PyPI's h5py: the laptop path), where
``convert`` and a processes(2) analysis give MDAnalysis's numbers; ``pytest --pyargs trajscale``
runs the tests the package ships; the documentation site builds with warnings as errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests import datafiles as D

from tests.conftest import ROOT
from tests.test_cli_reference import command_parsers

pytestmark = pytest.mark.tool   # builds the sdist, the wheel and the docs

VENV_BIN = Path(sys.executable).parent


def _tracked_copy(dst: Path) -> Path:
    """The repository's tracked files (as a clean clone has them) in ``dst``."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)
    return dst


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    pytest.importorskip("build")
    tree = _tracked_copy(tmp_path_factory.mktemp("tree"))
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "-o", str(out), str(tree)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_build_gives_sdist_and_wheel_with_kernels(dist):
    sdist, = dist.glob("trajscale-*.tar.gz")
    wheel, = dist.glob("trajscale-*.whl")
    with tarfile.open(sdist) as t:
        names = t.getnames()
    assert any(n.endswith("kernels/_sums.pyx") for n in names) and any(n.endswith("/setup.py") for n in names)
    assert any(n.endswith("LICENSE") for n in names) and any(n.endswith("CHANGELOG.md") for n in names)
    # the XTC decoder's C (xdrfile, with its origin and licence note); no Cython output beside a .pyx
    assert {"xdr/_xdr.pyx", "xdr/csrc/xdrfile.c", "xdr/csrc/xdrfile_trr.c", "xdr/csrc/README.md",
            "kernels/_chunks.pxd"} <= {n.split("/src/trajscale/", 1)[-1] for n in names}, names
    assert not [n for n in names if n.endswith(".c") and "/csrc/" not in n], names
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    kernels = [n for n in names if n.endswith(".so")]
    assert kernels, names
    assert not [n for n in names if n.endswith((".pyx", ".c"))]
    assert any(n.startswith("trajscale/tests/") for n in names)


def _uv_install_args() -> list[str] | None:
    """``uv pip install``'s options that give it pip's configuration (find-links, constraints, indexes), as
    scripts/setup-env.sh passes them; None where uv is not installed here (pip installs then).

    uv resolves and installs the wheel's ~30 dependencies from its cache in about a second where pip takes
    a minute of CPU; what it installs is what pip's configuration offers, from the same indexes."""
    import importlib.util

    if importlib.util.find_spec("uv") is None:
        return None
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                         timeout=120).stdout
    conf: dict[str, list[str]] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        conf.setdefault(key.split(".", 1)[-1], []).extend(value.strip("'\"").split())

    def usable(url: str) -> bool:   # pip skips a missing local index with a warning; uv would stop
        return not url.startswith("file://") or os.path.isdir(url[len("file://"):])

    pairs = [("--find-links", d) for d in conf.get("find-links", []) if usable(d)]
    pairs += [("-c", c) for c in conf.get("constraint", []) if os.path.isfile(c)]
    pairs += [("--default-index", u) for u in conf.get("index-url", [])[:1] if usable(u)]
    pairs += [("--index", u) for u in conf.get("extra-index-url", []) if usable(u)]
    # unsafe-best-match: every index's versions are candidates, as pip takes them
    return ["--index-strategy", "unsafe-best-match", *(a for pair in dict.fromkeys(pairs) for a in pair)]


@pytest.mark.cli
@pytest.mark.slow
def test_wheel_in_a_fresh_venv_without_mpi(tmp_path, dist):
    """The laptop path: PyPI's h5py (no MPI), no mpi4py; convert, then an RMSD on processes(2)."""
    wheel, = dist.glob("trajscale-*.whl")
    venv = tmp_path / "venv"
    uv = _uv_install_args()
    # with uv the venv needs no pip of its own (ensurepip: seconds of CPU)
    subprocess.run([sys.executable, "-m", "venv", *(["--without-pip"] if uv else []), str(venv)], check=True,
                   timeout=120)
    py = venv / "bin" / "python"
    # no bytecode compiled at install: the few modules this test imports are compiled as they are first imported
    install = ([sys.executable, "-m", "uv", "pip", "install", "-q", "--python", str(py), *uv] if uv else
               [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"])
    proc = subprocess.run([*install, str(wheel)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check = subprocess.run([str(py), "-c", "import h5py, importlib.util as u; "
                            "print(h5py.get_config().mpi, u.find_spec('mpi4py') is None)"],
                           capture_output=True, text=True, timeout=120)
    assert check.stdout.split() == ["False", "True"], check
    cli = venv / "bin" / "trajscale"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = tmp_path / "adk.h5md"
    conv = subprocess.run([str(cli), "convert", D.PSF, D.DCD, "-o", str(out)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
    assert conv.returncode == 0, conv.stderr[-3000:]
    csv = tmp_path / "rmsd.csv"
    run = subprocess.run([str(cli), "run", "rmsd", D.PSF, str(out), "--select", "name CA", "--executor",
                          "processes", "-n", "2", "--out", str(csv)], capture_output=True, text=True, timeout=300,
                         env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    got = np.loadtxt(csv, delimiter=",", skiprows=1)[:, -1]
    ref = rms.RMSD(mda.Universe(D.PSF, D.DCD), select="name CA").run().results.rmsd[:, 2]
    np.testing.assert_allclose(got, ref, atol=1e-4)


@pytest.mark.cli
def test_pytest_pyargs_runs_the_shipped_tests(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "trajscale"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


def test_the_changelog_page_without_the_repository_points_at_the_file(tmp_path):
    """``docs/`` on its own (an sdist, a copy of the folder): the changelog page keeps its title and says
    where the entries are (the build itself is the test above, with CHANGELOG.md beside it)."""
    import importlib.util

    docs = shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("_build", "generated"))
    spec = importlib.util.spec_from_file_location("alone_conf", docs / "conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    page = [(docs / "changelog.md").read_text()]
    conf._append_changelog(None, "changelog", page)
    assert page[0].startswith("# Changelog") and page[0].rstrip().endswith("at the top of the source repository.")
    with_it = [(ROOT / "docs" / "changelog.md").read_text()]
    shutil.copy(ROOT / "CHANGELOG.md", tmp_path)
    conf._append_changelog(None, "changelog", with_it)
    assert "## [Unreleased]" in with_it[0]


@pytest.mark.cli
def test_docs_build_with_warnings_as_errors(tmp_path):
    """``docs/`` copied with CHANGELOG.md beside it and nothing else of the repository builds with warnings
    as errors: no page includes another file outside it, the changelog page carries the entries, and every
    page, public name and CLI option is there.

    Built as text: the same pages read, stubs generated and references resolved as for HTML (the warnings
    that fail it), in two thirds of the CPU time (no theme, no highlighted source pages); ``make docs``
    builds the HTML site."""
    pytest.importorskip("sphinx")
    pytest.importorskip("numpydoc")
    pytest.importorskip("myst_parser")
    docs = shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("_build", "generated"))
    shutil.copy(ROOT / "CHANGELOG.md", tmp_path)
    proc = subprocess.run([str(VENV_BIN / "sphinx-build"), "-W", "--keep-going", "-q", "-b", "text",
                           "-d", str(tmp_path / "doctrees"), str(docs), str(tmp_path / "text")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "text"
    changelog = (out / "changelog.txt").read_text()
    assert changelog.startswith("Changelog\n*********") and "Unreleased" in changelog
    index = (out / "index.txt").read_text()   # its tables of contents: the pages' titles
    assert "\n* Changelog\n" in index and "\n* Tutorial: from a GROMACS run" in index
    for page in ("index", "install", "tutorial", "formats", "parallel", "writing", "ml", "mdanalysis", "arrays",
                 "benchmarks", "api", "changelog"):
        assert (out / f"{page}.txt").exists(), page
    api = (out / "api.txt").read_text()
    for name in ("run", "RMSD", "Reader", "ParallelWriter"):   # rows of its summary tables (names cut to the column)
        assert f'\n| "{name[:9]}' in api, name
    # every public name of the package and of each subpackage's __all__ has its page (read from the modules,
    # not from api.md): under the subpackage, or under the package when it exports the name too
    import importlib

    import trajscale

    pages = {p.stem for p in (out / "generated").glob("*.txt")}
    assert {"trajscale.run", "trajscale.RMSD", "trajscale.mda.Reader", "trajscale.ParallelWriter"} <= pages
    missing = [f"trajscale.{n}" for n in trajscale.__all__ if not n.startswith("_") and f"trajscale.{n}" not in pages]
    for sub in ("analysis", "sources", "topology", "executors", "pwrite", "report", "ml", "mda", "arrays"):
        for n in importlib.import_module(f"trajscale.{sub}").__all__:
            if f"trajscale.{sub}.{n}" not in pages and not (n in trajscale.__all__ and f"trajscale.{n}" in pages):
                missing.append(f"trajscale.{sub}.{n}")
    assert not missing, missing
    for page in ("trajscale.h5md.writer.H5MDWriter", "trajscale.convert.rechunk.rechunk",
                 "trajscale.convert.split.split", "trajscale.h5md.inspect.inspect_file",
                 "trajscale.report.predict.predict", "trajscale.errors.ConfigError"):
        assert page in pages, page
    # the CLI reference holds every option of every command, as the parser that --help prints has it
    from trajscale.cli.main import build_parser

    cli = (out / "cli.txt").read_text()
    options = {(p.prog, o) for p in command_parsers(build_parser()) for a in p._actions for o in a.option_strings
               if o.startswith("--")}
    assert len(options) > 100 and not [po for po in options if po[1] not in cli]


@pytest.mark.cli
def test_a_build_without_a_compiler_says_what_is_needed(tmp_path):
    """No working C compiler: one line naming what to install, no traceback, nothing built."""
    tree = _tracked_copy(tmp_path / "tree")
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree,
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, CC="/nonexistent/cc"))
    assert proc.returncode != 0
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "a C compiler (gcc or clang) and the Python headers are needed" in errors[0], \
        proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list((tree / "src").rglob("*.so"))
