"""How a followed run ends when the trajectory is not what it was: replaced under its name, damaged, left
by a writer that died, or a reference frame not yet written. Every ending saves the frames analysed, which
equal MDAnalysis's analysis of those frames, and names what happened (``report.meta.follow``)."""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests.datafiles import DCD, PSF

import trajscale as ts
from tests.conftest import ROOT, run_mpi
from tests.sources.test_follow import killed_producer, producer
from trajscale.endings import Ending
from trajscale.errors import ConfigError, NotFollowableError
from trajscale.follow import FollowOptions, last_line

warnings.filterwarnings("ignore", module="MDAnalysis")

EXECUTORS = ["serial", "processes", "dask"]


def write_xtc(path, frames: slice, extra: bytes = b"") -> None:
    """PSF/DCD's ``frames`` written by MDAnalysis's XTCWriter, then ``extra`` bytes appended."""
    u = mda.Universe(PSF, DCD)
    with mda.Writer(str(path), u.atoms.n_atoms) as w:
        for _ in u.trajectory[frames]:
            w.write(u.atoms)
    with open(path, "ab") as fh:
        fh.write(extra)


def mda_ca_rmsd(traj, n: int | None = None, ref_frame: int = 0) -> np.ndarray:
    """MDAnalysis's CA RMSD of the first ``n`` frames of ``traj`` (PSF topology)."""
    u = mda.Universe(PSF, str(traj))
    return rms.RMSD(u.select_atoms("name CA"), ref_frame=ref_frame).run(stop=n).results.rmsd[:, 2]


def _when_analysed(n: int, then):
    """An ``on_update`` that runs ``then()`` in a thread once ``n`` frames are analysed (the followed run
    goes on polling meanwhile), and the thread."""
    started = []

    def on_update(result) -> None:
        if len(result.rmsd) >= n and not started:
            started.append(threading.Thread(target=then))
            started[0].start()

    return on_update, started


def _replace(path: Path) -> None:
    """What ``gmx mdrun`` does when a new run starts under the same name: back the file up, write anew."""
    os.rename(path, path.with_name(f"#{path.name}.1#"))
    write_xtc(path, slice(40, 52))
    Path(str(path) + ".done").touch()


@pytest.mark.slow
@pytest.mark.cli   # the killed producer is a process of its own
@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("case", ["replaced", "damaged", "killed"])
def test_an_ending_saves_the_frames_analysed_and_names_what_happened(tmp_path, executor, case):
    if executor == "dask":
        pytest.importorskip("distributed")
    opts = {"executor": executor, "n_workers": 2}
    if case == "replaced":   # 8 frames followed, then a new run's 12 frames under the same name
        traj = tmp_path / "rp.xtc"
        write_xtc(traj, slice(0, 8))
        on_update, thread = _when_analysed(8, lambda: _replace(traj))
        r = ts.run(ts.RMSD(select="name CA"), PSF, str(traj), on_update=on_update,
                   follow=FollowOptions(idle=120, poll=0.1, every_s=0.2, every_frames=1), **opts)
        thread[0].join()
        first = tmp_path / "first.xtc"   # the bytes of the backed-up first file, under a name MDAnalysis reads
        first.write_bytes((tmp_path / "#rp.xtc.1#").read_bytes())
        said = f"{traj} was replaced (a new file under its name); the results cover the 8 frames analysed before"
    elif case == "damaged":   # already damaged when the follower starts: its 10 whole frames are analysed
        traj = tmp_path / "dm.xtc"
        write_xtc(traj, slice(0, 10), b"\x00\x00\x08junkjunk")
        t0 = time.monotonic()
        r = ts.run(ts.RMSD(select="name CA"), PSF, str(traj), follow=FollowOptions(idle=60, poll=0.1), **opts)
        assert time.monotonic() - t0 < 60   # named when met, not after --idle
        first = traj.with_name("whole.xtc")
        write_xtc(first, slice(0, 10))
        said = f"{traj}: damaged: frame 10 at byte {first.stat().st_size}:"
    else:   # a ParallelWriter producer SIGKILLed after 30 frames: never marked complete
        traj = first = tmp_path / "killed.h5md"
        killed_producer(traj)
        r = ts.run(ts.RMSD(select="name CA"), PSF, str(traj), follow=FollowOptions(idle=3, poll=0.1), **opts)
        said = "no new frame for 3 s; the file was never marked complete"
    f = r.report.meta.follow
    assert f.ended == {"killed": "idle"}.get(case, case), last_line(r)
    assert said in f.why and last_line(r).startswith(f"followed {len(r.rmsd)} frames; ended: ")
    n = {"replaced": 8, "damaged": 10}.get(case)
    assert n is None and len(r.rmsd) >= 29 or len(r.rmsd) == n
    np.testing.assert_allclose(r.rmsd, mda_ca_rmsd(first, len(r.rmsd)), rtol=1e-5, atol=1e-5)


