"""The README's quick tour: its Python example uses what the tour made (issue 17)."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def _tour() -> tuple[str, str]:
    tour = (ROOT / "README.md").read_text().split("## Quick tour", 1)[1].split("\n## ", 1)[0]
    bash = "\n".join(re.findall(r"```bash\n(.*?)```", tour, re.S))
    py = re.findall(r"```python\n(.*?)```", tour, re.S)[0]   # the tour's own run (later blocks are recipes)
    return bash, py


def test_python_example_names_files_the_tour_created():
    bash, py = _tour()
    made = set(re.findall(r"(?:-o|--out|--report)\s+([\w.]+)", bash))
    made |= set(re.findall(r"make_whole_xtc\('([\w.]+)'\)", bash))
    used = set(re.findall(r"""["']([\w.]+\.(?:h5md|tpr|xtc|psf|gro|csv|json))["']""", py))
    assert used, py
    assert used <= made, used - made


def test_tour_makes_the_protein_whole_before_measuring_rmsd():
    bash, _ = _tour()
    whole = bash.index("make_whole_xtc")
    assert whole < bash.index("trajscale convert") < bash.index("trajscale run rmsd")
    convert = next(ln for ln in bash.splitlines() if "trajscale convert" in ln)
    assert "adk_oplsaa.xtc" not in convert and "adk_whole.xtc" in convert
