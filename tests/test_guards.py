"""What import-linter cannot see, read from the syntax tree of every module of src/trajscale.

The imports themselves are contracts in pyproject.toml, checked by ``lint-imports`` (tests/test_layers.py runs it).
These scans see what is not an import, in any spelling: an attribute read, ``getattr`` with its name, a string, a
comparison of any form, a ``match`` case, a name bound to a constant of the module or imported from another.

* ``where``: nothing above the bytes asks where they are: no read of a store's ``c_openable_path``,
  ``local_path`` or ``remote`` (nor a location's ``local`` or ``store_class``) and no call of ``is_url``,
  ``is_local`` or ``scheme_of`` outside ``storage/`` and ``hdf5/``.
* ``upward``: no string that is a module path (``"trajscale.h5md.source"``, ``"..h5md.source:H5MDSource"``)
  names a package on a higher floor of the floors contract, or one beside it.
* ``names``: an executor's, a format's or a URL scheme's name is compared only in its homes: ``==``, ``!=``,
  ``in``, ``is`` with a constant, a tuple, list, set or frozenset (one element too) or a dict's keys, a ``match``
  case, ``startswith``/``endswith``/``split``..., in any case; a format's Source class in ``isinstance`` or a
  comparison; two executors' names listed together.
* ``workers``: worker processes start in pools.py and clusters.py only: no ``get_context``,
  ``set_start_method``, ``ProcessPoolExecutor``, ``LocalCluster`` (nor multiprocessing's ``Pool`` or
  ``Process``, distributed's ``Client``) anywhere else; torch's ``DataLoader`` only in ml/dataset.py, whose
  loader starts its workers by the same rule.

A line that breaks a rule on purpose is allowed by its text in :data:`ALLOWED`, with why; never a whole file.
An entry whose line is gone must leave the list."""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "trajscale"

_LAYOUT = "a Layout's own flag: the file is written for reads over a network (a choice of chunks), not where bytes are"
_POLICY = "a policy point: what a URL is refused or told (outputs are local files; --follow watches a local file)"
_INSPECT = "inspect reports a URL's requests and what tells a replacement: the report is about where the bytes are"
_SCHEME_TABLE = "the scheme table's own functions (util.py, at the bottom, so every layer tells a URL alike)"
_EXECUTOR_CLASSES = "the executor registry names each executor's class, imported when the executor is asked for"
_CONVERT_RUNNERS = "the executor registry names each executor's convert runner, imported when a convert runs on it"
_CLI_COMMAND = "the command line a subprocess runs (python -m), not an import"

#: rule -> {"path: the line as written": why it may}. A line fixed leaves the list.
ALLOWED: dict[str, dict[str, str]] = {
    "where": {
        "cli/inspect.py: if getattr(args, \"remote_costs\", False) or not where.local:": _INSPECT,
        "cli/inspect.py: if not where.local:": _INSPECT,
        "cli/options.py: if isinstance(value, str) and not Location(value).local:": _POLICY,
        "cli/options.py: if Location(args.output).local:": "an interrupted output is looked for only in a local folder",
        "run.py: remote = [t for t in files if not t.local]   # the locations say it: nothing opened yet": _POLICY,
        "convert/options.py: if self.layout.remote:   # (only then: records of earlier runs, without it, still "
        "match)": _LAYOUT,
        "convert/rechunk.py: early = job.spec.layout.remote and not job.spec.layout.compression": _LAYOUT,
        "h5md/layout.py: frames = (plan_remote_frames_per_chunk(n_atoms, itemsize) if self.remote": _LAYOUT,
        "h5md/layout.py: if self.remote and self.chunks == \"auto\":   # chunks of equal frames: no mostly empty last "
        "chunk": _LAYOUT,
        "h5md/layout.py: return {\"meta_block_size\": METADATA_BLOCK_BYTES} if self.remote else {}": _LAYOUT,
        "h5md/layout.py: return f\"chunks={self.chunks} compression={comp}\" + (\" layout=remote\" if self.remote "
        "else \"\")": _LAYOUT,
        "sources/segments.py: if topology and ip.local and not os.path.isabs(topology):   # (a topology is read from "
        "a local disk)": "a topology an index names is a local file: beside a local index, else as it is named",
        "util.py: return scheme_of(path) is not None": _SCHEME_TABLE,
        "util.py: if is_url(path):": _SCHEME_TABLE,
        "util.py: if is_url(os.fspath(path)):": _SCHEME_TABLE,
    },
    "upward": {
        "executor_registry.py: ExecutorTraits(\"auto\", \"trajscale.executors:choose_executor\",": _EXECUTOR_CLASSES,
        "executor_registry.py: ExecutorTraits(\"serial\", \"trajscale.executors.serial:SerialExecutor\", \"every task "
        "in this process\",": _EXECUTOR_CLASSES,
        "executor_registry.py: ExecutorTraits(\"processes\", \"trajscale.executors.processes:ProcessExecutor\", \"a "
        "local pool of worker processes\",": _EXECUTOR_CLASSES,
        "executor_registry.py: ExecutorTraits(\"dask\", \"trajscale.executors.dask:DaskExecutor\",": _EXECUTOR_CLASSES,
        "executor_registry.py: ExecutorTraits(\"mpi\", \"trajscale.executors.mpi:MPIExecutor\", \"the ranks of "
        "mpiexec -n N trajscale ...\",": _EXECUTOR_CLASSES,
        "executor_registry.py: ExecutorTraits(\"threads\", \"trajscale.executors.threads:ThreadExecutor\",":
            _EXECUTOR_CLASSES,
        "executor_registry.py: workers=\"one\", convert_runner=\"trajscale.convert.pool:run_serial\"),":
            _CONVERT_RUNNERS,
        "executor_registry.py: starts_on_demand=True, worker_imports=_BASE, convert_runner=\"trajscale.convert.pool:"
        "run_processes\",": _CONVERT_RUNNERS,
        "executor_registry.py: convert_runner=\"trajscale.convert.pool:run_dask\",": _CONVERT_RUNNERS,
        "executor_registry.py: worker_imports=f\"from mpi4py import MPI; {_BASE}\", convert_runner=\"trajscale.convert"
        ".pool:run_mpi\",": _CONVERT_RUNNERS,
        "pools.py: storage = sys.modules.get(\"trajscale.storage\")": "asks whether this process has made requests, "
                                                                      "without importing the URL clients",
        "report/calibrate.py: cmd = [sys.executable, \"-m\", \"trajscale.cli.main\", *args, \"--executor\", "
        "executor]": _CLI_COMMAND,
        "whole_runs.py: return [found] if found else [sys.executable, \"-m\", \"trajscale.cli.main\"]": _CLI_COMMAND,
    },
    "names": {
        "analysis/results.py: elif ext == \".npy\":": "a results file written as NumPy's .npy, not a trajectory",
        "ml/pack.py: if name.endswith(\".npy\"):": "an .npz sample file's arrays, not a trajectory",
        "tests/test_installed.py: @pytest.mark.parametrize(\"executor\", [\"serial\", \"processes\"])":
            "the installed package's own test runs on these two executors",
    },
    "workers": {},
}

