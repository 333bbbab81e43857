"""The Executor conformance suite: what every :class:`~trajscale.executors.base.Executor` must do.

Subclass :class:`ExecutorConformance` in a test module and give it one class method:

``new_executor(cls)``
    A new Executor.  The suite builds one per test class (a pool or a cluster started once, shared
    by its tests) and a fresh one where a test ends the workers (Ctrl-C); it closes both.

>>> class TestMyExecutor(ExecutorConformance):
...     @classmethod
...     def new_executor(cls):
...         return MyExecutor(n_workers=2)

Each test runs real analyses on AdK in vacuum (MDAnalysisTests' PSF/DCD) converted to H5MD, checked
against the serial executor bit for bit and against MDAnalysis's own RMSD.  An executor whose workers are
an MPI launcher's ranks runs the suite under ``mpiexec -n 2 python -m pytest``: the tests that would abort
the job (an error, Ctrl-C) are skipped there and belong to a test that starts ``mpiexec`` itself.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ..errors import TrajscaleError

#: Frame whose first atom the "far atom" copy of the trajectory moves away (the one failing task).
FAR_FRAME = 61
#: Where that atom goes (Å): beyond :func:`refuse_far_atoms`'s limit.
FAR = 1.0e5
SELECT = "name CA"


def refuse_far_atoms(positions: np.ndarray, box: np.ndarray) -> np.ndarray:
    """A per-frame user function that fails on a frame with an atom beyond 10,000 Å (the far-atom copy)."""
    far = np.abs(positions).max(axis=(1, 2))
    if (far > FAR / 10).any():
        raise ValueError(f"an atom lies {far.max():.0f} A from the origin")
    return far


def slow_frames(positions: np.ndarray, box: np.ndarray) -> np.ndarray:
    """A per-frame user function that takes 0.1 s per block (for Ctrl-C to land while tasks run)."""
    time.sleep(0.1)
    return positions[:, 0, 0].astype(np.float64)


#: Helpers that serve every pool of an interpreter until it exits (not any one executor's to stop).
INTERPRETER_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


def descendants(pid: int | None = None) -> set[int]:
    """Live processes descended from ``pid`` (default: this one), from Linux's /proc, less
    multiprocessing's interpreter-wide helpers (:data:`INTERPRETER_HELPERS`)."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                fields = fh.read().rpartition(")")[2].split()
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                cmdline = fh.read().decode(errors="replace")
        except OSError:
            continue
        if fields[0] != "Z" and not any(h in cmdline for h in INTERPRETER_HELPERS):
            parents[int(entry.name)] = int(fields[1])
    out, frontier = set(), {os.getpid() if pid is None else pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - out
        out |= frontier
    return out


def _far_atom_copy(src: str, dst: Path) -> str:
    """``src`` (H5MD) copied to ``dst`` with frame :data:`FAR_FRAME`'s first atom moved :data:`FAR` Å away."""
    import shutil

    import h5py

    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+") as f:
        found = []
        f.visititems(lambda name, obj: found.append(name) if name.endswith("position/value") else None)
        f[found[0]][FAR_FRAME, 0] = FAR
    return str(dst)


def build_job(analysis, topology, trajectory: str, source_options: dict):
    """The :class:`~trajscale.executors.base.Job` ``trajscale.run`` would send, prepared here."""
    from ..executors.base import Job
    from ..planning import AnalysisTopology
    from ..sources import open_source

    source = open_source(trajectory, topology)
    try:
        prep = analysis.prepare(AnalysisTopology(topology, source).atoms, source)
        config = source.get_config()
        if source.supports_mpio:
            config.update(source_options)
        return Job(analysis.get_config(), config, prep), source.n_frames
    finally:
        source.close()


def serial_result(analysis, topology, trajectory: str, n_tasks: int):
    """``analysis``'s result over ``trajectory`` on the serial executor, in ``n_tasks`` tasks: the
    reference (run in place, as under an MPI launcher, where ``trajscale.run`` refuses a serial run)."""
    from ..block import split_frames
    from ..executors.serial import SerialExecutor

    job, n = build_job(analysis, topology, trajectory, {})
    with SerialExecutor() as ex:
        got = ex.map_tasks(job, split_frames(n, n_tasks))
    return analysis.result(analysis.reduce(list(got.partials)), job.prepared)


class ExecutorConformance:
    """Tests every Executor passes; see the module docstring for the class method it needs."""

    #: Tasks the runs are cut into (more than the workers, and frames that do not divide evenly).
    n_tasks = 7

    @classmethod
    def new_executor(cls):
        raise NotImplementedError("subclasses return a new Executor")

    # ------------------------------------------------------------ fixtures

    @pytest.fixture(scope="class")
    @classmethod
    def executor(cls):
        ex = cls.new_executor()
        try:
            yield ex
        finally:
            ex.close()

    @pytest.fixture(scope="class")
    @classmethod
    def system(cls, executor, tmp_path_factory):
        """(topology, H5MD trajectory, its far-atom copy), written once per class (on the root)."""
        from MDAnalysisTests.datafiles import DCD, PSF

        from ..convert.convert import convert

        def make() -> str:
            folder = tmp_path_factory.mktemp("conformance")
            out = folder / "adk.h5md"
            convert(PSF, [DCD], str(out))
            _far_atom_copy(str(out), folder / "far.h5md")
            return str(out)

        path = make() if executor.is_root else None   # (made on the root, shared with every SPMD process)
        path = executor.broadcast(path) if executor.spmd else path
        return PSF, path, str(Path(path).with_name("far.h5md"))

    @pytest.fixture(scope="class")
    @classmethod
    def serial_rmsd(cls, system):
        from .. import RMSD

        top, traj, _ = system
        return serial_result(RMSD(select=SELECT), top, traj, cls.n_tasks)

    def _run(self, executor, analysis, trajectory: str, topology: str, **kw):
        from .. import run

        return run(analysis, topology, trajectory, executor=executor, n_tasks=self.n_tasks, **kw)

    # ------------------------------------------------------------ the tests

    def test_same_bits_as_serial(self, executor, system, serial_rmsd):
        """RMSD (per-frame rows) and RMSF (accumulated moments) give serial's bits; RMSD matches MDAnalysis."""
        from .. import RMSD, RMSF

        top, traj, _ = system
        got = self._run(executor, RMSD(select=SELECT), traj, top)
        got_f = self._run(executor, RMSF(select=SELECT), traj, top)
        if not executor.is_root:
            assert got is None and got_f is None
            return
        np.testing.assert_array_equal(got.rmsd, serial_rmsd.rmsd)
        np.testing.assert_array_equal(got.frames, np.arange(98))
        np.testing.assert_array_equal(got.times, serial_rmsd.times)
        want_f = serial_result(RMSF(select=SELECT), top, traj, self.n_tasks)
        np.testing.assert_array_equal(got_f.rmsf, want_f.rmsf)
        import MDAnalysis as mda
        from MDAnalysis.analysis import rms
        from MDAnalysisTests.datafiles import DCD

        ref = rms.RMSD(mda.Universe(top, DCD), select=SELECT).run()
        np.testing.assert_allclose(got.rmsd, ref.results.rmsd[:, 2], atol=1e-4)

    def test_error_on_one_worker_ends_the_run_with_its_message(self, executor, system):
        from ..analysis.user import PerFrame

        if executor.spmd:
            pytest.skip("an error on one rank aborts the whole MPI job: tested by starting mpiexec")
        top, _, far = system
        t0 = time.monotonic()
        with pytest.raises(TrajscaleError) as err:
            self._run(executor, PerFrame(f"{__name__}:refuse_far_atoms"), far, top)
        msg = str(err.value)
        assert f"an atom lies {FAR:.0f} A from the origin" in msg
        assert err.value.start <= FAR_FRAME < err.value.stop, msg   # the failing task's frames, named
        assert time.monotonic() - t0 < 120

    def test_ctrl_c_ends_the_run_and_leaves_no_process(self):
        from MDAnalysisTests.datafiles import DCD, PSF

        from .. import run
        from ..analysis.user import PerFrame

        ex = type(self).new_executor()
        if ex.spmd:
            ex.close()
            pytest.skip("Ctrl-C ends every rank of an MPI job: tested by starting mpiexec")
        before = descendants()
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
        try:
            # the workers up first (a pool, a cluster), for the Ctrl-C to land while tasks run
            run(PerFrame(f"{__name__}:slow_frames"), PSF, DCD, executor=ex, stop=2, n_tasks=2)
            with pytest.raises((KeyboardInterrupt, SystemExit)):
                timer.start()
                run(PerFrame(f"{__name__}:slow_frames"), PSF, DCD, executor=ex, n_tasks=98)
                time.sleep(30)   # only reached if the run ended before the Ctrl-C: it comes here
        finally:
            timer.cancel()
            ex.close()
        deadline = time.monotonic() + 60   # a loaded machine: workers may still be starting
        while (left := descendants() - before) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"processes left behind by the interrupted run: {sorted(left)}"

    def test_empty_task_list(self, executor, system):
        from .. import RMSD

        top, traj, _ = system
        analysis = RMSD(select=SELECT)
        job, _ = build_job(analysis, top, traj, executor.source_options)
        got = executor.map_tasks(job, [])
        if not executor.is_root:
            assert got is None
            return
        assert got.timings == ()
        assert len(analysis.reduce(list(got.partials))) == 0

    def test_a_job_pickle_cannot_take(self, executor, system):
        """Refused in one line where the job crosses a process boundary; run as any other job where not."""
        from ..analysis.user import PerFrame
        from ..block import FrameRange

        top, traj, _ = system
        analysis = PerFrame(f"{__name__}:refuse_far_atoms")
        job, n = build_job(analysis, top, traj, executor.source_options)
        bad = dataclasses.replace(job, prepared=dataclasses.replace(
            job.prepared, state={**job.prepared.state, "lock": threading.Lock()}))
        ranges = [FrameRange(0, n // 2), FrameRange(n // 2, n)]
        if executor.traits.pickles_job:
            with pytest.raises(TrajscaleError, match="pickle cannot take it") as err:
                got = executor.broadcast(bad) if executor.spmd else executor.map_tasks(bad, ranges)
                if isinstance(got, BaseException):   # what an SPMD root's refusal gives the other ranks
                    raise got
            assert "lock" in str(err.value)
            return
        got = executor.map_tasks(bad, ranges)
        want = executor.map_tasks(job, ranges)
        np.testing.assert_array_equal(analysis.reduce(list(got.partials)).columns["values"],
                                      analysis.reduce(list(want.partials)).columns["values"])

    def test_report_fields_filled(self, executor, system):
        from .. import RMSD

        top, traj, _ = system
        r = self._run(executor, RMSD(select=SELECT), traj, top)
        if not executor.is_root:
            return
        rep = r.report
        assert rep.executor == executor.name == executor.traits.name
        assert rep.n_workers == executor.n_workers >= 1
        assert (rep.n_frames, rep.n_atoms) == (98, 214)
        assert sorted(t.task for t in rep.tasks) == list(range(len(rep.tasks)))
        assert sum(t.stop - t.start for t in rep.tasks) == 98
        for t in rep.tasks:
            assert t.worker and t.host and t.pid > 0
            assert t.bytes_read >= (t.stop - t.start) * 214 * 12   # at least the selected atoms' floats
            assert t.t_io > 0 and t.t_compute > 0 and t.t_end >= t.t_begin
        named = {t.worker for t in rep.tasks}
        assert named <= {w.worker for w in rep.workers}
        for w in rep.workers:
            assert w.t_start >= 0
        assert rep.t_total >= rep.t_prepare > 0
        assert rep.meta.io is not None and rep.meta.io.driver in (None, "mpio", "default")
        assert rep.meta.n_tasks == len(rep.tasks)
        assert rep.process and rep.process.get("phases")
        back = type(rep).from_dict(rep.to_dict())
        assert [t.stop for t in back.tasks] == [t.stop for t in rep.tasks]


__all__ = ["ExecutorConformance", "build_job", "descendants", "refuse_far_atoms", "serial_result",
           "slow_frames"]
