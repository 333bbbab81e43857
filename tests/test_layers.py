"""Imports point one way, and what the import contracts cannot see about imports.

The architecture is written as import-linter contracts in pyproject.toml (``[tool.importlinter]``): the floors
every module stands on (lower floors never import higher ones, modules on a floor marked ``|`` never import each
other), what a package must not import, the topology entered through its interface, the report read from the
records up, private modules kept to their package, no circles. ``lint-imports`` checks them (``make check``,
``make test``, and :func:`test_the_import_contracts_are_kept` here); every import counts, the ones inside functions
and under ``TYPE_CHECKING`` too, and an import through other modules as well. A planted import of each spelling is
shown broken.

What the contracts cannot see is checked on the syntax tree: capabilities declared, not probed; no private name
of another package imported (tests/test_guards.py scans attribute reads, strings, names compared and workers)."""

from __future__ import annotations

import ast
import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "trajscale"
#: lint-imports, run by the interpreter running the tests.
LINT_IMPORTS = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                                      "sys.exit(lint_imports_command())", "--no-cache", "--no-logo"]


def lint_imports(src: Path) -> subprocess.CompletedProcess:
    """lint-imports with pyproject.toml's contracts, over the package ``trajscale`` in the folder ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(LINT_IMPORTS, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.cli
def test_the_import_contracts_are_kept():
    proc = lint_imports(ROOT / "src")
    assert "No module named" not in proc.stderr, "import-linter is in the test extra: pip install -e '.[test]'"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 broken" in proc.stdout and "Contracts: " in proc.stdout


#: Each spelling of an import a contract forbids, planted in a module: relative or absolute, a module or its
#: package, ``import`` or ``from``, ``import ... as``, inside a function or under ``TYPE_CHECKING``, the package's
#: ``__init__``; then the topology's modules, the report's floors, a private module and a circle.
PLANTED_IMPORTS = [
    # the Source framework imports no format package (nor what stands on the formats)
    ("sources/follow.py", "from ..h5md.source import H5MDSource"),
    ("sources/registry.py", "from ..h5md import follow"),
    ("sources/segments.py", "from trajscale.xdr.source import XDRSource"),
    ("sources/opened.py", "import trajscale.mdcath.source"),
    ("sources/registry.py", "from ..npy.source import NumpySource"),
    ("sources/base.py", "def f():\n    from ..hdf5.chunks import ChunkReads"),
    ("sources/chain.py", "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from ..pwrite import ParallelWriter"),
    ("sources/base.py", "from .. import mdareaders"),
    # HDF5 over a byte store imports no format and not the Source framework
    ("hdf5/chunks.py", "from ..h5md.schema import complete_frames"),
    ("hdf5/files.py", "from ..sources.base import Source"),
    ("hdf5/metadata.py", "import trajscale.mdcath.layout as layout"),
    ("hdf5/runs.py", "def f():\n    from trajscale.xdr import offsets"),
    # mdCATH stands on hdf5 and the Source interface, beside H5MD and XTC, not on them
    ("mdcath/source.py", "from ..h5md.source import H5MDSource"),
    ("mdcath/layout.py", "from trajscale.xdr.offsets import index"),
    ("mdcath/atoms.py", "def f():\n    from ..follow import FollowRounds"),
    # the formats stand below the engine and beside each other; the bytes below the machinery
    ("h5md/source.py", "from ..engine import Engine"),
    ("xdr/source.py", "from ..h5md.source import H5MDSource"),
    ("npy/source.py", "from trajscale.xdr import offsets"),
    ("mdareaders/part.py", "def f():\n    from ..h5md.source import H5MDSource"),
    ("xdr/offsets.py", "from ..mdareaders.part import MDAPartSource"),
    ("h5md/schema.py", "def f():\n    from ..mdcath.layout import describe"),
    ("h5md/layout.py", "import trajscale"),
    ("imd.py", "from .follow import StreamRounds"),
    ("storage/objects.py", "from .. import pools"),
    # a file of several trajectories is expanded through the traits' hook, not the format's module
    ("ml/ensemble.py", "def f():\n    from ..mdcath.source import ensemble_members"),
    ("ensemble/catalog.py", "import trajscale.mdcath.source"),
    # the topology through its interface, the command line from nowhere below it, the report from the records up
    ("engine.py", "from .topology.load import load_universe"),
    ("mdareaders/universe.py", "def f():\n    from ..topology import universe"),
    ("ml/dataset.py", "import trajscale.topology.selection_cache"),
    ("report/summary.py", "from ..cli.options import add_executor_options"),
    ("demo.py", "from . import cli"),
    ("run.py", "import trajscale.cli.main"),
    ("report/timing.py", "from .advice import diagnose"),
    ("report/metrics.py", "def f():\n    from . import plots"),
    ("report/diagnose.py", "from trajscale.report.summary import Report"),
    # a private module is its package's, and no module imports itself back
    ("engine.py", "from .executors._forkserver import serve"),
    ("h5md/schema.py", "def f():\n    from .source import H5MDSource"),
]


def _copy_of_the_package(dest: Path) -> Path:
    """The package's modules (no compiled ones) copied under ``dest``: the folder to plant in."""
    shutil.copytree(PKG, dest / "trajscale", ignore=lambda d, names: [
        n for n in names if not n.endswith(".py") and not (Path(d) / n).is_dir() or n == "__pycache__"])
    return dest


