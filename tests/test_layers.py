"""Imports point one way: lower layers never import higher ones, no module imports itself back
through others, the topology package is entered through its interface, and only cli/ imports cli/.

Every import counts, the ones inside functions and under ``TYPE_CHECKING`` too: a function-local
import that hides a circle is still a circle."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "trajscale"

#: what stands on the process's machinery (launch, pools, clusters, parallel, sharing, the timeline)
_ABOVE_THE_MACHINERY = {"sources", "h5md", "xdr", "analysis", "executors", "run", "report", "convert",
                        "cli", "demo", "pwrite", "ml", "mda", "arrays", "engine", "planning", "ensemble",
                        "topology", "storage", "follow", "npy", "mdareaders"}

#: layer (a package, or a module of the package's top) -> the trajscale packages/modules it must not import
FORBIDDEN = {
    # the H5MD format: its Source stands on sources.base; nothing above the Sources
    "h5md": {"analysis", "executors", "run", "report", "convert", "cli", "demo", "pwrite", "ml", "mda", "arrays",
             "engine", "planning", "follow", "topology", "xdr", "mdcath", "imd", "ensemble", "npy", "mdareaders"},
    # HDF5 over a byte store: under every HDF5 format, above the bytes only
    "hdf5": {"h5md", "mdcath", "xdr", "sources", "analysis", "executors", "run", "report", "convert", "cli", "demo",
             "pwrite", "ml", "mda", "arrays", "engine", "planning", "follow", "topology", "ensemble"},
    # the mdCATH format, as H5MD's: stands on hdf5 and sources.base
    "mdcath": {"analysis", "executors", "run", "report", "convert", "cli", "demo", "pwrite", "ml", "mda", "arrays",
               "engine", "planning", "follow", "h5md", "xdr", "imd", "ensemble", "npy", "mdareaders"},
    "kernels": {"sources", "analysis", "executors", "run", "report", "convert", "cli", "h5md", "demo"},
    # the Source interface and the framework: under every format package, which stands on it
    "sources": {"analysis", "executors", "run", "report", "convert", "cli", "demo", "h5md", "xdr", "mdcath", "hdf5",
                "npy", "mdareaders", "pwrite", "ml", "mda", "arrays", "engine", "planning", "follow", "imd",
                "ensemble"},
    "analysis": {"executors", "run", "report", "convert", "cli", "demo"},
    "convert": {"analysis", "executors", "run", "report", "cli", "demo"},
    "pwrite": {"sources", "analysis", "executors", "run", "report", "convert", "cli", "demo"},
    "report": {"sources", "analysis", "executors", "run", "convert", "cli", "demo", "h5md"},
    # the ML datasets: a file of several trajectories is expanded by its format's declared traits, not its module
    "ml": {"analysis", "executors", "run", "convert", "cli", "demo", "mdcath"},
    "topology": {"sources", "analysis", "executors", "run", "report", "convert", "cli", "demo", "ml", "mda",
                 "pwrite"},
    # the XTC/TRR format, as H5MD's
    "xdr": {"analysis", "executors", "run", "report", "convert", "cli", "demo", "pwrite", "ml", "mda", "arrays",
            "engine", "planning", "follow", "topology", "h5md", "mdcath", "imd", "ensemble", "npy", "mdareaders"},
    # the formats read through MDAnalysis's readers: on the topology's interface, beside the other formats
    "mdareaders": {"analysis", "executors", "run", "report", "convert", "cli", "demo", "pwrite", "ml", "mda",
                   "arrays", "engine", "planning", "follow", "h5md", "xdr", "mdcath", "npy", "hdf5", "imd", "ensemble"},
    # the .npy format, as XTC's
    "npy": {"analysis", "executors", "run", "report", "convert", "cli", "demo", "pwrite", "ml", "mda", "arrays",
            "engine", "planning", "follow", "topology", "h5md", "xdr", "mdcath", "hdf5", "imd", "ensemble",
            "mdareaders"},
    # an IMD stream written into H5MD as it comes: stands on the writer, under the followed run
    "imd": {"analysis", "executors", "run", "report", "convert", "cli", "demo", "engine", "planning", "follow",
            "ensemble", "ml", "mda", "arrays"},
    # bytes: transports only, under every format
    "storage": _ABOVE_THE_MACHINERY | {"launch", "pools", "clusters", "parallel", "sharing", "timeline"},
    # many trajectories: stands on the run engine, under the command line; expands files by formats' traits
    "ensemble": {"cli", "demo", "mdcath"},
    # the process's machinery, asked by executors, convert, the report and the command line alike
    "launch": _ABOVE_THE_MACHINERY | {"pools", "clusters", "parallel", "sharing"},
    "timeline": _ABOVE_THE_MACHINERY | {"launch", "pools", "clusters", "parallel", "sharing"},
    "cache_files": _ABOVE_THE_MACHINERY | {"launch", "pools", "clusters", "parallel", "sharing"},
    "pools": _ABOVE_THE_MACHINERY | {"clusters", "parallel", "sharing"},
    "parallel": _ABOVE_THE_MACHINERY | {"clusters", "pools"},
    "sharing": _ABOVE_THE_MACHINERY | {"clusters", "pools"},
    "clusters": _ABOVE_THE_MACHINERY,
}

#: The report package's floors, from the records up: a module imports only modules on its floor or below.
REPORT_FLOORS = {
    "timing": 0, "payload": 0, "runfacts": 0, "kinds": 0, "machine": 0, "probe": 0,   # records (of runs, machines)
    "conditions": 0,                           # what else the machine ran, and the page cache, beside them
    "metrics": 1,                              # numbers derived from the records
    "stragglers": 2, "diagnose": 2,            # diagnosis
    "advice": 3, "fit": 3, "predict": 3, "storage": 3,   # advice, and the model that predicts other runs
    "calibrate": 4,                            # whole runs fitted by the model
    "summary": 4, "table": 4, "plots": 4, "trace": 4,   # presentation
}


@functools.cache
def _parse(source: str) -> ast.Module:
    """``source``'s tree, parsed once in this process: each guard walks every module of the package (the
    guards only read the trees)."""
    return ast.parse(source)


def _imports(path: Path, text: str | None = None) -> set[str]:
    """The top-level trajscale names a module imports (``trajscale`` itself counts as ``__init__``); ``text``
    stands for the module's own (a planted one)."""
    tree = _parse(path.read_text() if text is None else text)
    rel_pkg = path.relative_to(PKG).parts[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(rel_pkg[: len(rel_pkg) - (node.level - 1)])
                parts = base + (node.module.split(".") if node.module else [])
                if not parts:
                    out.update(f"__init__:{a.name}" for a in node.names)
                else:
                    out.add(parts[0])
            elif node.module and node.module.startswith("trajscale"):
                parts = node.module.split(".")[1:]
                out.add(parts[0] if parts else "__init__")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("trajscale"):
                    parts = a.name.split(".")[1:]
                    out.add(parts[0] if parts else "__init__")
    return out


def layer_violations(path: Path, text: str | None = None) -> list[str]:
    """The imports of the module at ``path`` (``text``: a planted module there) that :data:`FORBIDDEN` forbids
    its layer (its top package, or the top module itself), and any import of the package's ``__init__``."""
    layer, bad = path.relative_to(PKG).parts[0].removesuffix(".py"), []
    for name in _imports(path, text):
        mod = name.split(":")[-1] if name.startswith("__init__:") else name
        if name.startswith("__init__") and mod not in {"_version"}:
            bad.append(f"{path.relative_to(PKG)} imports the package __init__ ({mod})")
        elif mod in FORBIDDEN.get(layer, ()) and mod != layer:   # (a package imports itself)
            bad.append(f"{path.relative_to(PKG)} imports {mod}")
    return bad


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_above_it(layer):
    paths = sorted((PKG / layer).rglob("*.py")) if (PKG / layer).is_dir() else [PKG / f"{layer}.py"]
    assert paths[0].exists(), f"no package or module {layer}"
    bad = [line for path in paths for line in layer_violations(path)]
    assert not bad, "\n".join(bad)


#: Each spelling of an import a layer rule forbids, planted in a module of that layer: relative or absolute,
#: a module or its package, ``import`` or ``from``, inside a function or under ``TYPE_CHECKING``.
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
    # the formats stand below the engine and beside each other
    ("h5md/source.py", "from ..engine import Engine"),
    ("xdr/source.py", "from ..h5md.source import H5MDSource"),
    ("npy/source.py", "from trajscale.xdr import offsets"),
    ("mdareaders/part.py", "def f():\n    from ..h5md.source import H5MDSource"),
    ("xdr/offsets.py", "from ..mdareaders.part import MDAPartSource"),
    ("h5md/schema.py", "def f():\n    from ..mdcath.layout import describe"),
    ("imd.py", "from .follow import StreamRounds"),
    # a file of several trajectories is expanded through the traits' hook, not the format's module
    ("ml/ensemble.py", "def f():\n    from ..mdcath.source import ensemble_members"),
    ("ensemble/catalog.py", "import trajscale.mdcath.source"),
]


