"""Test suites that every implementation of an interface passes (pytest classes to subclass)."""

from .conformance import SourceConformance, reference_frames, reference_meta

__all__ = ["SourceConformance", "reference_frames", "reference_meta"]
