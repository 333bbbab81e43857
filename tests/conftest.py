"""Shared fixtures: real MDAnalysisTests systems and small H5MD files made from them."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

warnings.filterwarnings("ignore", module="MDAnalysis")

from MDAnalysisTests import datafiles as D  # noqa: E402 - after the filter: importing it warns

ROOT = Path(__file__).resolve().parents[1]

#: Markers by how a test runs, enforced (tests/tiers.py).
pytest_plugins = ["tests.tiers", "tests.alone", "pytester"]


def pytest_configure(config) -> None:
    # A shell ignores SIGINT in what it starts in the background (`make test &`, a CI runner's script),
    # and every process inherits that, Python included. The Ctrl-C tests test a terminal's Ctrl-C: the
    # suite, its workers and what they start take SIGINT as from a terminal.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not hasattr(config, "workerinput"):   # once, before any xdist worker starts
        _offsets_of_the_test_data()
        _idle_mpi_ranks_yield()
        _test_modules_rewritten_once(config)


#: What trajscale makes in shared memory and in the temporary folder (pools' folders, a node cache's copies in
#: /dev/shm as the docs advise, named ``NAME-<16 hex digits>``; Dask workers' scratch, whose default is the
#: temporary folder's): the suite leaves none of it behind. The node cache's own folder in the temporary folder
#: (``trajscale-cache-UID``) is a cache, kept for the next run.
_MADE = {"/dev/shm": re.compile(r"^\.?trajscale-|-[0-9a-f]{16}(\.[^/]*)?$"),
         "tmp": re.compile(r"^\.?trajscale-|^dask-scratch-space$")}
#: Kept: the suite's own caches (made before it runs), and the lock that lets one test SLURM serve every session
#: on the machine (tests/slurm/cluster.py: a flock's file is never removed, or two sessions could lock two files)
_KEPT = re.compile(r"^trajscale-cache-\d+$|^trajscale-tests-|^trajscale-slurm\.lock$")
_OWNER = re.compile(r"^\.?trajscale-[a-z]+-(\d+)-")   # (a folder of a process: PREFIX<pid>-...)


def trajscale_made() -> set[str]:
    """The entries trajscale made in /dev/shm and the temporary folder, less those of processes that run now
    (another suite's, or a run of the user's, on this machine)."""
    import tempfile

    from trajscale.util import pid_alive

    out = set()
    for folder, pattern in _MADE.items():
        folder = tempfile.gettempdir() if folder == "tmp" else folder
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for n in names:
            owner = _OWNER.match(n)
            if pattern.search(n) and not _KEPT.match(n) and not (owner and pid_alive(int(owner.group(1)))
                                                                and int(owner.group(1)) != os.getpid()):
                out.add(os.path.join(folder, n))
    return out


_before: set[str] = set()


def _checks_leftovers(config) -> bool:
    """Whether this session checks what it leaves: the suite's controller only, not its xdist workers nor a test
    run alone in a pytest of its own (whose listing would hold what the suite's other tests make meanwhile)."""
    from tests.alone import ALONE

    return not hasattr(config, "workerinput") and not os.environ.get(ALONE)


def pytest_sessionstart(session) -> None:
    if _checks_leftovers(session.config):
        _before.update(trajscale_made())


@pytest.hookimpl(trylast=True)   # (after xdist's, which ends the workers)
def pytest_sessionfinish(session, exitstatus) -> None:
    """The session leaves nothing of trajscale's in /dev/shm or the temporary folder: a test that does fails it."""
    if not _checks_leftovers(session.config):
        return
    import time

    left, end = trajscale_made() - _before, time.monotonic() + 10
    while left and time.monotonic() < end:   # (workers that end remove theirs as they exit, maybe after this)
        time.sleep(0.2)
        left = trajscale_made() - _before
    left = sorted(left)
    if left:
        session.config._trajscale_left = left
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    left = getattr(terminalreporter.config, "_trajscale_left", None)
    if left:
        terminalreporter.write_line(f"FAILED: the suite left {len(left)} of trajscale's entries in /dev/shm or the "
                                    f"temporary folder: {', '.join(left[:10])}", red=True)


def _test_modules_rewritten_once(config) -> None:
    """pytest's assertion-rewritten code of every test module cached (``__pycache__/*-pytest-*.pyc``) before
    the xdist workers start, the files shared out between this machine's cores.

    Every worker collects every module, so on a fresh checkout each worker rewrote all of them (about 8 s
    of CPU a worker), at the same moment as the others, before any cache was written. Best effort: with
    bytecode writing off, without workers, or with a pytest whose internals differ, the workers rewrite
    as before."""
    if sys.dont_write_bytecode or not config.getoption("numprocesses", None):
        return
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
            try_makedirs,
        )

        state = config.stash[assertstate_key]
    except (ImportError, KeyError):
        return

    def pyc(fn: Path) -> Path:
        return get_cache_dir(fn) / (fn.name[:-3] + PYC_TAIL)

    todo = [fn for fn in sorted((ROOT / "tests").rglob("test_*.py"))
            if _read_pyc(fn, pyc(fn), state.trace) is None and try_makedirs(get_cache_dir(fn))]

    def rewrite(files: list[Path]) -> None:
        for fn in files:
            with contextlib.suppress(Exception):   # (a module that does not compile fails in its collection)
                source_hash, co = _rewrite_test(fn, config)
                _write_pyc(state, co, source_hash, pyc(fn))   # atomic: whole or absent

    n = min(len(os.sched_getaffinity(0)), len(todo))
    children = []
    for k in range(1, n):
        pid = os.fork()
        if pid == 0:   # a share of the files; out without this process's exit handlers
            try:
                rewrite(todo[k::n])
            finally:
                os._exit(0)
        children.append(pid)
    rewrite(todo[0::n] if n else [])
    for pid in children:
        os.waitpid(pid, 0)


