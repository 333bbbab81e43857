"""How this process was started: the launcher, its place in the launcher's world, and the scheduler's job.

The one module of trajscale that reads launcher and scheduler environment variables; everyone
else asks :func:`current`.  Launchers set these in every process they start:

==============================  =======================================================  ==========
launcher                        variables                                                MPI sees
==============================  =======================================================  ==========
MPICH's ``mpiexec`` (hydra)     ``PMI_SIZE``, ``PMI_RANK``, ``PMI_FD``; ``MPI_LOCALNRANKS``  yes
``srun --mpi=pmi2``             ``PMI_*`` and the step's ``SLURM_STEP_NUM_TASKS``,         yes
                                ``SLURM_PROCID`` (no hydra variables)
``srun --mpi=pmix``             ``PMIX_RANK`` and the step's ``SLURM_*``                   yes
``srun --mpi=none``             only the step's ``SLURM_STEP_NUM_TASKS``, ``SLURM_PROCID``  no
Open MPI's ``mpirun``           ``OMPI_COMM_WORLD_SIZE``, ``OMPI_COMM_WORLD_RANK``          yes
another PMIx launcher           ``PMIX_RANK`` (no size)                                   yes
==============================  =======================================================  ==========

"MPI sees" the world when the processes' MPI library can find the others through the launcher
(PMI, PMIx, Open MPI's runtime): ``MPI.COMM_WORLD`` then holds them all.  ``srun --mpi=none`` starts
N processes that MPI cannot join: each would be a world of one and run the whole command alone.

Inside ``salloc`` or ``sbatch``, hydra's ``mpiexec`` starts its proxies with ``srun``, so its ranks
carry both hydra's and a step's variables: hydra's win.  A batch script (``SLURM_JOB_ID`` set, no
step of its own) is a world of one: its ``SLURM_NTASKS`` describes the allocation, not this process.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: ``Launch.launcher``: nobody (a plain process, or a batch script), MPICH's hydra ``mpiexec``, SLURM's
#: ``srun``, Open MPI's ``mpirun``, another PMIx launcher.
LAUNCHERS = ("none", "mpiexec", "srun", "mpirun", "pmix")
#: Step ids SLURM gives the parts of a job that are not ``srun`` steps (the batch script, the extern step).
_NOT_STEPS = frozenset({"batch", "extern", "interactive", "4294967291", "4294967292", "4294967293", "4294967294"})
#: Seconds ``squeue`` may take to say a job's time left before the answer is "unknown".
SQUEUE_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class SchedulerJob:
    """The scheduler's job this process runs in (SLURM): what a report records, and its end.

    Attributes
    ----------
    job_id
        ``SLURM_JOB_ID``.
    step_id
        ``SLURM_STEP_ID`` of the ``srun`` step this process is a task of (None: the batch script).
    restart_count
        ``SLURM_RESTART_COUNT``: how many times the job was requeued (0: its first start).
    end_time
        Epoch seconds at which the scheduler ends the job (``SLURM_JOB_END_TIME``; None: not said).
    scheduler
        ``"slurm"``.
    """

    job_id: str
    step_id: str | None = None
    restart_count: int = 0
    end_time: float | None = None
    scheduler: str = "slurm"

    def time_left(self) -> float | None:
        """Seconds until the scheduler ends the job (its end time, else ``squeue`` once); None when unknown."""
        if self.end_time is not None:
            return max(0.0, self.end_time - time.time())
        left = _squeue_time_left(self.job_id)
        return None if left is None else max(0.0, left[1] - (time.monotonic() - left[0]))

    def describe(self) -> str:
        """``SLURM job 123 step 0 (requeued 2 times)``."""
        said = f"SLURM job {self.job_id}" + (f" step {self.step_id}" if self.step_id is not None else "")
        if self.restart_count:
            said += f" (requeued {self.restart_count} time{'s' if self.restart_count != 1 else ''})"
        return said

    def to_dict(self) -> dict:
        return {"scheduler": self.scheduler, "job_id": self.job_id, "step_id": self.step_id,
                "restart_count": self.restart_count, "end_time": self.end_time}

    @classmethod
    def from_dict(cls, d) -> SchedulerJob | None:
        """From :meth:`to_dict`; None for anything else (a report written before it was recorded)."""
        if not isinstance(d, Mapping) or not d.get("job_id"):
            return None
        end = d.get("end_time")
        return cls(str(d["job_id"]), str(d["step_id"]) if d.get("step_id") is not None else None,
                   int(d.get("restart_count") or 0), float(end) if isinstance(end, int | float) else None,
                   str(d.get("scheduler") or "slurm"))


@dataclass(frozen=True, slots=True)
class Launch:
    """How this process was started.

    Attributes
    ----------
    launcher
        Who started it (:data:`LAUNCHERS`).
    size
        Processes the launcher started (None: it does not say, as a bare PMIx launcher).
    rank
        This process's place among them (0 when alone).
    mpi_sees
        MPI can join the processes into one world (the launcher speaks PMI, PMIx or Open MPI's runtime);
        False for ``srun --mpi=none``, whose tasks are independent processes.
    job
        The scheduler's job around it (None: none).
    """

    launcher: str = "none"
    size: int | None = 1
    rank: int = 0
    mpi_sees: bool = True
    job: SchedulerJob | None = None

    @property
    def several(self) -> bool:
        """True when the launcher started more than this process (a PMIx rank above 0 says it without a size)."""
        return (self.size or 0) > 1 or self.rank > 0

    @property
    def independent(self) -> bool:
        """Several processes MPI does not join (``srun --mpi=none``): each would run a whole command alone."""
        return self.several and not self.mpi_sees

    @property
    def who(self) -> str:
        """The launcher in words, for messages."""
        if self.launcher == "srun":
            return "srun" if self.mpi_sees else "srun without an MPI plugin (--mpi=none)"
        return {"mpiexec": "an MPICH-style mpiexec (PMI)", "mpirun": "Open MPI's mpirun",
                "pmix": "a PMIx launcher"}.get(self.launcher, "no launcher")

    def fix(self) -> str:
        """The command that starts ``size`` ranks MPI joins, for this launcher (``srun --mpi=pmi2 -n N`` under srun)."""
        n = self.size if self.size and self.size > 1 else "N"
        if self.launcher == "srun":
            return f"srun --mpi=pmi2 -n {n}"
        return f"{recorded_launcher()} -n {n}"

    def refusal(self, what: str = "the command") -> str:
        """One line refusing to run ``what`` in every one of several independent processes."""
        n = self.size or "several"
        return (f"{self.who} started {n} processes that MPI cannot join into one job (no PMI in their "
                f"environment): each would run {what} alone and write the same outputs. Start it with "
                f"'{self.fix()} trajscale ...', or run it once without the launcher")


def _int(env: Mapping[str, str], var: str) -> int | None:
    try:
        return int(env.get(var, ""))
    except ValueError:
        return None


def _slurm_job(env: Mapping[str, str]) -> SchedulerJob | None:
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job_id:
        return None
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
    end = _int(env, "SLURM_JOB_END_TIME")
    return SchedulerJob(job_id, step if step and step not in _NOT_STEPS else None,
                        _int(env, "SLURM_RESTART_COUNT") or 0, float(end) if end else None)


def from_environment(env: Mapping[str, str]) -> Launch:
    """The :class:`Launch` that the environment ``env`` describes (:func:`current` passes ``os.environ``)."""
    job = _slurm_job(env)
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
    # a task of an srun step (a batch script's SLURM_* describe the allocation, not this process)
    srun = "SLURM_STEP_NUM_TASKS" in env and step is not None and step not in _NOT_STEPS
    hydra = "HYDI_CONTROL_FD" in env or "MPI_LOCALNRANKS" in env   # hydra's proxy sets them, srun does not
    if "OMPI_COMM_WORLD_SIZE" in env or "OMPI_COMM_WORLD_RANK" in env:
        return Launch("mpirun", _int(env, "OMPI_COMM_WORLD_SIZE"), _int(env, "OMPI_COMM_WORLD_RANK") or 0, True, job)
    if "PMI_SIZE" in env or "PMI_RANK" in env:
        return Launch("srun" if srun and not hydra else "mpiexec", _int(env, "PMI_SIZE"), _int(env, "PMI_RANK") or 0,
                      True, job)
    if "PMIX_RANK" in env:
        size = _int(env, "PMIX_SIZE") or (_int(env, "SLURM_STEP_NUM_TASKS") if srun else None)
        return Launch("srun" if srun else "pmix", size, _int(env, "PMIX_RANK") or 0, True, job)
    if srun:
        size = _int(env, "SLURM_STEP_NUM_TASKS") or 1
        return Launch("srun", size, _int(env, "SLURM_PROCID") or 0, size <= 1, job)
    return Launch(job=job)


def current() -> Launch:
    """How this process was started, read from its environment now."""
    return from_environment(os.environ)


def rank() -> int:
    """This process's rank among the launcher's processes (0 when alone): rank 0 speaks for all."""
    return current().rank


#: Prefixes of the variables launchers give each process they start, and the ``srun`` step's own.
_LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "OMPI_", "HYDRA_", "HYDI_", "MPI_", "MPIR_")
_STEP_VARS = frozenset({"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_LOCALID",
                        "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES"})


def without_launcher(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` less the launcher's variables, so a helper process does not take itself for a rank of the job."""
    return {k: v for k, v in env.items() if not k.startswith(_LAUNCHER_PREFIXES) and k not in _STEP_VARS}


def parse_time_left(text: str) -> float | None:
    """Seconds in ``squeue -o %L``'s ``[days-][hours:]minutes:seconds``; None for anything else."""
    text = text.strip()
    days, _, clock = text.rpartition("-") if "-" in text else ("0", "", text)
    try:
        parts = [int(p) for p in clock.split(":")]
        d = int(days)
    except ValueError:
        return None
    if not 1 <= len(parts) <= 3 or d < 0 or any(p < 0 for p in parts):
        return None
    h, m, s = [0] * (3 - len(parts)) + parts
    return float(((d * 24 + h) * 60 + m) * 60 + s)


@functools.cache
def _squeue_time_left(job_id: str) -> tuple[float, float] | None:
    """``(monotonic time asked, seconds left)`` of ``job_id`` as ``squeue`` says it, asked once per process."""
    import subprocess

    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%L"], capture_output=True, text=True,
                             timeout=SQUEUE_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):   # no squeue here, or a controller that does not answer
        return None
    left = parse_time_left(out.stdout.splitlines()[0]) if out.returncode == 0 and out.stdout.strip() else None
    return None if left is None else (time.monotonic(), left)


