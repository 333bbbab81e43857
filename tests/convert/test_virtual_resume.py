"""``--virtual``: a crash between moving the counted segments to ``NAME.parts/`` and the final rename is
finished by ``--resume`` (nothing rewritten), for convert and rechunk.

The crash is a real one: a child process dies with ``os._exit`` (no cleanup, no exception handlers) after
the first segment moved, or after the virtual output was written but before its rename.  References: an
uninterrupted virtual run of the same input (every dataset and attribute) and MDAnalysis reading the input.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from MDAnalysisTests import datafiles as D

from tests.convert.test_parallel_convert import assert_reads_like
from tests.h5md.test_rechunk import assert_same_tree
from trajscale.convert.convert import convert
from trajscale.convert.rechunk import rechunk
from trajscale.convert.resume import load_record, partial_paths
from trajscale.h5md.layout import Layout

pytestmark = pytest.mark.cli

CRASH = {
    # after the first segment is moved and fsynced
    "mid-move": "import trajscale.convert.segmented as m\n"
                "real = m.fsync_path\n"
                "def crash(path, directory=False):\n"
                "    real(path, directory)\n"
                "    os._exit(9)\n"
                "m.fsync_path = crash\n",
    # the virtual output written and counted, not yet renamed
    "before-rename": "import trajscale.convert.resume as m\n"
                     "m.Partial.finish = lambda self: os._exit(9)\n",
}


def _run(kind: str, out, crash: str, src) -> subprocess.CompletedProcess:
    if kind == "convert":
        call = (f"convert({D.PSF!r}, [{D.DCD!r}], {str(out)!r}, layout=Layout.parse('7', 'gzip:1'), "
                "executor='processes', n_workers=3, virtual=True)")
    else:
        call = (f"rechunk({str(src)!r}, {str(out)!r}, Layout.parse('7', 'gzip:1'), executor='processes', "
                "n_workers=3, virtual=True)")
    code = textwrap.dedent("""
        import os
        from trajscale.convert.convert import convert
        from trajscale.convert.rechunk import rechunk
        from trajscale.h5md.layout import Layout
        """) + CRASH[crash] + call + "\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.parametrize("crash", CRASH)
@pytest.mark.parametrize("kind", ["convert", "rechunk"])
def test_virtual_crash_after_moving_parts_is_resumed(tmp_path, kind, crash):
    src = tmp_path / "src.h5md"
    if kind == "rechunk":
        convert(D.PSF, [D.DCD], str(src))
    out = tmp_path / "v.h5md"
    r = _run(kind, out, crash, src)
    assert r.returncode == 9, r.stderr[-3000:]
    tmp, record = partial_paths(out, kind)
    parts = tmp_path / "v.parts"
    assert not out.exists() and load_record(record)["moving"] is True
    assert sorted(p.name for p in parts.iterdir())[:1] == ["part_0000.h5md"]   # moved before the crash
    if crash == "before-rename":
        assert tmp.exists() and len(list(parts.iterdir())) == 3
    if kind == "convert":
        convert(D.PSF, [D.DCD], str(out), layout=Layout.parse("7", "gzip:1"), executor="processes", n_workers=3,
                virtual=True, resume=True)
    else:
        s = rechunk(src, out, Layout.parse("7", "gzip:1"), executor="processes", n_workers=3, virtual=True,
                    resume=True)
        assert s.n_frames == 98
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["v.h5md", "v.parts", *(["src.h5md"] if kind == "rechunk" else [])]), left
    assert sorted(p.name for p in parts.iterdir()) == ["part_0000.h5md", "part_0001.h5md", "part_0002.h5md"]
    whole = tmp_path / "whole" / "v.h5md"
    whole.parent.mkdir()
    if kind == "convert":
        convert(D.PSF, [D.DCD], str(whole), layout=Layout.parse("7", "gzip:1"), executor="processes", n_workers=3,
                virtual=True)
    else:
        rechunk(src, whole, Layout.parse("7", "gzip:1"), executor="processes", n_workers=3, virtual=True)
    assert_same_tree(whole, out)
    assert_reads_like(D.PSF, out, D.DCD)