#: Where each rule's spellings belong (folders end with "/").
WHERE_HOMES = ("storage/", "hdf5/")
WORKER_HOMES = ("pools.py", "clusters.py")
LOADER_HOMES = ("ml/dataset.py",)
EXECUTOR_HOMES = ("executor_registry.py",)
SCHEME_HOMES = ("storage/", "util.py")   # (util.py: the scheme table, at the bottom so every layer reads it alike)
EVERY_FORMATS_HOMES = ("formats.py", "sources/registry.py")

#: What tells where bytes are: a store's or a location's attributes, and the functions that ask.
WHERE_ATTRS = frozenset({"c_openable_path", "local_path", "remote", "local", "store_class"})
WHERE_FUNCS = frozenset({"is_url", "is_local", "scheme_of"})
#: What starts worker processes; the second set only as a name of these modules.
STARTERS = frozenset({"get_context", "set_start_method", "ProcessPoolExecutor", "LocalCluster", "SLURMCluster",
                      "SpecCluster"})
STARTERS_OF = frozenset({"Pool", "Process", "Client"})
STARTER_MODULES = frozenset({"multiprocessing", "multiprocessing.pool", "multiprocessing.context", "distributed",
                             "dask.distributed", "concurrent.futures"})
#: String methods that test or cut a string by another.
SNIFFERS = frozenset({"startswith", "endswith", "removeprefix", "removesuffix", "split", "rsplit", "partition",
                      "rpartition", "find", "rfind", "index", "rindex", "count"})
COMPARED = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)
MODULE_PATH = re.compile(r"(?:trajscale|\.+[A-Za-z_]\w*)(?:\.[A-Za-z_]\w*)*(?::[A-Za-z_][\w.]*)?")


@dataclass(frozen=True)
class Hit:
    """A line that breaks ``rule``: ``rel`` is its module's path in the package, ``text`` the line as written."""

    rule: str
    rel: str
    line: int
    text: str
    what: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        return f"{self.rel}: {self.text}"

    def __str__(self) -> str:
        return f"{self.rel}:{self.line}: [{self.rule}] {self.what}: {self.text}"


@dataclass
class Module:
    """One module's tree and the names it binds: constants (name -> the strings it stands for), modules
    (``import multiprocessing as mp``: local name -> module) and imported names (local name -> (module, name))."""

    rel: str
    name: str
    package: str
    lines: list[str]
    tree: ast.Module
    consts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)

    def hit(self, rule: str, node: ast.AST, what: str) -> Hit:
        return Hit(rule, self.rel, node.lineno, self.lines[node.lineno - 1].strip(), what)


@functools.cache
def _parse(text: str) -> ast.Module:
    return ast.parse(text)


def _resolve(package: str, level: int, module: str | None) -> str:
    """The absolute name of a relative import (``level`` dots, then ``module``) in ``package``."""
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)] if level else []
    return ".".join(base + ([module] if module else []))


def read_tree(pkg: Path) -> list[Module]:
    """Every module under ``pkg`` (a package named trajscale), with the constants each binds or imports."""
    mods = []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg).as_posix()
        parts = [pkg.name, *rel.removesuffix(".py").split("/")]
        if parts[-1] == "__init__":
            parts.pop()
            package = ".".join(parts)
        else:
            package = ".".join(parts[:-1])
        text = path.read_text()
        mods.append(Module(rel, ".".join(parts), package, text.splitlines(), _parse(text)))
    own = {}
    for mod in mods:
        body = list(mod.tree.body) + [n for c in mod.tree.body if isinstance(c, ast.ClassDef) for n in c.body]
        for node in body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
                node.target if isinstance(node, ast.AnnAssign) and node.value is not None else None
            if isinstance(target, ast.Name):
                found = _strings(node.value, mod)
                if found:
                    mod.consts[target.id] = tuple(found)
        own[mod.name] = dict(mod.consts)
    for mod in mods:
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    mod.modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(mod.package, node.level, node.module)
                for a in node.names:
                    local = a.asname or a.name
                    mod.imported[local] = (source, a.name)
                    mod.modules.setdefault(local, f"{source}.{a.name}")
                    if a.name in own.get(source, {}):
                        mod.consts.setdefault(local, own[source][a.name])
    return mods


