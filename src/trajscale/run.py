"""``trajscale.run``: run an analysis over a trajectory, finished, still being written, or streamed.

The public face of the run engine (:mod:`trajscale.engine`): it chooses once what decides the run's
rounds (:mod:`trajscale.follow` for a growing file or a stream) and hands it to the engine."""

from __future__ import annotations

from .analysis.base import Analysis
from .engine import Engine, FinishedRounds, Rounds
from .runspec import RunOptions
from .sources import is_stream
from .storage.location import Location

TYPE_CHECKING = False
if TYPE_CHECKING:   # (a followed run's options, importable from here: see __getattr__ below)
    from .endings import FollowOptions


def run(analysis: Analysis | list[Analysis], topology=None, trajectory=None, *, ensemble=None,
        options: RunOptions | None = None, on_update=None, **keywords):
    """Run ``analysis`` over ``trajectory`` on an executor.

    Parameters
    ----------
    analysis
        An :class:`~trajscale.analysis.base.Analysis` such as ``RMSD(select=...)``, or a list of them run in one
        pass (each block read once): their results, each with the bits of a run alone, share one report.
    topology
        A topology file MDAnalysis reads (PSF, TPR, GRO, PDB, ...), a Universe built from one (its trajectory is
        not read), or an AtomGroup of one: the analysis selects within it, as MDAnalysis's analyses do.
    trajectory
        An H5MD file (fast path) or any trajectory file(s) MDAnalysis reads, on disk or behind URLs, parts
        joined as ``convert`` joins them; an IMD stream, ``imd://HOST:PORT``.
    ensemble
        Many trajectories, each with its own topology (:func:`~trajscale.ensemble.run.run_ensemble`): an Ensemble,
        a catalog, a glob or an mdCATH file, in place of the topology and trajectory (as ``run(analysis, ens)``).
    options
        A :class:`~trajscale.runspec.RunOptions` holding the options below; keywords given too replace its fields.
    on_update
        ``on_update(result)`` gets the result at the end (following: so far too, as ``FollowOptions`` says).

    Other Parameters
    ----------------
    executor
        ``"serial"`` (the default), ``"processes"``, ``"dask"``, ``"mpi"``, an Executor, or ``"auto"`` (serial or
        processes, from the analysis's declared work against a pool's start: ``report.meta.executor_choice``).
    n_workers, n_tasks, tasks_per_worker
        Workers (processes, Dask; serial, MPI ignore it), and frame blocks: ``tasks_per_worker`` (default 4;
        following: 1 per round) per worker.
    start, stop, step
        Frames ``start, start + step, ...`` below ``stop``, as Python slices (and MDAnalysis's ``run``) take them.
    progress
        Show a progress bar on stderr.
    group, assume_units
        The H5MD particle group (when there are several); ``"nm"``/``"Angstrom"``: datasets' units if unstated.
    max_block_bytes
        Most bytes of frames a worker reads and maps at once (default 128 MiB): about each worker's memory.
    continuous
        Let parts that overlap in time join, the later part's frames kept (as ``gmx trjcat``); else refused.
    follow
        True (or a :class:`~trajscale.follow.FollowOptions`): analyse a trajectory still being written as its
        frames land, with the bits of a run over the finished file (``report.meta.follow`` says how it ended).
    storage_options
        For trajectories behind URLs: their options (docs/remote.md), over the command line's.
    **executor_options
        An option of the executor built by name (``scheduler=``, ``start_method=``, ``collective=``, ...).

    Returns
    -------
    The result (``r.rmsd``, ...) with ``r.report`` (a RunReport) on the root, None on other ranks; a list for a list.
    """
    many = _ensemble_of(topology, trajectory, ensemble)
    if many is not None:   # many trajectories, each with its own topology, in one job
        return _run_ensemble(analysis, many, options, on_update, keywords)
    opts = RunOptions.from_keywords(options, keywords)
    analysis = _grouped(analysis)
    where = trajectory if is_stream(trajectory) else Location.each(trajectory, opts.storage_options)
    return Engine(analysis, topology, rounds_for(analysis, topology, where, opts), opts, on_update).execute()


def _ensemble_of(topology, trajectory, ensemble):
    """The ensemble a run is over: ``ensemble=``, or a ``topology`` given without a trajectory; None for one."""
    from .errors import ConfigError

    if ensemble is not None:
        if topology is not None or trajectory is not None:
            raise ConfigError("an ensemble names its trajectories and their topologies: give ensemble= alone, "
                              "without a topology or trajectory")
        return ensemble
    if topology is None:
        raise ConfigError("give a topology and a trajectory, or ensemble= for many trajectories")
    return topology if trajectory is None else None


def _grouped(analysis: Analysis | list[Analysis]) -> Analysis:
    """Several analyses: one :class:`~trajscale.analysis.group.AnalysisGroup`, a pass over their atoms' union."""
    if not isinstance(analysis, list | tuple):
        return analysis
    from .analysis.group import AnalysisGroup

    return AnalysisGroup(analysis)


def _run_ensemble(analysis, ensemble, options: RunOptions | None, on_update, keywords: dict):
    """``run(analysis, ensemble)``: :func:`trajscale.ensemble.run.run_ensemble` (its results come at the end)."""
    from .ensemble.run import run_ensemble

    if on_update is not None:
        from .errors import ConfigError

        raise ConfigError("on_update: an ensemble's results come at the end (its trajectories are read finished)")
    return run_ensemble(analysis, ensemble, options=options, **keywords)


def rounds_for(analysis: Analysis, topology, where: list[Location] | str, options: RunOptions) -> Rounds:
    """What decides the run's rounds: a stream (``where``: its address), a followed file, or a finished trajectory
    in one round (``where``: its files' locations)."""
    if is_stream(where):
        from .follow import StreamRounds  # what a finished run never needs: not imported for it

        return StreamRounds(where, topology, options, analysis)
    files: list[Location] = where
    if options.follow is None:
        return FinishedRounds(files if len(files) > 1 else files[0], topology, options)
    remote = [t for t in files if not t.local]   # the locations say it: nothing opened yet
    if remote:
        from .errors import ConfigError

        raise ConfigError(f"{remote[0]}: a trajectory behind a URL "
                          "is read finished; following is for files a job is writing (run without --follow)")
    from .follow import FileRounds

    return FileRounds([t.where for t in files] if len(files) > 1 else files[0].where, topology, options, analysis)


def __getattr__(name: str):
    if name == "FollowOptions":   # (a followed run's options: imported for one)
        from .endings import FollowOptions

        return FollowOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["FollowOptions", "RunOptions", "rounds_for", "run"]