@pytest.mark.cli
def test_the_import_contracts_catch_every_spelling(tmp_path):
    """Every planted import is reported broken, at its line."""
    src = _copy_of_the_package(tmp_path)
    where = []
    for rel, text in PLANTED_IMPORTS:
        path = src / "trajscale" / rel
        before = path.read_text().rstrip("\n") + "\n"
        line = before.count("\n") + 1 + next(i for i, t in enumerate(text.splitlines()) if "import" in t)
        path.write_text(before + text + "\n")
        name = ".".join(["trajscale", *rel.removesuffix(".py").removesuffix("/__init__").split("/")])
        where.append((rel, text, name, line))
    proc = lint_imports(src)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = proc.stdout
    missed = [f"{rel}: {text!r}" for rel, text, name, line in where
              if not re.search(rf"{re.escape(name)} -> \S+ \(l\.(\d+, )*{line}[,)]", said)]
    assert not missed, "not reported:\n" + "\n".join(missed) + "\n" + said
    assert "No cycles are allowed in trajscale.h5md" in said and ".schema -> .source" in said


def test_every_module_stands_on_a_floor():
    """The floors contract is exhaustive: a new top-level module or report module must be placed on a floor."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    floors = {c["containers"][0]: c for c in contracts if c["type"] == "layers"}
    assert floors["trajscale"]["exhaustive"] and floors["trajscale.report"]["exhaustive"]
    placed = {m.strip() for layer in floors["trajscale"]["layers"] for m in re.split(r"[|:]", layer)}
    tops = {p.name.removesuffix(".py") for p in PKG.iterdir()
            if p.suffix == ".py" and p.name != "__init__.py" or (p / "__init__.py").exists()}
    assert placed == tops


@functools.cache
def _parse(source: str) -> ast.Module:
    """``source``'s tree, parsed once in this process (the guards only read the trees)."""
    return ast.parse(source)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(path: Path) -> str:
    """The package a module belongs to (a package's ``__init__`` belongs to the package itself)."""
    me = _module_name(path)
    return me if path.name == "__init__.py" else me.rpartition(".")[0]


def _imported_from(node: ast.ImportFrom, package: str) -> str | None:
    """The trajscale module ``from ... import`` names, relative imports resolved in ``package``; None
    for other libraries."""
    if node.level:
        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))
    if node.module and node.module.split(".")[0] == "trajscale":
        return node.module
    return None


def _declared() -> set[str]:
    """Every name the Executor and Source interfaces declare."""
    from trajscale.executors.base import Executor
    from trajscale.sources.base import Source

    return {n for cls in (Executor, Source) for n in dir(cls) if not n.startswith("__")}


