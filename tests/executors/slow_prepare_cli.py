"""``trajscale``'s CLI with a slow preparation on rank 0 alone, for the tests of a stop signal while it prepares.

``python slow_prepare_cli.py MARKER WHERE ARGS...`` runs ``trajscale ARGS...`` under ``mpiexec``
(``python-run TOP TRAJ``: ``trajscale.run`` of a CA RMSD on ``mpi``, from a script).  Every rank
other than 0 writes ``MARKER.waiting`` as it enters a share (the root's broadcast it then waits in).  Rank 0 writes
``MARKER.root`` and sleeps 60 s where ``WHERE`` says:

* ``before-share``: before it shares what it prepared (a run: once its executor is made, before the job's share;
  a convert: before it loads the topology, while the others go on to the first thing it shares);
* ``in-prepare``: in the job's preparation, inside the share (``ARGS`` runs ``slow_prepare_rmsd``: an RMSD whose
  ``prepare`` sleeps);
* ``between-shares``: after its first share, before the next (a run: the job shared, its first round not yet; a
  convert: the XTC's offsets shared, its output's record not yet).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import trajscale.engine
import trajscale.sharing
from trajscale.analysis import ANALYSES, RMSD

MARKER = ""


def _sleep_marked() -> None:
    Path(MARKER + ".root").write_text("preparing")
    end = time.monotonic() + 60
    while time.monotonic() < end:
        time.sleep(0.05)


class SlowPrepareRMSD(RMSD):
    """RMSD whose ``prepare`` (the root's) sleeps first (same numbers as RMSD)."""

    name = "slow_prepare_rmsd"

    def get_config(self) -> dict:
        return {**super().get_config(), "name": self.name}

    def prepare(self, universe, source):
        _sleep_marked()
        return super().prepare(universe, source)


def _slow_first(fn):
    def slow(*args, **kw):
        _sleep_marked()
        return fn(*args, **kw)
    return slow


def _marked_share(fn):
    def share(*args, **kw):
        Path(MARKER + ".waiting").write_text("waiting")
        return fn(*args, **kw)
    return share


if __name__ == "__main__":
    MARKER, where, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    ANALYSES[SlowPrepareRMSD.name] = SlowPrepareRMSD
    if os.environ.get("PMI_RANK") != "0":
        trajscale.sharing.share = trajscale.engine.share = _marked_share(trajscale.sharing.share)
    elif where == "before-share" and argv[0] in ("run", "python-run"):
        trajscale.engine.Engine.prepare = _slow_first(trajscale.engine.Engine.prepare)
    elif where == "before-share":
        import trajscale.convert.convert as conv

        conv.written_atoms = _slow_first(conv.written_atoms)
    elif where == "between-shares" and argv[0] == "run":
        trajscale.engine.Engine.choose = _slow_first(trajscale.engine.Engine.choose)
    elif where == "between-shares":
        import trajscale.convert.convert as conv

        conv._plan_job = _slow_first(conv._plan_job)
    if argv[0] == "python-run":   # trajscale.run from a script (no CLI, Python's own Ctrl-C): TOP TRAJ
        import signal

        import trajscale

        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            trajscale.run(RMSD(select="name CA"), argv[1], argv[2], executor="mpi")
        except KeyboardInterrupt:
            sys.exit(130)
        sys.exit(0)
    from trajscale.cli.main import main

    # the command's own exit status, written by the rank itself: what the launcher does to the ranks'
    # shells after they ended (hydra's clean-up of a job whose rank ended non-zero) is not the command's
    code: object = 1
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
        raise
    finally:
        Path(f"{MARKER}.rc.{os.environ.get('PMI_RANK')}").write_text(str(code))
    sys.exit(code)
