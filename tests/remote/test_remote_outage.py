"""A server's outage is the run's, not each file's: every object and listing of one server in a process shares
one store and one outage clock (``trajscale.storage.server``), so a frozen S3 server stops an ensemble once,
within ``retry_seconds`` and a try's timeout, with its own exit status and one line, no trajectory refused and
the finished ones kept for ``--resume``; and a stop signal ends a listing that waits on a frozen server."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import mpiexec
from tests.support.ensembles import tiny_ensemble

from .conftest import BUCKET
from .stores import TcpProxy

pytestmark = [pytest.mark.remote]

#: ``retry_seconds`` and a try's ``timeout`` of the runs that meet a frozen server.
RETRY_SECONDS, TIMEOUT = 4, 2
#: What the bound allows past ``retry_seconds`` and one try's timeout: a process's exit on a loaded machine.
SLACK = 3.0
#: Seconds a stop signal may take to end the process: 2 s, and 2 s more for a loaded 2-core machine.
EXIT_S = 4.0
#: Seconds any run here may take at all (a hang fails the test, not the suite).
BOUNDED = 120
#: The status of a run stopped by its server's outage.
EXIT_OUTAGE = 9
#: Members of the ensemble (``TRAJSCALE_OUTAGE_MEMBERS=60`` for a release check: each costs a loaded machine).
MEMBERS = int(os.environ.get("TRAJSCALE_OUTAGE_MEMBERS", "16"))


def _bucket(server):
    """A client of ``server``, whose bucket :data:`BUCKET` is made if missing."""
    client = server.client()
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    return client


def test_objects_of_one_server_share_its_store_and_outage_clock(s3_env):
    """Two objects of one bucket hold one :class:`~trajscale.storage.server.Server` (and so one outage clock);
    frozen, the first read gives up within ``retry_seconds`` and a try's timeout as the server's failure
    (:class:`~trajscale.errors.ServerUnreachable`), and the other object's read fails at once, unsent; a key
    missing on a live server is still that object's own failure."""
    from trajscale.errors import InputFileError, ServerUnreachable
    from trajscale.storage.location import Location
    from trajscale.storage.objects import RemoteObject

    client = _bucket(s3_env)
    for k in ("a", "b"):
        client.put_object(Bucket=BUCKET, Key=f"outage-unit/{k}.bin", Body=os.urandom(600_000))
    proxy = TcpProxy("127.0.0.1", int(s3_env.endpoint.rsplit(":", 1)[1]))
    options = {"endpoint_url": f"http://{proxy.address}", "retry_seconds": 2, "timeout": 1}
    try:
        a = RemoteObject.open(f"s3://{BUCKET}/outage-unit/a.bin", options)
        b = RemoteObject.open(f"s3://{BUCKET}/outage-unit/b.bin", options)
        assert a.server is b.server is Location(f"s3://{BUCKET}/other", options).server
        with pytest.raises(InputFileError) as missing:
            RemoteObject.open(f"s3://{BUCKET}/outage-unit/none.bin", options)
        assert not isinstance(missing.value, ServerUnreachable)
        proxy.freeze()
        t0 = time.monotonic()
        with pytest.raises(ServerUnreachable) as first:
            a.read_ranges([(300_000, 500_000)])
        t1 = time.monotonic()
        with pytest.raises(ServerUnreachable):
            b.read_ranges([(300_000, 500_000)])
        t2 = time.monotonic()
    finally:
        proxy.close()
    assert t1 - t0 < 2 + 1 + 1.5, f"the first read gave up after {t1 - t0:.1f} s"
    assert t2 - t1 < 0.5, f"the other object of the frozen server waited {t2 - t1:.1f} s more"
    said = str(first.value)
    assert said.startswith(f"s3://{BUCKET}: did not answer in 2 s") and "\n" not in said, said
    assert first.value.exit_code not in (0, 1, 2, 3, 8)


