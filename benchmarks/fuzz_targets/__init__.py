"""Fuzzing targets for ``benchmarks/fuzz.py``: each module defines ``TARGETS`` (see its docstring)."""
