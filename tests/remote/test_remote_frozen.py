"""A server that stops answering mid-run, a stop signal while a read waits on it, and a refusal: each ends the
``trajscale run`` process in bounded time, on S3 (moto's) and https (nginx), through a
:class:`~tests.remote.stores.TcpProxy` that stops forwarding once the run has read part of the trajectory
(a ``kill -STOP`` of the server, mid-answer perhaps). The store suite (``tests.remote.stores``) holds the
same cases for one read in this process; these hold them for the command, its executors and its exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import mpiexec

from .conftest import BUCKET, TPR
from .stores import TcpProxy

pytestmark = [pytest.mark.remote, pytest.mark.cli, pytest.mark.slow]

#: ``retry_seconds`` of the runs that must give up on a frozen server.
RETRY_SECONDS = 3
#: What the issue allows beyond ``retry_seconds`` (a request's timeout cut to it, a start-up, the exit).
GIVE_UP_SLACK = 5.0
#: Seconds a stop signal or a refusal may take to end the process: 2 s, and 2 s more for a loaded 2-core machine.
EXIT_S = 4.0
#: Seconds any run here may take at all (a hang fails the test, not the suite).
BOUNDED = 120
#: Bytes of answers forwarded before the proxy freezes: past the head request's 256 kB, within the frames'.
FREEZE_AFTER = 330_000


class _Target:
    """The plain AdK store put under ``name`` on S3, GCS (fake-gcs-server), Azure (Azurite) or nginx (over
    https), reached through a proxy."""

    def __init__(self, where, name, s3_server, adk_stores, nginx, emulator=None) -> None:
        self.where, self.name, self.s3, self.nginx, self.emulator = where, name, s3_server, nginx, emulator
        self.put(open(adk_stores["plain"][0], "rb").read())
        self.port = {"s3": lambda: int(s3_server.endpoint.rsplit(":", 1)[1]), "https": lambda: nginx.https,
                     "gs": lambda: emulator.port, "az": lambda: emulator.port}[where]()

    def put(self, data: bytes) -> None:
        if self.where == "s3":
            self.s3.client().put_object(Bucket=BUCKET, Key=f"frozen/{self.name}", Body=data)
        elif self.where == "gs":
            self.emulator.put(BUCKET, f"frozen/{self.name}", data)
        elif self.where == "az":
            import obstore
            from obstore.store import AzureStore

            o = self.emulator.options
            obstore.put(AzureStore(BUCKET, config={"account_name": o["account_name"], "account_key": o["account_key"],
                                                   "endpoint": o["endpoint_url"]},
                                   client_options={"allow_http": True}), f"frozen/{self.name}", data)
        else:
            folder = self.nginx.root / "frozen"
            folder.mkdir(exist_ok=True)
            (folder / f".{self.name}.tmp").write_bytes(data)
            os.replace(folder / f".{self.name}.tmp", folder / self.name)   # a new file under the name, as published

    def url(self, proxy: TcpProxy) -> str:
        if self.where == "https":
            return self.nginx.url(f"frozen/{self.name}", https=True, port=proxy.port)
        return f"{self.where}://{BUCKET}/frozen/{self.name}"

    def options(self, proxy: TcpProxy) -> list[str]:
        if self.where == "https":
            return [f"ca_bundle={self.nginx.ca}"]
        if self.where == "s3":
            return [f"endpoint_url=http://{proxy.address}"]
        if self.where == "gs":
            return [f"endpoint_url=http://{proxy.address}", "anon=true"]
        o = self.emulator.options
        return [f"account_name={o['account_name']}", f"account_key={o['account_key']}",
                f"endpoint_url=http://{proxy.address}/{o['account_name']}"]


@pytest.fixture
def target(s3_server, adk_stores, nginx, request):
    """A maker of :class:`_Target`: ``target(where)``, under a name of the test's own."""
    name = "".join(c if c.isalnum() else "_" for c in request.node.name) + ".h5md"
    return lambda where, emulator=None: _Target(where, name, s3_server, adk_stores, nginx, emulator)


