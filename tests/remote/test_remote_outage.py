"""A server's outage is the run's, not each file's: every object and listing of one server in a process shares
one store and one outage clock (``trajscale.storage.server``), so a frozen S3 server stops an ensemble once,
within ``retry_seconds`` and a try's timeout, with its own exit status and one line, no trajectory refused and
the finished ones kept for ``--resume``; and a stop signal ends a listing that waits on a frozen server."""

from __future__ import annotations

import csv
import os
import signal
import sys
import threading
import time

import pytest

from tests.conftest import mpiexec
from tests.support.ensembles import tiny_ensemble

from .conftest import BUCKET
from .stores import TcpProxy
from .test_remote_frozen import BOUNDED, SOAK, Watched

pytestmark = [pytest.mark.remote]

#: ``retry_seconds`` and a try's ``timeout`` of the runs that meet a frozen server.
RETRY_SECONDS, TIMEOUT = 4, 2
#: What the bound allows past ``retry_seconds`` and one try's timeout: a process's exit on a loaded machine.
SLACK = 3.0
#: Seconds a stop signal may take to end the process: 2 s, and 2 s more for a loaded 2-core machine.
EXIT_S = 4.0
#: The status of a run stopped by its server's outage.
EXIT_OUTAGE = 9
#: Members of the ensemble (the release check's soak below runs 60: each costs a loaded machine).
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


def _run(args: list[str], env: dict) -> Watched:
    """``trajscale run rmsd --ensemble`` in a subprocess."""
    launch = [mpiexec(), "-n", "2"] if "mpi" in args else []   # (two ranks, as a user starts them)
    return Watched([*launch, sys.executable, "-m", "trajscale.cli.main", "run", "rmsd", "--select", "all",
                    "--no-progress", *args], env)


def _ensemble_args(prefix: str, top: str, folder, out, endpoint: str, executor: str) -> list[str]:
    workers = ["-n", "2"] if executor in ("processes", "dask") else []
    return ["--ensemble", f"s3://{BUCKET}/{prefix}/t*.xtc", "--topology", top, "--results", str(folder),
            "--round-size", "2", "--out", str(out), "--executor", executor, *workers,
            "--storage-option", f"endpoint_url={endpoint}", "--storage-option", f"retry_seconds={RETRY_SECONDS}",
            "--storage-option", f"timeout={TIMEOUT}"]


def _frozen(s3_server, proxy, prefix: str, top: str, res, out, executor: str, members: int) -> dict:
    """A run of the ensemble whose server ``proxy`` freezes once two trajectories are saved: what it did."""
    from trajscale.ensemble.saved import saved_names

    env = {**s3_server.subprocess_env(), "TRAJSCALE_TEST_SLOW_READ": "0.3"}   # each task's read: time to freeze
    run = _run(_ensemble_args(prefix, top, res, out, f"http://{proxy.address}", executor), env)
    try:
        run.wait_for(lambda: len(saved_names(res)) >= 2 if res.is_dir() else False, "two trajectories saved")
        proxy.freeze()
        frozen = time.monotonic()
        took = run.ended() - frozen
    finally:
        run.kill()
    with open(res / "refused.csv", newline="") as fh:
        refused = len(list(csv.DictReader(fh)))
    return {"took": took, "exit": run.proc.returncode, "lines": run.texts, "done": len(saved_names(res)),
            "refused": refused, "out": out.exists(), "members": members, "res": res}


def _stopped_once(ran: dict) -> None:
    """The frozen run ended as the server's outage, once: its own exit status and one line naming the server,
    the trajectories done and the folder, within ``retry_seconds`` and a try's timeout (and a loaded machine's
    exit) of the freeze, no trajectory refused, no ``--out`` written."""
    lines, done = ran["lines"], ran["done"]
    assert ran["exit"] == EXIT_OUTAGE and len(lines) == 1, ran
    assert f"s3://{BUCKET}: did not answer in {RETRY_SECONDS} s" in lines[0], ran
    assert f"{done} trajectories done and kept in {ran['res']}; --resume goes on" in lines[0], ran
    assert 2 <= done < ran["members"], ran
    assert ran["took"] < RETRY_SECONDS + TIMEOUT + SLACK, f"ended {ran['took']:.1f} s after the freeze: {ran}"
    assert ran["refused"] == 0, f"a trajectory was refused for the server's outage: {ran}"
    assert not ran["out"], ran


