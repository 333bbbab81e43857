"""Test suites that every implementation of an interface passes (pytest classes to subclass)."""

from .conformance import SourceConformance, reference_frames, reference_meta
from .executors import ExecutorConformance

__all__ = ["ExecutorConformance", "SourceConformance", "reference_frames", "reference_meta"]