def test_damage_appended_while_following_ends_the_run_after_the_frames_before_it(tmp_path):
    traj = tmp_path / "grow.xtc"
    write_xtc(traj, slice(0, 5))

    def damage() -> None:
        with open(traj, "ab") as fh:
            fh.write(b"\x00\x00\x08 not a frame")

    on_update, thread = _when_analysed(5, damage)
    r = ts.run(ts.RMSD(select="name CA"), PSF, str(traj), on_update=on_update,
               follow=FollowOptions(idle=60, poll=0.1, every_s=0.2, every_frames=1))
    thread[0].join()
    assert r.report.meta.follow.ended == "damaged", last_line(r)
    whole = tmp_path / "whole.xtc"
    write_xtc(whole, slice(0, 5))
    assert f"damaged: frame 5 at byte {whole.stat().st_size}" in last_line(r)
    np.testing.assert_allclose(r.rmsd, mda_ca_rmsd(whole), rtol=1e-5, atol=1e-5)


def test_a_writer_stopped_inside_a_frame_is_said_at_an_idle_end(tmp_path):
    traj = tmp_path / "torn.xtc"
    write_xtc(traj, slice(0, 5))
    with open(traj, "r+b") as fh:
        start = fh.read(40)
        fh.seek(0, 2)
        fh.write(start)   # the first 40 bytes of a sixth frame, never finished
    r = ts.run(ts.RMSD(select="name CA"), PSF, str(traj), follow=FollowOptions(idle=2, poll=0.1))
    assert r.report.meta.follow.ended == "idle"
    assert last_line(r) == ("followed 5 frames; ended: no new frame for 2 s; the file was never marked complete, "
                            "and its last 40 bytes are not a whole frame (a writer that stopped inside frame 5)")


def test_a_reference_counted_from_the_end_is_refused_at_once(tmp_path):
    traj = tmp_path / "g.xtc"
    write_xtc(traj, slice(0, 3))
    for analysis in (ts.RMSD(select="name CA", ref_frame=-1), ts.RMSF(select="name CA", fit_select="name CA",
                                                                       ref_frame=-2)):
        t0 = time.monotonic()
        with pytest.raises(ConfigError, match="counts from the end of the trajectory"):
            ts.run(analysis, PSF, str(traj), follow=FollowOptions(idle=60))
        assert time.monotonic() - t0 < 30


@pytest.mark.slow
@pytest.mark.cli   # the writer is a process of its own
def test_a_reference_frame_not_yet_written_is_waited_for(tmp_path):
    """``ref_frame=5`` while the writer has written fewer frames: the run waits for frame 5, and every row
    equals the finished file's, as MDAnalysis computes them."""
    src, traj, go = tmp_path / "src.xtc", tmp_path / "g.xtc", tmp_path / "go"
    write_xtc(src, slice(None))
    writer = producer("xtc", str(src), str(traj), "0.005", "5000", hold=go)   # holds at 50 kB: 2 frames
    timer = threading.Timer(6.0, go.touch)
    try:
        timer.start()
        r = ts.run(ts.RMSD(select="name CA", ref_frame=5), PSF, str(traj),
                   follow=FollowOptions(idle=120, poll=0.05, wait=120))
    finally:
        timer.join()
        assert writer.wait(timeout=300) == 0
    assert r.report.meta.follow.ended == "complete"
    np.testing.assert_allclose(r.rmsd, mda_ca_rmsd(traj, ref_frame=5), rtol=1e-5, atol=1e-5)
    assert len(r.rmsd) == 98


