"""``trajscale.run(analyses, ensemble)``: analyses over every trajectory of an ensemble, in one job.

One run engine (:mod:`trajscale.engine`) and one executor for the whole ensemble, as for a single
trajectory: the rounds are :class:`~trajscale.ensemble.rounds.EnsembleRounds`, the analysis the user's
wrapped in :class:`~trajscale.ensemble.analysis.EnsembleAnalysis`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from dataclasses import dataclass

from ..analysis.base import Analysis
from ..analysis.group import AnalysisGroup
from ..engine import Engine
from ..errors import AllRefusedError, ConfigError, InputFileError, ServerUnreachable
from ..launch import current
from ..runspec import RunOptions
from .analysis import EnsembleAnalysis
from .catalog import Ensemble
from .opened import MAX_OPEN
from .prepare import Refusal, RefusedResult
from .results import EnsembleResult, FinishedMembers
from .rounds import EnsembleRounds
from .saved import REFUSED, ResultsFolder
from .summary import EnsembleFacts

log = logging.getLogger(__name__)

#: The command's exit status when some trajectories were refused and the others analysed.
EXIT_SOME_REFUSED = 8


@dataclass(frozen=True, kw_only=True, eq=False)
class EnsembleOptions:
    """How an ensemble run keeps its results and treats its trajectories' failures.

    Attributes
    ----------
    results
        A folder where each trajectory's results are saved as it finishes, with the refused table
        (``refused.csv``); None: kept in memory (no resuming).
    resume
        Skip the trajectories whose results ``results`` holds from a run of the same analyses and frames.
    overwrite
        Start again in a ``results`` folder that holds another run's results.
    strict
        A trajectory that cannot be analysed refuses the whole run (by default it is listed as refused).
    max_open
        Member trajectories a worker thread keeps open at once.
    round_size
        Trajectories run and saved together (a run stopped midway keeps the rounds before); None: 64 per worker.
    """

    results: str | os.PathLike | None = None
    resume: bool = False
    overwrite: bool = False
    strict: bool = False
    max_open: int = MAX_OPEN
    round_size: int | None = None

    def __post_init__(self) -> None:
        if self.resume and self.results is None:
            raise ConfigError("resume: give the results folder of the run to resume (results=FOLDER, --results)")
        if self.max_open < 1:
            raise ConfigError(f"max_open must be at least 1, got {self.max_open}")
        if self.round_size is not None and self.round_size < 1:
            raise ConfigError(f"round_size must be at least 1, got {self.round_size}")

    @classmethod
    def split(cls, keywords: dict) -> tuple[EnsembleOptions, dict]:
        """These options out of ``keywords`` (``trajscale.run``'s), and the keywords left."""
        names = {f.name for f in dataclasses.fields(cls)}
        mine = {k: keywords[k] for k in keywords if k in names}
        rest = {k: v for k, v in keywords.items() if k not in names}
        return cls(**mine), rest


def run_ensemble(analysis: Analysis | list[Analysis], ensemble, *, options: RunOptions | None = None,
                 ensemble_options: EnsembleOptions | None = None, **keywords):
    """Run ``analysis`` (or several, in one pass) over every trajectory of ``ensemble`` in one job.

    Parameters
    ----------
    analysis
        An analysis, or a list of them (each block read once for all).
    ensemble
        An :class:`~trajscale.ensemble.catalog.Ensemble`, a catalog file (CSV, TOML, Parquet; a path or URL)
        or a glob (``"runs/*/md.xtc"``, ``"s3://bucket/prefix/*.h5"``).
    options
        A :class:`~trajscale.runspec.RunOptions`: executor, workers, frames (``start``/``stop``/``step``
        apply to each trajectory), block budget, H5MD options, ``storage_options``.
    ensemble_options
        An :class:`EnsembleOptions`; its fields may be given as keywords too (``results=``, ``resume=``,
        ``strict=``, ``overwrite=``, ``max_open=``), as may :class:`~trajscale.runspec.RunOptions`' fields.

    Returns
    -------
    An :class:`~trajscale.ensemble.results.EnsembleResult` (a list of them for a list of analyses), on the
    root process; None on other MPI ranks.

    Raises
    ------
    AllRefusedError
        Every trajectory was refused (its ``refused`` and the refused table say why).
    InputFileError
        The catalog cannot be read.
    ServerUnreachable
        A server stopped answering for ``retry_seconds``: the run stops, and says how many trajectories it
        finished and where they are kept (``resume=True`` goes on); no trajectory is refused for it.
    ConfigError
        ``strict`` and a trajectory was refused, or an option is not valid for an ensemble.
    """
    if ensemble_options is None:
        ensemble_options, keywords = EnsembleOptions.split(keywords)
    opts = RunOptions.from_keywords(options, keywords)
    if opts.follow is not None:
        raise ConfigError("an ensemble's trajectories are read finished: run it without following")
    analyses = list(analysis) if isinstance(analysis, list | tuple) else [analysis]
    group = AnalysisGroup(analyses)
    eo = ensemble_options
    if eo.resume and eo.results is not None and not isinstance(ensemble, Ensemble):   # (the CLI's: listed)
        resume_revisions(eo.results, opts.storage_options)
    ens = Ensemble.of(ensemble, opts.storage_options)
    atoms_named(ens)
    opts = dataclasses.replace(opts, storage_options=opts.storage_options or ens.storage_options)
    folder = None
    if eo.results is not None and (current().rank or 0) == 0:   # (the process that prepares the job)
        revisions = _revisions(ens)   # (a resumed run shares these with the run it resumes)
        manifest = {"analyses": [a.get_config() for a in group.analyses], "start": opts.start, "stop": opts.stop,
                    "step": opts.step, "group": opts.group, "assume_units": opts.assume_units,
                    "continuous": opts.continuous, **({"revisions": revisions} if revisions else {})}
        folder = ResultsFolder(eo.results, manifest, resume=eo.resume, overwrite=eo.overwrite)
    rounds = EnsembleRounds(ens, group, opts, folder, strict=eo.strict, max_open=eo.max_open,
                            round_size=eo.round_size)
    before: list[Refusal] = []   # refusals by one analysis of members the run before saved
    try:
        out = Engine(EnsembleAnalysis(group), None, rounds, opts).execute()
    except ServerUnreachable as exc:   # no trajectory is at fault: the run stops, its finished rounds kept
        raise exc.keeping(_kept(rounds, folder)) from None
    except InputFileError:
        if not rounds.opened or rounds.n_prepared:   # (a run that had members to run: its own error)
            raise
        out = None   # every member saved before, or refused: nothing to run
    finally:
        try:
            if folder is not None and rounds.opened:
                before = _refused_before(folder, ens, rounds.skipped) if eo.resume else []
                folder.write_refused([r.row() for r in sorted([*before, *rounds.refused],
                                                              key=lambda r: r.index)], _columns(ens))
        finally:
            if folder is not None and folder.own_lock:
                folder.lock.release()
    if out is None and not rounds.opened:
        return None   # an MPI rank other than 0
    if not rounds.costs.n and not rounds.skipped:
        where = f"; see {folder.path / REFUSED}" if folder is not None else ""
        first = rounds.refused[0] if rounds.refused else None
        raise AllRefusedError(ens.origin or "the ensemble",
                              f"every one of its {len(ens)} trajectories was refused{where}"
                              + (f" ({first.member.name}: {first.reason})" if first else ""), rounds.refused)
    report = None if out is None else out.report
    if report is not None:   # (a task's range counts a trajectory its worker prepared as one position)
        report.n_frames = rounds.costs.frames
        report.n_atoms = rounds.costs.atoms_max if rounds.costs.n else report.n_atoms   # (the most)
    results = _results(group, ens, rounds, folder, report, before)
    return results if isinstance(analysis, list | tuple) else results[0]


def atoms_named(ens: Ensemble) -> None:
    """Refuse at once, in one line, an ensemble none of whose members can name its atoms: each a file of a format
    that holds frames alone (XTC, TRR), with no topology (a glob given without one)."""
    from ..formats import own_traits

    kinds: set[str] = set()
    for m in ens:   # (the first member with a topology, or of another format, ends the look)
        if m.topology is not None or m.source is not None or len(m.trajectory) != 1:
            return
        suffix = os.path.splitext(m.trajectory[0].split("?")[0])[1].lower()
        held = [t.frames_only.get(t.suffixes[suffix]) for t in own_traits()
                if suffix in t.suffixes and not t.self_describing and not t.members]
        if not held or held[0] is None:
            return
        kinds.add(held[0])
    if kinds:
        raise ConfigError(f"{ens.origin or 'the ensemble'}: its {len(ens)} trajectories are "
                          f"{' and '.join(sorted(kinds))} files, which hold no atom names: give their topology "
                          "(--topology FILE, topology=; "
                          "a pattern such as runs/*/md.tpr gives each its own)")


def _kept(rounds: EnsembleRounds, folder: ResultsFolder | None) -> str:
    """What a run stopped by its server's outage keeps, for its one line."""
    done = rounds.costs.n + len(rounds.skipped)
    said = f"{done} trajector{'y' if done == 1 else 'ies'} done"
    if folder is None or not folder.path.is_dir():
        return f"{said}; none kept (a results folder keeps them for resuming)"
    return f"{said} and kept in {folder.path}; --resume goes on from them"


def _revisions(ens: Ensemble) -> dict:
    """The commits the Hub's revisions the ensemble's glob names were read at (``{}``: none)."""
    hub = sys.modules.get("trajscale.storage.hub")
    pins = hub.pinned_revisions() if hub is not None else {}
    return {k: v for k, v in pins.items() if (ens.origin or "").startswith(k + "/")}


def resume_revisions(results: str | os.PathLike, storage_options: dict | None) -> None:
    """A resumed run reads the Hub's revisions at the commits the run began with (before its glob is listed)."""
    pins = ResultsFolder.manifest_in(results).get("revisions")
    if pins:
        from ..storage.hub import pin_revisions

        pin_revisions(pins, storage_options)


def _columns(ens: Ensemble) -> list[str]:
    return ["name", "topology", "trajectory", *ens.label_names, "analysis"]


def _refused_before(folder: ResultsFolder | None, ens: Ensemble, skipped) -> list[Refusal]:
    """A resumed run's refusals of members saved before, from that run's refused table, each checked."""
    if folder is None or not skipped:
        return []
    import csv

    try:
        with open(folder.path / REFUSED, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except OSError:
        return []
    saved = folder.saved()   # (the members skipped: those saved, by name)
    out = []
    for name in dict.fromkeys(r.get("name") for r in rows if r.get("analysis") and r.get("name") in saved):
        i = ens.index_of(name)
        if i is None:
            continue
        out += [Refusal(i, ens[i], r.reason, r.analysis, k) for k, r in enumerate(folder.load(name).results)
                if isinstance(r, RefusedResult)]
    return out


def _results(group: AnalysisGroup, ens: Ensemble, rounds: EnsembleRounds, folder, report,
             before: list[Refusal]) -> list[EnsembleResult]:
    """Each analysis's :class:`EnsembleResult`, as a view of the members less those it refused."""
    refused = sorted([*rounds.refused, *before], key=lambda r: (r.index, -1 if r.position is None else r.position))
    if folder is not None:
        records = folder
    else:
        records = {rec.name: rec for rec in rounds.records.values()}
    # (a member refused by one analysis of several is analysed by the others: counted once, as analysed)
    facts = EnsembleFacts(origin=ens.origin, n_trajectories=len(ens), n_finished=rounds.costs.n,
                          n_refused=len({r.index for r in refused if r.position is None}),
                          n_skipped=len(rounds.skipped), costs=rounds.costs,
                          t_prepare_members=rounds.t_members, revisions=_revisions(ens))
    out = []
    for k, a in enumerate(group.analyses):
        mine = [r for r in refused if r.position is None or r.position == k]
        out.append(EnsembleResult(a, k, FinishedMembers(ens, {r.index for r in mine}), records, mine, report,
                                  facts, ens.label_names))
    return out


__all__ = ["EXIT_SOME_REFUSED", "EnsembleOptions", "atoms_named", "run_ensemble"]
