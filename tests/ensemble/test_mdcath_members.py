"""A glob over mdCATH-shaped files is an ensemble of their members (the expansion hook): each member's
results are those of a run over that member alone, its topology the file's own."""

from __future__ import annotations

import numpy as np

import trajscale as ts


def test_a_glob_over_mdcath_files_runs_each_member(tmp_path, monkeypatch):
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    from trajscale.mdcath.source import universe
    from trajscale.testing.mdcath import from_universe

    monkeypatch.chdir(tmp_path)
    u = mda.Universe(PSF, DCD)
    for i, residues in enumerate(["1-60", "61-140"]):
        from_universe(f"mdcath_dataset_{i}abcA00.h5", u, domain=f"{i}abcA00", select=f"resid {residues}",
                      members=[("320", "0"), ("348", "1")], n_frames=12)
    ens = ts.Ensemble.from_glob(str(tmp_path / "mdcath_dataset_*.h5"))
    assert ens.names == ("0abcA00/320/0", "0abcA00/348/1", "1abcA00/320/0", "1abcA00/348/1")
    assert ens["1abcA00/348/1"].labels == {"domain": "1abcA00", "temperature": 348, "replica": 1}
    from trajscale.executors.processes import ProcessExecutor

    started, real_start = [], ProcessExecutor.start

    def start(self, modules=(), late=False):   # (the real start: only what it is handed is noted)
        started.append(tuple(modules))
        return real_start(self, modules, late)

    monkeypatch.setattr(ProcessExecutor, "start", start)
    r = ts.run(ts.RMSD(select="name CA"), ens, executor="processes", n_workers=2)
    assert not r.refused and len(r) == 4
    # the pool's workers start holding the members' own reader (a member's location, file#T/R, names no
    # format by its ending): not MDAnalysis, which no member's read or preparation imports
    assert started and "trajscale.mdcath.source" in started[0] and "MDAnalysis" not in started[0], started
    for m in ens:
        path = m.trajectory[0].split("#")[0]
        key = "/".join(m.name.split("/")[1:])
        alone = ts.run(ts.RMSD(select="name CA"), universe(path), f"{path}#{key}")
        assert np.array_equal(r[m.name].rmsd, alone.rmsd) and len(alone.rmsd) == 12
    table = r.columns()
    assert set(table["temperature"]) == {320, 348} and set(table["domain"]) == {"0abcA00", "1abcA00"}


def test_a_damaged_member_is_refused_alone(tmp_path):
    """A member whose numFrames disagrees with its coords (as one stored version of mdCATH's builder wrote
    it), and one whose forces have the wrong shape, are refused with their reasons; the others are analysed
    as the same file's sound members are alone."""
    import h5py
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    from trajscale.mdcath.source import universe
    from trajscale.testing.mdcath import from_universe

    u = mda.Universe(PSF, DCD)
    path = from_universe(str(tmp_path / "mdcath_dataset_1abcA00.h5"), u, domain="1abcA00", select="resid 1-60",
                         members=[("320", "0"), ("320", "1"), ("348", "0")], n_frames=6)
    with h5py.File(path, "r+") as f:
        f["1abcA00/320/0"].attrs["numFrames"] = 3
        g = f["1abcA00/348/0"]
        del g["forces"]
        g.create_dataset("forces", data=np.zeros((2, 7, 3), np.float32))
    r = ts.run(ts.RMSD(select="name CA"), str(tmp_path / "mdcath_dataset_*.h5"))
    reasons = {x.member.name: x.reason for x in r.refused}
    assert set(reasons) == {"1abcA00/320/0", "1abcA00/348/0"}
    assert "numFrames says 3 but coords holds 6 frames" in reasons["1abcA00/320/0"]
    assert "forces has shape (2, 7, 3)" in reasons["1abcA00/348/0"]
    assert r.names == ("1abcA00/320/1",)
    assert ts.Ensemble.of(path).names == ("1abcA00/320/0", "1abcA00/320/1", "1abcA00/348/0")   # one file, no glob
    alone = ts.run(ts.RMSD(select="name CA"), universe(path), f"{path}#320/1")
    assert np.array_equal(r["1abcA00/320/1"].rmsd, alone.rmsd)


