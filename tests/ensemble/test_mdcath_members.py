"""A glob over mdCATH-shaped files is an ensemble of their members (the expansion hook): each member's
results are those of a run over that member alone, its topology the file's own."""

from __future__ import annotations

import numpy as np

import trajscale as ts


def test_a_glob_over_mdcath_files_runs_each_member(tmp_path, monkeypatch):
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    from trajscale.sources.mdcath import universe
    from trajscale.testing.mdcath import from_universe

    monkeypatch.chdir(tmp_path)
    u = mda.Universe(PSF, DCD)
    for i, residues in enumerate(["1-60", "61-140"]):
        from_universe(f"mdcath_dataset_{i}abcA00.h5", u, domain=f"{i}abcA00", select=f"resid {residues}",
                      members=[("320", "0"), ("348", "1")], n_frames=12)
    ens = ts.Ensemble.from_glob(str(tmp_path / "mdcath_dataset_*.h5"))
    assert ens.names == ("0abcA00/320/0", "0abcA00/348/1", "1abcA00/320/0", "1abcA00/348/1")
    assert ens["1abcA00/348/1"].labels == {"domain": "1abcA00", "temperature": 348, "replica": 1}
    r = ts.run(ts.RMSD(select="name CA"), ens, executor="processes", n_workers=2)
    assert not r.refused and len(r) == 4
    for m in ens:
        path = m.trajectory[0].split("#")[0]
        key = "/".join(m.name.split("/")[1:])
        alone = ts.run(ts.RMSD(select="name CA"), universe(path), f"{path}#{key}")
        assert np.array_equal(r[m.name].rmsd, alone.rmsd) and len(alone.rmsd) == 12
    table = r.columns()
    assert set(table["temperature"]) == {320, 348} and set(table["domain"]) == {"0abcA00", "1abcA00"}
