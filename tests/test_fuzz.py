"""The fuzzing campaign runs: a few seconds per XTC/TRR target find nothing, and count executions and
coverage (``benchmarks/fuzz.py``; the long campaign is reported in docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tool   # runs the fuzzing targets

pytest.importorskip("atheris")
pytest.importorskip("MDAnalysisTests")

ROOT = Path(__file__).resolve().parents[1]
FUZZ = ROOT / "benchmarks" / "fuzz.py"
#: The instrumented decoder is built once per source change, here (a minute of clang).
BUILD = Path(os.environ.get("TRAJSCALE_CACHE", Path.home() / ".cache" / "trajscale")) / "fuzz-build"


def _campaign(tmp_path: Path, *args: str) -> list[dict]:
    """fuzz.py's JSON lines; the campaign and its targets leave nothing in the temporary folder they are given."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
               TMPDIR=str(scratch))
    proc = subprocess.run([sys.executable, str(FUZZ), "--json-lines", "--findings", str(tmp_path / "out"), *args],
                          capture_output=True, text=True, timeout=1200, env=env, cwd=ROOT)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert results, proc.stderr[-3000:]
    assert list(scratch.iterdir()) == []
    return results


@pytest.mark.cli
@pytest.mark.timeout(1500)
def test_xdr_targets_run_and_find_nothing(tmp_path):
    native = [] if shutil.which("clang") else ["--no-native"]
    results = _campaign(tmp_path, "--seconds", "2", "--target", "xtc", "--target", "trr",
                        "--target", "xdr-parts", "--build-dir", str(BUILD), *native)
    assert [r["target"] for r in results] == ["xtc", "trr", "xdr-parts"]
    for r in results:
        assert r["findings"] == [], r
        assert r["executions"] > 100 and r["cov"] > 50 and r["ft"] > 50, r
        assert r["native_coverage"] == bool(not native), r


def test_targets_follow_the_contract(tmp_path, monkeypatch):
    """Every target module's TARGETS maps a name to (seed files, one-input function); seeds exist."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # (the folders the targets make on import: here)
    sys.path.insert(0, str(FUZZ.parent))
    try:
        import fuzz

        targets = fuzz.discover()
    finally:
        sys.path.remove(str(FUZZ.parent))
    assert {"xtc", "trr", "xdr-parts"} <= set(targets)
    for name, (seeds, one, _) in targets.items():
        seeds = list(seeds())   # file paths, or the bytes themselves
        assert seeds and all(isinstance(p, bytes) or Path(p).is_file() for p in seeds), name
        for p in seeds:
            one(p if isinstance(p, bytes) else Path(p).read_bytes())   # a seed is handled without an exception


@pytest.mark.cli
def test_a_crashing_input_is_a_finding(tmp_path):
    """A target whose input raises what it does not expect is reported as a finding, saved to a file."""
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "boom.py").write_text(
        "from pathlib import Path\n"
        "SEED = Path(__file__).with_name('seed.bin')\n"
        "SEED.write_bytes(b'ok')\n"
        "def one(data):\n"
        "    if data[:1] == b'o':\n"
        "        raise RuntimeError('found')\n"
        "TARGETS = {'boom': (lambda: [str(SEED)], one)}\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
               TRAJSCALE_FUZZ_TARGETS=str(targets))
    proc = subprocess.run([sys.executable, str(FUZZ), "--json-lines", "--no-native", "--seconds", "5",
                           "--findings", str(tmp_path / "out")], capture_output=True, text=True, timeout=600,
                          env=env, cwd=ROOT)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert results[0]["target"] == "boom" and results[0]["findings"], results
    assert Path(results[0]["findings"][0]).read_bytes()[:1] == b"o"
