"""Fixtures of the topology-cache tests: a private cache folder, and a count of the PSF parser's runs."""

from __future__ import annotations

import pytest
from MDAnalysis.topology.PSFParser import PSFParser


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAJSCALE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRAJSCALE_TOPOLOGY_CACHE", raising=False)
    return tmp_path / "cache" / "topologies"


@pytest.fixture
def parses(monkeypatch):
    """Counts the PSF parser's runs."""
    calls = []
    orig = PSFParser.parse
    monkeypatch.setattr(PSFParser, "parse", lambda self, **kw: (calls.append(1), orig(self, **kw))[1])
    return calls