def _strings(node: ast.AST | None, mod: Module) -> list[str]:
    """The strings ``node`` stands for: a constant, a tuple's, list's or set's elements, a dict's keys, ``set(...)``
    or ``frozenset(...)`` of them, ``"X".lower()``, or a name bound to them (:attr:`Module.consts`)."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e, mod)]
    if isinstance(node, ast.Dict):
        return [s for k in node.keys if k is not None for s in _strings(k, mod)]
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name) and f.id in ("set", "frozenset", "tuple", "list", "sorted") and node.args:
            return _strings(node.args[0], mod)
        if isinstance(f, ast.Attribute) and f.attr in ("lower", "upper", "casefold", "strip"):
            return _strings(f.value, mod)
        return []
    if isinstance(node, ast.Name):
        return list(mod.consts.get(node.id, ()))
    if isinstance(node, ast.Attribute) and node.attr.isupper():   # a class's or module's constant
        return list(mod.consts.get(node.attr, ()))
    return []


def _identifiers(node: ast.AST) -> list[str]:
    """The names ``node`` is (a name, an attribute's last name), or holds as a tuple's elements."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for e in node.elts for n in _identifiers(e)]
    return []


def _dotted(node: ast.AST, mod: Module) -> str:
    """``a.b.c`` as a dotted name, its first part read through the module's imports ('' for anything else)."""
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, mod)
        return f"{base}.{node.attr}" if base else ""
    if isinstance(node, ast.Name):
        return mod.modules.get(node.id, "")
    return ""


def _norm(name: str) -> str:
    """A name as compared: any case, a suffix's dot dropped, a URL cut after its scheme."""
    name = name.casefold()
    return name[: name.index("://") + 3] if "://" in name else name.lstrip(".")


@dataclass(frozen=True)
class Names:
    """The names looked for by the ``names`` rule: normalised name -> (what it names, its homes)."""

    strings: dict[str, tuple[str, tuple[str, ...]]]
    classes: dict[str, tuple[str, tuple[str, ...]]]
    executors: frozenset[str]


@functools.cache
def known_names() -> Names:
    """Every executor's name (the registry's), every format's (its kind, formats and Source class, from its declared
    traits) and every URL scheme's (its name and prefixes, from the scheme table), each with its homes."""
    from trajscale.executor_registry import EXECUTORS
    from trajscale.formats import own_traits
    from trajscale.util import SCHEME_PREFIXES

    strings, classes = {}, {}
    executors = frozenset(n for n, t in EXECUTORS.items() if not t.chooses)   # (auto: a chooser, and a layout word)
    for name in executors:
        strings[_norm(name)] = (f"executor {name!r}", EXECUTOR_HOMES)
    for t in own_traits():
        module, _, cls = t.source.partition(":")
        top = module.split(".")[1]
        home = module.removeprefix("trajscale.").replace(".", "/") + ".py" if top == "sources" else f"{top}/"
        for name in (t.kind, *t.formats, cls):
            strings[_norm(name)] = (f"format {t.kind!r}", (home, *EVERY_FORMATS_HOMES))
        classes[_norm(cls)] = (f"format {t.kind!r}'s Source", (home, "sources/", *EVERY_FORMATS_HOMES))
    for scheme, prefixes in SCHEME_PREFIXES.items():
        for name in (scheme, *prefixes, *(p.removesuffix("://") for p in prefixes)):
            strings[_norm(name)] = (f"URL scheme {scheme!r}", SCHEME_HOMES)
    strings["://"] = ("a URL's scheme", SCHEME_HOMES)
    return Names(strings, classes, executors)


