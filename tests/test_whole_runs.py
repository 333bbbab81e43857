"""trajscale.whole_runs: a "first run" finds every cache empty, later runs find the caches a first run filled,
and a run's CPU seconds are the OS's accounting of the whole process."""

from __future__ import annotations

import os
import sys

import pytest

from trajscale.whole_runs import CACHE_VARIABLES, Pairs, Side

pytestmark = pytest.mark.cli   # whole_runs times whole processes

#: A child that reports whether its caches were empty and leaves a file in each.
PROBE = """
import os, sys
seen = []
for var in sys.argv[2:]:
    d = os.environ[var]
    seen.append(str(int(os.path.isdir(d) and bool(os.listdir(d)))))
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "filled"), "w").close()
with open(sys.argv[1], "a") as f:
    f.write("".join(seen) + "\\n")
"""


def probe(pairs: Pairs, out, fresh: bool) -> Side:
    return Side([sys.executable, "-c", PROBE, str(out), *CACHE_VARIABLES], str(out) + ".unused", fresh)


def test_first_runs_find_empty_caches_and_later_runs_the_filled_ones(tmp_path):
    seen = tmp_path / "seen.txt"
    with Pairs(tmp_path, "top", "traj") as pairs:
        for fresh in (True, True, False, False):
            pairs.time(probe(pairs, seen, fresh))
        assert (pairs.warm_caches / "trajscale_cache_dir" / "filled").exists()
        workdir = pairs.workdir
    # Every first run found every cache empty; the later runs found what the first one left.
    k = len(CACHE_VARIABLES)
    assert seen.read_text().split() == ["0" * k, "0" * k, "1" * k, "1" * k]
    assert not workdir.exists()   # the scratch folder goes with the Pairs


def test_only_trajscale_caches_are_redirected(tmp_path, monkeypatch):
    """The sides' environment points trajscale's cache at the benchmark's folder and sets nothing for a
    library the project no longer uses (numba's cache variable stays as the user has it: unset here)."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    env_out = tmp_path / "env.txt"
    code = ("import os, sys\nopen(sys.argv[1], 'w').write(' '.join(sorted(k for k in os.environ "
            "if k.endswith('_CACHE_DIR'))))")
    with Pairs(tmp_path, "top", "traj") as pairs:
        pairs.time(Side([sys.executable, "-c", code, str(env_out)], str(tmp_path / "none"), fresh_caches=True))
    theirs = {k for k in os.environ if k.endswith("_CACHE_DIR")}   # a user's own are passed on as they are
    assert env_out.read_text().split() == sorted(theirs | {"TRAJSCALE_CACHE_DIR"})


def test_cpu_is_the_whole_process_and_a_failure_says_which_command(tmp_path):
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    with Pairs(tmp_path, "top", "traj") as pairs:
        side = Side([sys.executable, "-c", burn], str(tmp_path / "none"))
        wall = pairs.time(side)
        assert side.times == [wall] and side.cpu[0] >= 0.29 and wall >= side.cpu[0] * 0.5
        with pytest.raises(RuntimeError, match="exit 3: .*sys.exit"):
            pairs.time(Side([sys.executable, "-c", "import sys; print('why'); sys.exit(3)"], str(tmp_path / "x")))
