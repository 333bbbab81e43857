"""What a worker asks the server for: the root's look at the object (its identity, chunk addresses and HDF5
metadata) travels with the job, so a worker opens the file without a request and its requests are its
frames' bytes, no more."""

from __future__ import annotations

import base64
import functools
import json

import h5py
import numpy as np
import pytest

from tests.conftest import run_cli, run_cli_here
from trajscale.storage.objects import HEAD_BYTES

from .conftest import BUCKET, TPR, upload_segments

pytestmark = pytest.mark.remote

POSITIONS = "particles/all/position/value"


def _ca() -> np.ndarray:
    """AdK's CA atoms (MDAnalysis's selection, independent of trajscale's)."""
    return _mdanalysis_ca().copy()


@functools.cache
def _mdanalysis_ca() -> np.ndarray:
    """The selection, made once per process (parsing AdK in water's TPR takes a second of CPU)."""
    import MDAnalysis as mda

    return mda.Universe(TPR).select_atoms("name CA").indices


#: A local file's CSV by the file's path, from one run per module (each executor's test compares with it).
_LOCAL_CSV: dict[str, bytes] = {}


def _local_csv(local: str, tmp_path) -> bytes:
    if local not in _LOCAL_CSV:
        here = run_cli_here("run", "rmsd", TPR, local, "--select", "name CA", "--out", str(tmp_path / "local.csv"))
        assert here.returncode == 0, here.stderr
        _LOCAL_CSV[local] = (tmp_path / "local.csv").read_bytes()
    return _LOCAL_CSV[local]


def test_a_worker_opens_the_file_without_a_request_and_fetches_only_its_frames(s3_env, adk_stores):
    from trajscale.sources import open_source, source_from_config

    local, _, _ = adk_stores["plain"]
    client = s3_env.client()
    client.upload_file(local, BUCKET, "shipped.h5md")
    url = f"s3://{BUCKET}/shipped.h5md"
    root = open_source(url)
    root.read(0, 1)   # what preparing a job reads (its reference frame)
    config = root.get_config()
    assert config == root.get_config()   # one config for the run (the serial executor adopts the root's source)
    root.close()
    json.dumps(config)   # it travels as JSON too (xarray's openers)
    shipped = sum(len(base64.b64decode(b)) for _, b in config["metadata"])
    assert 0 < shipped < 1024**2   # tens of kB: HDF5's superblock, headers, heaps, B-tree nodes, time and step

    worker = source_from_config(config)
    assert worker.remote_stats()["requests"] == 0   # opened from the shipped bytes
    ca = _ca()
    block = worker.read(2, 6, ca)
    with h5py.File(local) as f:
        pos = f[POSITIONS]
        scale = {"nm": 10.0, "Angstrom": 1.0}[pos.attrs["unit"].decode() if isinstance(pos.attrs["unit"], bytes)
                                               else str(pos.attrs["unit"])]
        assert np.array_equal(block.positions, pos[2:6][:, ca] * np.float32(scale))
        assert np.allclose(block.time, f["particles/all/position/time"][2:6])
        assert np.array_equal(block.step, f["particles/all/position/step"][2:6])
    stats = worker.remote_stats()
    # one request a frame: the CA span of each (merge_gap keeps the 530 kB between them out), nothing else
    assert stats["requests"] == 4, stats
    span = (ca.max() + 1 - ca.min()) * 12
    assert stats["bytes"] == 4 * span, (stats, span)
    worker.close()


@pytest.mark.cli
@pytest.mark.slow
def test_a_process_pools_tasks_fetch_the_bytes_they_read(s3_server, adk_stores, tmp_path):
    """processes(2) from S3: every task's fetch is its frames' CA spans (the local run's bytes read),
    the first task of each worker included (it opened the file from the job's metadata)."""
    local, url, _ = adk_stores["plain"]
    got = {}
    for where, traj in (("local", local), ("remote", url)):
        report = tmp_path / f"{where}.json"
        proc = run_cli("run", "rmsd", TPR, traj, "--select", "name CA", "--executor", "processes", "-n", "2",
                       "--tasks", "4", "--out", str(tmp_path / f"{where}.csv"), "--report", str(report),
                       env=s3_server.subprocess_env(), timeout=300)
        assert proc.returncode == 0, proc.stderr
        got[where] = json.loads(report.read_text())["tasks"]
    assert (tmp_path / "remote.csv").read_bytes() == (tmp_path / "local.csv").read_bytes()
    read_here = {t["start"]: t["bytes_read"] for t in got["local"]}
    fetched = {t["start"]: t["bytes_fetched"] for t in got["remote"]}
    assert len(fetched) == 4 and fetched == read_here, (fetched, read_here)
    assert all(t["requests"] == len(range(t["start"], t["stop"], t["stride"])) for t in got["remote"])


