"""A resume continues only a partial output of the same inputs, options and write mode.

The progress record holds the run's :class:`ResumeKey` as JSON; a record of another mode or options, or
one written by an earlier trajscale (a ``repr()`` of the options), is refused in one line naming the
file and the difference, and the partial output is kept.  The partials are left by a real crash: a
child process dies (``os._exit``) after counting every frame, before the rename.  References:
MDAnalysis reading the DCD itself, and the options records against the keyword calls they replace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.cli._helpers import assert_clean_failure
from tests.conftest import run_cli, run_cli_here
from trajscale.convert.convert import convert
from trajscale.convert.options import ConvertOptions, OutputSpec, ReadOptions, WriteOptions, with_options
from trajscale.convert.resume import InputIdentity, ResumeKey, WriteMode, load_record, partial_paths
from trajscale.errors import ConfigError
from trajscale.h5md.layout import Layout


def _crashed_convert(out, *cli: str) -> None:
    """``trajscale convert PSF DCD -o out *cli`` killed (os._exit) after its last count, before the rename."""
    code = textwrap.dedent(f"""
        import os, sys
        import trajscale.convert.resume as m
        from trajscale.cli.main import main
        m.Partial.finish = lambda self: os._exit(9)
        sys.exit(main(["convert", {D.PSF!r}, {D.DCD!r}, "-o", {str(out)!r}, "--no-progress", *{list(cli)!r}]))
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 9, r.stderr[-3000:]
    tmp, record = partial_paths(out, "convert")
    assert tmp.exists() and record.exists() and not out.exists()


def _assert_dcd_frames(path) -> None:
    """``path`` holds the DCD's frames as MDAnalysis reads them."""
    u = mda.Universe(D.PSF, D.DCD)
    with h5py.File(path) as f:
        pos = f["particles/all/position/value"][()]
    np.testing.assert_array_equal(pos, np.array([ts.positions.copy() for ts in u.trajectory]))


