"""The few lines ``trajscale run`` prints at the end of a run, and the :class:`Report` that prints them."""

from __future__ import annotations

from .timing import RunReport

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .diagnose import Diagnosis


def diagnose(report: RunReport):
    """:func:`.advice.diagnose`, imported only when a summary or a report's JSON is made."""
    from .advice import diagnose

    return diagnose(report)


def short_report(report: RunReport, diagnosis: Diagnosis | None = None) -> str:
    """A few lines for the end of ``trajscale run``: ratios, stragglers, top advice."""
    d = diagnosis or diagnose(report)
    if d.too_short:   # one line, not stragglers and advice read from noise
        lines = [f"  {d.advice[0].message} ({d.advice[0].reason})"]
        lines += [f"  straggler: {s.kind} {s.name} slow in {s.cause} (+{s.excess:.2f} s over the median)"
                  for s in d.stragglers]
        lines += [f"  advice: {a.message} ({a.reason})" for a in d.advice[1:2]]
        return "\n".join(lines)
    from .metrics import fmt_comm_ratio, fmt_ratio, worker_timings

    imb = "n/a" if d.imbalance is None else f"{d.imbalance:.2f}"
    lines = [   # throughput is on the summary line above this block
        f"  R_comp/IO {fmt_ratio(d.r_comp_io)}, R_comp/comm {fmt_comm_ratio(d)}",
        (f"  stragglers: {len(d.stragglers)} of {len(worker_timings(report))} workers{_named(d)}, "
         f"{len(d.task_stragglers)} of {report.n_tasks} tasks; imbalance (max/median) {imb}"),
    ]
    if d.advice:
        a = d.advice[0]
        lines.append(f"  advice: {a.message} ({a.reason})")
    return "\n".join(lines)


def _named(d: Diagnosis, most: int = 3) -> str:
    """`` (rank 3 slow in start-up, +4.02 s)``: the slowest straggling workers and their causes."""
    if not d.stragglers:
        return ""
    names = ", ".join(f"{s.name} slow in {s.cause}, +{s.excess:.2f} s" for s in d.stragglers[:most])
    return f" ({names}{', ...' if len(d.stragglers) > most else ''})"


def _decoded(report: RunReport) -> str | None:
    """Who decoded what, when more atoms were read than kept; None for a source read in place."""
    src = report.source
    n_src = src.n_atoms
    if n_src is None or n_src <= report.n_atoms:
        return None
    whole = sum(t.frames for t in report.tasks) * n_src * 12 / 1e9
    if src.precision is not None and src.precision.option == "deltas":   # (deltas32 reads up to the last atom)
        return f"trajscale decoded whole frames of {n_src} atoms, {whole:.3f} GB"
    how, _, who = (src.decoding or "").partition(":")
    if how == "prefix":
        return f"{who} decoded each frame of {n_src} atoms up to the last selected atom"
    if how == "whole":
        return f"{who} decoded whole frames of {n_src} atoms, {whole:.3f} GB"
    return None


def process_line(report: RunReport) -> str:
    """``process 1.71 s from its start: interpreter and imports 1.2 s, ...`` ("" without a record)."""
    from ..timeline import PROCESS_PHASE_LABELS

    p = report.process or {}
    phases = p.get("phases") or {}
    wall = float(p.get("t_wall") or 0.0)
    if wall <= 0 or not phases:
        return ""
    parts = ", ".join(f"{PROCESS_PHASE_LABELS.get(k, k)} {float(v):.2f}" for k, v in phases.items() if v >= 0.005)
    start = "its start" if p.get("origin", "process start") == "process start" else "the run's start"
    return f"process {wall:.2f} s from {start}: {parts} s"


def run_summary(report: RunReport, out: str | None = None, report_path: str | None = None) -> str:
    """The one-screen summary printed after every run (also ``str(report)``)."""
    gb = report.bytes_read / 1e9
    t = report.t_total
    rate = (lambda x: x / t) if t > 0 else (lambda x: float("nan"))
    lines = [
        (f"{report.analysis} on {report.executor} x{report.n_workers}: {report.n_frames} frames x "
         f"{report.n_atoms} atoms read in {report.n_tasks} tasks"),
        f"  {t:.2f} s total, {rate(report.n_frames):,.0f} frames/s, {rate(gb):.2f} GB/s read ({gb:.3f} GB)",
    ]
    decoded = _decoded(report)
    if decoded:   # a compressed format's reader decodes more atoms than kept; the GB/s above counts the kept
        lines[-1] = lines[-1][:-1] + f" of the {report.n_atoms} selected atoms; {decoded})"
    t_io = sum(tk.t_io for tk in report.tasks)
    if t_io > 0:   # the storage's speed as the tasks saw it, apart from start-up and compute
        lines[-1] += f"; reads ran at {gb / t_io:.2f} GB/s per worker"
    net = report.fetched()
    if net["requests"]:   # a trajectory behind a URL: what its reads cost in requests
        root = net["prepare"]
        lines.append(f"  fetched {net['bytes'] / 1e6:.2f} MB in {net['requests']} requests"
                     + (f" ({root['requests']} preparing the job)" if root.get("requests") else "")
                     + f", {net['wait_s']:.2f} s waiting on the network, {net['retries']} retries")
        if report.source.validator:   # what would have shown the object replaced while it was read
            lines.append(f"  validator {report.source.validator}"
                         + ("" if report.source.validator_complete else " (a replacement may go unseen)"))
    proc = process_line(report)
    if proc:
        lines.append(f"  {proc}")
    shares = report.meta.analyses
    if shares:   # several analyses, one pass: the read is shared, the compute is each analysis's
        lines.append(f"  {len(shares)} analyses in one pass, each frame read once ({report.n_atoms} atoms, "
                     f"{t_io:.2f} s of reads); compute: "
                     + ", ".join(f"{a.name} {a.t_compute:.2f} s" for a in shares))
    choice = report.meta.executor_choice
    if choice is not None:
        lines.append(f"  executor {choice}")
    if out:
        lines.append(f"  results: {out}")
    if report_path:
        lines.append(f"  report:  {report_path}")
    from ..storage import redacted

    return redacted("\n".join(lines) + "\n" + short_report(report))   # (advice names the inputs)


class Report(RunReport):
    """A run's report as ``trajscale.run`` returns it: prints as its summary, carries its diagnosis into ``to_dict``."""

    def __str__(self) -> str:
        return run_summary(self)

    def to_dict(self, diagnosis: bool = True) -> dict:
        """Plain values; with ``diagnosis`` also the derived numbers, stragglers and advice."""
        d = super().to_dict()
        if diagnosis:
            d["diagnosis"] = diagnose(self).to_dict()
        return d
