"""The selection cache: a run on a cached topology and selection imports neither MDAnalysis nor SciPy,
gives MDAnalysis's RMSD, and is never served a stale entry (changed topology, another MDAnalysis).

Each run whose imports or use of the cache a test asserts is a fresh process (what a user's command or
script is); a first run that writes the entry a later process is (or is not) served runs in this process,
through the same ``trajscale.run`` (a process for it cost a second of CPU, importing MDAnalysis again). The
reference is MDAnalysis's own ``rms.RMSD`` in this process, computed once per topology's content.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from trajscale.topology import selection_cache

SEL = "protein and name CA"

#: Runs ts.run (or the CLI) in a new process; prints the RMSDs and the modules it imported.
DRIVER = r"""
import json, sys
mode, top, traj, sel, out = sys.argv[1:6]
if "--fake-version" in sys.argv:
    from trajscale.topology import selection_cache
    selection_cache.mdanalysis_version = lambda: "0.0.0-fake"
if mode == "api":
    import trajscale as ts
    rmsd = ts.run(ts.RMSD(select=sel), top, traj, executor="serial").rmsd.tolist()
else:
    from trajscale.cli.main import main
    rc = main(["-q", "run", "rmsd", top, traj, "--select", sel, "--executor", "serial", "--out", out])
    assert rc == 0, rc
    import csv
    rmsd = [float(row["rmsd"]) for row in csv.DictReader(open(out))]