def test_a_file_described_before_is_read_without_hdf5_until_it_changes(tmp_path, monkeypatch):
    """A second run over the same mdCATH files reads their members' layouts and atoms from trajscale's cache:
    HDF5 is not opened, and the φ/ψ are the first run's (which read the files' HDF5). A file rewritten since,
    even to the same size with its modification time set back, is described again, its new coordinates read."""
    import os

    import h5py
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    from trajscale.mdcath import atoms, layout
    from trajscale.testing.mdcath import from_universe
    from trajscale.util import LRU

    monkeypatch.setenv("TRAJSCALE_CACHE_DIR", str(tmp_path / "cache"))
    u = mda.Universe(PSF, DCD)
    paths = [from_universe(str(tmp_path / f"mdcath_dataset_{i}abcA00.h5"), u, domain=f"{i}abcA00",
                           select="resid 1-40", members=[("320", "0"), ("348", "1")], n_frames=5) for i in range(2)]
    opened, real_init = [], layout.hdf5_of.__init__

    def init(self, store, prepares=True):
        opened.append(store.identity[0])
        real_init(self, store, prepares)

    monkeypatch.setattr(layout.hdf5_of, "__init__", init)

    def run():
        monkeypatch.setattr(atoms, "_BY_FILE", LRU(atoms.KEPT))   # (what this process read: as a new process)
        monkeypatch.setattr(atoms, "_BY_CONTENT", LRU(atoms.KEPT))
        r = ts.run(ts.Ramachandran(select="protein", sincos=True), str(tmp_path / "mdcath_dataset_*.h5"),
                   executor="serial")
        assert not r.refused and len(r) == 4
        return dict(zip(r.names, r.arrays(), strict=True))

    first = run()
    assert opened
    opened.clear()
    again = run()
    assert opened == []
    assert all(np.array_equal(first[k], again[k]) for k in first)
    monkeypatch.setenv("TRAJSCALE_TOPOLOGY_CACHE", "0")   # (turned off with the topology caches)
    run()
    assert len(set(opened)) == 2
    opened.clear()
    monkeypatch.delenv("TRAJSCALE_TOPOLOGY_CACHE")

    st = os.stat(paths[1])
    with h5py.File(paths[1], "r+") as f:   # the same bytes' size: coordinates changed in place
        f["1abcA00/348/1/coords"][0] += 1.5
    os.utime(paths[1], ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(paths[1]).st_size == st.st_size
    changed = run()
    assert opened and all(o == os.path.realpath(paths[1]) for o in opened)
    assert not np.array_equal(changed["1abcA00/348/1"], first["1abcA00/348/1"])
    assert all(np.array_equal(changed[k], first[k]) for k in first if k != "1abcA00/348/1")


def test_short_members_are_prepared_by_the_workers_that_read_them(tmp_path, monkeypatch):
    """An mdCATH file's short members are prepared by the worker whose task reads them, as short trajectory
    files are: the root prepares one member (what preparing imports, learned before the pool starts), not
    every member before the pool has work. Their φ/ψ sin/cos are MDAnalysis's Ramachandran's on each
    member's own atoms and coordinates, and a pool's have the bits of one process's."""
    import h5py
    import MDAnalysis as mda
    from MDAnalysis.analysis.dihedrals import Ramachandran
    from MDAnalysis.coordinates.memory import MemoryReader
    from MDAnalysisTests.datafiles import DCD, PSF

    from trajscale.ensemble import prepare, rounds
    from trajscale.mdcath.source import universe
    from trajscale.testing.mdcath import from_universe

    u = mda.Universe(PSF, DCD)
    keys = [(t, r) for t in ("320", "348", "379", "413", "450") for r in ("0", "1")]
    paths = [from_universe(str(tmp_path / f"mdcath_dataset_{i}abcA00.h5"), u, domain=f"{i}abcA00",
                           select="resid 1-30", members=keys, n_frames=3, seed=i) for i in range(2)]
    on_root = []

    def counted(real):
        def prepare_member(index, member, *args, **kwargs):
            on_root.append(member.name)   # (a forked worker appends to its own copy of the list)
            return real(index, member, *args, **kwargs)
        return prepare_member

    monkeypatch.setattr(prepare, "prepare_member", counted(prepare.prepare_member))
    monkeypatch.setattr(rounds, "prepare_member", counted(rounds.prepare_member))
    glob = str(tmp_path / "mdcath_dataset_*.h5")
    got = {}
    # (serially with blocks of 128 kB: a member's 17 kB of coordinates, read whole, are within a quarter of one)
    for executor, n, block in (("processes", 2, None), ("serial", 1, 2**17)):
        on_root.clear()
        r = ts.run(ts.Ramachandran(select="protein", sincos=True), glob, executor=executor, n_workers=n,
                   **({"max_block_bytes": block} if block else {}))
        assert not r.refused and len(r) == 20
        assert len(on_root) == 1, (executor, on_root)   # (the first member: its preparation's imports learned)
        got[executor] = dict(zip(r.names, r.arrays(), strict=True))
    for name, a in got["serial"].items():
        np.testing.assert_array_equal(got["processes"][name], a)
    for i, path in enumerate(paths):
        ref = universe(path)
        with h5py.File(path, "r") as f:
            for t, rep in keys:
                ref.load_new(f[f"{i}abcA00/{t}/{rep}/coords"][()], format=MemoryReader)
                ang = np.deg2rad(Ramachandran(ref.select_atoms("protein")).run().results.angles)
                phi, psi = ang[:, :, 0], ang[:, :, 1]
                want = np.stack([np.sin(phi), np.cos(phi), np.sin(psi), np.cos(psi)], axis=2).reshape(len(ang), -1)
                np.testing.assert_allclose(got["serial"][f"{i}abcA00/{t}/{rep}"], want, atol=2e-5)