@pytest.mark.parametrize(("where", "planted"), PLANTED_IMPORTS)
def test_the_layer_rule_catches_every_spelling(where, planted):
    assert layer_violations(PKG / where, planted), planted


def test_the_layer_rule_lets_a_layer_import_below_it():
    for where, text in (("sources/follow.py", "from ..storage.opener import open_bytes"),
                        ("hdf5/chunks.py", "from ..storage.bytestore import ByteStore"),
                        ("mdcath/source.py", "from ..hdf5.runs import plan_atom_reads\n"
                                             "from ..sources.base import Source"),
                        ("h5md/follow.py", "from ..sources.follow import Snapshot\nfrom .source import H5MDSource")):
        assert not layer_violations(PKG / where, text), text


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


def _known_modules() -> set[str]:
    """Every trajscale module, a compiled one (a leaf) too."""
    return {_module_name(p) for p in PKG.rglob("*.py")} | {_module_name(p) for p in PKG.rglob("*.pyx")}


def _module_imports(path: Path, known: set[str], text: str | None = None) -> set[str]:
    """The trajscale modules the module at ``path`` (``text``: a planted module there) imports, anywhere in it;
    ``from pkg import sub`` names the submodule, ``from pkg import name`` the package (its ``__init__``)."""
    def resolve(name: str) -> str:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name

    package, out = _package_of(path), set()
    for node in ast.walk(_parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.ImportFrom):
            target = _imported_from(node, package)
            if target is None:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in known else resolve(target))
        elif isinstance(node, ast.Import):
            out.update(resolve(a.name) for a in node.names if a.name.split(".")[0] == "trajscale")
    out.discard(_module_name(path))
    return out


