"""Every Python example of the README and docs/ runs as written and gives meaningful numbers.

The examples name short files (``top.tpr``, ``traj.h5md``, ``adk.h5md``, ``train.h5``); here they
are real ones: AdK in vacuum (PSF/DCD as H5MD) for ``top.tpr``/``traj.h5md``, AdK in water made
whole (TPR, H5MD) for ``adk.*``, a packed store of NPZ samples for ``train.h5``, and a running
Dask scheduler for ``tcp://10.0.0.5:8786``.  An example that needs what no test machine has
(a SLURM cluster) is marked ``<!-- not run: why -->`` just above it.  Each runs in a process of
its own, forked from one that imported the modules the examples share (``RUNNER``: an example still
imports what it uses, in fresh globals, but no longer pays NumPy's, MDAnalysis's, xarray's and
torch's imports each), or under ``mpiexec -n 2`` when it uses MPI; the numbers it leaves are
checked against MDAnalysis.
"""

from __future__ import annotations

import functools
import os
import re
import select
import signal
import subprocess
import sys
from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms
from MDAnalysisTests import datafiles as D

from tests.conftest import ROOT, mpiexec

SRC = ROOT / "src"
TUTORIAL = ROOT / "docs" / "tutorial.md"    # its blocks build on each other: run in order below
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p != TUTORIAL)]
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->\s*$")

#: Saves what the example leaves (on MPI rank 0 only) for the checks below.
EPILOGUE = '''
import numpy as _np
try:
    from mpi4py import MPI as _MPI
    _rank = _MPI.COMM_WORLD.rank if "mpi4py.MPI" in __import__("sys").modules else 0
except ImportError:
    _rank = 0
_keep = {}
for _k, _v in list(globals().items()):
    for _f in ("rmsd", "values"):
        if isinstance(getattr(_v, _f, None), _np.ndarray):
            _keep[f"{_k}.{_f}"] = getattr(_v, _f)
if _rank == 0:
    _np.savez("left.npz", **_keep)
'''


def examples() -> list[tuple[str, str, str | None]]:
    """(where, code, why not run) of every ```python block."""
    out = []
    for path in DOCS:
        text = path.read_text()
        for m in re.finditer(r"```python\n(.*?)```", text, re.S):
            line = text[:m.start()].count("\n") + 1
            before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            why = NOT_RUN.match(before)
            out.append((f"{path.relative_to(ROOT)}:{line}", m.group(1), why.group(1) if why else None))
    return out


EXAMPLES = examples()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The examples' file names, made real."""
    from trajscale.convert.convert import convert
    from trajscale.demo import make_whole_xtc
    from trajscale.h5md.layout import Layout
    from trajscale.ml.pack import pack

    d = tmp_path_factory.mktemp("docfiles")
    vacuum = d / "vacuum.h5md"
    convert(D.PSF, [D.DCD], str(vacuum), layout=Layout.parse("frame"))
    whole = make_whole_xtc(d / "adk_whole.xtc")
    water = d / "water.h5md"
    convert(D.TPR, [whole], str(water), layout=Layout.parse("frame"))
    rng = np.random.default_rng(0)
    npz = []
    for i in range(4):
        npz.append(d / f"s{i}.npz")
        np.savez(npz[-1], x=rng.normal(size=(128, 8691)), y=rng.integers(0, 2, (128, 1)))
    train = d / "train.h5"
    pack([str(p) for p in npz], str(train))
    return {"top.tpr": D.PSF, "traj.h5md": str(vacuum), "adk.tpr": D.TPR, "adk.h5md": str(water),
            "train.h5": str(train)}


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    pytest.importorskip("distributed")
    from tests.dask_cluster import users_cluster

    with users_cluster(tmp_path_factory.mktemp("dask"), dashboard=None) as cluster:
        yield cluster.scheduler_address


