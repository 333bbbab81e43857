"""Storage options are a value of the thread (or task) that opens a URL, not of the process: two threads
opening objects with different options at the same time each open with their own.  Against the suite's
real S3 server; the other thread's endpoint is a port where nothing answers."""

from __future__ import annotations

import threading

import pytest

pytestmark = pytest.mark.remote


def test_two_threads_open_urls_with_their_own_options(s3_env, adk_stores):
    from trajscale.sources import open_source
    from trajscale.storage import current_options, using

    _, url, _ = adk_stores["plain"]
    mine = {"endpoint_url": s3_env.endpoint, "retry_seconds": 2, "timeout": 2}
    theirs = {"endpoint_url": "http://127.0.0.1:9", "retry_seconds": 2, "timeout": 2}
    inside, other_inside, done = threading.Event(), threading.Event(), threading.Event()
    got: dict = {}

    def opener() -> None:   # enters its options first, opens while the other thread is inside its own
        try:
            with using(mine):
                inside.set()
                assert other_inside.wait(30)
                got["seen"] = current_options()
                with open_source(url) as src:
                    got["frames"] = src.n_frames
        except Exception as exc:   # noqa: BLE001 - the test reads it
            got["error"] = exc
        finally:
            done.set()

    def other() -> None:
        assert inside.wait(30)
        with using(theirs):
            other_inside.set()
            got["other_seen"] = current_options()
            assert done.wait(60)

    threads = [threading.Thread(target=opener), threading.Thread(target=other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert "error" not in got, got.get("error")
    assert got["seen"]["endpoint_url"] == s3_env.endpoint and got["other_seen"]["endpoint_url"].endswith(":9")
    assert got["frames"] == 10
    assert "endpoint_url" not in current_options()   # neither thread's options outlive its block


def test_a_parameter_wins_over_the_process_options(s3_env, adk_stores):
    """``open_source(..., storage_options=...)`` over the command line's process-wide options."""
    from trajscale.sources import open_source
    from trajscale.storage import current_options, set_options

    _, url, _ = adk_stores["plain"]
    set_options({"endpoint_url": "http://127.0.0.1:9", "retry_seconds": 2})
    try:
        with open_source(url, storage_options={"endpoint_url": s3_env.endpoint}) as src:
            assert src.n_frames == 10
        assert current_options()["endpoint_url"].endswith(":9")
    finally:
        set_options(None)


@pytest.mark.cli
def test_rechunk_takes_storage_options(s3_server, adk_stores, tmp_path):
    """``trajscale rechunk`` of a URL whose endpoint only ``--storage-option`` names (no AWS_ENDPOINT_URL), as
    every command that reads a URL takes it: the output holds the local file's positions, read by h5py."""
    import h5py
    import numpy as np

    from tests.conftest import run_cli_here

    local, url, _ = adk_stores["plain"]
    env = {k: v for k, v in s3_server.subprocess_env().items() if not k.startswith("AWS_ENDPOINT_URL")}
    out = tmp_path / "rechunked.h5md"
    proc = run_cli_here("rechunk", url, "-o", str(out), "--chunks", "2", "--no-progress", "--storage-option",
                        f"endpoint_url={s3_server.endpoint}", "--storage-option", "retry_seconds=5", env=env)
    assert proc.returncode == 0, proc.stderr
    with h5py.File(local, "r") as a, h5py.File(out, "r") as b:
        group = next(iter(a["particles"]))
        expected = a[f"particles/{group}/position/value"][()]
        got = b[f"particles/{group}/position/value"]
        assert got.chunks[0] == 2
        np.testing.assert_array_equal(got[()], expected)
