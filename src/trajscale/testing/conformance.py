"""The Source conformance suite: what every :class:`~trajscale.sources.base.Source` must do.

Subclass :class:`SourceConformance` in a test module and give it two fixtures:

``make_source``
    A callable returning a fresh, open Source (the suite closes it).
``universe``
    An MDAnalysis Universe over the same trajectory: the independent reference.

>>> class TestMySource(SourceConformance):
...     @pytest.fixture
...     def make_source(self, my_file):
...         return lambda: MySource(my_file)
...     @pytest.fixture
...     def universe(self, my_file):
...         return mda.Universe(TOP, my_file)

Every test compares with MDAnalysis's own reader, never with another trajscale Source.
"""

from __future__ import annotations

import numpy as np
import pytest

from ..block import FIELD_ATTRS
from ..errors import TrajscaleError

#: Values a Source converts (units) may differ from MDAnalysis's in the last float32 bits.
ATOL = 1e-4


def reference_frames(universe, start: int, stop: int, atoms=None, field: str = "position") -> np.ndarray:
    """(F, N, 3) float64 of ``field`` for frames ``[start, stop)`` from MDAnalysis's reader."""
    sel = slice(None) if atoms is None else np.asarray(atoms)
    attr = FIELD_ATTRS[field]
    return np.array([getattr(ts, attr)[sel].astype(np.float64) for ts in universe.trajectory[start:stop]])