@pytest.mark.cli
def test_the_report_counts_the_requests_of_the_process_that_prepared_the_job(s3_server, adk_stores, tmp_path):
    """Every request the server saw is in the report: the tasks' and the preparing process's (its look at
    the object, HDF5's metadata, the chunk addresses, the reference frame), apart and in the summary."""
    from .conftest import FlakyProxy

    local, url, _ = adk_stores["plain"]
    proxy = FlakyProxy(s3_server.endpoint, failures=0)
    try:
        report = tmp_path / "report.json"
        proc = run_cli("run", "rmsd", TPR, url, "--select", "name CA", "--executor", "processes", "-n", "2",
                       "--tasks", "4", "--out", str(tmp_path / "remote.csv"), "--report", str(report),
                       "--storage-option", f"endpoint_url={proxy.endpoint}", env=s3_server.subprocess_env(),
                       timeout=300)
        seen = len(proxy.gets)
    finally:
        proxy.close()
    assert proc.returncode == 0, proc.stderr
    got = json.loads(report.read_text())
    tasks = sum(t["requests"] for t in got["tasks"])
    root = got["meta"]["fetched_prepare"]
    assert root["requests"] > 0 and tasks == 10   # (each task: its frames' CA spans, one request a frame)
    assert root["requests"] + tasks == seen, (root, tasks, proxy.gets)
    assert root["bytes"] > 0 and root["wait_s"] > 0 and root["retries"] == 0
    assert f"in {seen} requests ({root['requests']} preparing the job)" in proc.stdout


@pytest.mark.cli
def test_a_worker_opens_the_parts_of_a_segment_index_behind_a_url_from_what_the_root_looked_up(
        s3_env, adk_stores, tmp_path):
    """A segment index of H5MD parts behind URLs: the preparing process opens each part once and its identity,
    chunk addresses and HDF5 metadata travel with the segment list, so a worker's requests are its frames'."""
    from trajscale.sources import open_source, source_from_config

    local, _, _ = adk_stores["plain"]
    root = open_source(upload_segments(s3_env, local, tmp_path / "segs", "shipped-segs"))
    root.read(0, 1)
    config = root.get_config()
    root.close()
    json.dumps(config)
    assert all(seg["remote"]["chunk_index"] and seg["remote"]["metadata"] for seg in config["segments"])

    worker = source_from_config(config)
    ca = _ca()
    block = worker.read(3, 8, ca)   # frames of both parts (5 and 5)
    with h5py.File(local) as f:
        pos = f[POSITIONS]
        unit = pos.attrs["unit"]
        scale = {"nm": 10.0, "Angstrom": 1.0}[unit.decode() if isinstance(unit, bytes) else str(unit)]
        assert np.array_equal(block.positions, pos[3:8][:, ca] * np.float32(scale))
        assert np.array_equal(block.step, f["particles/all/position/step"][3:8])
    stats = worker.remote_stats()
    assert stats["requests"] == 5, stats   # one CA span a frame: no look at a part, no metadata, no B-tree
    assert stats["bytes"] == 5 * (ca.max() + 1 - ca.min()) * 12
    worker.close()


def test_the_next_block_is_fetched_while_this_one_is_mapped(s3_env, adk_stores):
    """``prefetch`` sends the next read's requests at once: the read that follows sends none of its own, takes
    the bytes fetched ahead (counted by it), and gives HDF5's numbers; the bytes it holds are in the budget."""
    import time as _time

    from trajscale.sources import open_source, source_from_config

    from .conftest import FlakyProxy

    local, _, _ = adk_stores["plain"]
    s3_env.client().upload_file(local, BUCKET, "ahead.h5md")
    proxy = FlakyProxy(s3_env.endpoint, failures=0)
    try:
        root = open_source(f"s3://{BUCKET}/ahead.h5md", storage_options={"endpoint_url": proxy.endpoint})
        config = root.get_config()
        here = open_source(local)
        ca = _ca()
        span = (ca.max() + 1 - ca.min()) * 12
        assert root.bytes_per_frame(ca) == here.bytes_per_frame(ca) + span   # the next block's bytes
        here.close()
        root.close()
        worker = source_from_config(config)
        first = worker.read(0, 2, ca)
        seen = len(proxy.gets)
        worker.prefetch(2, 7, ca)
        end = _time.monotonic() + 60
        while len(proxy.gets) < seen + 5 and _time.monotonic() < end:
            _time.sleep(0.05)
        assert len(proxy.gets) == seen + 5   # sent before the read asks: one CA span a frame
        block = worker.read(2, 7, ca)
        assert len(proxy.gets) == seen + 5   # the read sent nothing of its own
        stats = worker.remote_stats()
        worker.close()
    finally:
        proxy.close()
    assert stats["requests"] == 7 and stats["bytes"] == 7 * span, stats
    with h5py.File(local) as f:
        pos = f[POSITIONS]
        unit = pos.attrs["unit"]
        scale = {"nm": 10.0, "Angstrom": 1.0}[unit.decode() if isinstance(unit, bytes) else str(unit)]
        assert np.array_equal(first.positions, pos[0:2][:, ca] * np.float32(scale))
        assert np.array_equal(block.positions, pos[2:7][:, ca] * np.float32(scale))


