"""Every benchmark script has a smoke run in one module, and every --json (--out) file is refused when it exists."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .smoke import BENCH, JSON_OUTPUTS, MODULES, SMOKE, bench_env

pytestmark = pytest.mark.tool


def test_every_script_has_a_smoke_run():
    """Every script, not the modules they share (``_NAME.py``), has a smoke run."""
    scripts = sorted(p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh") and not p.name.startswith("_"))
    assert scripts == sorted(SMOKE), "add the new benchmark to SMOKE in tests/benchmarks/smoke.py"


def test_every_smoke_run_is_in_one_module():
    """The scripts whose output is checked line by line are each run by one test module's test_smoke."""
    from pathlib import Path

    listed = [s for scripts in MODULES.values() for s in scripts]
    assert sorted(listed) == sorted(s for s, (_, patterns) in SMOKE.items() if patterns)
    here = Path(__file__).parent
    assert sorted(p.stem for p in here.glob("test_smoke_*.py")) == sorted(MODULES)
def test_every_json_output_is_checked():
    """Every script with a --json (or --out) file is in JSON_OUTPUTS."""
    has = sorted(p.name for p in BENCH.glob("*.py")
                 if re.search(r"add_argument\(\"--(json|out)\"", p.read_text()))
    assert has == sorted(JSON_OUTPUTS)


@pytest.mark.mpi
@pytest.mark.parametrize("script", sorted(JSON_OUTPUTS))
def test_existing_json_refused_before_any_work(script, tmp_path):
    """An existing output without --overwrite: one line naming it, exit 1, no traceback, the file byte for byte,
    and nothing measured or built (the work folder holds only that file)."""
    args, option = JSON_OUTPUTS[script]
    out = tmp_path / "mine.json"
    old = b'{"a user\'s": "numbers"}\n'
    out.write_bytes(old)
    cmd = [str(BENCH / script), *[a.replace("{work}", str(tmp_path)) for a in args], option, str(out)]
    if script == "mda_mpi_baseline.py":   # an MPI job: the ranks agree, and it is said once
        from ..conftest import run_mpi

        proc = run_mpi(2, cmd, timeout=120, cwd=tmp_path, env=bench_env(tmp_path))
    else:
        proc = subprocess.run([sys.executable, *cmd], check=False, capture_output=True, text=True, timeout=120,
                              env=bench_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [f"{script}: {out}: already exists (use --overwrite to replace it)"], \
        proc.stderr
    assert out.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == ["mine.json"]