@functools.cache
def floors() -> dict[str, tuple[int, bool]]:
    """Top-level module -> (its floor, counted from the top; whether the floor's modules are apart), read from the
    floors contract in pyproject.toml."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in conf if c.get("containers") == ["trajscale"] and c["type"] == "layers")["layers"]
    out = {}
    for i, layer in enumerate(layers):
        apart = ":" not in layer
        for name in re.split(r"[|:]", layer):
            out[name.strip()] = (i, apart)
    return out


def _named(strings: list[str], table: dict, rel: str) -> list[str]:
    """What each of ``strings`` names in ``table``, where ``rel`` is none of its homes."""
    return [table[k][0] for k in map(_norm, strings) if k in table and not rel.startswith(table[k][1])]


def scan(mods: list[Module]) -> list[Hit]:
    """Every line of ``mods`` that breaks a rule, allowed or not."""
    names, fl = known_names(), floors()
    hits: dict[tuple[str, str, int], Hit] = {}

    def add(hit: Hit) -> None:
        hits.setdefault((hit.rule, hit.rel, hit.line), hit)

    for mod in mods:
        top = mod.rel.split("/")[0].removesuffix(".py")
        where_home, worker_home = mod.rel.startswith(WHERE_HOMES), mod.rel in WORKER_HOMES
        loader_home = mod.rel in LOADER_HOMES
        called: set[int] = set()   # (a parent is walked before its children)
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Call):
                called.add(id(node.func))
                f = node.func
                fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if fname in ("getattr", "hasattr", "attrgetter") and len(node.args) >= (1 if fname == "attrgetter"
                                                                                          else 2):
                    asked = set(_strings(node.args[0 if fname == "attrgetter" else 1], mod))
                    if asked & WHERE_ATTRS and not where_home:
                        add(mod.hit("where", node, f"{fname} of {sorted(asked & WHERE_ATTRS)}"))
                    if asked & STARTERS and not worker_home:
                        add(mod.hit("workers", node, f"{fname} of {sorted(asked & STARTERS)}"))
                if isinstance(f, ast.Attribute) and f.attr in SNIFFERS and node.args:
                    said = _named(_strings(node.args[0], mod), names.strings, mod.rel)
                    if said:
                        add(mod.hit("names", node, f".{f.attr}() with {said[0]}"))
                if fname in ("isinstance", "issubclass") and len(node.args) == 2:
                    said = _named(_identifiers(node.args[1]), names.classes, mod.rel)
                    if said:
                        add(mod.hit("names", node, f"{fname} with {said[0]}"))
            elif isinstance(node, ast.Compare) and any(isinstance(op, COMPARED) for op in node.ops):
                sides = [node.left, *node.comparators]
                said = _named([s for side in sides for s in _strings(side, mod)], names.strings, mod.rel) + \
                    _named([n for side in sides for n in _identifiers(side)], names.classes, mod.rel)
                if said:
                    add(mod.hit("names", node, f"compared with {said[0]}"))
            elif isinstance(node, ast.match_case):
                for p in ast.walk(node.pattern):
                    said = []
                    if isinstance(p, ast.MatchValue):
                        said = _named(_strings(p.value, mod), names.strings, mod.rel) + \
                            _named(_identifiers(p.value), names.classes, mod.rel)
                    elif isinstance(p, ast.MatchClass):
                        said = _named(_identifiers(p.cls), names.classes, mod.rel)
                    if said:
                        add(mod.hit("names", p, f"a case of {said[0]}"))
            elif isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) and not mod.rel.startswith(EXECUTOR_HOMES):
                listed = {s for s in _strings(node, mod) if s in names.executors}
                if len(listed) >= 2:
                    add(mod.hit("names", node, f"executors {sorted(listed)} listed"))
            elif isinstance(node, ast.Attribute):
                if (node.attr in WHERE_ATTRS and isinstance(node.ctx, ast.Load) and not where_home
                        and not (node.attr == "local" and id(node) in called)) or \
                        (node.attr in WHERE_FUNCS and not where_home):
                    add(mod.hit("where", node, f".{node.attr}"))
                if node.attr == "DataLoader" and not loader_home:
                    add(mod.hit("workers", node, ".DataLoader"))
                if not worker_home and (node.attr in STARTERS or node.attr in STARTERS_OF
                                        and _dotted(node.value, mod) in STARTER_MODULES):
                    add(mod.hit("workers", node, f".{node.attr}"))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                source, name = mod.imported.get(node.id, ("", node.id))
                if name in WHERE_FUNCS and not where_home:
                    add(mod.hit("where", node, name))
                if name == "DataLoader" and not loader_home:
                    add(mod.hit("workers", node, name))
                if not worker_home and (name in STARTERS or name in STARTERS_OF and source in STARTER_MODULES):
                    add(mod.hit("workers", node, name))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and top in fl \
                    and MODULE_PATH.fullmatch(node.value):
                path = node.value.partition(":")[0]
                if path.startswith("."):
                    level = len(path) - len(path.lstrip("."))
                    path = _resolve(mod.package, level, path[level:])
                parts = path.split(".")
                named = parts[1] if len(parts) > 1 and parts[0] == "trajscale" else None
                if named in fl and named != top and (fl[named][0] < fl[top][0]
                                                     or fl[named][0] == fl[top][0] and fl[top][1]):
                    add(mod.hit("upward", node, f"names {path}, above {top}"))
    return sorted(hits.values(), key=lambda h: (h.rule, h.rel, h.line))


def not_allowed(hits: list[Hit]) -> list[Hit]:
    return [h for h in hits if h.key not in ALLOWED.get(h.rule, {})]


@functools.cache
def _package_hits() -> tuple[Hit, ...]:
    return tuple(scan(read_tree(PKG)))


WHY = {
    "where": "ask the location's or the store's capability instead (may a library open it by path, does a read "
             "cost a request, is there a node-local copy)",
    "upward": "register downward (the package that owns it registers with the registry below) instead",
    "names": "read the registry's declared traits (executor_registry, formats) or ask the store instead",
    "workers": "start workers through trajscale.pools (process_pool, worker_context), trajscale.clusters, or "
               "trajscale.ml.make_loader",
}


@pytest.mark.parametrize("rule", sorted(ALLOWED))
def test_no_line_breaks_the_rule(rule):
    bad = [h for h in not_allowed(list(_package_hits())) if h.rule == rule]
    assert not bad, f"{WHY[rule]}:\n" + "\n".join(map(str, bad))


@pytest.mark.parametrize("rule", sorted(ALLOWED))
def test_every_allowed_line_is_still_there(rule):
    found = {h.key for h in _package_hits() if h.rule == rule}
    gone = sorted(set(ALLOWED[rule]) - found)
    assert not gone, f"these lines no longer break {rule!r}: take them off ALLOWED[{rule!r}]:\n" + "\n".join(gone)


def _planted(tmp_path: Path, files: dict[str, str]) -> list[Hit]:
    """The hits of a package made of ``files`` (path in the package -> text) under ``tmp_path``."""
    for rel, text in files.items():
        path = tmp_path / "trajscale" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return scan(read_tree(tmp_path / "trajscale"))


#: Each rule's violation in spellings a regex over the source missed: (rule, path in the package, its text, other
#: modules of the planted package). The violation is the text's last line but a ``pass``.
PLANTED = [
    # where bytes are: an attribute, by getattr, through a constant, attrgetter, a function renamed or not called
    ("where", "engine.py", "if store.local_path is None:\n    pass", {}),
    ("where", "ml/dataset.py", "held = self._store.remote", {}),
    ("where", "mdcath/source.py", "if self._store.c_openable_path is None:\n    pass", {}),
    ("where", "ensemble/catalog.py", "path = getattr(store, 'local_path', None)", {}),
    ("where", "engine.py", "ATTR = 'remote'\nfar = getattr(store, ATTR)", {}),
    ("where", "mdcath/kept.py", "from operator import attrgetter\nfar = attrgetter(\"remote\")(store)", {}),
    ("where", "run.py", "from .util import is_url as far_away\nif far_away(path):\n    pass", {}),
    ("where", "cli/run.py", "from .. import util\nask = util.scheme_of", {}),
    ("where", "topology/load.py", "if Location.of(t).local:\n    pass", {}),
    # a module path in a string, upward or beside
    ("upward", "sources/registry.py", "SOURCE = \"trajscale.h5md.source\"", {}),
    ("upward", "sources/base.py", "cls = 'trajscale.xdr.source:XDRSource'", {}),
    ("upward", "sources/opened.py", "where = \"..mdcath.source\"", {}),
    ("upward", "h5md/source.py", "import importlib\nengine = importlib.import_module(\"trajscale.engine\")", {}),
    ("upward", "h5md/layout.py", "beside = \"trajscale.xdr.offsets\"", {}),
    ("upward", "analysis/rmsd.py", "name = \"trajscale.\" \"ensemble\"", {}),
    ("upward", "storage/objects.py", "opener = \"trajscale.sources.registry:open_source\"", {}),
    # a name compared: a one-element set or frozenset, a prefix, single quotes, a case, a constant, any case
    ("names", "engine.py", "ok = executor in {\"dask\"}", {}),
    ("names", "ensemble/plan.py", "ok = kind in frozenset({\"h5md\"})", {}),
    ("names", "ml/dataset.py", "if url.startswith(\"s3://\"):\n    pass", {}),
    ("names", "topology/load.py", "if url.startswith('gs://'):\n    pass", {}),
    ("names", "convert/pool.py", "match executor:\n    case \"mpi\":\n        pass", {}),
    ("names", "report/predict.py", "DASK = \"dask\"\nif name == DASK:\n    pass", {}),
    ("names", "engine.py", "from .consts import MPI_NAME\nuse_mpi = name == MPI_NAME",
     {"consts.py": "MPI_NAME = 'mpi'"}),
    ("names", "cli/run.py", "if path.endswith(\".xtc\"):\n    pass", {}),
    ("names", "engine.py", "if type(src) is XDRSource:\n    pass", {}),
    ("names", "ensemble/members.py", "match src:\n    case H5MDSource():\n        pass", {}),
    ("names", "run.py", "if \"DASK\" == name.upper():\n    pass", {}),
    ("names", "ml/pack.py", "is_mpi = executor.casefold() in (\"mpi\",)", {}),
    ("names", "arrays/backend.py", "web = url.startswith((\"http://\", \"https://\"))", {}),
    ("names", "report/summary.py", "LABELS = {\"serial\": \"one process\", \"dask\": \"a cluster\"}", {}),
    # workers started outside pools.py and clusters.py
    ("workers", "report/probe.py", "import multiprocessing as mp\nctx = mp.get_context(\"fork\")", {}),
    ("workers", "ml/dataset.py", "from multiprocessing import get_context as ctx_of\nctx = ctx_of(\"spawn\")", {}),
    ("workers", "convert/pool.py", "import concurrent.futures\nmake = concurrent.futures.ProcessPoolExecutor", {}),
    ("workers", "executors/processes.py", "import multiprocessing\np = multiprocessing.Process(target=print)", {}),
    ("workers", "mda/backends.py", "from distributed import LocalCluster as LC\ncluster = LC()", {}),
    ("workers", "engine.py", "import multiprocessing as mp\nmp.set_start_method(\"fork\")", {}),
    ("workers", "launch.py", "import multiprocessing as mp\nfactory = getattr(mp, \"get_context\")", {}),
    ("workers", "ml/pack.py", "from multiprocessing.pool import Pool as P\npool = P(2)", {}),
    ("workers", "ml/ensemble.py", "from torch.utils.data import DataLoader as Loader\nit = Loader(ds, num_workers=2)",
     {}),
]


@pytest.mark.parametrize(("rule", "rel", "text", "others"), PLANTED, ids=[f"{p[0]}-{i}" for i, p in enumerate(PLANTED)])
def test_each_rule_catches_each_spelling(tmp_path, rule, rel, text, others):
    hits = _planted(tmp_path, {rel: text, **others})
    line = max(n for n, code in enumerate(text.splitlines(), 1) if code.strip() != "pass")
    assert any(h.rule == rule and h.rel == rel and h.line == line for h in not_allowed(hits)), (text, hits)


def test_each_rule_has_five_planted_spellings():
    assert {rule: sum(p[0] == rule for p in PLANTED) >= 5 for rule in ALLOWED} == dict.fromkeys(ALLOWED, True)


def test_an_allowed_line_is_allowed_in_its_file_only(tmp_path):
    line = "if Location(args.output).local:"
    assert f"cli/options.py: {line}" in ALLOWED["where"]
    hits = _planted(tmp_path, {"cli/options.py": f"{line}\n    pass", "cli/run.py": f"{line}\n    pass"})
    assert [h.key for h in hits] == [f"cli/options.py: {line}", f"cli/run.py: {line}"]
    assert [h.key for h in not_allowed(hits)] == [f"cli/run.py: {line}"]


def test_the_rules_pass_their_homes_and_lookalikes(tmp_path):
    hits = _planted(tmp_path, {
        "storage/objects.py": "if store.local_path is None and url.startswith(\"s3://\"):\n    pass",
        "hdf5/files.py": "path = store.local_path",
        "pools.py": "import multiprocessing as mp\nctx = mp.get_context(\"fork\")",
        "clusters.py": "from distributed import LocalCluster\ncluster = LocalCluster()",
        "ml/dataset.py": "from torch.utils.data import DataLoader\nclass Loader(DataLoader):\n    pass",
        "h5md/source.py": "if fmt == \"H5MD\":\n    pass",
        "executor_registry.py": "NAMES = (\"serial\", \"dask\")",
        "engine.py": "import threading\n_tls = threading.local()\nexecutor = \"serial\"\n"
                     "if mode == \"append\" or key in (\"rmsd\", \"rgyr\"):\n    pass\n"
                     "n = loc.size\nparts = text.split(\",\")",
        "follow.py": "import logging\nlog = logging.getLogger(\"trajscale.h5md.schema\")",
        "report/probe.py": "from ..pools import worker_context\nctx = worker_context()\np = ctx.Process(target=print)",
        "analysis/__init__.py": "BUILTIN = {\"rmsd\": (\"RMSD\", \".rmsd\")}",
    })
    assert not hits, "\n".join(map(str, hits))



# -- Locations passed down, not remade ---------------------------------------------------------------------------
#
# A function takes a location when its first parameter is annotated with Location (or, as before, takes a path and
# its ``storage_options`` beside it: a location in two pieces; in storage/, a path and its ``options``). A call of
# one outside storage/ passes a Location when its location argument is one its caller holds: a parameter annotated
# ``Location`` (or a list of them), a name bound to one, an attribute its class set to one, what a function
# annotated to return one returns, one derived from another (``.beside(...)``, ``.absolute()``, ``.at(...)``), or
# one made from a user's text where it enters (:data:`BOUNDARIES`); and passes no ``storage_options`` beside it.
# A boundary that hands the user's text to another boundary (``Ensemble.of`` to ``from_glob``) passes it too:
# the Location is made once, there. ``Location(...)`` made anywhere else is counted as a call that does not pass
# one (a location remade from its text).

#: Where a user's path or URL enters and its Location is made (the API, the command line; a task's member,
#: config or input where a worker opens it): (module, qualified name prefix; "" for every function of the module).
BOUNDARIES = (("cli/", ""), ("run.py", "run"), ("sources/__init__.py", "open_source"),
              ("sources/__init__.py", "config_location"), ("ensemble/catalog.py", "Ensemble."),
              ("ensemble/run.py", "run_ensemble"), ("ensemble/members.py", "open_member"),
              ("ml/ensemble.py", "_members_of"),
              ("arrays/backend.py", "open_dataset"), ("arrays/backend.py", "TrajscaleBackendEntrypoint."),
              ("ml/", "__init__"),
              ("mda/reader.py", "Reader.__init__"), ("h5md/source.py", "H5MDSource.__init__"),
              ("xdr/source.py", "XDRSource.__init__"), ("mdcath/source.py", "MDCATHSource.__init__"),
              ("sources/segments.py", "SegmentedSource.__init__"),
              ("sources/segments.py", "SegmentedSource.from_parts"),
              ("mdcath/layout.py", "members"), ("mdcath/layout.py", "pdb_text"), ("mdcath/layout.py", "universe"),
              ("mda/reader.py", "ChainReader.__new__"), ("ensemble/run.py", "resume_revisions"), ("testing/", ""),
              ("convert/convert.py", "convert"), ("convert/rechunk.py", "rechunk"), ("convert/verify.py", "verify"),
              ("convert/split.py", "build_index"), ("convert/stream.py", "open_input_file"), ("engine.py", "prepare"))
#: The share of those calls that must pass a Location.
LOCATION_FLOOR = 0.90
_DERIVED = frozenset({"beside", "absolute", "at"})


@dataclass(frozen=True)
class LocationCall:
    rel: str
    line: int
    text: str
    passes: bool

    def __str__(self) -> str:
        return f"{self.rel}:{self.line}: {'passes' if self.passes else 'does not pass'} a Location: {self.text}"


def _a_location(annotation: ast.AST | None) -> bool:
    """Whether ``annotation`` is a Location, an optional one, a list or tuple of them, or one of those."""
    kinds = set() if annotation is None else set(ast.unparse(annotation).split(" | ")) - {"None"}
    return bool(kinds) and kinds <= {"Location", "list[Location]", "tuple[Location, ...]"}


def _location_parameter(fn: ast.FunctionDef, method: bool, in_storage: bool) -> str | None:
    """The name of the parameter by which ``fn`` takes a location, or None when it takes none."""
    ps = [*fn.args.posonlyargs, *fn.args.args]
    ps = ps[1:] if method and ps and ps[0].arg in ("self", "cls") else ps
    if not ps:
        return None
    names = {p.arg for p in [*ps, *fn.args.kwonlyargs]}
    annotation = ast.unparse(ps[0].annotation) if ps[0].annotation is not None else ""
    if "Location" in annotation or "storage_options" in names or (in_storage and "options" in names
                                                                  and "str" in annotation):
        return ps[0].arg
    return None


@dataclass
class _Scope:
    """What one function holds: the module, its class, the names bound to Locations, whether it is a boundary."""

    mod: Module
    cls: str
    defined: set[str]
    returns: set[tuple[str, str]]
    takers: dict
    attrs: set[str]
    held: set[str]
    boundary: bool


def _callee(func: ast.AST, at: _Scope) -> tuple[str, str] | None:
    """(module, qualified name) that ``func`` names, as far as the module's imports tell; None when unknown."""
    mod = at.mod
    if isinstance(func, ast.Name):
        if func.id in at.defined:
            return mod.name, func.id
        return mod.imported.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        base = func.value.id
        if base in ("self", "cls") and at.cls:
            return mod.name, f"{at.cls}.{func.attr}"
        if base in at.defined:
            return mod.name, f"{base}.{func.attr}"
        if base in mod.imported:
            source, name = mod.imported[base]
            return (f"{source}.{name}", func.attr) if name[:1].islower() else (source, f"{name}.{func.attr}")
        if base in mod.modules:
            return mod.modules[base], func.attr
    return None