@pytest.mark.cli
@pytest.mark.slow(seconds=30)
@pytest.mark.parametrize("executor", ["serial", "processes", "dask", pytest.param("mpi", marks=pytest.mark.mpi)])
def test_a_frozen_server_stops_an_ensemble_once_and_resume_goes_on(s3_server, tmp_path, executor):
    """The server freezes once the run has saved its first trajectories: the run stops once
    (:func:`_stopped_once`), not once per member left. Thawed, ``--resume`` ends with an output byte for byte
    that of a run never frozen."""
    prefix = f"outage-{executor}"
    top = _uploaded(s3_server, tmp_path, prefix, MEMBERS)
    proxy = TcpProxy("127.0.0.1", int(s3_server.endpoint.rsplit(":", 1)[1]))
    res, out = tmp_path / "res", tmp_path / "resumed.csv"
    try:
        ran = _frozen(s3_server, proxy, prefix, top, res, out, executor, MEMBERS)
        print(f"{executor}: ended {ran['took']:.2f} s after the freeze, {ran['done']} of {MEMBERS} done")
        _stopped_once(ran)
        proxy.thaw()
        again = _run([*_ensemble_args(prefix, top, res, out, f"http://{proxy.address}", executor), "--resume"],
                     s3_server.subprocess_env())
        again.ended()
    finally:
        proxy.close()
    assert again.proc.returncode == 0, again.texts
    whole = tmp_path / "whole.csv"
    ref = _run(_ensemble_args(prefix, top, tmp_path / "whole-res", whole, s3_server.endpoint, "serial"),
               s3_server.subprocess_env())
    ref.ended()
    assert ref.proc.returncode == 0, ref.texts
    assert out.read_bytes() == whole.read_bytes()
    assert len(out.read_text().splitlines()) == 1 + 2 * MEMBERS


#: Members of the ensemble in the release check's rounds.
SOAK_MEMBERS = 60


@pytest.mark.cli
@pytest.mark.slow
@pytest.mark.parametrize("executor", ["serial", "processes", "dask", pytest.param("mpi", marks=pytest.mark.mpi)])
def test_frozen_server_soak_of_an_ensemble(s3_server, tmp_path, executor):
    """The release check's rounds (``TRAJSCALE_FROZEN_SOAK=10``, as the single runs' soak) of a 60-member
    ensemble whose server freezes: every round stops once (:func:`_stopped_once`); each round's seconds after
    the freeze, exit status and refused count are printed."""
    if not SOAK:
        pytest.skip("a release check: TRAJSCALE_FROZEN_SOAK=10 runs it")
    prefix = f"soak-{executor}"
    top = _uploaded(s3_server, tmp_path, prefix, SOAK_MEMBERS)
    rounds = []
    for k in range(SOAK):
        proxy = TcpProxy("127.0.0.1", int(s3_server.endpoint.rsplit(":", 1)[1]))
        try:
            ran = _frozen(s3_server, proxy, prefix, top, tmp_path / f"res{k}", tmp_path / f"out{k}.csv", executor,
                          SOAK_MEMBERS)
        finally:
            proxy.close()
        rounds.append(ran)
        print(f"{executor} round {k}: ended {ran['took']:.2f} s after the freeze, exit {ran['exit']}, "
              f"{ran['refused']} refused, {ran['done']} of {SOAK_MEMBERS} done", flush=True)
    for ran in rounds:
        _stopped_once(ran)
    print(f"{executor}: {SOAK} rounds of {SOAK_MEMBERS} members; ended at most "
          f"{max(r['took'] for r in rounds):.2f} s after the freeze (bound {RETRY_SECONDS + TIMEOUT + SLACK:.0f} s)")


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
    run = _run(args, s3_server.subprocess_env())
    try:
        run.wait_for(lambda: proxy.connections > 0, "the listing's request")
        time.sleep(2)
        assert run.proc.poll() is None, run.texts
        sent = time.monotonic()
        run.proc.send_signal(signal.SIGTERM)
        took = run.ended() - sent
    finally:
        proxy.close()
    said = "\n".join(run.texts)
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
    run = _run(_ensemble_args("outage-listing", str(tmp_path / "top.pdb"), tmp_path / "res", tmp_path / "out.csv",
                              f"http://{proxy.address}", "serial"), s3_server.subprocess_env())
    try:
        run.wait_for(lambda: proxy.connections > 0, "the listing's request")
        started = time.monotonic()
        took = run.ended() - started
    finally:
        proxy.close()
    assert run.proc.returncode == EXIT_OUTAGE and len(run.texts) == 1, run.texts
    assert f"s3://{BUCKET}: did not answer in {RETRY_SECONDS} s" in run.texts[0], run.texts
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