@functools.cache
def _import_graph() -> dict[str, set[str]]:
    """Module -> the trajscale modules it imports (:func:`_module_imports`), built once in this process (the
    guards only read it)."""
    known = _known_modules()
    return {_module_name(path): _module_imports(path, known) for path in PKG.rglob("*.py")}


def _planted_graph(where: str, text: str) -> dict[str, set[str]]:
    """The import graph of one planted module at ``where`` (relative to the package)."""
    path = PKG / where
    return {_module_name(path): _module_imports(path, _known_modules(), text)}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, without recursion)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    graph = _import_graph()
    shown = [" <-> ".join(c) + "\n    " + "\n    ".join(f"{m} imports {sorted(graph[m] & set(c))}" for m in c)
             for c in _circles(graph)]
    assert not shown, "import circles:\n" + "\n".join(shown)


def topology_entered_aside(graph: dict[str, set[str]]) -> list[str]:
    """Imports of one of ``trajscale.topology``'s modules from outside it (only the package is entered)."""
    return sorted(f"{m} imports {t}" for m, targets in graph.items()
                  if not (m + ".").startswith("trajscale.topology.")
                  for t in targets if t.startswith("trajscale.topology."))


def test_topology_is_entered_through_its_interface():
    """Outside ``trajscale.topology`` only the package itself is imported, never one of its modules."""
    bad = topology_entered_aside(_import_graph())
    assert not bad, "\n".join(bad)


def cli_imported_outside(graph: dict[str, set[str]]) -> list[str]:
    """Imports of ``trajscale.cli`` (or a module of it) from outside it."""
    return sorted(f"{m} imports {t}" for m, targets in graph.items()
                  if not (m + ".").startswith("trajscale.cli.")
                  for t in targets if (t + ".").startswith("trajscale.cli."))


