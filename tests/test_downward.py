"""Registration points down, and code above the byte layer asks for what it needs by intent.

No module below the formats names a format package or the ensemble, not even in a string: the package's root
registers every kind of Source's record and the engine's own analyses (:mod:`trajscale.registered`), and the
registries read them. Only the layers that hand a path to a C library (``storage/``, ``hdf5/``) ask whether one
may open a store's bytes by path."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "trajscale"

#: The packages above the Sources' framework (the formats, and what stands on them that registers below).
HIGHER = ("h5md", "xdr", "mdcath", "npy", "mdareaders", "ensemble")
#: A module path naming one of them, as ``importlib`` or a ``"module:name"`` target spells it.
NAMES_HIGHER = re.compile(r"(?:trajscale\.|\.\.)(?:%s)(?:\.\w+)*(?::\w+)?" % "|".join(HIGHER))
#: Where such a string would be an import upward: the modules the formats stand on.
BELOW = ("formats.py", "registered.py", "util.py", "sources/", "analysis/", "topology/", "storage/", "hdf5/")


def strings_naming_higher(source: str, rel: str = "<planted>") -> list[str]:
    """The string constants of ``source`` that are a module path into a package above the Sources."""
    return [f"{rel}:{node.lineno}: {node.value!r}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAMES_HIGHER.fullmatch(node.value)]


def test_no_module_below_the_formats_names_one_in_a_string():
    bad = [hit for path in sorted(PKG.rglob("*.py")) if path.relative_to(PKG).as_posix().startswith(BELOW)
           for hit in strings_naming_higher(path.read_text(), path.relative_to(PKG).as_posix())]
    assert not bad, "register it from the package's root (trajscale.registered) instead:\n" + "\n".join(bad)


@pytest.mark.parametrize("planted", [
    'T = "trajscale.h5md.traits:H5MD"', "x = {'mda': '..mdareaders.universe:MDASource'}",
    'importlib.import_module("trajscale.xdr.source")', 'm = ("..ensemble.analysis", "EnsembleAnalysis")',
    'OWN = ["trajscale.mdcath"]', "f(kind, target='trajscale.npy.source:NumpySource')",
])
def test_the_string_finder_catches_every_spelling(planted):
    assert strings_naming_higher(planted), planted
    assert not strings_naming_higher('"""See :mod:`trajscale.h5md.follow`."""\nx = "trajscale.storage.objects"')


def test_the_root_registers_every_record_in_the_package():
    """Every FormatTraits a ``traits.py`` declares is registered by the root, each kind once, files matched
    only to the formats (a kind made by another Source is never asked about a file)."""
    import importlib

    from trajscale import registered
    from trajscale.formats import FormatTraits, own_kinds, own_traits, traits_of

    declared = {}
    for path in sorted(PKG.rglob("traits.py")):
        module = importlib.import_module("trajscale." + ".".join(path.relative_to(PKG).with_suffix("").parts))
        declared.update({f"{module.__name__}:{n}": v for n, v in vars(module).items() if isinstance(v, FormatTraits)})
    assert set(declared) == set(registered.FORMATS) | set(registered.KINDS)
    assert not set(registered.FORMATS) & set(registered.KINDS)
    assert sorted(own_kinds()) == sorted({t.kind for t in declared.values()})
    assert {t.kind for t in own_traits()} == {declared[t].kind for t in registered.FORMATS}
    assert all(traits_of(t.kind) is t for t in declared.values())
    from trajscale.analysis import analysis_class

    assert [analysis_class(n).__module__ for n in registered.ANALYSES] == \
        [t.partition(":")[0] for t in registered.ANALYSES.values()]


#: Where a C library is handed a path to open (HDF5's own driver and MPI-IO; xdrfile's stdio, through as_file).
C_OPENS = ("storage/", "hdf5/")


def c_path_asked(source: str, rel: str = "<planted>") -> list[str]:
    """Reads of a store's ``c_openable_path`` (or the old ``local_path``) in ``source``, outside :data:`C_OPENS`."""
    if rel.startswith(C_OPENS):
        return []
    return [f"{rel}:{node.lineno}: .{node.attr}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and node.attr in ("c_openable_path", "local_path")]


def test_only_the_layers_that_hand_c_a_path_ask_for_one():
    bad = [hit for path in sorted(PKG.rglob("*.py"))
           for hit in c_path_asked(path.read_text(), path.relative_to(PKG).as_posix())]
    assert not bad, "ask by intent (costs_request, node_local_copy, storage.nodecache.at_hand):\n" + "\n".join(bad)


@pytest.mark.parametrize("planted", [
    "p = store.c_openable_path", "if src.store.local_path is None:\n    pass", "f(getattr_free.c_openable_path)",
    "x = [s.local_path for s in stores]", "ok = (original.c_openable_path or '') != ''",
])
def test_the_c_path_finder_catches_every_spelling(planted):
    assert c_path_asked(planted, "ml/dataset.py"), planted
    assert not c_path_asked(planted, "hdf5/files.py")