@pytest.mark.cli
def test_a_serial_run_reads_ahead_across_tasks_and_each_task_counts_its_own_bytes(s3_server, adk_stores, tmp_path):
    """Serial, several tasks from S3 through a counting proxy: each task's next block is fetched while it is mapped;
    the CSV is the local file's, every request is counted once, and each task's fetch is its frames' CA spans."""
    from .conftest import FlakyProxy

    local, url, _ = adk_stores["plain"]
    proxy = FlakyProxy(s3_server.endpoint, failures=0)
    got = {}
    try:
        for where, traj in (("local", local), ("remote", url)):
            report = tmp_path / f"{where}.json"
            proc = run_cli_here("run", "rmsd", TPR, traj, "--select", "name CA", "--executor", "serial", "--tasks", "5",
                                "--out", str(tmp_path / f"{where}.csv"), "--report", str(report),
                                "--storage-option", f"endpoint_url={proxy.endpoint}", env=s3_server.subprocess_env())
            assert proc.returncode == 0, proc.stderr
            got[where] = json.loads(report.read_text())
        seen = len(proxy.gets)
    finally:
        proxy.close()
    assert (tmp_path / "remote.csv").read_bytes() == (tmp_path / "local.csv").read_bytes()
    tasks = got["remote"]["tasks"]
    assert len(tasks) >= 3   # (cut on the 3-frame chunks)
    span = (_ca().max() + 1 - _ca().min()) * 12
    # a frame's CA span is one request, unless it lies within the object's first request (its head)
    in_head = {f for f, end in _ca_span_ends(local).items() if end <= HEAD_BYTES}
    for t in tasks:
        asked = len(set(range(t["start"], t["stop"])) - in_head)
        assert t["requests"] == asked and t["bytes_fetched"] == t["requests"] * span, t
    assert sum(t["requests"] for t in tasks) + got["remote"]["meta"]["fetched_prepare"]["requests"] == seen


def _ca_span_ends(local: str) -> dict[int, int]:
    """Frame -> the byte offset where its CA atoms' span ends in the file (h5py's chunk index)."""
    ca = _ca()
    with h5py.File(local) as f:
        ds = f[POSITIONS]
        frame_bytes = ds.shape[1] * 3 * ds.dtype.itemsize
        ends = {}
        for i in range(ds.id.get_num_chunks()):
            info = ds.id.get_chunk_info(i)
            for k in range(ds.chunks[0]):
                ends[info.chunk_offset[0] + k] = (info.byte_offset + k * frame_bytes
                                                  + (ca.max() + 1) * 3 * ds.dtype.itemsize)
    return ends


def _chunk_frames(local: str) -> dict[int, int]:
    """Byte offset of each stored positions chunk -> its first frame (h5py's chunk index, not trajscale's)."""
    with h5py.File(local) as f:
        ds = f[POSITIONS]
        return {(info := ds.id.get_chunk_info(i)).byte_offset: info.chunk_offset[0]
                for i in range(ds.id.get_num_chunks())}