def capabilities_probed(source: str, rel: str = "<planted>", declared: set[str] | None = None) -> list[str]:
    """The lines of ``source`` (a module at ``rel``) that probe for a declared attribute with ``getattr(x,
    "name", default)`` or ``hasattr(x, "name")``."""
    declared = _declared() if declared is None else declared
    return [f"{rel}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})"
            for node in ast.walk(_parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant) and node.args[1].value in declared]


def test_capabilities_are_declared_not_probed():
    """What the code asks of an Executor or a Source is declared on its interface with a default, so
    no ``getattr(x, "name", default)`` or ``hasattr(x, "name")`` asks for one of their attributes
    where executors and sources are used (MDAnalysis's objects, elsewhere, share some names)."""
    from trajscale.executors.base import Executor
    from trajscale.sources.base import Source

    asked = {Executor: {"polls_for_stop", "adopts_sources", "uses_external_cluster", "late_starts", "source_options",
                        "is_root", "spmd", "traits"},
             Source: {"bytes_read", "opens", "opened", "collective", "preload_frame_meta", "refresh"}}
    for cls, names in asked.items():
        assert names <= set(dir(cls)), f"{cls.__name__} does not declare {sorted(names - set(dir(cls)))}"
    declared = _declared()
    users = [PKG / "engine.py", PKG / "run.py", PKG / "follow.py", PKG / "planning.py", *PKG.glob("executors/*.py"),
             *PKG.glob("sources/*.py")]
    bad = [line for path in users
           for line in capabilities_probed(path.read_text(), path.relative_to(PKG).as_posix(), declared)]
    assert not bad, "declare these on the interface instead:\n" + "\n".join(bad)


@pytest.mark.parametrize("planted", [
    'if getattr(executor, "polls_for_stop", False):\n    pass',
    'n = getattr(src, "bytes_read", 0)',
    'if hasattr(source, "refresh"):\n    pass',
])
def test_the_capability_probe_finder_catches_every_spelling(planted):
    assert capabilities_probed(planted), planted
    assert not capabilities_probed('u = getattr(atoms, "masses", None)')


def _private_imports(path: Path, text: str | None = None) -> list[str]:
    """``from MODULE import _name`` in ``path`` (or ``text`` as that module) where the private name belongs to
    another package than the importer's (a private module is the private_modules contract's); the root
    package's own private modules (``_lazy``, ``_version``) serve every subpackage."""
    me, package = _module_name(path), _package_of(path)
    out = []
    for node in ast.walk(_parse(path.read_text() if text is None else text)):
        target = _imported_from(node, package) if isinstance(node, ast.ImportFrom) else None
        if target is None:
            continue
        is_package = (PKG.parent / target.replace(".", "/")).is_dir()
        owner = target if is_package else target.rpartition(".")[0]
        for a in node.names:
            submodule = (PKG.parent / target.replace(".", "/") / f"{a.name}.py").exists()
            if a.name.startswith("_") and not a.name.startswith("__") and owner != package \
                    and not (submodule and target == "trajscale"):
                out.append(f"{me}:{node.lineno} imports {target}.{a.name}")
    return out


def test_the_private_name_finder_finds_one():
    text = ("from ..follow import _first_snapshot\nfrom ..sources import _registry as reg\n"
            "from .reader import _ok\nfrom .._lazy import attach\nfrom trajscale.sources.follow import snapshot\n")
    assert _private_imports(PKG / "mda" / "probe.py", text) == [
        "trajscale.mda.probe:1 imports trajscale.follow._first_snapshot",
        "trajscale.mda.probe:2 imports trajscale.sources._registry"]


def test_no_module_imports_another_packages_private_names():
    """A name with a leading underscore is private to its package: another package that needs it asks
    for a public name (every import counts, inside functions too)."""
    bad = [line for path in sorted(PKG.rglob("*.py")) for line in _private_imports(path)]
    assert not bad, "\n".join(bad)
