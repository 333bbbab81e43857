"""Run reports: timings, diagnosis, advice, tables, plots and traces; each name imported on first use."""

from __future__ import annotations

from .._lazy import attach

__all__ = ["Advice", "Diagnosis", "ExecutorChoice", "FollowFacts", "IOFacts", "RunFacts", "RunReport", "TaskTiming",
           "WorkerTiming", "diagnose", "short_report"]

__getattr__, __dir__ = attach(__name__, {
    "Advice": ".advice", "Diagnosis": ".diagnose", "diagnose": ".advice", "short_report": ".summary",
    "RunReport": ".timing", "TaskTiming": ".timing", "WorkerTiming": ".timing", "RunFacts": ".runfacts",
    "ExecutorChoice": ".runfacts", "FollowFacts": ".runfacts", "IOFacts": ".runfacts",
}, submodules=("advice", "metrics", "runfacts", "stragglers", "summary", "timing"))
