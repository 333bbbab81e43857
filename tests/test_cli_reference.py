"""docs/cli.md is generated from the parser that ``trajscale --help`` prints, and that parser holds every command."""

from __future__ import annotations

import importlib
import re

from tests.conftest import ROOT
from trajscale.cli.main import COMMANDS


def command_parsers(parser):
    """Every parser a command line ends in (``run rmsd``, ``convert``, ...), under ``parser``."""
    subs = [a for a in parser._actions if isinstance(a.choices, dict)]
    if not subs:
        yield parser
    for action in subs:
        for child in dict.fromkeys(action.choices.values()):   # aliases map to the same parser
            yield from command_parsers(child)


def test_the_reference_is_built_from_the_whole_parser():
    text = (ROOT / "docs" / "cli.md").read_text()
    block = re.search(r"```\{argparse\}\n(.*?)```", text, re.S)
    assert block, "docs/cli.md has no argparse directive"
    opts = dict(re.findall(r"^:(\w+): *(.*)$", block.group(1), re.M))
    assert opts["prog"] == "trajscale" and not {"nosubcommands", "path"} & set(opts)
    parser = getattr(importlib.import_module(opts["module"]), opts["func"])()
    commands = {p.prog.split()[1] for p in command_parsers(parser)}
    assert commands == set(COMMANDS)
    assert "sphinxarg.ext" in (ROOT / "docs" / "conf.py").read_text()
