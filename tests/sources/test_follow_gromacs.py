"""A real engine streaming over IMD: ``gmx mdrun -imdport P -imdwait`` (GROMACS 2022, IMD v2) on a small water
box, analysed with ``trajscale run rgyr md.tpr imd://localhost:P --tee stream.h5md``. Every step arrives: the
frames kept equal the positions GROMACS writes to its own TRR (up to whole box vectors: IMD sends molecules made
whole), and the results equal MDAnalysis's radius of gyration of them. Skipped where ``gmx`` is not on PATH.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from tests.conftest import ROOT

pytest.importorskip("imdclient")
GMX = shutil.which("gmx")
pytestmark = [pytest.mark.cli,
              pytest.mark.skipif(GMX is None, reason="gmx (GROMACS) is not on PATH: apt-get install gromacs")]

TOPOLOGY = """#include "oplsaa.ff/forcefield.itp"
#include "oplsaa.ff/spc.itp"

[ system ]
water

[ molecules ]
SOL {n}
"""

MDP = """integrator = md
nsteps = 50
dt = 0.002
cutoff-scheme = Verlet
rcoulomb = 0.9
rvdw = 0.9
coulombtype = PME
tcoupl = v-rescale
tc-grps = System
tau-t = 0.1
ref-t = 300
gen-vel = yes
gen-temp = 300
nstxout = 1
IMD-group = System
"""


def _gmx(*args: str, cwd) -> None:
    proc = subprocess.run([GMX, "-quiet", *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _water_box(folder) -> None:
    """221 SPC waters in a 2 nm box (``gmx solvate``), 50 steps of MD (``gmx grompp``): ``md.tpr``."""
    _gmx("solvate", "-cs", "spc216.gro", "-box", "2", "2", "2", "-o", "water.gro", cwd=folder)
    n = sum(1 for line in (folder / "water.gro").read_text().splitlines()[2:-1] if "OW" in line)
    (folder / "topol.top").write_text(TOPOLOGY.format(n=n))
    (folder / "md.mdp").write_text(MDP)
    _gmx("grompp", "-f", "md.mdp", "-c", "water.gro", "-p", "topol.top", "-o", "md.tpr", cwd=folder)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_gromacs_mdrun_streamed_over_imd_is_analysed_to_its_end(tmp_path):
    import MDAnalysis as mda

    warnings.filterwarnings("ignore", module="MDAnalysis")
    _water_box(tmp_path)
    port = _free_port()
    said = tmp_path / "mdrun.err"   # mdrun's log file is flushed later; its stderr at once
    with open(said, "w") as err:
        mdrun = subprocess.Popen([GMX, "mdrun", "-s", "md.tpr", "-deffnm", "md", "-o", "traj.trr", "-nt", "1",
                                  "-imdport", str(port), "-imdwait"], cwd=tmp_path,
                                 stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 300   # connecting before mdrun listens would be refused
        while "Listening for IMD connection" not in _text(said) and time.monotonic() < deadline:
            assert mdrun.poll() is None, "mdrun ended before it listened"
            time.sleep(0.2)
        proc = subprocess.run([sys.executable, "-m", "trajscale.cli.main", "run", "rgyr", "md.tpr",
                               f"imd://localhost:{port}", "--select", "all", "--tee", "stream.h5md",
                               "--out", "rgyr.csv", "--idle", "120", "--executor", "processes", "-n", "2"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=400, check=False,
                              env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
        assert mdrun.wait(timeout=300) == 0
    finally:
        if mdrun.poll() is None:
            mdrun.kill()
            mdrun.wait()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == ("followed 51 frames; ended: the stream ended: "
                                                "the producer closed its connection")
    engine = mda.Universe(str(tmp_path / "md.tpr"), str(tmp_path / "traj.trr"))   # steps 0..50, GROMACS's own
    streamed = mda.Universe(str(tmp_path / "md.tpr"), str(tmp_path / "stream.h5md"))
    assert streamed.trajectory.n_frames == engine.trajectory.n_frames == 51
    rgyr = []
    for a, _ in zip(engine.trajectory, streamed.trajectory, strict=True):
        d = streamed.atoms.positions.astype(np.float64) - engine.atoms.positions
        d -= a.dimensions[:3] * np.round(d / a.dimensions[:3])
        np.testing.assert_allclose(d, 0, atol=1e-4)
        rgyr.append(streamed.atoms.radius_of_gyration())
    got = np.loadtxt(tmp_path / "rgyr.csv", delimiter=",", skiprows=1)
    np.testing.assert_allclose(got[:, 2], rgyr, rtol=1e-5)


def _text(path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
