"""``trajscale run ANALYSIS TOP imd://HOST:PORT``: frames streamed by imdclient's own test server
(IMD v3 and v2, an MDAnalysisTests trajectory) are analysed as they come, teed into H5MD; the result
equals MDAnalysis's RMSD of the trajectory streamed and a run over the teed file."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests.datafiles import DCD, PSF

from tests.conftest import ROOT, mpiexec, run_cli, run_cli_here
from trajscale.endings import Ending

pytest.importorskip("imdclient")
from tests.sources.imd_producer import PatientServer, session  # noqa: E402

warnings.filterwarnings("ignore", module="MDAnalysis")


def _stream_into_cli(args: list[str], version: int = 3, frames: int | None = None):
    """Stream PSF/DCD's frames (``frames``: the first so many) from imdclient's test server into
    ``trajscale run ARGS`` (ARGS naming the stream ``imd://{port}``); the finished process, with its
    output as ``stdout_text`` and ``stderr_text``."""
    u = mda.Universe(PSF, DCD)
    server = PatientServer(u.trajectory)
    server.set_imdsessioninfo(session(version))
    server.handshake_sequence("localhost", first_frame=False)
    cmd = [sys.executable, "-m", "trajscale.cli.main", "run",
           *(a.replace("imd://{port}", f"imd://localhost:{server.port}") for a in args)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    try:
        server.join_accept_thread()
        server.send_frames(0, u.trajectory.n_frames if frames is None else frames)
    finally:
        server.disconnect()
        server.cleanup()
        proc.stdout_text, proc.stderr_text = proc.communicate(timeout=300)
    return proc


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
# Each protocol version once and each executor once: the stream is received, and teed, by the main process
# whatever the executor (serial v3 is the advice test's stream below, processes v2 adds no code path).
@pytest.mark.parametrize(("executor", "version"), [("serial", 2), ("processes", 3), ("dask", 3)])
def test_imd_stream_is_analysed_as_it_comes(tmp_path, version, executor):
    if executor == "dask":
        pytest.importorskip("distributed")
    tee, out = tmp_path / "stream.h5md", tmp_path / "rmsd.csv"
    proc = _stream_into_cli(["rmsd", PSF, "imd://{port}", "--tee", str(tee), "--out", str(out), "--idle", "120",
                             "--executor", executor, "-n", "2"], version)
    stderr = proc.stderr_text
    assert proc.returncode == 0, stderr
    assert stderr.strip().splitlines()[-1] == ("followed 98 frames; ended: the stream ended: "
                                                "the producer closed its connection")
    got = np.loadtxt(out, delimiter=",", skiprows=1)
    ref = rms.RMSD(mda.Universe(PSF, DCD).select_atoms("name CA")).run().results.rmsd[:, 2]
    np.testing.assert_allclose(got[:, 2], ref, rtol=1e-5, atol=1e-5)
    full = tmp_path / "full.csv"
    assert run_cli_here("run", "rmsd", PSF, str(tee), "--executor", "serial", "--out", str(full)).returncode == 0
    assert np.array_equal(got, np.loadtxt(full, delimiter=",", skiprows=1))


@pytest.mark.cli
def test_a_bad_stream_address_is_one_line(tmp_path):
    proc = run_cli("run", "rmsd", PSF, "imd://localhost")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "imd://HOST:PORT" in proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("ending", ["ends", "reset"])
def test_imd_stream_under_mpi(tmp_path, ending):
    """``mpiexec -n 2``: rank 0 receives, both ranks analyse. A producer that ends the stream, or one whose
    connection is reset in the middle of a frame, ends every rank with one last line saying which, its
    exit status, and the frames received whole analysed."""
    n = 98 if ending == "ends" else 40
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}", OMP_NUM_THREADS="1")
    server = subprocess.Popen([sys.executable, "-m", "tests.sources.imd_producer", "3", str(n),
                               *(["reset"] if ending == "reset" else [])],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        port = int(server.stdout.readline())
        out = tmp_path / "rmsd.csv"
        proc = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", "trajscale.cli.main", "run", "rmsd", PSF,
                               f"imd://localhost:{port}", "--executor", "mpi", "--out", str(out), "--idle", "120"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=400, env=env, check=False)
    finally:   # ended on its own once it sent its frames, unless the run failed before connecting
        if server.poll() is None:
            server.kill()
        server.wait()
    said = {"ends": (Ending.STREAM_ENDED, "the stream ended: the producer closed its connection"),
            "reset": (Ending.VANISHED, f"the producer vanished: after {n} frames: connection reset by the "
                                       "producer")}[ending]
    assert proc.returncode == said[0].status, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"followed {n} frames; ended: {said[1]}"
    got = np.loadtxt(out, delimiter=",", skiprows=1)
    ref = rms.RMSD(mda.Universe(PSF, DCD).select_atoms("name CA")).run(stop=n).results.rmsd[:, 2]
    np.testing.assert_allclose(got[:, 2], ref, rtol=1e-5, atol=1e-5)
    assert os.listdir(tmp_path) == ["rmsd.csv"]   # the temporary stream file is gone


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_a_stream_that_cannot_be_received_is_one_line(tmp_path):
    import socket

    with socket.socket() as s:   # a port where nothing listens
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    proc = run_cli("run", "rmsd", PSF, f"imd://localhost:{port}", "--out", str(tmp_path / "r.csv"), "--idle", "60")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "the stream could not be received" in lines[0], proc.stderr
    assert not (tmp_path / "r.csv").exists()


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_an_existing_tee_is_followed_only_once_the_new_stream_replaces_it(tmp_path):
    """``--tee old.h5md --overwrite``: the old file (complete, 98 frames) is not taken for the new stream's."""
    tee, out = tmp_path / "stream.h5md", tmp_path / "rmsd.csv"
    assert run_cli_here("convert", PSF, DCD, "-o", str(tee)).returncode == 0
    proc = _stream_into_cli(["rmsd", PSF, "imd://{port}", "--tee", str(tee), "--overwrite", "--out", str(out),
                             "--idle", "120"], frames=30)
    stderr = proc.stderr_text
    assert proc.returncode == 0, stderr
    assert stderr.strip().splitlines()[-1] == ("followed 30 frames; ended: the stream ended: "
                                                "the producer closed its connection")
    ref = rms.RMSD(mda.Universe(PSF, DCD).select_atoms("name CA")).run(stop=30).results.rmsd[:, 2]
    np.testing.assert_allclose(np.loadtxt(out, delimiter=",", skiprows=1)[:, 2], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_advice_on_a_stream_not_kept_names_no_deleted_file(tmp_path):
    """Without ``--tee`` the stream's H5MD copy is deleted when the run ends: the summary and the report's
    advice (on that copy's one-frame chunks) name the file ``--tee`` would keep, never the deleted one."""
    import json

    report = tmp_path / "run.json"
    proc = _stream_into_cli(["rmsd", PSF, "imd://{port}", "--report", str(report), "--idle", "120",
                             "--executor", "serial"])
    stdout, stderr = proc.stdout_text, proc.stderr_text
    assert proc.returncode == 0, stderr
    saved = json.loads(report.read_text())
    deleted = saved["source"]["path"]
    assert deleted and not os.path.exists(deleted)
    advice = saved["diagnosis"]["advice"]
    assert advice and all(deleted not in a["message"] + a["reason"] for a in advice), advice
    assert deleted not in stdout + stderr
    # the commands on the stream's file (rechunk, or a file of the selected atoms) name the file --tee keeps
    commands = [a["message"] for a in advice if "`trajscale " in a["message"]]
    assert commands and all("`--tee FILE.h5md`" in m and " FILE.h5md " in m for m in commands), advice
    # a followed run's report holds what its own reads cost, as a finished run's does
    assert all("the run's" in a["reason"] for a in advice if a["rule"] == "chunk-amplification"), advice


def test_a_streamed_box_is_stored_as_lengths_and_angles():
    """A frame's box vectors (as IMD v3 sends them) become ``[a, b, c, alpha, beta, gamma]``: the dimensions
    MDAnalysis made the vectors from."""
    from MDAnalysis.lib.mdamath import triclinic_vectors

    from trajscale.imd import _box_lengths_angles

    for dims in ([50.0, 50.0, 50.0, 90.0, 90.0, 90.0], [70.0, 80.0, 90.0, 80.0, 95.0, 110.0]):
        got = _box_lengths_angles(triclinic_vectors(np.array(dims, np.float32)))
        np.testing.assert_allclose(got, dims, rtol=1e-5)
