"""The same bits on every executor and split: every analysis, random task counts and block sizes.

Per-frame results concatenate in frame order; accumulating ones (RMSF, the average structure,
the RDF's counts and box volumes) add exact integers, so no split may change a single bit.
The reference is a serial run in one task and one block; the comparison is ``np.array_equal``.
"""

from __future__ import annotations

import numpy as np
import pytest

import trajscale as ts
from tests.analysis.analyses_cases import SYSTEMS
from tests.analysis.same_bits_cases import ANALYSES, SYSTEM, TOPOLOGY, result_arrays
from tests.conftest import run_mpi
from trajscale.convert.convert import convert
from trajscale.h5md.layout import Layout


def test_the_scripts_topology_is_the_systems():
    """same_bits_cases.TOPOLOGY (what the MPI ranks read) is the system's topology here."""
    assert TOPOLOGY == SYSTEMS[SYSTEM][0]


@pytest.fixture(scope="module")
def h5md(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("bits") / "water.h5md")
    convert(*SYSTEMS[SYSTEM][:1], [SYSTEMS[SYSTEM][1]], path, layout=Layout.parse("frame"))
    return path


@pytest.fixture(scope="module")
def reference(h5md):
    """Each analysis serially in one task and one block."""
    return {name: result_arrays(ts.run(make(SYSTEM), SYSTEMS[SYSTEM][0], h5md, n_tasks=1))
            for name, make in ANALYSES.items()}


@pytest.fixture(scope="module")
def pool():
    with ts.make_executor("processes", 2) as ex:
        yield ex


def assert_same_bits(got: dict, want: dict, what: str) -> None:
    assert got.keys() == want.keys(), what
    for k in want:
        floats = np.issubdtype(want[k].dtype, np.inexact)   # (labels are strings: no NaN to tell)
        assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k], equal_nan=floats), \
            f"{what}: {k} differs by up to {np.nanmax(np.abs(got[k] - want[k])):.3g}"


def test_any_split_gives_the_same_bits(h5md, reference, pool):
    """Random task counts and block sizes, serial or on processes(2): np.array_equal with one task."""
    # hypothesis imported here, not at the module's top: every pytest worker would pay its import at collection
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=12, deadline=None)
    @given(name=st.sampled_from(sorted(ANALYSES)), n_tasks=st.integers(1, 11),
           block_frames=st.integers(1, 40), on_pool=st.booleans())
    def split(name, n_tasks, block_frames, on_pool):
        n_atoms = 4000   # an upper bound of the bytes a frame of these selections costs, for the block budget
        r = ts.run(ANALYSES[name](SYSTEM), SYSTEMS[SYSTEM][0], h5md, executor=pool if on_pool else "serial",
                   n_tasks=n_tasks, max_block_bytes=block_frames * n_atoms * 12)
        assert_same_bits(result_arrays(r), reference[name], f"{name}, {n_tasks} tasks, blocks of ~{block_frames}")

    split()


@pytest.mark.slow(seconds=2)   # out of the quick tier: whole runs or a cluster, ~2 s of CPU
def test_dask_gives_the_same_bits(h5md, reference):
    pytest.importorskip("distributed")
    with ts.make_executor("dask", 2) as ex:
        for name, make in ANALYSES.items():
            r = ts.run(make(SYSTEM), SYSTEMS[SYSTEM][0], h5md, executor=ex, n_tasks=7,
                       max_block_bytes=5 * 4000 * 12)
            assert_same_bits(result_arrays(r), reference[name], f"dask: {name}")


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.parametrize("ranks,n_tasks", [(2, 3), (3, 8)])
def test_mpi_gives_the_same_bits(tmp_path, h5md, reference, ranks, n_tasks):
    pytest.importorskip("mpi4py")
    out = tmp_path / "mpi.npz"
    script = str(__import__("pathlib").Path(__file__).with_name("same_bits_script.py"))
    proc = run_mpi(ranks, [script, SYSTEM, h5md, str(n_tasks), str(out)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(out)
    for name, want in reference.items():
        assert_same_bits({k: got[f"{name}__{k}"] for k in want}, want, f"mpi -n {ranks}: {name}")