@pytest.mark.cli
@pytest.mark.parametrize("executor", ["processes", "threads", pytest.param("mpi", marks=pytest.mark.mpi)])
def test_a_worker_fetches_its_next_tasks_first_block_while_it_maps_the_last(s3_server, adk_stores, tmp_path,
                                                                           executor):
    """Two workers from S3 through a proxy that holds each range request 0.2 s, as a round trip: each
    task a worker runs after another (a pool's 2 workers take 10 tasks themselves, as they free up; 2
    MPI ranks hold 2 of 4 tasks each) has its frames asked for before it begins (while the task before it
    on that worker runs), not at its start, a round trip later; the CSV is the local file's."""
    from .conftest import FlakyProxy

    local, url, _ = adk_stores["frame_gzip"]   # one frame a chunk: each request is one frame's
    chunk_frame = _chunk_frames(local)
    n_tasks = 4 if executor == "mpi" else 10
    args = ["run", "rmsd", TPR, url, "--select", "name CA", "--tasks", str(n_tasks),
            "--out", str(tmp_path / "remote.csv"), "--report", str(tmp_path / "remote.json")]
    proxy = FlakyProxy(s3_server.endpoint, failures=0, hold=0.2)
    try:
        # each block is mapped 0.3 s slower: the window in which the next task's first block is asked for is
        # real on a loaded machine too (the request's thread is scheduled while the worker maps)
        env = {**s3_server.subprocess_env(), "AWS_ENDPOINT_URL": proxy.endpoint, "TRAJSCALE_TEST_SLOW_COMPUTE": "0.3"}
        if executor == "mpi":
            from tests.conftest import run_mpi

            proc = run_mpi(2, ["-m", "trajscale.cli.main", *args, "--executor", "mpi"], env=env, timeout=300)
        else:
            proc = run_cli(*args, "--executor", executor, "-n", "2", env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        arrivals = list(proxy.arrivals)
    finally:
        proxy.close()
    assert (tmp_path / "remote.csv").read_bytes() == _local_csv(local, tmp_path)
    asked: dict[int, float] = {}   # frame -> when a request holding its chunk's start first arrived
    for when, _, rng in arrivals:
        lo, hi = (int(x) for x in rng.split("=")[1].split("-"))
        for offset, frame in chunk_frame.items():
            if lo <= offset <= hi:
                asked.setdefault(frame, when)
    tasks = {t["task"]: t for t in json.loads((tmp_path / "remote.json").read_text())["tasks"]}
    assert len(tasks) == n_tasks
    on_worker: dict[str, list] = {}
    for t in sorted(tasks.values(), key=lambda t: t["t_begin"]):
        on_worker.setdefault(t["worker"], []).append(t)
    in_turn = [(a, b) for ts in on_worker.values() for a, b in zip(ts, ts[1:], strict=False)]
    assert len(in_turn) == n_tasks - len(on_worker) >= n_tasks - 2
    for first, then in in_turn:   # (handed out in runs of two tasks, a run's first task was asked for at its start)
        assert min(asked[f] for f in range(then["start"], then["stop"])) < then["t_begin"], (first, then, asked)


@pytest.mark.parametrize("store", ["gzip", "lossy"])
def test_compressed_chunks_are_fetched_ahead_whole_and_decoded_as_the_local_files(s3_env, adk_stores, store):
    """A compressed store (gzip; lossy deltas under gzip): the chunks the next read decodes are fetched ahead,
    the read sends no request of its own, and its block is the local file's."""
    import time as _time

    from trajscale.sources import open_source, source_from_config

    from .conftest import FlakyProxy

    local, _, _ = adk_stores[store]
    s3_env.client().upload_file(local, BUCKET, f"ahead-{store}.h5md")
    ca = _ca()
    here = open_source(local)
    want = here.read(2, 7, ca)
    proxy = FlakyProxy(s3_env.endpoint, failures=0)
    try:
        root = open_source(f"s3://{BUCKET}/ahead-{store}.h5md", storage_options={"endpoint_url": proxy.endpoint})
        config = root.get_config()
        root.close()
        worker = source_from_config(config)
        seen = len(proxy.gets)
        worker.prefetch(2, 7, ca)
        end = _time.monotonic() + 60
        while len(proxy.gets) == seen and _time.monotonic() < end:
            _time.sleep(0.05)
        _time.sleep(0.5)   # (every request of the batch sent by now)
        ahead = len(proxy.gets) - seen
        got = worker.read(2, 7, ca)
        after = len(proxy.gets) - seen
        worker.close()
    finally:
        proxy.close()
    assert ahead > 0 and after == ahead, (ahead, after)
    assert np.array_equal(got.positions, want.positions)
    assert np.array_equal(got.time, want.time) and np.array_equal(got.step, want.step)
    here.close()


def test_the_requests_in_flight_grow_with_the_round_trip():
    """Without ``max_concurrency``: 64 in flight up to a 25.6 ms round trip, then 2,500 a second's worth of it,
    at most 256; the shortest round trip seen counts (a server slowed by the requests themselves does not
    widen the window); a given ``max_concurrency`` stays as given."""
    from trajscale.storage.inflight import Window

    window = Window(64, grows=True)
    for seen, limit in [(0.5, 256), (0.1, 250), (0.2, 250), (0.05, 125), (0.02, 64), (0.0, 64)]:
        window.saw_round_trip(seen)
        assert window.limit == limit, (seen, window.limit)
    fixed = Window(8, grows=False)
    fixed.saw_round_trip(0.5)
    assert fixed.limit == 8


@pytest.mark.parametrize("kind", ["h5md", "xtc"])
def test_a_worker_keeps_as_many_requests_in_flight_as_the_root_found_the_round_trip_asks_for(s3_env, adk_stores,
                                                                                            kind):
    """Through a proxy that holds every range request 0.2 s: the preparing process's requests (its look at the
    object, the metadata or the frames' offsets, a frame) saw a round trip of at least 0.2 s, and a worker opened
    from its config (an H5MD store, an XTC) keeps 2,500 a second's worth of it in flight (500, so the most: 256)
    before its own first request, not 64 until its first answer comes."""
    from trajscale.sources import open_source, source_from_config

    from .conftest import XTC, FlakyProxy

    local = adk_stores["plain"][0] if kind == "h5md" else XTC
    s3_env.client().upload_file(local, BUCKET, f"window.{kind}")
    proxy = FlakyProxy(s3_env.endpoint, failures=0, hold=0.2)
    try:
        root = open_source(f"s3://{BUCKET}/window.{kind}", storage_options={"endpoint_url": proxy.endpoint})
        root.read(0, 1, _ca())
        config = root.get_config()
        root.close()
        seen = len(proxy.gets)
        worker = source_from_config(config)
        assert len(proxy.gets) == seen   # (opened without a request)
        assert config["round_trip"] >= 0.2
        assert worker.store.max_concurrency == 256   # (the object's store, as the Source reads it)
        worker.close()
    finally:
        proxy.close()


@pytest.mark.parametrize("option, most", [(None, 72), (8, 8)])
def test_a_reads_requests_go_out_max_concurrency_at_once(s3_env, adk_stores, option, most):
    """A read of 72 ranges (8 scattered atoms of 9 frames) through a proxy that holds every request 0.5 s:
    all 72 are in flight at once by default (a 0.5 s round trip asks for up to 256), ``max_concurrency``
    when given; the block is HDF5's."""
    from trajscale.sources import open_source

    from .conftest import FlakyProxy

    local, _, _ = adk_stores["plain"]
    s3_env.client().upload_file(local, BUCKET, "flight.h5md")
    atoms = np.arange(0, 47681, 6000)   # 72 kB apart: more than merge_gap, one request each
    proxy = FlakyProxy(s3_env.endpoint, failures=100_000, how="delay", delay=0.5)
    opts = {"endpoint_url": proxy.endpoint, **({} if option is None else {"max_concurrency": option})}
    try:
        src = open_source(f"s3://{BUCKET}/flight.h5md", storage_options=opts)
        src.read(0, 1)   # (what opening reads: time, step, metadata)
        proxy.flight["most"] = 0
        seen = len(proxy.gets)
        block = src.read(1, 10, atoms)   # (frames past the object's first request, whose bytes it keeps)
        src.close()
    finally:
        proxy.close()
    assert len(proxy.gets) - seen == 72
    assert proxy.flight["most"] == most
    with h5py.File(local) as f:
        pos = f[POSITIONS]
        unit = pos.attrs["unit"]
        scale = {"nm": 10.0, "Angstrom": 1.0}[unit.decode() if isinstance(unit, bytes) else str(unit)]
        assert np.array_equal(block.positions, pos[1:10][:, atoms] * np.float32(scale))


def test_a_selection_is_gathered_from_each_frames_bytes_without_a_buffer_the_width_of_its_span(s3_env, adk_stores):
    """CA atoms of 7 frames of a store behind a URL, strided too, with reused buffers (as a task reads): the
    same positions as h5py's read of the local file, and no buffer the width of the span the CA atoms cover
    (3,341 atoms) was made to gather them from (only the selection's)."""
    from trajscale.sources import open_source

    local, url, _ = adk_stores["plain"]
    ca = _ca()
    src = open_source(url)
    src.reuse_buffers = True
    try:
        with h5py.File(local, "r") as fh:
            for start, stop, stride in ((2, 9, 1), (0, 10, 3)):
                got = src.read(start, stop, ca, stride=stride).positions
                want = fh[POSITIONS][start:stop:stride][:, ca]
                np.testing.assert_array_equal(got, want)
        assert max(buf.size for buf in src._scratch.values()) <= 7 * len(ca) * 3   # (the span's: 7 x 3,341 x 3)
    finally:
        src.close()
