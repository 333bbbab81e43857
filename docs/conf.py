"""Sphinx configuration: the trajscale documentation site (``make docs``; warnings are errors)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

project = "trajscale"
author = "trajscale developers"
copyright = "2026, trajscale developers"
try:
    from importlib.metadata import version as _version

    release = _version("trajscale")
except Exception:   # noqa: BLE001 - a source tree never installed
    release = "0+unknown"

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "sphinxarg.ext",   # docs/cli.md: the CLI reference, generated from the parser
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
smartquotes_action = "qe"   # quotes and ellipses only: "--overwrite" stays two hyphens (docs/cli.md, the guides)
suppress_warnings = ["myst.header", "myst.xref_missing"]   # README/guide links point at files on GitHub too

autosummary_generate = True
templates_path = ["_templates"]   # classes: their own docstring (inherited MDAnalysis members are MDAnalysis's to document)
autodoc_default_options = {}     # each public name with its own docstring; members are documented there
autodoc_typehints = "none"          # numpydoc's Parameters sections say the types
numpydoc_show_class_members = False
numpydoc_validation_checks = set()  # docstrings are checked by tests, not by the build

intersphinx_mapping = {}            # the build needs no network
html_theme = "furo"                 # a clean, wide, responsive theme; wide tables and code scroll inside their box
html_title = f"trajscale {release}"
html_static_path = ["_static"]
html_css_files = ["trajscale.css"]
pygments_style = "friendly"
pygments_dark_style = "monokai"


def _append_changelog(app, docname: str, source: list[str]) -> None:
    """The changelog page carries CHANGELOG.md's entries when the repository is there.

    The page has its own title, so ``docs/`` also builds on its own (from an sdist or a copy of the
    folder); then the page points at the file in the repository instead.
    """
    if docname != "changelog":
        return
    changelog = ROOT / "CHANGELOG.md"
    if changelog.is_file():
        body = changelog.read_text(encoding="utf-8").split("\n", 1)[1]   # its own "# Changelog" title
        source[0] += "\n" + body
    else:
        source[0] += "\nThe entries are in `CHANGELOG.md` at the top of the source repository.\n"


#: Where the formats page takes the table the format registry makes (trajscale.sources.registry).
FORMATS_TABLE = "<!-- the formats table, made from the registry when the docs are built -->"


def _formats_table(app, docname: str, source: list[str]) -> None:
    """The formats page's table comes from the format registry itself, so it lists every Source."""
    if docname == "formats" and FORMATS_TABLE in source[0]:
        from trajscale.sources.registry import formats_table

        source[0] = source[0].replace(FORMATS_TABLE, formats_table())


#: Where a page takes the table of every analysis's options and defaults (trajscale.analysis.options).
DEFAULTS_TABLE = "<!-- the analyses' defaults table, made from the registry when the docs are built -->"


def _defaults_table(app, docname: str, source: list[str]) -> None:
    """The analyses' options and defaults come from the analysis registry, as the command line's do."""
    if DEFAULTS_TABLE in source[0]:
        from trajscale.analysis.options import defaults_table

        source[0] = source[0].replace(DEFAULTS_TABLE, defaults_table())


def _api_pages_hidden(app, doctree) -> None:
    """The API reference's generated pages stay out of the sidebar, which lists the guides and the API page.

    The API page's tables link every name already; listed in the sidebar too, they made each page's
    navigation ~170 entries long, and building that navigation for every page (O(pages^2)) was most of the
    build. Their toctree (autosummary's) is marked hidden, and the theme's tree leaves hidden toctrees out.
    """
    from sphinx import addnodes
    from sphinx.ext.autosummary import autosummary_toc

    for toc in doctree.findall(autosummary_toc):
        for node in toc.findall(addnodes.toctree):
            node["hidden"] = True


def _navigation_without_hidden(app, pagename, templatename, context, doctree) -> None:
    """The theme's navigation tree without hidden toctrees (runs before the theme's own handler); the
    empty list a hidden toctree leaves would give its page an expander with nothing in it."""
    import re

    toctree = context.get("toctree")
    if toctree is not None:
        context["toctree"] = lambda **kw: re.sub(r"<ul>\s*</ul>", "", toctree(**{**kw, "includehidden": False}))


def setup(app) -> dict:
    app.connect("doctree-read", _api_pages_hidden, priority=400)
    app.connect("html-page-context", _navigation_without_hidden, priority=400)
    app.connect("source-read", _append_changelog)
    app.connect("source-read", _formats_table)
    app.connect("source-read", _defaults_table)
    return {"parallel_read_safe": True}
