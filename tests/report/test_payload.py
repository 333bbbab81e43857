"""What a run's job and partial results weigh when pickled, as its report records them for ``--predict``."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
from MDAnalysisTests.datafiles import DCD, PSF

from trajscale import RMSD, RMSF, run
from trajscale.report.payload import Payload, pickled_bytes


def test_pickled_bytes_counts_what_pickle_writes_without_copying():
    obj = {"positions": np.arange(30_000, dtype=np.float64).reshape(-1, 3), "name": "x" * 100,
           "indices": np.arange(5_000, dtype=np.int64)}
    inband = len(pickle.dumps(obj, protocol=5))
    # out-of-band buffers leave out a few framing bytes per array: the counts agree to within those
    assert abs(pickled_bytes(obj) - inband) <= 64 * 2
    assert pickled_bytes(obj) >= 30_000 * 8 + 5_000 * 8


@pytest.mark.parametrize("executor", ["serial", "processes"])
def test_a_run_records_its_job_and_partial_sizes(executor):
    """RMSF's partial holds a sum and a sum of squares per atom and coordinate (at least float64's 16 bytes;
    trajscale's exact sums take two 64-bit words each), whatever the frames; RMSD's is one row per frame."""
    n_atoms = 3341
    kw = {"executor": executor} if executor == "serial" else {"executor": executor, "n_workers": 2}
    rmsf = run(RMSF(select="all"), PSF, DCD, **kw).report.meta.payload
    assert rmsf is not None and not rmsf.per_frame
    assert 2 * n_atoms * 3 * 8 <= rmsf.partial_bytes <= 4 * n_atoms * 3 * 8 + 4096
    # the job carries the selection's indices at least
    assert rmsf.job_bytes >= n_atoms * 4
    short = run(RMSD(select="name CA"), PSF, DCD, stop=20, **kw).report.meta.payload
    full = run(RMSD(select="name CA"), PSF, DCD, **kw).report.meta.payload
    assert short.per_frame and full.per_frame and (short.frames, full.frames) == (20, 98)
    # one row per frame: 78 more frames add at least their frame index, time and value (8 bytes each)
    assert full.partial_bytes - short.partial_bytes >= 78 * 3 * 8


def test_a_payload_record_from_an_older_or_damaged_report_is_not_used():
    assert Payload.from_dict(None) is None
    assert Payload.from_dict({"job_bytes": 10}) is None
    assert Payload.from_dict({"job_bytes": -1, "partial_bytes": 0, "frames": 1, "per_frame": True}) is None
    assert Payload.from_dict({"job_bytes": "x", "partial_bytes": 0, "frames": 1, "per_frame": True}) is None


def _unpicklable_map(positions, box):
    """A user's partial that pickle cannot take (a generator)."""
    return (float(x) for x in positions[:, 0, 0])


def _first(partials):
    return partials[0]


def test_a_partial_that_cannot_be_pickled_leaves_the_sizes_out_not_the_run():
    """A serial run never pickles its partials: a user's accumulator may hold anything, and measuring
    its size must not fail the run that computed it."""
    from trajscale import Reduce

    r = run(Reduce(_unpicklable_map, _first, select="name CA"), PSF, DCD, stop=5, executor="serial")
    assert r.report.meta.payload is None
    assert sum(1 for _ in r.value) == 5   # the generator of the first block's frames, intact
    with pytest.raises(TypeError):
        pickle.dumps(_unpicklable_map(np.zeros((1, 1, 3)), None))


def test_the_assumptions_say_the_sizes_were_measured_and_which_launch_was_used():
    from trajscale.report.fit import fit
    from trajscale.report.machine import LaunchLine, Machine
    from trajscale.report.predict import model_assumptions

    report = run(RMSF(select="all"), PSF, DCD, executor="serial").report
    sizes = report.meta.payload
    machine = Machine(name="two", nodes=1, cores_per_node=2, launch=(LaunchLine("processes", 0.1, 0.04),))
    rows = {w: (v, o) for w, v, o in model_assumptions(fit(report, "processes"), machine)}
    value, origin = rows["pickled job and partial result"]
    assert origin == "measured in the report"
    assert value == f"{sizes.job_bytes / 1e6:.3g} MB job; {sizes.partial_bytes / 1e6:.3g} MB per task (accumulated)"
    assert rows["processes launch"][0] == "the machine's launch line"
    report.meta = dataclasses.replace(report.meta, payload=None)   # a report from before sizes
    assert model_assumptions(fit(report, "processes"), machine)[2][2] == "defaulted"


def test_a_followed_run_records_the_sizes_a_finished_run_does(tmp_path):
    """A run that followed a file to its end moved the same job and partials as a run over the finished file."""
    from tests.conftest import run_cli_here

    h5 = tmp_path / "t.h5md"
    assert run_cli_here("convert", PSF, DCD, "-o", str(h5)).returncode == 0   # marked complete: following ends
    followed = run(RMSF(select="name CA"), PSF, str(h5), follow=True, executor="serial").report.meta.payload
    finished = run(RMSF(select="name CA"), PSF, str(h5), executor="serial").report.meta.payload
    assert followed is not None and followed.frames == finished.frames == 98
    assert (followed.partial_bytes, followed.per_frame) == (finished.partial_bytes, False)