def reference_meta(universe, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Box (F, 6) (zeros without a box) and time (F,) from MDAnalysis's reader."""
    boxes, times = [], []
    for ts in universe.trajectory[start:stop]:
        boxes.append(np.zeros(6) if ts.dimensions is None else ts.dimensions.astype(np.float64))
        times.append(ts.time)
    return np.array(boxes).reshape(-1, 6), np.array(times, dtype=np.float64)


class SourceConformance:
    """Tests every Source passes; see the module docstring for the two fixtures it needs."""

    #: Random frame ranges / atom subsets per test (seeded: failures reproduce).
    n_cases = 4
    seed = 20261123

    @pytest.fixture
    def source(self, make_source):
        src = make_source()
        try:
            yield src
        finally:
            src.close()

    @pytest.fixture
    def rng(self):
        return np.random.default_rng(self.seed)

    # ------------------------------------------------------------ shape and counts

    def test_counts_equal_mdanalysis(self, source, universe):
        assert source.n_frames == universe.trajectory.n_frames
        assert source.n_atoms == universe.atoms.n_atoms
        assert "position" in source.fields
        assert source.chunk_frames >= 1
        assert isinstance(source.path, str) and source.path

    def test_block_types_and_frames(self, source):
        stop = min(3, source.n_frames)
        b = source.read(0, stop)
        assert b.start == 0 and b.stop == stop and b.n_frames == stop
        assert b.positions.dtype == np.float32 and b.positions.shape == (stop, source.n_atoms, 3)
        assert b.box.dtype == np.float32 and b.box.shape == (stop, 6)
        assert b.time.dtype == np.float64 and b.time.shape == (stop,)
        assert b.step.dtype == np.int64 and b.step.shape == (stop,)
        np.testing.assert_array_equal(b.frames, np.arange(stop))

    # ------------------------------------------------------------ values

    def test_random_frame_ranges_equal_mdanalysis(self, source, universe, rng):
        n = source.n_frames
        ranges = [(0, n), (n - 1, n)] + [tuple(sorted(rng.integers(0, n + 1, 2))) for _ in range(self.n_cases)]
        for start, stop in ranges:
            b = source.read(int(start), int(stop))
            assert b.n_frames == stop - start
            np.testing.assert_allclose(b.positions, reference_frames(universe, start, stop).reshape(b.positions.shape),
                                       atol=ATOL, rtol=1e-6, err_msg=f"frames [{start}, {stop})")

    def test_atom_subsets_equal_mdanalysis(self, source, universe, rng):
        n_at, n = source.n_atoms, source.n_frames
        subsets = [np.array([0]), np.array([n_at - 1]), np.array([0, n_at - 1]),   # scattered ends
                   np.arange(n_at // 3, n_at // 3 + max(1, n_at // 10))]           # one contiguous run
        subsets += [np.sort(rng.choice(n_at, size=int(rng.integers(1, min(n_at, 500) + 1)), replace=False))
                    for _ in range(self.n_cases)]
        for atoms in subsets:
            start, stop = sorted(int(x) for x in rng.integers(0, n + 1, 2))
            stop = max(stop, start + 1) if start < n else n
            b = source.read(start, stop, atoms)
            assert b.positions.shape == (stop - start, len(atoms), 3)
            np.testing.assert_allclose(b.positions, reference_frames(universe, start, stop, atoms).reshape(
                b.positions.shape), atol=ATOL, rtol=1e-6, err_msg=f"atoms {atoms[:5]}..., frames [{start}, {stop})")

    def test_strided_reads_equal_mdanalysis(self, source, universe, rng):
        """``read(start, stop, atoms, stride=k)``: frames start, start + k, ... (only those are read)."""
        n_at, n = source.n_atoms, source.n_frames
        atoms = np.unique(np.r_[0, rng.integers(0, n_at, 20), n_at - 1])
        for k in (2, 3, 7):
            start = int(rng.integers(0, max(1, n // 3)))
            b = source.read(start, n, atoms, stride=k)
            assert b.n_frames == len(range(start, n, k)) == len(b.box) == len(b.time) == len(b.step)
            np.testing.assert_array_equal(b.frames, np.arange(start, n, k))
            ref = np.array([ts.positions[atoms] for ts in universe.trajectory[start:n:k]], dtype=np.float64)
            np.testing.assert_allclose(b.positions, ref.reshape(b.positions.shape), atol=ATOL, rtol=1e-6,
                                       err_msg=f"frames {start}:{n}:{k}")
            times = [ts.time for ts in universe.trajectory[start:n:k]]
            np.testing.assert_allclose(b.time, times, atol=1e-6, rtol=1e-9)

    def test_bytes_per_frame_covers_the_block(self, source, rng):
        """What sizes tasks and blocks: at least the Block's own arrays, per frame."""
        atoms = np.unique(rng.integers(0, source.n_atoms, 10))
        b = source.read(0, min(source.n_frames, 3), atoms)
        assert source.bytes_per_frame(atoms) * b.n_frames >= b.nbytes

    def test_box_and_time_equal_mdanalysis(self, source, universe):
        stop = min(source.n_frames, 20)
        b = source.read(0, stop)
        box, time = reference_meta(universe, 0, stop)
        np.testing.assert_allclose(b.box, box, atol=1e-3, rtol=1e-5)
        np.testing.assert_allclose(b.time, time, atol=1e-6, rtol=1e-9)
        assert np.all(np.diff(b.step) >= 0), "steps go backwards"

    def test_every_field_equals_mdanalysis(self, source, universe):
        stop = min(source.n_frames, 5)
        for field in source.fields:
            b = source.read(0, stop, fields=(field,)) if field == "position" else \
                source.read(0, stop, fields=("position", field))
            arr = getattr(b, FIELD_ATTRS[field])
            assert arr is not None and arr.dtype == np.float32
            np.testing.assert_allclose(arr, reference_frames(universe, 0, stop, field=field).reshape(arr.shape),
                                       atol=ATOL, rtol=1e-5, err_msg=field)

    def test_absent_field_is_a_clear_error(self, source):
        absent = [f for f in ("velocity", "force") if f not in source.fields]
        for field in absent:
            with pytest.raises(TrajscaleError):
                source.read(0, 1, fields=("position", field))

    # ------------------------------------------------------------ travel and reuse

    def test_config_round_trip(self, source):
        import json

        from ..sources import source_from_config

        cfg = source.get_config()
        assert json.loads(json.dumps(cfg)) == cfg, "config must be plain JSON values"
        stop = min(source.n_frames, 4)
        with source_from_config(cfg) as again:
            assert (again.n_frames, again.n_atoms) == (source.n_frames, source.n_atoms)
            np.testing.assert_array_equal(again.read(0, stop).positions, source.read(0, stop).positions)

    def test_blocks_own_their_arrays_unless_reusing(self, source, universe):
        """Without ``reuse_buffers`` a Block owns its arrays; with it, reads stay exact."""
        n = source.n_frames
        a, b = source.read(0, min(2, n)), source.read(n - 1, n)
        assert not np.shares_memory(a.positions, b.positions)
        kept = a.positions.copy()
        a.box[:] = -1.0                     # a block's metadata is its own copy
        np.testing.assert_array_equal(a.positions, kept)
        assert not np.any(source.read(0, min(2, n)).box == -1.0)
        source.reuse_buffers = True
        for start, stop in ((0, min(3, n)), (n - 1, n), (0, min(2, n))):
            np.testing.assert_allclose(source.read(start, stop).positions,
                                       reference_frames(universe, start, stop).reshape(stop - start, -1, 3),
                                       atol=ATOL, rtol=1e-6)

    # ------------------------------------------------------------ bad input

    def test_bad_ranges_are_clear_errors(self, source):
        n = source.n_frames
        for start, stop in ((-1, 2), (0, n + 1), (3, 2), (n + 1, n + 2)):
            with pytest.raises(TrajscaleError):
                source.read(start, stop)

    def test_bad_atom_indices_are_clear_errors(self, source):
        for atoms in (np.array([source.n_atoms]), np.array([-1])):
            with pytest.raises(TrajscaleError):
                source.read(0, 1, atoms)

    def test_empty_range_and_close_twice(self, source):
        b = source.read(0, 0)
        assert b.n_frames == 0 and b.positions.shape[0] == 0
        source.close()
        source.close()