def _found(key: tuple[str, str] | None, table: dict | set):
    """``key`` in ``table``, or the one entry of its name in the package ``key`` names (a re-export); else None."""
    if key is None:
        return None
    if key in table:
        return table[key] if isinstance(table, dict) else key
    inside = [k for k in table if k[1] == key[1] and k[0].startswith(key[0] + ".")]
    return (table[inside[0]] if isinstance(table, dict) else inside[0]) if len(inside) == 1 else None


def _is_location(node: ast.AST, at: _Scope) -> bool:
    """Whether ``node`` is a Location its function holds (see the section's head)."""
    if isinstance(node, ast.Name):
        return node.id in at.held
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in at.attrs
    if isinstance(node, ast.Subscript):   # (one of a list of them)
        return _is_location(node.value, at)
    if isinstance(node, ast.ListComp | ast.GeneratorExp):
        return _is_location(node.elt, at)
    if isinstance(node, ast.List | ast.Tuple):
        return bool(node.elts) and all(_is_location(e, at) for e in node.elts)
    if isinstance(node, ast.IfExp):   # (one, or None)
        return all(_is_location(e, at) or isinstance(e, ast.Constant) and e.value is None
                   for e in (node.body, node.orelse))
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in _DERIVED:
            return _is_location(f.value, at)
        made = isinstance(f, ast.Name) and f.id == "Location" or isinstance(f, ast.Attribute) and f.attr in (
            "of", "each", "glob") and isinstance(f.value, ast.Name) and f.value.id == "Location"
        if made:
            return at.boundary
        if isinstance(f, ast.Attribute) and f.attr == "store":   # (its bytes, opened from it)
            return _is_location(f.value, at)
        callee = _callee(f, at)
        taker = _found(callee, at.takers)
        # what a function said to return one returns; what is opened from one (its bytes) stands for it
        return _found(callee, at.returns) is not None or taker is not None and node.args[:1] != [] and \
            _is_location(node.args[0], at)
    return False