class Watched:
    """A command in a subprocess, its stderr's lines timed as they come (the outage tests' runs too)."""

    def __init__(self, cmd: list[str], env: dict, folder=None) -> None:
        self.folder = folder
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    @property
    def texts(self) -> list[str]:
        return [line for _, line in self.lines]

    def wait_for(self, ready, what: str) -> float:
        """Wait until ``ready()`` (the process still running): the time it was seen."""
        end = time.monotonic() + BOUNDED
        while not ready():
            assert self.proc.poll() is None, f"the run ended before {what}: {self.said()}"
            assert time.monotonic() < end, f"no {what} in {BOUNDED} s"
            time.sleep(0.01)
        return time.monotonic()

    def ended(self) -> float:
        """Wait for the process's end (killed after BOUNDED): the time it ended."""
        try:
            self.proc.wait(timeout=BOUNDED)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the run did not end in {BOUNDED} s: {self.said()}")
        t = time.monotonic()
        self._reader.join(10)
        return t

    def said(self) -> str:
        return "\n".join(self.texts)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def left_nothing(self) -> None:
        assert sorted(p.name for p in self.folder.iterdir()) == [], list(self.folder.iterdir())


def _run(url, options, executor, folder, env) -> Watched:
    """``trajscale run rmsd`` of a URL through a proxy, its outputs under ``folder``."""
    folder.mkdir(exist_ok=True)
    opts = [x for o in options for x in ("--storage-option", o)]
    workers = ["-n", "2"] if executor in ("processes", "dask") else []
    launch = [mpiexec(), "-n", "2"] if executor == "mpi" else []   # two ranks, as a user starts them
    return Watched([*launch, sys.executable, "-m", "trajscale.cli.main", "run", "rmsd", TPR, url, "--out",
                    str(folder / "remote.csv"), "--report", str(folder / "report.json"), "--select", "name CA",
                    "--executor", executor, *workers, "--max-block-mb", "0.6", "--no-progress", *opts], env, folder)


@pytest.mark.parametrize("where, executor", [("s3", "serial"), ("https", "processes"),
                                             ("s3", "dask"),
                                             pytest.param("https", "mpi", marks=pytest.mark.mpi)])
def test_a_server_frozen_mid_run_ends_it_within_retry_seconds(target, s3_server, tmp_path, where, executor):
    """The proxy stops forwarding once the run has read part of the frames (``max_concurrency=1``, a try's
    timeout of 1 s: requests wait their turn, each shorter than ``retry_seconds``): the run ends within
    ``retry_seconds`` (3 s) and a few seconds of the freeze, in one line ("did not answer in 3 s"), non-zero
    exit, nothing under the output's names."""
    there = target(where)
    proxy = TcpProxy("127.0.0.1", there.port)
    proxy.freeze_after(FREEZE_AFTER)
    run = _run(there.url(proxy), [*there.options(proxy), f"retry_seconds={RETRY_SECONDS}", "timeout=1",
                               "max_concurrency=1"], executor, tmp_path / "run", s3_server.subprocess_env())
    try:
        frozen = run.wait_for(lambda: proxy.frozen, "the freeze")
        took = run.ended() - frozen
    finally:
        run.kill()
        proxy.close()
    lines = run.texts
    assert run.proc.returncode not in (0, None), run.said()
    # (under MPI too: the ranks share the outage as they share a stop, and rank 0 says it, with no abort)
    assert len(lines) == 1 and f"did not answer in {RETRY_SECONDS} s" in lines[0], run.said()
    assert run.proc.returncode == 9, run.said()   # (the server's outage: its own exit status)
    assert took < RETRY_SECONDS + GIVE_UP_SLACK, f"ended {took:.1f} s after the freeze"
    run.left_nothing()


@pytest.mark.parametrize("where, executor", [("s3", "processes"), ("https", "serial"),
                                             ("https", "dask"),
                                             pytest.param("s3", "mpi", marks=pytest.mark.mpi)])
def test_a_stop_signal_ends_a_run_waiting_on_a_frozen_server(target, s3_server, tmp_path, where, executor):
    """SIGTERM while every read waits on a frozen server (``retry_seconds=60``, a try's timeout of 20 s):
    the process ends within 2 s of it (asserted with 2 s more for a loaded machine), said as terminated,
    nothing under the output's names."""
    there = target(where)
    proxy = TcpProxy("127.0.0.1", there.port)
    proxy.freeze_after(FREEZE_AFTER)
    run = _run(there.url(proxy), [*there.options(proxy), "retry_seconds=60", "timeout=20"], executor,
               tmp_path / "run", s3_server.subprocess_env())
    try:
        run.wait_for(lambda: proxy.frozen, "the freeze")
        time.sleep(0.5)   # (the reads that were under way now wait on the server)
        assert run.proc.poll() is None, run.said()
        sent = time.monotonic()
        run.proc.send_signal(signal.SIGTERM)
        took = run.ended() - sent
    finally:
        run.kill()
        proxy.close()
    # (MPICH's mpiexec, signalled itself, exits 0 or the ranks' 143 as its forwarding races their exit: the
    # ranks' own status is 143, but only the launcher's is seen here)
    assert run.proc.returncode != 0 or executor == "mpi", run.said()
    assert took < EXIT_S, f"ended {took:.1f} s after SIGTERM: {run.said()}"
    assert "terminated by signal 15" in run.said(), run.said()
    run.left_nothing()


