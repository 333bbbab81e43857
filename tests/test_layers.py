"""Lower layers never import higher ones (the data path is the folder layout)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "trajscale"

#: layer -> the trajscale packages/modules it must not import
FORBIDDEN = {
    "store": {"sources", "analysis", "executors", "run", "report", "convert", "cli", "demo"},
    "kernels": {"sources", "analysis", "executors", "run", "report", "convert", "cli", "store", "demo"},
    "sources": {"analysis", "executors", "run", "report", "convert", "cli", "demo"},
    "analysis": {"executors", "run", "report", "convert", "cli", "demo"},
    "convert": {"analysis", "executors", "run", "report", "cli", "demo"},
    "pwrite": {"sources", "analysis", "executors", "run", "report", "convert", "cli", "demo"},
    "report": {"sources", "analysis", "executors", "run", "convert", "cli", "demo", "store"},
}


def _imports(path: Path) -> set[str]:
    """The top-level trajscale names a module imports (``trajscale`` itself counts as ``__init__``)."""
    tree = ast.parse(path.read_text())
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


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_above_it(layer):
    bad = []
    for path in sorted((PKG / layer).rglob("*.py")):
        for name in _imports(path):
            mod = name.split(":")[-1] if name.startswith("__init__:") else name
            if name.startswith("__init__") and mod not in {"_version"}:
                bad.append(f"{path.relative_to(PKG)} imports the package __init__ ({mod})")
            elif mod in FORBIDDEN[layer]:
                bad.append(f"{path.relative_to(PKG)} imports {mod}")
    assert not bad, "\n".join(bad)