@pytest.mark.slow(seconds=8)
def test_a_request_refused_on_every_try_ends_as_the_server_even_if_a_later_one_failed_first(s3_env):
    """The outage clock starts at the earliest failing request, not at the first failure: request A's first try
    hangs on a frozen server; the server then refuses connections, and request B, begun after A, fails first.
    A's tries all fail through its whole deadline, so its verdict is the server's, not A's object's; and a key
    missing on a live server of its own stays that object's failure."""
    from trajscale.errors import InputFileError, ServerUnreachable
    from trajscale.storage.objects import RemoteObject

    client = _bucket(s3_env)
    for k in ("a", "b"):
        client.put_object(Bucket=BUCKET, Key=f"outage-race/{k}.bin", Body=os.urandom(1000))
    proxy = TcpProxy("127.0.0.1", int(s3_env.endpoint.rsplit(":", 1)[1]))
    options = {"endpoint_url": f"http://{proxy.address}", "retry_seconds": 4, "timeout": 2}
    said: dict = {}

    def open_(name):
        try:
            RemoteObject.open(f"s3://{BUCKET}/outage-race/{name}.bin", options)
        except Exception as exc:   # noqa: BLE001 - the test asserts which
            said[name] = exc

    try:
        proxy.freeze()
        a = threading.Thread(target=open_, args=("a",))
        a.start()   # A's first try is sent on a connection of its own (a new server: none pooled) and waits
        end = time.monotonic() + BOUNDED
        while proxy.connections < 1:
            assert time.monotonic() < end, "request A made no connection"
            time.sleep(0.01)
        proxy.refuse()
        open_("b")   # begun after A, refused at once: the first failure the server's clock sees
        a.join(BOUNDED)
    finally:
        proxy.close()
    assert isinstance(said.get("a"), ServerUnreachable), said
    assert str(said["a"]).startswith(f"s3://{BUCKET}: did not answer in 4 s"), said
    assert isinstance(said.get("b"), ServerUnreachable), said
    with pytest.raises(InputFileError) as missing:
        RemoteObject.open(f"s3://{BUCKET}/outage-race/none.bin", {"endpoint_url": s3_env.endpoint})
    assert not isinstance(missing.value, ServerUnreachable) and "no such object" in str(missing.value)


def _uploaded(s3_server, tmp_path, prefix: str, n: int) -> str:
    """``n`` tiny members uploaded under ``prefix``: their local topology's path."""
    catalog, _ = tiny_ensemble(tmp_path / "members", n)
    client = _bucket(s3_server)
    for i in range(n):
        client.upload_file(str(catalog.parent / f"t{i:05d}.xtc"), BUCKET, f"{prefix}/t{i:05d}.xtc")
    return str(catalog.parent / "top.pdb")


class _Run:
    """``trajscale run rmsd --ensemble`` in a subprocess, its stderr's lines kept as they come."""

    def __init__(self, args: list[str], env: dict) -> None:
        launch = [mpiexec(), "-n", "2"] if "mpi" in args else []   # (two ranks, as a user starts them)
        cmd = [*launch, sys.executable, "-m", "trajscale.cli.main", "run", "rmsd", "--select", "all", "--no-progress",
               *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(x.rstrip("\n") for x in self.proc.stderr),
                                        daemon=True)
        self._reader.start()

    def wait_for(self, ready, what: str) -> float:
        end = time.monotonic() + BOUNDED
        while not ready():
            assert self.proc.poll() is None, f"the run ended before {what}: {self.lines}"
            assert time.monotonic() < end, f"no {what} in {BOUNDED} s"
            time.sleep(0.01)
        return time.monotonic()

    def ended(self) -> float:
        try:
            self.proc.wait(timeout=BOUNDED)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"the run did not end in {BOUNDED} s: {self.lines}")
        t = time.monotonic()
        self._reader.join(10)
        return t


