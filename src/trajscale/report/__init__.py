"""Run reports: timings (:mod:`.timing`), diagnosis and advice (:mod:`.diagnose`),
text tables (:mod:`.table`), plots (:mod:`.plots`, needs matplotlib) and
Chrome/Perfetto traces (:mod:`.trace`)."""

from __future__ import annotations

from .advice import Advice
from .diagnose import Diagnosis, diagnose
from .summary import short_report
from .timing import RunReport, TaskTiming, WorkerTiming

__all__ = ["Advice", "Diagnosis", "RunReport", "TaskTiming", "WorkerTiming", "diagnose", "short_report"]
