"""The default executor on a trajectory behind a URL: ``auto`` weighs the analysis's declared work, and
the pool it picks after preparing the job starts its workers from a forkserver, never by fork from a
process whose URL client has started its runtime (a forked child's client crashed with SIGSEGV from S3
and hung for ever from http).  The runs end in bounded time with the local run's CSV, against the
suite's real S3 server (moto) and its objects served over plain http."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

from .conftest import TPR

pytestmark = pytest.mark.remote

#: An RDF of every atom with every atom to 15 Å over the first 7 of the 10 frames: ~10^8 pairs a frame within
#: the cut-off, as the analysis declares, so ``auto`` picks a pool even for 7 frames (their declared compute,
#: ~3.7 s, saves more on 2 workers than a forkserver's start costs; each frame computes for 1-2 s here).
OO = ["--select1", "all", "--select2", "all", "--nbins", "30", "--stop", "7"]


def _rdf(server, tmp_path, name: str, traj: str, *extra: str):
    out, report = tmp_path / f"{name}.csv", tmp_path / f"{name}.json"
    proc = run_cli("run", "rdf", TPR, traj, *OO, "--out", str(out), "--report", str(report), *extra,
                   timeout=120, env=server.subprocess_env())
    return proc, out, report


@pytest.fixture(scope="module")
def local_rdf(s3_server, adk_stores, tmp_path_factory) -> bytes:
    """The reference: the same RDF of the local file, serially (one run for both schemes' tests)."""
    here, here_out, _ = _rdf(s3_server, tmp_path_factory.mktemp("local"), "local", adk_stores["plain"][0],
                             "--executor", "serial")
    assert here.returncode == 0, here.stderr
    return here_out.read_bytes()


@pytest.mark.cli
@pytest.mark.slow(seconds=30)
@pytest.mark.parametrize("scheme", ["s3", "http"])
def test_default_executor_rdf_from_a_url_equals_the_local_run(s3_server, adk_stores, local_rdf, tmp_path, scheme):
    _, s3_url, http_url = adk_stores["plain"]
    proc, out, report = _rdf(s3_server, tmp_path, scheme, s3_url if scheme == "s3" else http_url, "-n", "2")
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == local_rdf
    d = json.loads(report.read_text())
    choice = d["meta"]["executor_choice"]
    # the analysis's pairs make the work, not its 10 frames; the bytes come over the network, so only the
    # compute counts; and the pool, started after the job was prepared, did not fork
    assert d["executor"] == "processes" and choice["chosen"] == "processes", choice
    assert "of compute; reading over the network is not shared by workers" in choice["why"], choice
    assert "(forkserver)" in choice["why"] or "(spawn)" in choice["why"], choice


@pytest.mark.cli
def test_a_reading_bound_run_from_a_url_stays_serial(s3_server, adk_stores, tmp_path):
    """docs/remote.md's rule: a run whose work is reading (a CA RMSD) gets nothing from more processes
    reading a URL, so ``auto`` runs it serially, and says why."""
    local, url, _ = adk_stores["plain"]
    report = tmp_path / "r.json"
    proc = run_cli("run", "rmsd", TPR, url, "--select", "name CA", "-n", "2", "--report", str(report),
                   timeout=240, env=s3_server.subprocess_env())
    assert proc.returncode == 0, proc.stderr
    d = json.loads(report.read_text())
    assert d["executor"] == "serial", d["meta"]["executor_choice"]
    assert "reading over the network is not shared by workers" in d["meta"]["executor_choice"]["why"]


@pytest.mark.cli
@pytest.mark.slow(seconds=10)
def test_sigterm_ends_the_default_executors_run_from_a_url(s3_server, adk_stores, tmp_path):
    """From http (where a forked worker hung for ever in its first request, and the parent after SIGTERM in
    its pool's join): SIGTERM during the tasks ends the run in seconds, exit 143, one line, no worker left.
    Each block's compute is stretched by 1 s (TRAJSCALE_TEST_SLOW_COMPUTE) so the tasks outlast the test's
    look on a loaded machine."""
    import signal

    from tests.executors.test_seams_stop import stop_mid_run

    _, _, http = adk_stores["plain"]
    env = {**s3_server.subprocess_env(), "TRAJSCALE_TEST_SLOW_COMPUTE": "1"}
    proc, seconds, left = stop_mid_run(tmp_path, TPR, http, "-n", "2", env=env)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-3000:]
    assert "executor auto: processes" in proc.stderr or " tasks on processes" in proc.stderr, proc.stderr[-3000:]
    assert seconds < 6, f"the run took {seconds:.1f} s to end after SIGTERM"
    assert not left, f"processes {left} outlived the run"
    said = [ln for ln in proc.stderr.splitlines() if "terminated" in ln]
    assert said == ["trajscale run: terminated by signal 15; no partial output was kept"], proc.stderr[-3000:]


def test_a_url_clients_runtime_is_not_forked_with(s3_env, adk_stores):
    """Once this process has made a request (obstore's runtime runs threads Python does not count), no pool
    forks from it: a forked child's client crashed (S3) or hung (http)."""
    from trajscale.errors import ConfigError
    from trajscale.pools import choose_start_method, holds_unforkable
    from trajscale.sources import open_source

    _, url, _ = adk_stores["plain"]
    with open_source(url) as src:
        assert src.n_frames == 10
    assert "a URL client's runtime" in holds_unforkable()   # (a fixture's Universe may hold an HDF5 file too)
    assert choose_start_method() != "fork"
    with pytest.raises(ConfigError, match="^start_method='fork' refused: "):   # asked for, it is refused
        choose_start_method("fork")
