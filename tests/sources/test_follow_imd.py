"""``trajscale run ANALYSIS TOP imd://HOST:PORT``: frames streamed by imdclient's own test server
(IMD v3 and v2, an MDAnalysisTests trajectory) are analysed as they come, teed into H5MD; the result
equals MDAnalysis's RMSD of the trajectory streamed and a run over the teed file."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import warnings

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests.datafiles import DCD, PSF

from tests.conftest import ROOT, run_cli

pytest.importorskip("imdclient")
from imdclient.IMDClient import IMDSessionInfo
from imdclient.tests.server import InThreadIMDServer

warnings.filterwarnings("ignore", module="MDAnalysis")


class PatientServer(InThreadIMDServer):
    """imdclient's test server, waiting for the client as long as a loaded machine takes to start one
    (it waits 5 s, shorter than the command's start here)."""

    def _accept_handshake(self, first_frame):
        select.select([self.listen_socket], [], [], 300)
        super()._accept_handshake(first_frame)


def session(version: int) -> IMDSessionInfo:
    """What the server says it sends: the DCD has no box, velocities nor forces."""
    return IMDSessionInfo(version=version, endianness="<", time=version == 3, energies=True, box=False,
                          positions=True, velocities=False, forces=False, wrapped_coords=False)


@pytest.mark.parametrize(("executor", "version"), [("serial", 3), ("serial", 2), ("processes", 3), ("processes", 2),
                                                  ("dask", 3)])
def test_imd_stream_is_analysed_as_it_comes(tmp_path, version, executor):
    if executor == "dask":
        pytest.importorskip("distributed")
    u = mda.Universe(PSF, DCD)
    server = PatientServer(u.trajectory)
    server.set_imdsessioninfo(session(version))
    server.handshake_sequence("localhost", first_frame=False)
    tee, out = tmp_path / "stream.h5md", tmp_path / "rmsd.csv"
    cmd = [sys.executable, "-m", "trajscale.cli.main", "run", "rmsd", PSF, f"imd://localhost:{server.port}",
           "--tee", str(tee), "--out", str(out), "--idle", "120", "--executor", executor, "-n", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    try:
        server.join_accept_thread()
        server.send_frames(0, u.trajectory.n_frames)
    finally:
        server.disconnect()
        server.cleanup()
        _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert stderr.strip().splitlines()[-1] == "followed 98 frames; ended: the writer marked the file complete"
    got = np.loadtxt(out, delimiter=",", skiprows=1)
    ref = rms.RMSD(mda.Universe(PSF, DCD).select_atoms("name CA")).run().results.rmsd[:, 2]
    np.testing.assert_allclose(got[:, 2], ref, rtol=1e-5, atol=1e-5)
    full = tmp_path / "full.csv"
    assert run_cli("run", "rmsd", PSF, str(tee), "--executor", "serial", "--out", str(full)).returncode == 0
    assert np.array_equal(got, np.loadtxt(full, delimiter=",", skiprows=1))


def test_a_bad_stream_address_is_one_line(tmp_path):
    proc = run_cli("run", "rmsd", PSF, "imd://localhost")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "imd://HOST:PORT" in proc.stderr