def test_nothing_outside_cli_imports_cli():
    bad = cli_imported_outside(_import_graph())
    assert not bad, "\n".join(bad)


def report_floors_broken(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a report module on a higher floor (:data:`REPORT_FLOORS`) than the importer's."""
    bad = []
    for mod, floor in REPORT_FLOORS.items():
        for t in graph.get(f"trajscale.report.{mod}", ()):
            other = t.rpartition(".")[2] if t.startswith("trajscale.report.") else None
            if other in REPORT_FLOORS and REPORT_FLOORS[other] > floor:
                bad.append(f"report.{mod} (floor {floor}) imports report.{other} (floor {REPORT_FLOORS[other]})")
    return bad


def test_report_reads_from_records_up():
    """records (timing, process) -> metrics -> diagnosis (stragglers, diagnose) -> advice -> presentation."""
    graph = _import_graph()
    report = {m.rpartition(".")[2] for m in graph if m.startswith("trajscale.report.")}
    assert report <= set(REPORT_FLOORS), f"place new report modules on a floor: {report - set(REPORT_FLOORS)}"
    bad = report_floors_broken(graph)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(("where", "planted", "guard"), [
    ("engine.py", "from .topology.load import load_universe", topology_entered_aside),
    ("mdareaders/universe.py", "def f():\n    from ..topology import universe", topology_entered_aside),
    ("ml/dataset.py", "import trajscale.topology.selection_cache", topology_entered_aside),
    ("report/summary.py", "from ..cli.options import add_executor_options", cli_imported_outside),
    ("demo.py", "from . import cli", cli_imported_outside),
    ("run.py", "import trajscale.cli.main", cli_imported_outside),
    ("report/timing.py", "from .advice import diagnose", report_floors_broken),
    ("report/metrics.py", "def f():\n    from . import plots", report_floors_broken),
    ("report/diagnose.py", "from trajscale.report.summary import Report", report_floors_broken),
])
def test_the_import_guards_catch_every_spelling(where, planted, guard):
    assert guard(_planted_graph(where, planted)), planted


def test_the_import_guards_pass_imports_they_allow():
    assert not topology_entered_aside(_planted_graph("engine.py", "from .topology import load_universe"))
    assert not topology_entered_aside(_planted_graph("topology/universe.py", "from .load import load_universe"))
    assert not cli_imported_outside(_planted_graph("cli/run.py", "from .options import add_executor_options"))
    assert not report_floors_broken(_planted_graph("report/advice.py", "from .metrics import derive"))


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
    """``from MODULE import _name`` (and ``from pkg._module import ...``) in ``path`` (or ``text`` as
    that module) where the private name belongs to another package than the importer's; the root
    package's own private modules (``_lazy``, ``_version``) serve every subpackage."""
    me, package = _module_name(path), _package_of(path)
    out = []
    for node in ast.walk(_parse(path.read_text() if text is None else text)):
        target = _imported_from(node, package) if isinstance(node, ast.ImportFrom) else None
        if target is None:
            continue
        parts = target.split(".")
        private = [i for i, c in enumerate(parts) if c.startswith("_") and not c.startswith("__")]
        if private and ".".join(parts[: private[0]]) not in (package, "trajscale"):
            out.append(f"{me}:{node.lineno} imports from {target}")
        is_package = (PKG.parent / target.replace(".", "/")).is_dir()
        owner = target if is_package else target.rpartition(".")[0]
        for a in node.names:
            submodule = (PKG.parent / target.replace(".", "/") / f"{a.name}.py").exists()
            if a.name.startswith("_") and not a.name.startswith("__") and owner != package \
                    and not (submodule and target == "trajscale"):
                out.append(f"{me}:{node.lineno} imports {target}.{a.name}")
    return out


def test_the_private_name_finder_finds_one():
    text = ("from ..follow import _first_snapshot\nfrom ..sources._xdr import scan\n"
            "from .reader import _ok\nfrom .._lazy import attach\nfrom trajscale.sources.follow import snapshot\n")
    assert _private_imports(PKG / "mda" / "probe.py", text) == [
        "trajscale.mda.probe:1 imports trajscale.follow._first_snapshot",
        "trajscale.mda.probe:2 imports from trajscale.sources._xdr"]


def test_no_module_imports_another_packages_private_names():
    """A name with a leading underscore is private to its package: another package that needs it asks
    for a public name (every import counts, inside functions too)."""
    bad = [line for path in sorted(PKG.rglob("*.py")) for line in _private_imports(path)]
    assert not bad, "\n".join(bad)


#: Every spelling of "is this location local (or a URL)?": the question itself under each of its names, its
#: scheme, a Location's ``local``, and the class of store a location would open (which says remote or local).
LOCATION_ASKED = re.compile(r'\bis_url\(|\bis_local\(|\bscheme_of\(|"://"|(?<!threading)\.local\b(?!\()'
                            r'|\bstore_class\b')
#: Where a location may be asked: the layer of transports, the location module, and util (the scheme table's
#: definition, and the input and output checks every command makes before a location exists).
LOCATION_HOMES = ("storage/", "sources/locations.py", "util.py")
#: The named policy points above them, each with its policy: what the user is told or refused for a URL.
LOCATION_POLICY_POINTS = {
    "cli/options.py": "an output given as a URL is refused (outputs are local files, written atomically)",
    "cli/inspect.py": "inspecting a URL reports its requests per access pattern and what tells a replacement",
    "run.py": "--follow over a URL is refused (following watches a file a job is writing on this file system)",
}
#: Files that still ask, each with why: the list only shrinks (a file fixed must leave it).
LOCATION_ASKED_PENDING: dict[str, str] = {}


def location_questions(source: str, rel: str = "<planted>") -> list[str]:
    """The lines of ``source`` (a module at ``rel`` in the package) that ask whether a location is local, by any
    of :data:`LOCATION_ASKED`'s spellings (comments not counted)."""
    if rel.startswith(LOCATION_HOMES):
        return []
    return [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(source.splitlines(), 1)
            if LOCATION_ASKED.search(line.split("#", 1)[0] if '"://"' not in line else line)
            and not line.lstrip().startswith("#")]


def test_nothing_above_the_byte_layer_asks_whether_a_location_is_local():
    found: dict[str, list[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        hits = location_questions(path.read_text(), rel)
        if hits:
            found[rel] = hits
    bad = [line for rel, lines in found.items()
           if rel not in LOCATION_POLICY_POINTS and rel not in LOCATION_ASKED_PENDING for line in lines]
    assert not bad, "ask the location's store (its size, identity, state) or a Source's trait instead:\n" + \
        "\n".join(bad)
    fixed = sorted((set(LOCATION_ASKED_PENDING) | set(LOCATION_POLICY_POINTS)) - set(found))
    assert not fixed, f"no longer ask where bytes are: take them off the lists: {fixed}"


@pytest.mark.parametrize("planted", [
    "if is_url(path):", "if not is_local(t):", "remote = scheme_of(path) is not None", 'if "://" in path:',
    "if Location.of(t).local:", "if where.local and name:", "remote = store_class(path).remote",
    "fetched = Location(p).store_class.remote",
])
def test_the_location_question_finder_catches_every_spelling(planted):
    assert location_questions(planted, "engine.py"), planted
    assert not location_questions(planted, "storage/location.py")   # (its home)


def test_the_location_question_finder_passes_other_names():
    for line in ("_tls = threading.local()", "self.locals = {}", "if src.ships_offsets:", "n = loc.size",
                 "# is_local( in a comment"):
        assert not location_questions(line, "engine.py"), line


#: A format's Source asked for by its class: what only the format registry and the format's own package may do.
SOURCE_CLASS_ASKED = re.compile(r'isinstance\([^)]*(H5MDSource|XDRSource|MDASource|SegmentedSource|MDCATHSource|'
                                r'NumpySource|MDAPartSource)')
#: Where each format may name itself: its traits, its own package or modules, and the registry (which reads
#: every format's traits). Every name a format is known by (its kind, its formats, any case) is looked for.
FORMAT_HOMES = {
    "h5md": ("h5md/",), "xdr": ("xdr/",), "mdcath": ("mdcath/",),
    "segments": ("sources/segments.py",), "npy": ("npy/",), "mda_part": ("mdareaders/",),
}
EVERY_FORMATS_HOME = ("formats.py", "sources/registry.py")


def _format_names() -> dict[str, str]:
    """Every name a format is known by, lower case -> the format's kind (read from the declared traits)."""
    from trajscale.formats import own_traits

    names = {}
    for t in own_traits():
        for name in (t.kind, *t.formats):
            names[name.lower()] = t.kind
    return names


def _strings(node: ast.AST) -> list[str]:
    """The string constants ``node`` is, or holds as a tuple, list or set's elements."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [v for elt in node.elts for v in _strings(elt)]
    return []


def format_names_compared(source: str, rel: str = "<planted>") -> list[str]:
    """The lines of ``source`` (a module at ``rel`` in the package) that compare a value with a format's name
    (``==``, ``!=``, ``in``, ``not in``, either side, any case, in a tuple, list or set; ``match``/``case``
    too) or ask for a format's Source by class, outside that format's homes."""
    names = _format_names()
    hits = []

    def named(strings: list[str]) -> list[str]:
        return [names[v.lower()] for v in strings if v.lower() in names]

    for node in ast.walk(_parse(source)):
        kinds: list[str] = []
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                                 for op in node.ops):
            kinds = named([v for side in (node.left, *node.comparators) for v in _strings(side)])
        elif isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue):
            kinds = named(_strings(node.pattern.value))
        kinds = [k for k in kinds if not rel.startswith(FORMAT_HOMES.get(k, ()) + EVERY_FORMATS_HOME)]
        if kinds:
            where = node.pattern if isinstance(node, ast.match_case) else node
            hits.append(f"{rel}:{where.lineno}: {ast.get_source_segment(source, where)}")
    for no, line in enumerate(source.splitlines(), 1):
        if SOURCE_CLASS_ASKED.search(line) and not rel.startswith(("sources/", "h5md/", "xdr/")):
            hits.append(f"{rel}:{no}: {line.strip()}")
    return hits


#: Still named above the formats, each with why: the list only shrinks (a file fixed must leave it).
NAMED_ABOVE_FOR_NOW: dict[str, str] = {}


def test_no_format_name_is_compared_outside_the_registry():
    """No module outside a format's homes compares a value with the format's name or asks for its Source by
    class (a format decision reads the format's declared traits, or asks the registry)."""
    found: dict[str, list[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        hits = format_names_compared(path.read_text(), rel)
        if hits:
            found[rel] = hits
    new = [hit for rel, hits in found.items() if rel not in NAMED_ABOVE_FOR_NOW for hit in hits]
    assert not new, "ask the format's declared traits (trajscale.formats) or the registry instead:\n" + "\n".join(new)
    fixed = sorted(set(NAMED_ABOVE_FOR_NOW) - set(found))
    assert not fixed, f"no format name compared in {fixed} any more: take them off NAMED_ABOVE_FOR_NOW"


@pytest.mark.parametrize("planted", [
    'if src.format != "h5md":\n    pass',
    'if src.format == "H5MD":\n    pass',
    'if config.get("kind") == "mdcath":\n    pass',
    'if "mdcath" != kind:\n    pass',
    'ok = fmt in ("XTC", "TRR")',
    'ok = fmt.upper() not in {"DCD"}',
    'ok = kind in ["segments", "npy"]',
    'match kind:\n    case "xdr":\n        pass',
    'ok = isinstance(src, MDCATHSource)',
])
def test_the_format_name_finder_catches_every_spelling(planted):
    assert format_names_compared(planted, "engine.py"), planted


def test_the_format_name_finder_lets_a_format_name_itself_and_passes_other_strings():
    assert not format_names_compared('if fmt == "MDCATH":\n    pass', "mdcath/source.py")
    assert not format_names_compared('if fmt == "H5MD":\n    pass', "h5md/source.py")
    assert not format_names_compared('if mode == "append" or key in ("rmsd", "rgyr"):\n    pass', "engine.py")
    assert not format_names_compared("if src.ships_offsets:\n    pass", "engine.py")