#: Runs each script it is sent (a line: folder TAB script) in a child forked from this process, which
#: imported the examples' common modules once, as ``python script`` in that folder would: ``__main__``,
#: fresh globals, stdout and stderr to files there. Answers "pid PID" at the fork, then the child's exit
#: status and CPU seconds.
RUNNER = r"""
import atexit, gc, os, runpy, sys, traceback
import numpy, h5py, MDAnalysis, MDAnalysisTests.datafiles, xarray, dask.array, torch
import trajscale, trajscale.mda, trajscale.ml
for line in sys.stdin:
    cwd, script = line.rstrip("\n").split("\t")
    pid = os.fork()
    if pid == 0:
        os.chdir(cwd)
        for fd, name in ((0, os.devnull), (1, "stdout"), (2, "stderr")):
            os.dup2(os.open(name, os.O_RDWR if fd == 0 else os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.argv, code = [script], 0
        try:
            runpy.run_path(script, run_name="__main__").clear()   # its objects finalized, as at its end
            gc.collect()
        except SystemExit as e:
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        # the exit handlers (the example's pools and clients), then out without tearing down every module
        # imported here (torch's, MDAnalysis's...), which costs a second a child
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code or 0)
    print("pid", pid, flush=True)
    _, status, use = os.wait4(pid, 0)
    print(os.waitstatus_to_exitcode(status), use.ru_utime + use.ru_stime, flush=True)
"""


