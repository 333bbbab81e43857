"""A one-node SLURM for the tests: ``munged``, ``slurmctld`` and ``slurmd``, started as root from a slurm.conf
generated under a temporary directory, and stopped by pid when the last test process using it ends.

One cluster runs on the machine at a time, shared by every pytest process that wants one (``make test``
runs modules on several xdist workers, and other sessions may run on the same machine): a file lock
(``/tmp/trajscale-slurm.lock``) guards a record (``/tmp/trajscale-slurm.json``) of the running cluster and
the processes using it. :func:`acquire` starts the cluster or joins the one running; :func:`release` leaves
it, and the last user out stops it: every job cancelled, the daemons and whatever still runs with the
cluster's ``SLURM_CONF`` in its environment (slurmstepd, job processes) killed by pid, the directory
removed. A watchdog process (this file run as a script) stops a cluster whose users all died without
releasing it (a killed pytest), so no daemon outlives the tests.

This file needs only the standard library: the watchdog runs it as a script.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TMP = Path(tempfile.gettempdir())
LOCK = TMP / "trajscale-slurm.lock"
RECORD = TMP / "trajscale-slurm.json"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "sinfo", "squeue", "scontrol", "scancel")
#: Seconds to wait for the node to become idle after the daemons start (they take ~1 s when idle).
START_TIMEOUT = 60.0


def why_not() -> str | None:
    """Why no SLURM can be started here (a skip reason), or None."""
    if not sys.platform.startswith("linux"):
        return "a local SLURM needs Linux"
    if os.geteuid() != 0:
        return "a local SLURM starts munged, slurmctld and slurmd as root; not root here"
    missing = [p for p in (*DAEMONS, *CLIENTS) if shutil.which(p, path=_sbin_path()) is None]
    if missing:
        return (f"SLURM is not installed ({', '.join(missing)} not found): "
                "apt-get install slurm-wlm munge (scripts/setup-env.sh does)")
    return None


def _sbin_path() -> str:
    return os.environ.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"


def _exe(name: str) -> str:
    found = shutil.which(name, path=_sbin_path())
    if found is None:
        raise RuntimeError(f"{name} not found")
    return found


# -- processes ------------------------------------------------------------------------------------

def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (with its pid, an identity that survives pid reuse),
    or None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in "ZX" else int(fields[19])


def _alive(who: dict) -> bool:
    return _start_time(who["pid"]) == who["start"]


def _me() -> dict:
    return {"pid": os.getpid(), "start": _start_time(os.getpid())}


def _holders_of(conf: str) -> list[int]:
    """Every process (not this one) whose environment names this cluster's slurm.conf: its daemons' children
    (slurmstepd), the jobs' processes and clients started for it."""
    needle = f"SLURM_CONF={conf}\0".encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as fh:
                if needle in fh.read() + b"\0":
                    out.append(int(d))
        except OSError:
            continue
    return out