def _idle_mpi_ranks_yield() -> None:
    """Preload tests/mpi_yield.c into every process the suite starts (its workers, and so what they start):
    an MPI rank waiting for a message gives its core to the rank it waits for and to the other tests.

    MPICH 4.0's ch4 device polls without yielding, and the suite runs up to 16 ranks on 2 cores: the shim
    took 8 ranks writing AdK from 21 s to 2.5 s. It is built once per content (about 0.1 s); without a C
    compiler the ranks poll as before."""
    import hashlib
    import tempfile

    source = ROOT / "tests" / "mpi_yield.c"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    lib = Path(tempfile.gettempdir()) / f"trajscale-tests-mpi-yield-{digest}.so"
    if not lib.exists():
        part = lib.with_name(f"{lib.name}.{os.getpid()}")
        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if cc is None or subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(part), str(source), "-ldl"],
                                        capture_output=True, check=False).returncode:
            return
        os.replace(part, lib)   # whole or absent: suites started at once each build their own part
    os.environ["LD_PRELOAD"] = " ".join(filter(None, [os.environ.get("LD_PRELOAD"), str(lib)]))


def _offsets_of_the_test_data() -> None:
    """MDAnalysis's frame-offset caches of MDAnalysisTests' XTC/TRR files, made before the tests run.

    Every MDAnalysis reader of such a file reads or writes ``.NAME_offsets.npz`` beside it, in the
    installed package; in a fresh environment the suite's first readers (several workers, MPI ranks)
    would write it at once, and a reader once found it half-written (``EOFError``)."""
    from MDAnalysis.coordinates.TRR import TRRReader
    from MDAnalysis.coordinates.XTC import XTCReader

    for path in (D.XTC, D.TRR, D.COORDINATES_XTC, D.COORDINATES_TRR):
        with contextlib.suppress(Exception):
            (XTCReader if path.endswith(".xtc") else TRRReader)(path).close()


@pytest.fixture(scope="session")
def adk_vacuum():
    """AdK in vacuum: PSF topology + DCD (98 frames, 3341 atoms)."""
    return D.PSF, D.DCD


@pytest.fixture(scope="session")
def adk_water():
    """AdK in water: TPR/GRO topology + XTC/TRR (10 frames, 47,681 atoms)."""
    return {"tpr": D.TPR, "gro": D.GRO, "xtc": D.XTC, "trr": D.TRR}