class Runner:
    """A :data:`RUNNER` process: :meth:`run` a script in a folder, its exit status back."""

    def __init__(self, env: dict) -> None:
        self.cpu = 0.0   # CPU seconds of the children run so far (not in this process's children's: unreaped here)
        self.proc = subprocess.Popen([sys.executable, "-c", RUNNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)

    def _line(self, timeout: float) -> str:
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            raise TimeoutError
        line = self.proc.stdout.readline()
        assert line, f"the examples' runner exited {self.proc.wait()}"
        return line

    def run(self, cwd: Path, script: str, timeout: float = 420) -> subprocess.CompletedProcess:
        """``python script`` in ``cwd``, forked: its exit status, stdout and stderr."""
        self.proc.stdin.write(f"{cwd}\t{script}\n")
        self.proc.stdin.flush()
        pid = int(self._line(timeout).split()[1])   # (the first waits for the runner's imports too)
        try:
            rc, cpu = self._line(timeout).split()
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            raise
        self.cpu += float(cpu)
        return subprocess.CompletedProcess(script, int(rc), (cwd / "stdout").read_text(), (cwd / "stderr").read_text())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def example_env(**more: str) -> dict:
    return {"PYTHONPATH": str(SRC), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
            "OMP_NUM_THREADS": "1", **more}


@pytest.fixture(scope="module")
def runner():
    r = Runner(example_env())
    yield r
    r.close()


@pytest.fixture
def forked_cpu(runner, record_property):
    """Records the CPU seconds of the test's forked examples (``cpu_forked`` in a JUnit XML report)."""
    before = runner.cpu
    yield runner
    record_property("cpu_forked", round(runner.cpu - before, 3))


def real_code(code: str, files: dict, scheduler: str | None) -> str:
    for name, path in files.items():
        code = code.replace(f'"{name}"', repr(path)).replace(f"'{name}'", repr(path))
    # a node cache in shared memory, as the docs advise, is the example's own folder here: the suite leaves
    # nothing in /dev/shm
    code = code.replace('cache_dir="/dev/shm', 'cache_dir="node-cache')
    if scheduler:
        code = code.replace("tcp://10.0.0.5:8786", scheduler)
    return code


def test_every_example_is_run_or_says_why():
    assert len(EXAMPLES) >= 8
    for where, _, why in EXAMPLES:
        assert why is None or len(why) > 10, where


def uses_mpi(code: str) -> bool:
    return "MPI" in code or 'executor="mpi"' in code


@pytest.mark.slow
@pytest.mark.cli
@pytest.mark.parametrize("where,code", [pytest.param(w, c, id=w, marks=[pytest.mark.mpi] if uses_mpi(c) else [])
                                        for w, c, why in EXAMPLES if why is None])
def test_example_runs(tmp_path, files, forked_cpu, request, where, code):
    runner = forked_cpu
    sched = request.getfixturevalue("scheduler") if "tcp://" in code else None
    script = tmp_path / "example.py"
    script.write_text(real_code(code, files, sched) + EPILOGUE)
    if uses_mpi(code):
        proc = subprocess.run([mpiexec(), "-n", "2", sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                              text=True, timeout=420, env=example_env())
    else:
        proc = runner.run(tmp_path, str(script))
    assert proc.returncode == 0, f"{where}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, where
    left = dict(np.load(tmp_path / "left.npz"))
    check_numbers(code, files, tmp_path, left)


@functools.cache   # several examples leave the RMSD of the same files
def _ca_rmsd(top: str, traj: str) -> np.ndarray:
    return rms.RMSD(mda.Universe(top, traj), select="protein and name CA").run().results.rmsd


def check_numbers(code: str, files: dict, cwd: Path, left: dict) -> None:
    """What each kind of example must leave, against MDAnalysis."""
    for key, value in left.items():
        if key.endswith(".rmsd") and "protein and name CA" in code:
            top, traj = ((files["adk.tpr"], files["adk.h5md"]) if "TPR" in code
                         else (files["top.tpr"], files["traj.h5md"]))
            ref = _ca_rmsd(top, traj)
            if value.ndim == 2:   # MDAnalysis's own RMSD object: (frame, time, RMSD) rows
                value = value[:, 2]
            np.testing.assert_allclose(value, ref[:, 2], atol=1e-4, err_msg=key)
            assert value.max() < 8.0, f"{key}: CA RMSDs up to {value.max():.1f} Å"
        if key == "r.values" and "CentreZ" in code:   # float64 means of the same float32 coordinates
            u = mda.Universe(files["top.tpr"], files["traj.h5md"])
            p = u.select_atoms("protein")
            want = [p.positions[:, 2].astype(np.float64).mean() for _ in u.trajectory]
            np.testing.assert_allclose(value, want, rtol=0, atol=1e-9)
        if key == "r.values" and "com_z" in code:
            u = mda.Universe(files["top.tpr"], files["traj.h5md"])
            p = u.select_atoms("protein")
            np.testing.assert_allclose(value, [p.positions[:, 2].mean() for _ in u.trajectory], rtol=1e-5)
    if "open_dataset" in code:
        check_arrays(code, files, cwd, left)
    if "implied_timescales.png" in code:   # the Markov-model pipeline's plot
        assert (cwd / "implied_timescales.png").stat().st_size > 5_000
    if "ParallelWriter" in code:
        import h5py

        with h5py.File(cwd / "out.h5md", "r") as f:
            shape = f["particles/all/position/value"].shape
        if "topology=universe" in code:   # MDAnalysis's trajectory, written back in atom order
            ref = mda.Universe(files["top.tpr"], files["traj.h5md"])
            u = mda.Universe(files["top.tpr"], str(cwd / "out.h5md"))
            assert shape == (ref.trajectory.n_frames, ref.atoms.n_atoms, 3)
            for a, b in zip(u.trajectory[::30], ref.trajectory[::30], strict=False):
                np.testing.assert_allclose(a.positions, b.positions, atol=1e-4)
        else:
            assert shape == (10, 1000, 3)


def check_arrays(code: str, files: dict, cwd: Path, left: dict) -> None:
    """docs/arrays.md: the mean, covariance and MSD of the CA atoms, and the file written back, against
    NumPy float64 on MDAnalysis's frames."""
    u = mda.Universe(files["top.tpr"], files["traj.h5md"])
    ca = u.select_atoms("protein and name CA")
    x = np.array([ca.positions.astype(np.float64) for _ in u.trajectory])
    if "mean.values" in left:
        np.testing.assert_allclose(left["mean.values"], x.mean(0), atol=1e-3)
    if "cov.values" in left:
        np.testing.assert_allclose(left["cov.values"], np.cov(x.reshape(len(x), -1), rowvar=False), atol=1e-8)
    if "msd.values" in left:
        want = [((x[lag:] - x[:-lag]) ** 2).sum(-1).mean() for lag in (1, 2, 4, 8, 16)]
        np.testing.assert_allclose(left["msd.values"], want, rtol=1e-12)
    if "at10.values" in left:   # sel(time=10.0): the frame MDAnalysis reads at 10 ps
        times = np.array([t.time for t in u.trajectory])
        u.trajectory[int(np.flatnonzero(np.isclose(times, 10.0, rtol=0, atol=1e-3))[0])]
        np.testing.assert_array_equal(left["at10.values"], ca.positions if "select=" in code else u.atoms.positions)
    if "to_h5md" in code:
        got = mda.Universe(files["top.tpr"], str(cwd / "centred.h5md"))
        assert got.trajectory.n_frames == len(u.trajectory[::10])
        for a, _ in zip(got.trajectory, u.trajectory[::10], strict=True):
            want = u.atoms.positions.astype(np.float64)
            np.testing.assert_allclose(a.positions, want - want.mean(0), atol=1e-3)
    assert any(k in left for k in ("mean.values", "cov.values", "msd.values", "at10.values")) or "to_h5md" in code \
        or "chunks[0]" in code


@pytest.mark.slow
@pytest.mark.cli
def test_tutorial_runs_as_shown(tmp_path, forked_cpu):
    """docs/tutorial.md from its first block to its last, in order: the files it makes, every shell
    command, its Python plot, and the numbers and lines it pastes, against MDAnalysis reading the
    same frames."""
    text = TUTORIAL.read_text()
    setup, plot = re.findall(r"```python\n(.*?)```", text, re.S)
    (tmp_path / "setup.py").write_text(setup)
    (tmp_path / "plot.py").write_text(plot)
    env = example_env(HOME=str(tmp_path))
    proc = forked_cpu.run(tmp_path, "setup.py", timeout=300)   # its two Python scripts as `python x.py` there
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = ""
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            proc = subprocess.run(line, shell=True, cwd=tmp_path, capture_output=True, text=True,
                                  timeout=300, env=env)
            assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
            assert "Traceback" not in proc.stderr, line
            printed += proc.stdout + proc.stderr
    # lines the tutorial pastes that do not depend on the machine's speed are what the commands print
    for shown in ("frames x atoms 6 x 47681  fields position", "time          500 - 900 ps, dt 100 ps",
                  "dropped 1 frame(s) whose time the next part repeats", "frames x atoms 10 x 47681",
                  "OK: identical within float32 round-off", "rmsd on processes x2: 10 frames x 214 atoms",
                  "plot:  rmsd-report.png"):
        assert shown in text and shown in printed, shown
    u = mda.Universe(str(tmp_path / "md.tpr"), str(tmp_path / "whole.xtc"))
    ref = rms.RMSD(u, select="protein and name CA").run().results.rmsd
    got = np.loadtxt(tmp_path / "rmsd.csv", delimiter=",", skiprows=1)
    assert got.shape == (10, 3)
    np.testing.assert_allclose(got[:, 1], ref[:, 1], atol=1e-3)
    np.testing.assert_allclose(got[:, 2], ref[:, 2], atol=1e-4)
    ca = u.select_atoms("protein and name CA")
    rmsf = np.loadtxt(tmp_path / "rmsf.csv", delimiter=",", skiprows=1)
    np.testing.assert_array_equal(rmsf[:, 0], ca.indices)
    for pasted in re.findall(r"^(\d+),(\d+),([\d.]+)$", text, re.M):   # the RMSD rows pasted
        np.testing.assert_allclose(float(pasted[2]), ref[int(pasted[0]), 2], atol=1e-6)
    assert (tmp_path / "rmsd-report.png").stat().st_size > 10_000
    proc = forked_cpu.run(tmp_path, "plot.py", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stdout.strip()
    assert line.startswith(f"RMSD {ref[:, 2].max():.2f} Å at most") and line in text, line
    assert (tmp_path / "md-analysis.png").stat().st_size > 10_000


def test_the_ml_page_trains_through_make_loader():
    """docs/ml.md builds every loader with make_loader, whose workers start by the rule every worker of trajscale
    starts by; where it names a plain DataLoader it says why not to train through one (torch forks its workers
    whatever this process holds)."""
    text = (ROOT / "docs" / "ml.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert code and all("DataLoader(" not in c for c in code) and any("make_loader(" in c for c in code)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for part in re.split(r"\n(?=\* )|\n\n", prose):
        if "DataLoader(" in part:
            assert "make_loader" in part and "fork" in part, part
