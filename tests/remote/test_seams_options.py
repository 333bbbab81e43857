"""Storage options are a value of the location that is opened, not of the thread or process: two threads
opening the same object with different options at the same time each open with their own.  Against the suite's
real S3 server; the other thread's endpoint is a port where nothing answers."""

from __future__ import annotations

import threading

import pytest

pytestmark = pytest.mark.remote


def test_two_threads_open_urls_with_their_own_options(s3_env, adk_stores):
    from trajscale.errors import TrajscaleError
    from trajscale.sources import open_source
    from trajscale.storage import process_options

    _, url, _ = adk_stores["plain"]
    mine = {"endpoint_url": s3_env.endpoint, "retry_seconds": 2, "timeout": 2}
    theirs = {"endpoint_url": "http://127.0.0.1:9", "retry_seconds": 2, "timeout": 2}
    both = threading.Barrier(2)
    got: dict = {}

    def opener(name: str, options: dict) -> None:   # both open at once, each with its own options
        try:
            both.wait(30)
            with open_source(url, storage_options=options) as src:
                got[name] = (src.n_frames, src.get_config()["storage_options"]["endpoint_url"])
        except TrajscaleError as exc:
            got[name] = exc

    threads = [threading.Thread(target=opener, args=("mine", mine)),
               threading.Thread(target=opener, args=("theirs", theirs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert got["mine"] == (10, s3_env.endpoint)
    assert isinstance(got["theirs"], TrajscaleError) and "127.0.0.1:9" in str(got["theirs"])
    assert "endpoint_url" not in process_options()   # neither thread's options became the process's


def test_a_parameter_wins_over_the_process_options(s3_env, adk_stores):
    """``open_source(..., storage_options=...)`` over the command line's process-wide options."""
    from trajscale.sources import open_source
    from trajscale.storage import process_options, set_options

    _, url, _ = adk_stores["plain"]
    set_options({"endpoint_url": "http://127.0.0.1:9", "retry_seconds": 2})
    try:
        with open_source(url, storage_options={"endpoint_url": s3_env.endpoint}) as src:
            assert src.n_frames == 10
        assert process_options()["endpoint_url"].endswith(":9")
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