def _bind(fn: ast.FunctionDef, at: _Scope) -> None:
    """Add to ``at.held`` the names ``fn`` binds to Locations (assigned, or a loop's over Locations)."""
    for _ in range(2):   # (a name bound from another bound later in the text)
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if _is_location(node.value, at) or isinstance(node, ast.AnnAssign) and _a_location(node.annotation):
                    at.held |= {t.id for t in targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.For | ast.comprehension):
                for target, over in _looped(node.target, node.iter):
                    if isinstance(target, ast.Name) and _is_location(over, at):
                        at.held.add(target.id)


def _looped(target: ast.AST, over: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(name, what it runs over) of a loop's target: over a sequence, ``zip(...)`` or ``enumerate(...)``."""
    if isinstance(target, ast.Tuple) and isinstance(over, ast.Call) and isinstance(over.func, ast.Name):
        if over.func.id == "zip":
            return list(zip(target.elts, over.args, strict=False))
        if over.func.id == "enumerate" and len(target.elts) == 2 and over.args:
            return [(target.elts[1], over.args[0])]
    return [(target, over)]


def _at_boundary(rel: str, qual: str) -> bool:
    name = qual.rpartition(".")[2]
    return any(rel.startswith(r) and (qual.startswith(q) if q.endswith(".") else q in ("", qual, name))
               for r, q in BOUNDARIES)


def location_calls(mods: list[Module]) -> list[LocationCall]:
    """Every call outside storage/ of a function that takes a location, and whether it passes a Location."""
    takers, returns, out = {}, set(), []
    for mod in mods:
        for node in mod.tree.body:
            members = [(node, "", False)] if isinstance(node, ast.FunctionDef) else \
                [(f, node.name, True) for f in node.body if isinstance(f, ast.FunctionDef)] \
                if isinstance(node, ast.ClassDef) else []
            for fn, cls, method in members:
                qual = cls if fn.name == "__init__" else f"{cls}.{fn.name}".lstrip(".")
                param = _location_parameter(fn, method, mod.rel.startswith("storage/"))
                if param is not None:
                    takers[(mod.name, qual)] = (param, _at_boundary(mod.rel, qual if fn.name != "__init__" else
                                                                    f"{cls}.__init__"))
                if fn.returns is not None and "Location" in ast.unparse(fn.returns):
                    returns.add((mod.name, qual))
    for mod in mods:
        if mod.rel.startswith("storage/"):
            continue
        defined = {n.name for n in mod.tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        classes = [("", [n for n in mod.tree.body if isinstance(n, ast.FunctionDef)])] + \
            [(c.name, [f for f in c.body if isinstance(f, ast.FunctionDef)]) for c in mod.tree.body
             if isinstance(c, ast.ClassDef)]
        for cls, functions in classes:
            body = next((c.body for c in mod.tree.body if isinstance(c, ast.ClassDef) and c.name == cls), [])
            scopes, attrs = [], {n.target.id for n in body if isinstance(n, ast.AnnAssign)
                                 and isinstance(n.target, ast.Name) and _a_location(n.annotation)}
            for fn in functions:
                qual = f"{cls}.{fn.name}".lstrip(".")
                boundary = _at_boundary(mod.rel, qual)
                params = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
                held = {p.arg for p in params if _a_location(p.annotation)}
                scopes.append((fn, _Scope(mod, cls, defined, returns, takers, attrs, held, boundary)))
            for _ in range(2):   # (an attribute set in one method, read in another)
                for fn, at in scopes:
                    _bind(fn, at)
                    for node in ast.walk(fn):
                        if isinstance(node, ast.Assign) and _is_location(node.value, at):
                            attrs |= {t.attr for t in node.targets if isinstance(t, ast.Attribute)
                                      and isinstance(t.value, ast.Name) and t.value.id == "self"}
            for fn, at in scopes:
                for node in ast.walk(fn):
                    if not isinstance(node, ast.Call):
                        continue
                    text, f = ast.unparse(node), node.func
                    if isinstance(f, ast.Name) and f.id == "Location" or isinstance(f, ast.Attribute) and f.attr in (
                            "of", "each", "glob") and isinstance(f.value, ast.Name) and f.value.id == "Location":
                        # made here: at a boundary, or given as it is
                        passes = at.boundary or bool(node.args) and _is_location(node.args[0], at)
                        out.append(LocationCall(mod.rel, node.lineno, text, passes))
                        continue
                    taker = _found(_callee(node.func, at), takers)
                    if taker is None:
                        continue
                    param, to_boundary = taker
                    arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == param),
                                                               None)
                    passes = at.boundary and to_boundary or arg is not None and _is_location(arg, at) and \
                        not any(k.arg == "storage_options" for k in node.keywords)
                    out.append(LocationCall(mod.rel, node.lineno, text, passes))
    return sorted(set(out), key=lambda c: (c.rel, c.line, c.text))