def _ensemble_args(prefix: str, top: str, folder, out, endpoint: str, executor: str) -> list[str]:
    workers = ["-n", "2"] if executor in ("processes", "dask") else []
    return ["--ensemble", f"s3://{BUCKET}/{prefix}/t*.xtc", "--topology", top, "--results", str(folder),
            "--round-size", "2", "--out", str(out), "--executor", executor, *workers,
            "--storage-option", f"endpoint_url={endpoint}", "--storage-option", f"retry_seconds={RETRY_SECONDS}",
            "--storage-option", f"timeout={TIMEOUT}"]


@pytest.mark.cli
@pytest.mark.slow(seconds=30)
@pytest.mark.parametrize("executor", ["serial", "processes", "dask", pytest.param("mpi", marks=pytest.mark.mpi)])
def test_a_frozen_server_stops_an_ensemble_once_and_resume_goes_on(s3_server, tmp_path, executor):
    """The server freezes once the run has saved its first trajectories: the run ends within ``retry_seconds``
    and a try's timeout (and a loaded machine's exit) of the freeze, not once per member left; with its own
    exit status and one line naming the server, the trajectories done and the folder; no trajectory refused,
    no ``--out`` written. Thawed, ``--resume`` ends with an output byte for byte that of a run never frozen."""
    from trajscale.ensemble.saved import saved_names

    prefix = f"outage-{executor}"
    top = _uploaded(s3_server, tmp_path, prefix, MEMBERS)
    proxy = TcpProxy("127.0.0.1", int(s3_server.endpoint.rsplit(":", 1)[1]))
    env = {**s3_server.subprocess_env(), "TRAJSCALE_TEST_SLOW_READ": "0.3"}   # each task's read: time to freeze
    res, out = tmp_path / "res", tmp_path / "resumed.csv"
    run = _Run(_ensemble_args(prefix, top, res, out, f"http://{proxy.address}", executor), env)
    try:
        run.wait_for(lambda: len(saved_names(res)) >= 2 if res.is_dir() else False, "two trajectories saved")
        proxy.freeze()
        frozen = time.monotonic()
        took = run.ended() - frozen
        done = len(saved_names(res))
        print(f"{executor}: ended {took:.2f} s after the freeze, {done} of {MEMBERS} trajectories done")
        assert run.proc.returncode == EXIT_OUTAGE, run.lines
        assert len(run.lines) == 1, run.lines
        line = run.lines[0]
        assert f"s3://{BUCKET}: did not answer in {RETRY_SECONDS} s" in line, line
        assert f"{done} trajectories done and kept in {res}; --resume goes on" in line, line
        assert 2 <= done < MEMBERS, line
        assert took < RETRY_SECONDS + TIMEOUT + SLACK, f"ended {took:.1f} s after the freeze: {line}"
        with open(res / "refused.csv", newline="") as fh:
            assert list(csv.DictReader(fh)) == [], "a trajectory was refused for the server's outage"
        assert not out.exists()

        proxy.thaw()
        again = _Run([*_ensemble_args(prefix, top, res, out, f"http://{proxy.address}", executor), "--resume"],
                     s3_server.subprocess_env())
        again.ended()
    finally:
        proxy.close()
    assert again.proc.returncode == 0, again.lines
    whole = tmp_path / "whole.csv"
    ref = _Run(_ensemble_args(prefix, top, tmp_path / "whole-res", whole, s3_server.endpoint, "serial"),
               s3_server.subprocess_env())
    ref.ended()
    assert ref.proc.returncode == 0, ref.lines
    assert out.read_bytes() == whole.read_bytes()
    assert len(out.read_text().splitlines()) == 1 + 2 * MEMBERS