def test_a_format_read_whole_is_refused_at_once():
    t0 = time.monotonic()
    with pytest.raises(NotFollowableError, match="DCD files are read whole"):
        ts.run(ts.RMSD(select="name CA"), PSF, DCD, follow=FollowOptions(idle=60))
    assert time.monotonic() - t0 < 30


def test_a_part_of_an_index_changed_after_it_was_read_ends_the_run(tmp_path):
    """A followed segment index whose first part is rewritten (other frames, same count) after it was read."""
    from trajscale.convert.split import build_index

    u = mda.Universe(PSF, DCD)
    parts = []
    for k, (a, b) in enumerate([(0, 10), (10, 20)]):
        parts.append(str(tmp_path / f"part{k}.dcd"))
        with mda.Writer(parts[-1], u.atoms.n_atoms) as w:
            for _ in u.trajectory[a:b]:
                w.write(u.atoms)
    index = tmp_path / "run.json"
    build_index(parts, index, PSF)

    def rewrite() -> None:
        time.sleep(0.5)
        with mda.Writer(parts[0], u.atoms.n_atoms) as w:   # another run's frames in the part already read
            for _ in u.trajectory[50:60]:
                w.write(u.atoms)

    on_update, thread = _when_analysed(20, rewrite)
    r = ts.run(ts.RMSD(select="name CA"), PSF, str(index), on_update=on_update,
               follow=FollowOptions(idle=30, poll=0.1, every_s=0.2, every_frames=1))
    thread[0].join()
    assert r.report.meta.follow.ended == "replaced", last_line(r)
    assert f"part {parts[0]} of {index} changed after its frames were read" in last_line(r)
    np.testing.assert_allclose(r.rmsd, mda_ca_rmsd(DCD, 20), rtol=1e-5, atol=1e-5)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.cli
def test_endings_under_mpi(tmp_path):
    """``mpiexec -n 2 trajscale run ... --follow --executor mpi``: a replaced file, damage met at the start
    and a killed producer each save the frames analysed, say what happened in the last line, and exit
    with the ending's status."""
    write_xtc(tmp_path / "dm.xtc", slice(0, 10), b"\x00\x00\x08junkjunk")
    write_xtc(tmp_path / "whole.xtc", slice(0, 10))
    killed_producer(tmp_path / "killed.h5md")
    proc = run_mpi(2, [str(ROOT / "tests/sources/mpi_follow_endings.py"), str(tmp_path)], timeout=600,
                   env={"PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    codes = json.loads((tmp_path / "codes.json").read_text())
    assert codes == {"replaced": Ending.REPLACED.status, "damaged": Ending.DAMAGED.status,
                     "killed": Ending.IDLE.status}, proc.stderr[-3000:]
    last = [ln for ln in proc.stderr.splitlines() if ln.startswith("followed ")]
    got = {case: np.loadtxt(tmp_path / f"{case}.csv", delimiter=",", skiprows=1)[:, 2]
           for case in ("replaced", "damaged", "killed")}
    assert last == [f"followed 8 frames; ended: {tmp_path / 'rp.xtc'} was replaced (a new file under its name); "
                    "the results cover the 8 frames analysed before; frames of another trajectory are not "
                    "joined to them",
                    f"followed 10 frames; ended: {tmp_path / 'dm.xtc'}: damaged: frame 10 at byte "
                    f"{(tmp_path / 'whole.xtc').stat().st_size}: the 11 bytes after the last whole frame do not "
                    "start an XTC frame",
                    f"followed {len(got['killed'])} frames; ended: no new frame for 3 s; the file was never "
                    "marked complete"], proc.stderr[-3000:]
    first = tmp_path / "first.xtc"
    first.write_bytes((tmp_path / "#rp.xtc.1#").read_bytes())
    np.testing.assert_allclose(got["replaced"], mda_ca_rmsd(first), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["damaged"], mda_ca_rmsd(tmp_path / "whole.xtc"), rtol=1e-5, atol=1e-5)
    assert len(got["killed"]) >= 29
    np.testing.assert_allclose(got["killed"], mda_ca_rmsd(DCD, len(got["killed"])), rtol=1e-5, atol=1e-5)