@pytest.mark.cli
def test_the_record_holds_a_typed_key(tmp_path):
    out = tmp_path / "out.h5md"
    _crashed_convert(out, "--chunks", "7")
    key = ResumeKey.from_dict(load_record(partial_paths(out, "convert")[1])["key"])
    assert key.kind == "convert" and key.mode is WriteMode.SERIAL
    assert [i.path for i in key.inputs] == [os.path.realpath(D.PSF), os.path.realpath(D.DCD)]
    assert key.inputs[1].size == os.stat(D.DCD).st_size
    assert dict(key.options)["chunks"] == 7 and dict(key.options)["compression"] == "none"
    assert ResumeKey.from_dict(json.loads(json.dumps(key.to_dict()))) == key


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_resume_with_another_write_mode_is_refused_naming_it(tmp_path):
    """Written serially, resumed with --executor processes: refused in one line, the partial kept; resumed
    as it was written, it is finished."""
    out = tmp_path / "out.h5md"
    _crashed_convert(out)
    r = run_cli("convert", D.PSF, D.DCD, "-o", str(out), "--no-progress", "--executor", "processes", "-n", "2",
                "--resume")
    assert_clean_failure(r, str(out), "written serially", "this run writes in place", "start again without --resume")
    tmp, record = partial_paths(out, "convert")
    assert tmp.exists() and record.exists() and not out.exists()
    r = run_cli_here("convert", D.PSF, D.DCD, "-o", str(out), "--no-progress", "--resume")
    assert r.returncode == 0, r.stderr
    _assert_dcd_frames(out)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_resume_with_another_option_is_refused_naming_it(tmp_path):
    out = tmp_path / "out.h5md"
    _crashed_convert(out, "--chunks", "7")
    r = run_cli_here("convert", D.PSF, D.DCD, "-o", str(out), "--no-progress", "--chunks", "5", "--resume")
    assert_clean_failure(r, str(out), "made with other options", "chunks 7 there, 5 now")
    r = run_cli_here("convert", D.PSF, D.DCD, "-o", str(out), "--no-progress", "--select", "name CA", "--chunks", "7",
                     "--resume")
    assert_clean_failure(r, str(out), "select none there, name CA now")
    assert partial_paths(out, "convert")[0].exists()


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_a_record_of_the_earlier_repr_key_is_refused_in_one_line(tmp_path):
    """A progress record as the previous version wrote it (options as a ``repr()`` string): one line saying
    it cannot be resumed and what to do; a start without --resume then writes the whole file."""
    out = tmp_path / "out.h5md"
    _crashed_convert(out)
    tmp, record = partial_paths(out, "convert")
    old = {"inputs": [{"input": os.path.realpath(p), "size": os.stat(p).st_size, "mtime_ns": os.stat(p).st_mtime_ns}
                      for p in (D.PSF, D.DCD)],
           "options": "(Layout(chunks='auto', compression=None, compression_opts=None, shuffle=False, "
                      "fletcher32=False), None, None, None, None, ('position',), 'mdanalysis', None, None, None, "
                      "'floats', False)",
           "done": 98}
    record.write_text(json.dumps(old))
    r = run_cli_here("convert", D.PSF, D.DCD, "-o", str(out), "--no-progress", "--resume")
    assert_clean_failure(r, str(out), tmp.name, "cannot be resumed by this one", "start again without --resume")
    assert tmp.exists() and not out.exists()
    r = run_cli_here("convert", D.PSF, D.DCD, "-o", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert not tmp.exists() and not record.exists()
    _assert_dcd_frames(out)


def test_a_changed_input_is_refused_naming_it():
    was = ResumeKey("convert", WriteMode.SERIAL, (InputIdentity("/a.dcd", 10, 1),), (("chunks", 7),))
    assert was.difference(was) is None
    grown = ResumeKey("convert", WriteMode.SERIAL, (InputIdentity("/a.dcd", 11, 1),), (("chunks", 7),))
    assert "/a.dcd changed since" in was.difference(grown)
    other = ResumeKey("convert", WriteMode.SERIAL, (InputIdentity("/b.dcd", 10, 1),), (("chunks", 7),))
    assert "/a.dcd, not /b.dcd" in was.difference(other)


def test_keywords_fill_the_options_records_and_an_unknown_one_is_named():
    opts = with_options(ConvertOptions(), {"layout": Layout.parse("7"), "select": "name CA", "resume": True,
                                           "units": "gromacs"}, "convert")
    assert opts == ConvertOptions(read=ReadOptions(select="name CA"), spec=OutputSpec(layout=Layout.parse("7")),
                                  write=WriteOptions(resume=True), units="gromacs")
    with pytest.raises(ConfigError, match="convert\\(\\) got an unknown option 'chunks'"):
        with_options(ConvertOptions(), {"chunks": 7}, "convert")


def test_an_options_record_writes_what_the_keywords_write(tmp_path):
    """The record form and the keyword form are one call: the same bytes (and MDAnalysis's frames)."""
    a, b = tmp_path / "a.h5md", tmp_path / "b.h5md"
    convert(D.PSF, [D.DCD], str(a), layout=Layout.parse("7", "gzip:1"), start=3, step=2)
    convert(D.PSF, [D.DCD], str(b), options=ConvertOptions(read=ReadOptions(start=3, step=2),
                                                           spec=OutputSpec(layout=Layout.parse("7", "gzip:1"))))
    u = mda.Universe(D.PSF, D.DCD)
    ref = np.array([ts.positions.copy() for ts in u.trajectory[3::2]])
    for path in (a, b):
        with h5py.File(path) as f:
            np.testing.assert_array_equal(f["particles/all/position/value"][()], ref)
    with h5py.File(a) as f, h5py.File(b) as g:
        assert f["particles/all/position/value"].chunks == g["particles/all/position/value"].chunks
        np.testing.assert_array_equal(f["particles/all/position/step"][()], g["particles/all/position/step"][()])
    with pytest.raises(ConfigError, match="unknown option 'no_velocities'"):
        convert(D.PSF, [D.DCD], str(tmp_path / "c.h5md"), no_velocities=True)
