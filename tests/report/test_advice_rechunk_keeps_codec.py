"""Run advice that says "rechunk" keeps the file's compression and precision: following it must not
decompress a compressed file or turn a lossy one into plain floats.

Reference: the input file itself, read with h5py (its filters, its lossy attributes, its stored values).
"""

from __future__ import annotations

import shlex

import h5py
import numpy as np
import pytest
from MDAnalysisTests import datafiles as D

from tests.conftest import run_cli_here
from tests.report._synth import make_report
from trajscale.convert.convert import convert
from trajscale.h5md.layout import Layout
from trajscale.report import diagnose
from trajscale.report.advice import RULES
from trajscale.sources import H5MDSource

POS = "particles/all/position/value"
AMP_SUBSET_ONLY = {"one frame": 8.0, "block of 100 frames": 1.28, "150-atom subset, 100 frames": 21.0}


def _attrs(ds) -> dict:
    """A dataset's attributes, comparable with == (arrays as lists)."""
    return {k: np.asarray(v).tolist() for k, v in ds.attrs.items()}


def _filters(ds) -> list[tuple]:
    plist = ds.id.get_create_plist()
    return [plist.get_filter(i)[:3] for i in range(plist.get_nfilters())]


@pytest.mark.parametrize("encoding", [None, "floats", "deltas"])
def test_following_the_rechunk_advice_keeps_compression_and_precision(tmp_path, encoding):
    src = tmp_path / "slow.h5md"
    lossy = {} if encoding is None else {"precision": 0.01, "encoding": encoding}
    convert(D.PSF, [D.DCD], str(src), layout=Layout.parse("7", "gzip:3"), **lossy)   # not the planned chunks
    with H5MDSource(str(src)) as s:
        facts = s.layout_summary()
    report = make_report(n_workers=2, n_atoms=214, source={**facts.to_dict(), "read_amplification": AMP_SUBSET_ONLY})
    for rule, want in (("chunk-amplification", "--chunks auto"), ("imbalance", None)):
        if rule == "imbalance":   # the imbalance rule's rechunk (to smaller chunks for more tasks)
            report = make_report(n_workers=4, tasks_per_worker=[1, 1, 1, 2], frames_per_task=10, source=facts)
        advice = RULES[rule](report, diagnose(report))
        assert advice is not None, rule
        cmd = advice.message.split("`")[1]
        assert cmd.startswith("trajscale rechunk ") and (want is None or want in cmd), cmd
        out = tmp_path / f"{rule}.h5md"
        args = shlex.split(cmd)[2:]
        args[args.index("-o") + 1] = str(out)
        r = run_cli_here("rechunk", *args, "--no-progress")
        assert r.returncode == 0, r.stderr
        with h5py.File(src) as a, h5py.File(out) as b:
            assert _filters(b[POS]) == _filters(a[POS]), cmd   # gzip level 3 (and shuffle) kept
            assert b[POS].chunks != a[POS].chunks
            assert _attrs(b[POS]) == _attrs(a[POS]), cmd
            np.testing.assert_array_equal(b[POS][()], a[POS][()])   # the stored values, not decoded ones