def shared_demo_file(tmp_path_factory, n_frames: int) -> tuple[str, str]:
    """(topology, H5MD) of the ``n_frames``-frame demo file (:func:`trajscale.demo.build_demo_file`), built
    once for the test run in the folder the xdist workers' temporary folders share (a worker that needs a
    file another is building waits on its lock), every size from one whole-protein XTC made once for the
    run (MDAnalysis making the protein whole costs about 4 s of CPU). The tests only read them."""
    import fcntl

    from trajscale.demo import build_demo_file

    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "demo-files"
    folder.mkdir(exist_ok=True)

    def build() -> tuple[str, str]:
        with open(folder / f".{n_frames}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return build_demo_file(folder, n_frames, progress=False)   # at once where it is built already

    with open(folder / ".whole.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "adk_whole.xtc").exists():   # the first build makes it (whole or absent)
            return build()
    return build()


@pytest.fixture(scope="session")
def adk_vacuum_h5md(tmp_path_factory, adk_vacuum):
    """The PSF/DCD trajectory converted to H5MD with trajscale (frame chunks)."""
    from trajscale.convert.convert import convert
    from trajscale.h5md.layout import Layout

    out = tmp_path_factory.mktemp("h5") / "adk_vacuum.h5md"
    convert(adk_vacuum[0], [adk_vacuum[1]], str(out), layout=Layout.parse("frame"))
    return str(out)


def run_cli_here(*args: str, cwd: str | os.PathLike | None = None,
                 env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the ``trajscale`` CLI's ``main`` in this process, as :func:`run_cli` runs it in another: its exit
    status and what it printed, as a CompletedProcess.

    For a test of what a command says, writes and refuses, not of the process itself (a signal, its
    workers, its imports): each process the suite starts costs about a second of CPU, most of it
    MDAnalysis's import. What ``main`` sets up for its process (signal handlers, logging, warnings
    filters, environment variables, the collector's thresholds, the unraisable hook) is put back after
    it. An exception ``main`` lets out is raised here (the process would print its traceback and exit 1).
    ``cwd``: the directory it runs in (this process's is put back too); ``env``: its whole environment, as
    :func:`run_cli`'s ``env`` (this process's is put back). What a new process would not have kept, the
    objects' first bytes that :mod:`trajscale.storage.objects` holds a while, is forgotten first; the storage
    options a command keeps for its process's life are put back after it.
    """
    import gc
    import io
    import logging

    from trajscale.cli import main as cli

    names = ("trajscale", "MDAnalysis", *cli.LIBRARIES)
    root = logging.getLogger()
    handlers, level, levels = list(root.handlers), root.level, {n: logging.getLogger(n).level for n in names}
    handlers_of_signals = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    environ, thresholds, hook = dict(os.environ), gc.get_threshold(), sys.unraisablehook
    out, err = io.StringIO(), io.StringIO()
    objects = sys.modules.get("trajscale.storage.objects")
    if objects is not None:
        objects.forget_heads()
    from trajscale import storage

    options = storage.process_options()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                contextlib.chdir(cwd or os.getcwd()):
            try:
                code = cli.main([os.fspath(a) for a in args])   # as a command line has them: str
            except SystemExit as exc:   # argparse's refusals (2), a command's own exit
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
    finally:
        for s, h in handlers_of_signals.items():
            signal.signal(s, h)
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in handlers:
            root.addHandler(h)
        root.setLevel(level)
        for n, lv in levels.items():
            logging.getLogger(n).setLevel(lv)
        os.environ.clear()
        os.environ.update(environ)
        gc.set_threshold(*thresholds)
        sys.unraisablehook = hook
        storage.set_options(options)   # the command line's --storage-option, set for the process's life
    return subprocess.CompletedProcess(["trajscale", *map(os.fspath, args)], code, out.getvalue(), err.getvalue())


def mpiexec() -> str:
    """The system mpiexec of the MPI that h5py and mpi4py were built against."""
    exe = shutil.which("mpiexec.mpich") or shutil.which("mpiexec")
    if exe is None:
        pytest.skip("no mpiexec on PATH")
    return exe


def run_mpi(n: int, args: list[str], timeout: float = 180, **kw) -> subprocess.CompletedProcess:
    """Run ``python args...`` under ``mpiexec -n n`` (oversubscribed on small machines)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.update(kw.pop("env", {}))
    cmd = [mpiexec(), "-n", str(n), sys.executable, *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout, env=env, **kw)


def kill_and_reap(proc: subprocess.Popen, pids: list[int], timeout: float = 60) -> None:
    """SIGKILL the processes a test started, by their own pids (MPI ranks, a producer), then reap ``proc``
    (their launcher, or the process itself), killing it too if it does not end within ``timeout`` s."""
    import signal

    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_cli(*args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """Run the ``trajscale`` CLI in a subprocess."""
    cmd = [sys.executable, "-m", "trajscale.cli.main", *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout, **kw)