mods = sorted({m.split(".")[0] for m in sys.modules})
print(json.dumps({"rmsd": rmsd, "modules": mods}))
"""


def _run(mode: str, top, traj, sel: str, tmp_path, *extra: str) -> dict:
    out = tmp_path / f"rmsd-{len(list(tmp_path.glob('rmsd-*')))}.csv"
    proc = subprocess.run([sys.executable, "-c", DRIVER, mode, str(top), str(traj), sel, str(out), *extra],
                          check=False, capture_output=True, text=True, timeout=300,
                          env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _populate(top, traj, sel: str) -> np.ndarray:
    """A run in this process on an empty cache: its RMSDs; a selection the cache may hold is in the entry it
    writes (the later processes' subject)."""
    import trajscale as ts

    before = set(selection_cache.cache_dir().glob("*.json"))
    rmsd = ts.run(ts.RMSD(select=sel), str(top), str(traj), executor="serial").rmsd
    if selection_cache.cacheable((sel,)):
        new = set(selection_cache.cache_dir().glob("*.json")) - before
        assert len(new) == 1   # the entry the next run may be served, holding this selection
        assert selection_cache.selection_key((sel,)) in json.loads(new.pop().read_text())["selections"]
    return rmsd


#: MDAnalysis's RMSDs by (topology's content, trajectory, selection): each test's private copy of the PSF
#: has the same atoms, so the reference is computed once, not once per test.
_REFERENCE: dict[tuple[str, str, str], np.ndarray] = {}


def _mda_rmsd(top, traj, sel: str) -> np.ndarray:
    import MDAnalysis as mda
    from MDAnalysis.analysis import rms

    key = (hashlib.sha256(Path(top).read_bytes()).hexdigest(), str(traj), sel)
    if key not in _REFERENCE:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _REFERENCE[key] = rms.RMSD(mda.Universe(str(top), str(traj)), select=sel).run().results.rmsd[:, 2]
    return _REFERENCE[key]


def _not_imported(got: dict) -> list[str]:
    """The modules a cached run must not import that it did."""
    forbidden = {"MDAnalysis", "scipy", "tqdm"}   # tqdm: a run without a progress bar needs none
    if "numba" in got["modules"]:
        forbidden.discard("scipy")   # numba imports SciPy itself; it leaves with the compiled kernels (issue 23)
    return sorted(forbidden & set(got["modules"]))


@pytest.fixture
def system(tmp_path, monkeypatch, adk_vacuum, adk_vacuum_h5md):
    """A private copy of the AdK PSF (to touch and edit), the H5MD trajectory, and an empty cache."""
    monkeypatch.setenv("TRAJSCALE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRAJSCALE_TOPOLOGY_CACHE", raising=False)
    top = tmp_path / "adk.psf"
    shutil.copyfile(adk_vacuum[0], top)
    return top, adk_vacuum_h5md


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
@pytest.mark.parametrize("mode", ["api", "cli"])
def test_cached_run_imports_neither_mdanalysis_nor_scipy(system, tmp_path, mode):
    top, traj = system
    first = _run(mode, top, traj, SEL, tmp_path)
    assert "MDAnalysis" in first["modules"]   # the first run parses the topology and evaluates the selection
    second = _run(mode, top, traj, SEL, tmp_path)
    assert _not_imported(second) == []
    want = _mda_rmsd(top, traj, SEL)
    np.testing.assert_allclose(second["rmsd"], want, atol=1e-4, rtol=0)
    np.testing.assert_allclose(first["rmsd"], want, atol=1e-4, rtol=0)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_changed_topology_is_not_served_from_the_cache(system, tmp_path, adk_vacuum):
    top, traj = system
    _populate(top, traj, SEL)
    # Rename a quarter of the CA atoms (same width: the file keeps its size): "name CA" now selects fewer.
    lines = top.read_text().splitlines(keepends=True)
    ca = [i for i, line in enumerate(lines) if len(line.split()) > 8 and line.split()[4] == "CA"]
    assert len(ca) == 214
    for i in ca[::4]:
        lines[i] = lines[i].replace(" CA ", " CX ", 1)
    before = os.stat(top)
    top.write_text("".join(lines))
    os.utime(top, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))   # an edit a second later
    assert os.stat(top).st_size == before.st_size
    got = _run("api", top, traj, SEL, tmp_path)
    assert "MDAnalysis" in got["modules"]   # the stale entry was not used
    np.testing.assert_allclose(got["rmsd"], _mda_rmsd(top, traj, SEL), atol=1e-4, rtol=0)
    assert not np.allclose(got["rmsd"], _mda_rmsd(adk_vacuum[0], traj, SEL), atol=1e-4)   # other atoms now


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_touched_topology_is_not_served_from_the_cache(system, tmp_path):
    top, traj = system
    _populate(top, traj, SEL)
    st = os.stat(top)
    os.utime(top, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    got = _run("api", top, traj, SEL, tmp_path)
    assert "MDAnalysis" in got["modules"]
    np.testing.assert_allclose(got["rmsd"], _mda_rmsd(top, traj, SEL), atol=1e-4, rtol=0)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_another_mdanalysis_version_is_not_served_from_the_cache(system, tmp_path):
    top, traj = system
    _populate(top, traj, SEL)
    got = _run("api", top, traj, SEL, tmp_path, "--fake-version")
    assert "MDAnalysis" in got["modules"]
    np.testing.assert_allclose(got["rmsd"], _mda_rmsd(top, traj, SEL), atol=1e-4, rtol=0)
    assert _not_imported(_run("api", top, traj, SEL, tmp_path)) == []   # the real version's entry still serves


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_coordinate_dependent_selection_goes_through_mdanalysis(system, tmp_path, adk_vacuum):
    """``around`` depends on the first frame: a second trajectory (other first frame) must not get the
    first one's atoms."""
    from trajscale.convert.convert import convert
    from trajscale.h5md.layout import Layout

    top, traj = system
    later = tmp_path / "from50.h5md"
    convert(adk_vacuum[0], [adk_vacuum[1]], str(later), layout=Layout.parse("frame"), start=50)
    sel = "name CA and resid 30:59 and around 12 resid 122:159"   # 27 atoms at frame 0, 12 at frame 50
    np.testing.assert_allclose(_populate(top, traj, sel), _mda_rmsd(top, traj, sel), atol=1e-4, rtol=0)
    got = _run("api", top, later, sel, tmp_path)
    np.testing.assert_allclose(got["rmsd"], _mda_rmsd(top, later, sel), atol=1e-4, rtol=0)
    assert "MDAnalysis" in got["modules"]


@pytest.mark.parametrize("sel", [
    "name CA and around 5 resid 10", "byres around 3.5 resid 1", "point 1 2 3 4", "sphzone 6 resid 1",
    "sphlayer 2 6 resid 1", "isolayer 2 6 resid 1", "cyzone 5 10 -10 resid 1", "cylayer 2 5 10 -10 resid 1",
    "prop x > 5", "prop z<2", "same x as resid 1", "same  Z  as name CA", "smarts c1ccccc1",
])
def test_coordinate_dependent_selections_are_not_cacheable(sel):
    assert not selection_cache.cacheable((sel,))
    assert not selection_cache.cacheable(("protein", sel))


@pytest.mark.parametrize("sel", ["protein and name CA", "same residue as name CA", "byres name CA",
                                 "backbone or resname SOL", "index 0:10", "mass > 12"])
def test_topology_selections_are_cacheable(sel):
    assert selection_cache.cacheable((sel,))


def test_entry_round_trips_exactly(tmp_path, monkeypatch):
    """Indices and masses come back bit for bit (float64 masses, int64 indices), from JSON only."""
    monkeypatch.setenv("TRAJSCALE_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(0)
    masses = rng.random(1000) * 30
    idx = np.sort(rng.choice(10**6, 1000, replace=False)).astype(np.int64)
    for a in (masses, idx):
        b = selection_cache.decode(json.loads(json.dumps(selection_cache.encode(a))))
        assert b.dtype == a.dtype and np.array_equal(a, b)
    with pytest.raises(ValueError):   # an entry can hold numbers only, never objects
        selection_cache.decode({"dtype": "|O", "shape": [0], "data": ""})


def test_a_compressed_entry_round_trips_and_a_hostile_one_is_refused():
    """A topology's per-atom numbers are stored deflated: they come back bit for bit; an entry whose bytes
    inflate to more or less than its shape (a damaged file, or a planted deflate bomb) is refused (and the
    record read again from the topology), never inflated past the size its shape says."""
    import base64
    import zlib

    resids = np.repeat(np.arange(1, 16_001, dtype=np.int64), 3)   # a solvated system's residue numbers
    stored = selection_cache.encode(resids, compress=True)
    assert len(stored["zlib"]) < resids.nbytes / 5
    back = selection_cache.decode(json.loads(json.dumps(stored)))
    assert back.dtype == resids.dtype and np.array_equal(back, resids)
    bomb = base64.b64encode(zlib.compress(bytes(2**26), 1)).decode("ascii")   # 64 MiB of zeros, ~300 kB stored
    for hostile in ({"dtype": "<i8", "shape": [8], "zlib": bomb},
                    {"dtype": "<i8", "shape": [8], "zlib": base64.b64encode(zlib.compress(bytes(8))).decode()}):
        with pytest.raises(ValueError, match="size is not its shape"):
            selection_cache.decode(hostile)


def test_labels_of_a_solvated_system_come_back_as_mdanalysis_reads_them(cache):
    """AdK in water's labels (47,681 atoms: names, residues, segments and masses), kept as each text's
    distinct values and every atom's code, equal MDAnalysis's own."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import TPR

    from trajscale.topology import atom_labels

    atoms = mda.Universe(TPR).atoms
    first = atom_labels(TPR)[1]
    n_atoms, labels = atom_labels(TPR)   # from the cache
    assert n_atoms == atoms.n_atoms
    for got in (first, labels):
        for label, attr in (("name", "names"), ("resname", "resnames"), ("segid", "segids")):
            assert got[label].dtype.kind == "U"
            np.testing.assert_array_equal(got[label], getattr(atoms, attr).astype(str))
        np.testing.assert_array_equal(got["resid"], atoms.resids)
        np.testing.assert_array_equal(got["mass"], atoms.masses)


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
@pytest.mark.cli
def test_entries_others_may_write_are_not_used(system, tmp_path):
    """A folder that group or others may write could hold planted entries (wrong atoms): never read."""
    top, traj = system
    _populate(top, traj, SEL)
    folder = tmp_path / "cache" / "selections"
    assert len(list(folder.glob("*.json"))) == 1
    folder.chmod(0o775)
    got = _run("api", top, traj, SEL, tmp_path)
    assert "MDAnalysis" in got["modules"]
    np.testing.assert_allclose(got["rmsd"], _mda_rmsd(top, traj, SEL), atol=1e-4, rtol=0)


def test_a_files_labels_are_kept_apart_from_its_selections(cache, parses):
    """Every atom's labels are several times the selections' size: a run that names no feature (which
    reads the selections' entry) does not parse them."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import PSF

    from trajscale.topology import atom_labels

    n_atoms, labels = atom_labels(PSF)
    again = atom_labels(PSF)[1]
    atoms = mda.Universe(PSF).atoms
    assert n_atoms == atoms.n_atoms
    for got in (labels, again):
        np.testing.assert_array_equal(got["name"], atoms.names)
        np.testing.assert_array_equal(got["resid"], atoms.resids)
    assert len(parses) == 2   # the labels once, the reference once: the second read came from the cache
    selections = selection_cache.load(selection_cache.entry_key(PSF, {}))
    assert set(selections) == {"key", "n_atoms", "selections"}


def test_an_ensembles_distinct_topologies_all_stay_cached(tmp_path, monkeypatch):
    """Members with a topology each: a cache bounded to a few dozen entries dropped the first of a hundred
    distinct topologies before a second run could read it, so that every run parsed them all again."""
    monkeypatch.setenv("TRAJSCALE_CACHE_DIR", str(tmp_path))
    key = {"format": selection_cache.FORMAT, "file": ["/x", 1, 2, 3], "mdanalysis": "2.11.0", "kw": []}
    keys = [{**key, "file": [f"/members/{i}/top.pdb", i, 2, 3]} for i in range(200)]
    for k in keys:
        selection_cache.store({"key": k, "n_atoms": 3, "selections": {"[\"all\"]": {}}})
    assert all(selection_cache.load(k)["n_atoms"] == 3 for k in keys)


def test_labels_read_from_a_universe_built_are_cached_for_the_next_run(cache, parses):
    """A topology's first run builds its Universe; the features it names take their labels from it and
    leave them in the cache (they were cached only by the run after, which parsed the file again)."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import PSF

    from trajscale.analysis.residues import atom_table
    from trajscale.topology import CachedUniverse, atom_labels

    top = CachedUniverse(PSF, lambda: mda.Universe(PSF))
    top.select_atoms("name CA")   # (builds the Universe: a selection new to the cache)
    table = atom_table(top)
    assert len(parses) == 1
    n_atoms, labels = atom_labels(PSF)   # the next run's question
    assert len(parses) == 1
    atoms = mda.Universe(PSF).atoms
    assert n_atoms == atoms.n_atoms
    np.testing.assert_array_equal(labels["resid"], atoms.resids)
    np.testing.assert_array_equal(table.name, atoms.names)


def test_a_topology_served_from_the_cache_gives_each_selection_its_own_arrays(cache, parses):
    """The members of an ensemble share one CachedUniverse and ask it the same selection each: its stored
    arrays are decoded once, and every answer is MDAnalysis's selection in arrays of its own (a member that
    changed its indices or masses would otherwise change the next member's)."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import PSF

    from trajscale.topology import CachedUniverse

    ref = mda.Universe(PSF).select_atoms(SEL)
    CachedUniverse(PSF, lambda: mda.Universe(PSF)).select_atoms(SEL).masses   # noqa: B018 - recorded for the next
    n = len(parses)
    shared = CachedUniverse(PSF, lambda: pytest.fail("the cached selection built a Universe"))
    first, second = shared.select_atoms(SEL), shared.select_atoms(SEL)
    assert len(parses) == n
    for group in (first, second):
        np.testing.assert_array_equal(group.indices, ref.indices)
        np.testing.assert_array_equal(group.masses, ref.masses)
    first.indices[:] = -1
    first._masses[:] = -1.0
    third = shared.select_atoms(SEL)
    for group in (second, third):
        np.testing.assert_array_equal(group.indices, ref.indices)
        np.testing.assert_array_equal(group.masses, ref.masses)
