"""Helpers the tests and the benchmarks share (not part of the installed package)."""