def test_calls_pass_a_location(capsys):
    calls = location_calls(read_tree(PKG))
    passing = sum(c.passes for c in calls)
    with capsys.disabled():
        print(f"\n{passing} of {len(calls)} calls of location-taking functions outside storage/ pass a Location "
              f"({passing / len(calls):.0%})")
    assert passing >= LOCATION_FLOOR * len(calls), "\n".join(str(c) for c in calls if not c.passes)


LOCATION_PACKAGE = {
    "storage/location.py": "class Location:\n    pass\n\n\ndef at_hand(location: Location, cache=None):\n    pass",
    "sources/opener.py": "from ..storage.location import Location\n\n\n"
                         "def open_it(location: Location, request=None):\n    pass\n\n\n"
                         "def old_open(path, storage_options=None):\n    pass\n\n\n"
                         "def found(text) -> Location:\n    return Location(text)",
}
#: (a caller's text, whether its last call passes a Location)
LOCATION_CALLS = [
    ("def f(path, options):\n    open_it(path)", False),   # a path where a Location is taken
    ("def f(path, options):\n    old_open(path, storage_options=options)", False),   # the old split form
    ("def f(where: Location, options):\n    old_open(where, storage_options=options)", False),   # options beside
    ("def f(path, options):\n    open_it(Location(path, options))", False),   # remade here, not at a boundary
    ("def f(path):\n    where = Location(path)\n    open_it(where)", False),   # the same, through a name
    ("def f(path):\n    from ..storage import location\n    location.at_hand(path)", False),   # a module's function
    ("def f(where: Location):\n    open_it(where)", True),   # received as one
    ("def f(where: Location):\n    open_it(where.beside('top.pdb'))", True),   # derived from one
    ("def f(parts: list[Location]):\n    for p in parts:\n        open_it(p)", True),   # one of a list received
    ("def f(text):\n    open_it(found(text))", True),   # what a function says it returns
    ("def open_source(path, options):\n    open_it(Location(path, options))", True),   # made at a boundary
]


@pytest.mark.parametrize(("text", "passes"), LOCATION_CALLS)
def test_each_call_is_counted_as_it_passes_a_location_or_not(tmp_path, text, passes):
    for rel, code in {**LOCATION_PACKAGE, "sources/__init__.py": "from .opener import *\nfrom .opener import Location"
                      ", found, old_open, open_it\n\n\n" + text}.items():
        path = tmp_path / "trajscale" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code + "\n")
    calls = [c for c in location_calls(read_tree(tmp_path / "trajscale")) if c.rel == "sources/__init__.py"]
    last = max(calls, key=lambda c: c.line)
    assert last.passes is passes, calls
