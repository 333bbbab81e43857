"""The README's ``@ts.per_frame`` example runs as written: in a module, in a script (no ``__main__``
guard) and in a notebook, on serial, processes, Dask and MPI, with equal results.

The reference is MDAnalysis: the mean z of the protein's atoms in every frame.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest

from tests.conftest import run_mpi

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = Path(__file__).resolve().parents[2]

#: The README's example, verbatim but for the files and executors.
EXAMPLE = '''
import trajscale as ts

@ts.per_frame
def com_z(positions, box):              # (F, N, 3) float32 Å, (F, 6) -> one value per frame
    return positions[..., 2].mean(axis=1)
'''


def run_all(executors: list[str], top: str, traj: str, out: str, fn: str = "com_z") -> str:
    lines = ["results = {}"]
    for ex in executors:
        lines.append(f"r = ts.run(ts.PerFrame({fn}, select='protein'), {top!r}, {traj!r}, executor={ex!r}, "
                     "n_workers=2)")
        lines.append(f"if r is not None: results[{ex!r}] = r.values")
    lines.append(f"if results: import numpy as np; np.savez({out!r}, **results)")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def reference(adk_vacuum):
    u = mda.Universe(*adk_vacuum)
    p = u.select_atoms("protein")
    return np.array([p.positions[:, 2].mean() for _ in u.trajectory])


def check(out: Path, executors: list[str], reference) -> None:
    got = np.load(out)
    assert sorted(got.files) == sorted(executors)
    for ex in executors:
        np.testing.assert_allclose(got[ex], reference, rtol=1e-5, err_msg=ex)
        assert np.array_equal(got[ex], got[executors[0]]), ex   # the same bits everywhere


def python(script: Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": f"{SRC}:{cwd}", "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    return subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


EXECUTORS = ["serial", "processes", "dask"]


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_in_a_script_without_main_guard(tmp_path, adk_vacuum, adk_vacuum_h5md, reference):
    out = tmp_path / "script.npz"
    script = tmp_path / "analyse.py"
    script.write_text(EXAMPLE + run_all(EXECUTORS, adk_vacuum[0], adk_vacuum_h5md, str(out)))
    proc = python(script, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    check(out, EXECUTORS, reference)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_in_a_module(tmp_path, adk_vacuum, adk_vacuum_h5md, reference):
    """Decorated in a module: importing it once failed ("partially initialized module ... circular import")."""
    (tmp_path / "my_functions.py").write_text(EXAMPLE)
    out = tmp_path / "module.npz"
    script = tmp_path / "analyse.py"
    script.write_text("import trajscale as ts\nfrom my_functions import com_z\n"
                      + run_all(EXECUTORS, adk_vacuum[0], adk_vacuum_h5md, str(out)))
    proc = python(script, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check(out, EXECUTORS, reference)


@pytest.mark.mpi
@pytest.mark.parametrize("where", ["script", "module"])
def test_under_mpi(tmp_path, adk_vacuum, adk_vacuum_h5md, reference, where):
    pytest.importorskip("mpi4py")
    out = tmp_path / "mpi.npz"
    (tmp_path / "my_functions.py").write_text(EXAMPLE)
    head = EXAMPLE if where == "script" else "import trajscale as ts\nfrom my_functions import com_z\n"
    script = tmp_path / "analyse.py"
    script.write_text(head + run_all(["mpi"], adk_vacuum[0], adk_vacuum_h5md, str(out)))
    proc = run_mpi(2, [str(script)], cwd=tmp_path, env={"PYTHONPATH": f"{SRC}:{tmp_path}"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    check(out, ["mpi"], reference)


@pytest.mark.slow
@pytest.mark.cli
def test_in_a_notebook(tmp_path, adk_vacuum, adk_vacuum_h5md, reference):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    out = tmp_path / "notebook.npz"
    cells = [f"import sys; sys.path.insert(0, {str(SRC)!r})", textwrap.dedent(EXAMPLE),
             run_all(EXECUTORS, adk_vacuum[0], adk_vacuum_h5md, str(out))]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    check(out, EXECUTORS, reference)


@pytest.mark.cli
@pytest.mark.slow
def test_mda_dask_backend_in_a_script_without_main_guard(tmp_path, adk_vacuum):
    """trajscale.mda.DaskBackend() in a script with no __main__ guard works as trajscale.run does."""
    pytest.importorskip("distributed")
    out = tmp_path / "rmsd.npy"
    script = tmp_path / "mda_dask.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np
        import MDAnalysis as mda
        from MDAnalysis.analysis import rms
        import trajscale.mda
        u = mda.Universe({adk_vacuum[0]!r}, {adk_vacuum[1]!r})
        r = rms.RMSD(u, select="name CA").run(backend=trajscale.mda.DaskBackend(n_workers=2),
                                              unsupported_backend=True)
        np.save({str(out)!r}, r.results.rmsd)
    """))
    proc = python(script, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ref = rms.RMSD(mda.Universe(*adk_vacuum), select="name CA").run().results.rmsd
    np.testing.assert_allclose(np.load(out), ref, atol=1e-6)


from MDAnalysis.analysis import rms  # noqa: E402
