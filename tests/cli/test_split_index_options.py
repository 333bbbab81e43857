"""``trajscale split --assume-units`` and ``trajscale index --group/--assume-units`` (kept in the index)."""

from __future__ import annotations

import h5py
import MDAnalysis as mda
import numpy as np
from MDAnalysis.analysis import rms
from MDAnalysis.coordinates.memory import MemoryReader

import trajscale as ts
from tests.cli._helpers import adk_positions, assert_clean_failure, write_two_groups, write_without_units
from tests.conftest import run_cli_here
from trajscale.sources import SegmentedSource


def test_split_states_the_units_of_an_input_without_them(tmp_path, adk_vacuum):
    pos = adk_positions(adk_vacuum)
    nounit = tmp_path / "nounit.h5md"
    write_without_units(nounit, pos)   # nm, unstated
    out = tmp_path / "parts"
    assert_clean_failure(run_cli_here("split", str(nounit), "-o", str(out), "--parts", "2"), "--assume-units")
    ok = run_cli_here("split", str(nounit), "-o", str(out), "--parts", "2", "--assume-units", "nm")
    assert ok.returncode == 0, ok.stderr
    with SegmentedSource(out) as src:   # the parts state their units: no option needed to read them
        assert src.n_frames == 10 and len(src.segments) == 2
        np.testing.assert_allclose(src.read(0, 10).positions, pos, atol=1e-4)


def test_index_reads_the_chosen_group_and_keeps_it(tmp_path, adk_vacuum):
    top = adk_vacuum[0]
    pos = adk_positions(adk_vacuum)
    a, b = tmp_path / "a.h5md", tmp_path / "b.h5md"
    for path, shift in ((a, 0.0), (b, 100.0)):   # two parts, the second later in time
        write_two_groups(path, pos)
        with h5py.File(path, "r+") as f:
            for fl in ("position", "velocity", "force"):
                f[f"particles/protein/{fl}/time"][...] += shift
            f["particles/solvent/position/time"][...] += shift
    index = tmp_path / "traj.index.json"
    assert_clean_failure(run_cli_here("index", str(a), str(b), "-o", str(index)), "protein, solvent", "--group")
    ok = run_cli_here("index", str(a), str(b), "-o", str(index), "--group", "protein")
    assert ok.returncode == 0, ok.stderr
    # the run needs no --group: the index says which one
    got = ts.run(ts.RMSD(select="name CA"), top, str(index), n_tasks=2).rmsd
    u = mda.Universe(top, np.concatenate([pos, pos]), format=MemoryReader, order="fac")
    ref = rms.RMSD(u, select="name CA").run().results.rmsd[:, 2]
    np.testing.assert_allclose(got, ref, atol=1e-4)