def _kill(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait_gone(whos: list[dict], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(_alive(w) for w in whos):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# -- the cluster ----------------------------------------------------------------------------------

CONF = """\
# A one-node SLURM for trajscale's tests (tests/slurm/cluster.py)
ClusterName=trajscale
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/run/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/run/slurmctld.pid
SlurmdPidFile={dir}/run/slurmd.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobRequeue=1
KillWait=5
ReturnToService=2
MinJobAge=600
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
"""


def _start(directory: Path) -> dict:
    """Start munged, slurmctld and slurmd under ``directory``; return the cluster's record."""
    os.chmod(directory, 0o755)   # munged wants its socket's folders searchable by all
    for sub, mode in (("munge", 0o700), ("run", 0o755), ("state", 0o755), ("spool", 0o755), ("log", 0o755)):
        (directory / sub).mkdir(mode=mode)
        os.chmod(directory / sub, mode)
    key = directory / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    host = socket.gethostname()
    with open("/proc/meminfo") as fh:
        mem_kb = int(re.search(r"MemTotal:\s+(\d+)", fh.read()).group(1))
    ctld_port, d_port = _free_ports(2)
    conf = directory / "slurm.conf"
    conf.write_text(CONF.format(host=host, dir=directory, ctld_port=ctld_port, d_port=d_port,
                                cpus=os.cpu_count() or 1, mem_mb=mem_kb // 1024 // 2))
    env = dict(os.environ, SLURM_CONF=str(conf))
    env.pop("SLURM_JOB_ID", None)
    log = directory / "log"
    procs = {}
    try:
        run = directory / "run"
        procs["munged"] = _daemon(
            [_exe("munged"), "-F", f"--key-file={key}", f"--socket={run}/munge.socket",
             f"--pid-file={run}/munged.pid", f"--log-file={log}/munged.log",
             f"--seed-file={directory}/munge/munged.seed"], log / "munged.out", env)
        deadline = time.monotonic() + START_TIMEOUT
        while not (run / "munge.socket").exists():
            if procs["munged"].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"munged did not start: {_tail(log / 'munged.out')}")
            time.sleep(0.02)
        for name in ("slurmctld", "slurmd"):
            procs[name] = _daemon([_exe(name), "-D", "-f", str(conf)], log / f"{name}.out", env)
        record = {"dir": str(directory), "conf": str(conf), "host": host, "cpus": os.cpu_count() or 1,
                  "daemons": {n: {"pid": p.pid, "start": _start_time(p.pid)} for n, p in procs.items()},
                  "users": []}
        while True:
            for name, p in procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode}): {_tail(log / f'{name}.out')}")
            out = subprocess.run([_exe("sinfo"), "-h", "-N", "-o", "%t"], env=env, capture_output=True,
                                 text=True, timeout=30)
            if out.stdout.strip() == "idle":
                return record
            if time.monotonic() > deadline:
                raise RuntimeError(f"the node is not idle after {START_TIMEOUT:.0f} s (sinfo: "
                                   f"{out.stdout.strip() or out.stderr.strip()}): {_tail(log / 'slurmctld.log')}")
            time.sleep(0.1)
    except BaseException:
        _stop({"dir": str(directory), "conf": str(conf),
               "daemons": {n: {"pid": p.pid, "start": _start_time(p.pid)} for n, p in procs.items()}})
        raise
    finally:
        for p in procs.values():   # started in their own sessions; their exit is seen by pid
            p.returncode = 0


def _daemon(argv: list[str], out: Path, env: dict) -> subprocess.Popen:
    """A daemon in the foreground, in a session of its own, its output into ``out``."""
    with open(out, "wb") as fh:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


def _stop(record: dict) -> None:
    """Cancel every job, end the daemons and every process started for the cluster, remove its directory."""
    conf = record["conf"]
    env = dict(os.environ, SLURM_CONF=conf)
    daemons = record["daemons"]
    ctld = daemons.get("slurmctld")
    if ctld and _alive(ctld):
        with contextlib.suppress(OSError, subprocess.SubprocessError, RuntimeError):
            jobs = subprocess.run([_exe("squeue"), "-h", "-o", "%i"], env=env, capture_output=True, text=True,
                                  timeout=20).stdout.split()
            if jobs:
                subprocess.run([_exe("scancel"), *jobs], env=env, capture_output=True, timeout=20)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and subprocess.run(
                        [_exe("squeue"), "-h", "-o", "%i"], env=env, capture_output=True, text=True,
                        timeout=20).stdout.split():
                    time.sleep(0.2)
    for names in (("slurmd", "slurmctld"), ("munged",)):
        whos = [daemons[n] for n in names if n in daemons and _alive(daemons[n])]
        _kill([w["pid"] for w in whos], signal.SIGTERM)
        if not _wait_gone(whos, 10):
            _kill([w["pid"] for w in whos if _alive(w)], signal.SIGKILL)
            _wait_gone(whos, 10)
    for _ in range(3):   # slurmstepd and job processes outlive slurmd: found by the conf in their environment
        left = _holders_of(conf)
        if not left:
            break
        _kill(left, signal.SIGKILL)
        time.sleep(0.2)
    shutil.rmtree(record["dir"], ignore_errors=True)


# -- sharing --------------------------------------------------------------------------------------

@contextlib.contextmanager
def _locked():
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read() -> dict | None:
    try:
        return json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return None


def _write(record: dict | None) -> None:
    if record is None:
        with contextlib.suppress(FileNotFoundError):
            RECORD.unlink()
        return
    tmp = RECORD.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, RECORD)


def _healthy(record: dict) -> bool:
    return all(_alive(w) for w in record["daemons"].values()) and Path(record["conf"]).is_file()


def acquire() -> dict:
    """Join the machine's test SLURM, starting it if none runs; return its record."""
    with _locked():
        record = _read()
        if record is not None:
            record["users"] = [u for u in record["users"] if _alive(u)]
            if not _healthy(record):
                _stop(record)
                record = None
        if record is None:
            record = _start(Path(tempfile.mkdtemp(prefix="trajscale-slurm-")))
            _write(record)
            _start_watchdog()
        record["users"].append(_me())
        _write(record)
        return record


def release() -> None:
    """Leave the machine's test SLURM; the last user out stops it."""
    with _locked():
        record = _read()
        if record is None:
            return
        me = _me()
        record["users"] = [u for u in record["users"] if _alive(u) and u != me]
        if record["users"]:
            _write(record)
        else:
            _stop(record)
            _write(None)


def _start_watchdog() -> None:
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    subprocess.Popen([sys.executable, os.path.abspath(__file__), "--watch"], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
                     close_fds=True)


def watch(period: float = 2.0) -> None:
    """Stop the cluster once every process using it has gone (the watchdog's loop)."""
    with _locked():
        record = _read()
        mine = record and record["dir"]
    while mine:
        time.sleep(period)
        with _locked():
            record = _read()
            if record is None or record["dir"] != mine:
                return
            if not any(_alive(u) for u in record["users"]):
                _stop(record)
                _write(None)
                return


if __name__ == "__main__":
    if sys.argv[1:] == ["--watch"]:
        watch()