@pytest.mark.cli
@pytest.mark.slow(seconds=8)
@pytest.mark.parametrize("executor", ["serial", "processes", "dask", pytest.param("mpi", marks=pytest.mark.mpi)])
def test_a_stop_signal_ends_a_listing_of_a_frozen_server(s3_server, tmp_path, executor):
    """SIGTERM 2 s into a glob's listing of a server that never answers (``retry_seconds=60``, a try's timeout
    of 20 s): the process ends within 2 s (asserted with 2 s more for a loaded machine), said as terminated, and
    its line names no results folder, none having been made."""
    proxy = TcpProxy("127.0.0.1", int(s3_server.endpoint.rsplit(":", 1)[1]))
    proxy.freeze()
    res = tmp_path / "res"
    args = _ensemble_args("outage-listing", str(tmp_path / "top.pdb"), res, tmp_path / "out.csv",
                          f"http://{proxy.address}", executor)
    args += ["--storage-option", "retry_seconds=60", "--storage-option", "timeout=20"]
    run = _Run(args, s3_server.subprocess_env())
    try:
        run.wait_for(lambda: proxy.connections > 0, "the listing's request")
        time.sleep(2)
        assert run.proc.poll() is None, run.lines
        sent = time.monotonic()
        run.proc.send_signal(signal.SIGTERM)
        took = run.ended() - sent
    finally:
        proxy.close()
    said = "\n".join(run.lines)
    assert took < EXIT_S, f"ended {took:.1f} s after SIGTERM: {said}"
    # (MPICH's mpiexec, signalled itself, exits 0 or the ranks' 143 as its forwarding races their exit)
    assert run.proc.returncode in ((143, 0) if executor == "mpi" else (143,)), said
    assert "terminated by signal 15" in said, said
    assert not res.exists() and str(res) not in said and "no partial output was kept" in said, said


@pytest.mark.cli
def test_a_listing_of_a_frozen_server_is_bounded_by_its_outage_clock(s3_server, tmp_path):
    """A glob's listing of a server that never answers ends within ``retry_seconds`` and a try's timeout, as the
    server's outage (its own exit status, one line), not as a bad input."""
    proxy = TcpProxy("127.0.0.1", int(s3_server.endpoint.rsplit(":", 1)[1]))
    proxy.freeze()
    run = _Run(_ensemble_args("outage-listing", str(tmp_path / "top.pdb"), tmp_path / "res", tmp_path / "out.csv",
                              f"http://{proxy.address}", "serial"), s3_server.subprocess_env())
    try:
        run.wait_for(lambda: proxy.connections > 0, "the listing's request")
        started = time.monotonic()
        took = run.ended() - started
    finally:
        proxy.close()
    assert run.proc.returncode == EXIT_OUTAGE and len(run.lines) == 1, run.lines
    assert f"s3://{BUCKET}: did not answer in {RETRY_SECONDS} s" in run.lines[0], run.lines
    assert took < RETRY_SECONDS + TIMEOUT + SLACK, f"ended {took:.1f} s after its listing began"


def test_a_request_cut_then_refused_after_another_was_answered_ends_as_the_server():
    """The clock's rule itself, without a server: request A starts; B, sent after A began, is answered; then the
    server stops: A's tries are cut, then refused, to the end of its own deadline, and nothing sent since A first
    failed is answered. The verdict is the server's, though B's answer came after A began (a whole suite's load
    ordered a stopped server's requests so)."""
    from trajscale.storage.retry import Deadline, Failure, Outage

    outage = Outage(0.3)
    a = Deadline(0.3, 1.0, outage)
    a.try_timeout()   # A's first try is sent
    b = Deadline(0.3, 1.0, outage)
    b.try_timeout()
    outage.answered(b.sent)   # B, sent after A began, answered
    a.failed(Failure("cut", "the response was cut"))
    while True:
        a.try_timeout()
        a.failed(Failure("refused", "connection refused"))
        if not a.wait():
            break
    assert a.servers()
    # the server answered a try sent after A first failed: A's failure is its own
    c = Deadline(0.3, 1.0, Outage(0.3))
    c.try_timeout()
    c.failed(Failure("server", "500"))
    d = Deadline(0.3, 1.0, c.outage)
    d.try_timeout()
    c.outage.answered(d.sent)
    while c.wait():
        c.try_timeout()
        c.failed(Failure("server", "500"))
    assert not c.servers()