@pytest.mark.parametrize("where", ["https"])
def test_a_refused_object_ends_the_process_at_once(target, s3_server, tmp_path, where):
    """The object is replaced while the run reads it (the proxy holds its answers meanwhile, then forwards
    again): the run is refused in one line ("replaced"), and the process exits within 2 s of that line
    (asserted with 2 s more for a loaded machine), not once the object's other requests are done."""
    there = target(where)
    proxy = TcpProxy("127.0.0.1", there.port)
    proxy.freeze_after(FREEZE_AFTER)
    other = os.urandom(7_000_000)   # another object under the same name: another size, another ETag
    run = _run(there.url(proxy), [*there.options(proxy), "retry_seconds=30", "max_concurrency=2"], "serial",
               tmp_path / "run", s3_server.subprocess_env())
    try:
        run.wait_for(lambda: proxy.frozen, "the freeze")
        there.put(other)
        proxy.thaw()
        end = run.ended()
    finally:
        run.kill()
        proxy.close()
    assert run.lines, f"the run said nothing (exit {run.proc.returncode})"
    said_at, line = run.lines[0]
    assert "replaced" in line and len(run.lines) == 1, run.said()
    assert end - said_at < EXIT_S, f"exited {end - said_at:.1f} s after its line"
    run.left_nothing()


#: Rounds of the soak below and of an ensemble's (test_remote_outage.py) (``TRAJSCALE_FROZEN_SOAK=10 pytest
#: tests/remote -k soak``); 0, its default, skips them: a release check of the bounds above on every store and
#: executor (about a minute a round), not a test for every change.
SOAK = int(os.environ.get("TRAJSCALE_FROZEN_SOAK", "0"))


@pytest.mark.parametrize("where", ["s3", "gs", "az", "https"])
def test_frozen_server_soak(target, s3_server, tmp_path, where):
    """SOAK times in a row on each store: a freeze mid-run ends the run within ``retry_seconds`` + 5 s with the
    documented line, and a SIGTERM while frozen ends it within 2 s (asserted with the loaded machine's 2 s more;
    the largest seen is printed)."""
    if not SOAK:
        pytest.skip("a release check: TRAJSCALE_FROZEN_SOAK=10 runs it")
    from .emulators import Azurite, FakeGcs, azurite_missing, gcs_emulator_missing

    emulator = None
    if where in ("gs", "az"):
        why = gcs_emulator_missing() if where == "gs" else azurite_missing()
        if why:
            pytest.skip(why)
        emulator = FakeGcs() if where == "gs" else Azurite()
        emulator.create_bucket(BUCKET) if where == "gs" else emulator.create_container(BUCKET)
    gave_up, stopped = [], []
    try:
        there = target(where, emulator)
        for k in range(SOAK):
            for stop in (False, True):
                proxy = TcpProxy("127.0.0.1", there.port)
                proxy.freeze_after(FREEZE_AFTER)
                opts = ["retry_seconds=60", "timeout=20"] if stop else \
                    [f"retry_seconds={RETRY_SECONDS}", "timeout=1", "max_concurrency=1"]
                run = _run(there.url(proxy), [*there.options(proxy), *opts], "serial", tmp_path / f"r{k}{stop}",
                           s3_server.subprocess_env())
                try:
                    frozen = run.wait_for(lambda p=proxy: p.frozen, "the freeze")
                    if stop:
                        time.sleep(0.5)
                        frozen = time.monotonic()
                        run.proc.send_signal(signal.SIGTERM)
                    took = run.ended() - frozen
                finally:
                    run.kill()
                    proxy.close()
                (stopped if stop else gave_up).append(took)
                said = run.said()
                assert run.proc.returncode not in (0, None), said
                if stop:
                    assert took < EXIT_S and "terminated by signal 15" in said, (k, took, said)
                else:
                    assert took < RETRY_SECONDS + GIVE_UP_SLACK and len(run.lines) == 1 \
                        and f"did not answer in {RETRY_SECONDS} s" in said, (k, took, said)
    finally:
        if emulator is not None:
            emulator.stop()
    print(f"{where}: {SOAK} rounds; after the freeze, ended in at most {max(gave_up):.2f} s "
          f"(retry_seconds {RETRY_SECONDS}); after SIGTERM, at most {max(stopped):.2f} s")
