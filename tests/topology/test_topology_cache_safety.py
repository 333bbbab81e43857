"""The topology cache never unpickles what another user could have written, and never prunes
another writer's temporary file."""

from __future__ import annotations

import logging
import os
import stat

import MDAnalysis as mda

from tests.topology.test_topology_cache import _same_universe
from trajscale.topology import load_universe
from trajscale.topology import parsed_cache as topology_cache


def _load_twice(adk_vacuum):
    load_universe(adk_vacuum[0], [adk_vacuum[1]])
    return load_universe(adk_vacuum[0], [adk_vacuum[1]])


def test_folder_is_created_private(cache, adk_vacuum):
    load_universe(adk_vacuum[0], [adk_vacuum[1]])
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    (entry,) = cache.glob("*.pkl")
    assert stat.S_IMODE(entry.stat().st_mode) & 0o077 == 0


def test_group_writable_entry_is_not_loaded(cache, parses, adk_vacuum, caplog):
    ref = mda.Universe(*adk_vacuum)
    topology_cache._warned.clear()
    load_universe(adk_vacuum[0], [adk_vacuum[1]])
    (entry,) = cache.glob("*.pkl")
    entry.chmod(0o664)
    parses.clear()
    with caplog.at_level(logging.WARNING, logger="trajscale.topology.parsed_cache"):
        for _ in range(3):
            _same_universe(load_universe(adk_vacuum[0], [adk_vacuum[1]]), ref)
    # parsed once instead of unpickling the entry, which is then replaced by a private one
    assert len(parses) == 1
    warnings = [r for r in caplog.records if "writable by group" in r.getMessage()]
    assert len(warnings) == 1 and str(entry) in warnings[0].getMessage()
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600


def test_foreign_entry_and_folder_are_not_loaded(cache, parses, adk_vacuum, caplog):
    if os.getuid() != 0:
        import pytest

        pytest.skip("chown to another user needs root")
    topology_cache._warned.clear()
    load_universe(adk_vacuum[0], [adk_vacuum[1]])
    (entry,) = cache.glob("*.pkl")
    os.chown(entry, 65534, 65534)   # nobody
    parses.clear()
    with caplog.at_level(logging.WARNING, logger="trajscale.topology.parsed_cache"):
        load_universe(adk_vacuum[0], [adk_vacuum[1]])
    assert len(parses) == 1 and "owned by uid 65534" in caplog.text
    os.chown(entry, 0, 0)
    os.chown(cache, 65534, 65534)
    parses.clear()
    with caplog.at_level(logging.WARNING, logger="trajscale.topology.parsed_cache"):
        load_universe(adk_vacuum[0], [adk_vacuum[1]])
    assert len(parses) == 1 and caplog.text.count("owned by uid 65534") == 2   # the entry, then the folder


def test_world_writable_folder_is_not_used(cache, parses, adk_vacuum, caplog):
    topology_cache._warned.clear()
    cache.mkdir(parents=True)
    cache.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="trajscale.topology.parsed_cache"):
        _load_twice(adk_vacuum)
    assert len(parses) == 2 and not list(cache.iterdir())
    assert len([r for r in caplog.records if "writable by group and others" in r.getMessage()]) == 1


def test_symlinked_entry_is_not_followed(cache, parses, adk_vacuum, tmp_path):
    topology_cache._warned.clear()
    load_universe(adk_vacuum[0], [adk_vacuum[1]])
    (entry,) = cache.glob("*.pkl")
    elsewhere = tmp_path / "planted.pkl"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    parses.clear()
    load_universe(adk_vacuum[0], [adk_vacuum[1]])
    assert len(parses) == 1


def test_pruning_spares_other_writers_temporaries(cache, adk_vacuum, monkeypatch):
    monkeypatch.setattr(topology_cache, "MAX_ENTRIES", 2)
    cache.mkdir(parents=True, mode=0o700)
    temp = cache / ".tmp-abc123.pkl"   # another process is writing this entry right now
    temp.write_bytes(b"partial")
    old = [cache / f"{i:032x}.pkl" for i in range(3)]
    for i, p in enumerate(old):
        p.write_bytes(b"x")
        os.utime(p, (1000 + i, 1000 + i))
    os.utime(temp, (1, 1))   # oldest of all
    load_universe(adk_vacuum[0], [adk_vacuum[1]])
    assert temp.exists()
    finished = sorted(p.name for p in cache.glob("*.pkl") if not p.name.startswith("."))
    assert len(finished) == 2 and old[2].name in finished   # the new entry and the newest old one