def recorded_launcher() -> str:
    """The launcher that goes with this environment's mpi4py (e.g. ``mpiexec.mpich``): recorded by
    ``scripts/setup-env.sh`` in ``<venv>/share/trajscale/launcher``, else guessed from mpi4py's MPI library."""
    with contextlib.suppress(OSError):
        return Path(sys.prefix, "share", "trajscale", "launcher").read_text().strip() or "mpiexec"
    try:
        from mpi4py import MPI

        library = MPI.Get_library_version()
    except Exception:   # noqa: BLE001 - no mpi4py: nothing better to say
        return "mpiexec"
    import shutil

    for marker, exe in (("MPICH", "mpiexec.mpich"), ("Open MPI", "mpiexec.openmpi")):
        if marker in library and shutil.which(exe):
            return exe
    return "mpiexec"


def say_time_left(expected_s: float | None = None, what: str = "the run",
                  predict: Callable[[], float | None] | None = None) -> float | None:
    """Log the job's time left when the scheduler says it and it is short, or shorter than ``expected_s``
    (or ``predict()``'s, asked only once a time left is known); return it (None: unknown, or not rank 0)."""
    launch = current()
    if launch.job is None or launch.rank != 0:   # (one squeue per job, not one per rank)
        return None
    left = launch.job.time_left()
    if left is None:
        return None
    if expected_s is None and predict is not None:
        expected_s = predict()
    if expected_s is not None and expected_s > left:
        log.warning("%s is predicted to take %s, but %s ends in %s: it will be stopped before it finishes",
                    what, _duration(expected_s), launch.job.describe(), _duration(left))
    elif left < SHORT_TIME_LEFT_S:
        log.warning("%s ends in %s", launch.job.describe(), _duration(left))
    return left


#: Time left under which a command says it before it starts (its end may come first).
SHORT_TIME_LEFT_S = 600.0


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def mpiexec() -> str | None:
    """The MPICH launcher h5py and mpi4py are built against, else any ``mpiexec`` on PATH; None without MPI."""
    import shutil

    return shutil.which("mpiexec.mpich") or shutil.which("mpiexec")


__all__ = ["LAUNCHERS", "Launch", "SchedulerJob", "current", "from_environment", "mpiexec", "parse_time_left",
           "rank", "recorded_launcher", "say_time_left", "without_launcher"]
