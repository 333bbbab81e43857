"""The RDF cell list against MDAnalysis's capped_distance + np.histogram (InterRDF's own steps), bin for bin."""

from __future__ import annotations

import numpy as np
import pytest
from MDAnalysis.lib.distances import capped_distance
from MDAnalysis.lib.mdamath import triclinic_vectors as mda_vectors

from trajscale.kernels import geometry, pairs


def histogram(a, b, dims, cutoff, edges, exclusion=None):
    """The kernel on selections a, b given as one block (atoms of a, then of b)."""
    x = np.concatenate([a, b], axis=1)
    return pairs.rdf_histogram(x, np.arange(a.shape[1]), a.shape[1] + np.arange(b.shape[1]), dims, cutoff,
                               edges, exclusion)


def reference(a, b, dims, cutoff, edges, exclusion=None):
    """InterRDF._single_frame's counts, summed over frames."""
    out = np.zeros(len(edges) - 1)
    for f in range(len(a)):
        p, d = capped_distance(a[f], b[f], cutoff, box=dims[f] if dims[f].any() else None)   # as rdf.py
        if exclusion is not None:
            d = d[p[:, 0] // exclusion[0] != p[:, 1] // exclusion[1]]
        out += np.histogram(d, bins=len(edges) - 1, range=(edges[0], edges[-1]))[0]
    return out


BOXES = {
    "orthorhombic": [31.0, 27.5, 35.25, 90, 90, 90],
    "dodecahedron": [80.017, 80.017, 80.017, 60, 60, 90],   # the AdK water box
    "triclinic": [33.0, 36.0, 31.0, 75, 95, 105],
}


@pytest.mark.parametrize("shape", list(BOXES))
@pytest.mark.parametrize("cutoff", [6.0, 13.0])   # grid search, and MDAnalysis's brute force (> 0.3 box)
def test_rdf_counts_equal_capped_distance(shape, cutoff):
    rng = np.random.default_rng(11)
    n_frames = 4
    dims = np.tile(np.asarray(BOXES[shape], np.float32), (n_frames, 1))
    dims[:, :3] *= rng.uniform(0.97, 1.03, (n_frames, 1)).astype(np.float32)   # NPT: a box per frame
    # coordinates well outside the box too (MDAnalysis's multi-box shifts)
    a = rng.uniform(-60, 100, (n_frames, 150, 3)).astype(np.float32)
    b = rng.uniform(-60, 100, (n_frames, 700, 3)).astype(np.float32)
    edges = np.histogram_bin_edges(np.empty(0), bins=37, range=(0.5, cutoff))
    got, done = histogram(a, b, dims, cutoff, edges)
    assert done.all()
    ref = reference(a, b, dims, cutoff, edges)
    assert ref.sum() > 1000
    np.testing.assert_array_equal(got, ref)


def test_rdf_counts_exclusion_block_and_self():
    rng = np.random.default_rng(5)
    dims = np.tile(np.asarray(BOXES["triclinic"], np.float32), (3, 1))
    x = rng.uniform(0, 30, (3, 400, 3)).astype(np.float32)
    edges = np.histogram_bin_edges(np.empty(0), bins=20, range=(0.0, 8.0))
    got, _ = histogram(x, x, dims, 8.0, edges, (1, 1))
    np.testing.assert_array_equal(got, reference(x, x, dims, 8.0, edges, (1, 1)))


def test_rdf_counts_on_bin_edges_and_cutoff():
    """Distances exactly on bin edges and on the cut-off land where np.histogram puts them."""
    grid = np.stack(np.meshgrid(*[np.arange(0, 20, 0.5)] * 3, indexing="ij"), -1).reshape(1, -1, 3)
    a = grid.astype(np.float32)[:, ::97]
    b = grid.astype(np.float32)
    dims = np.array([[20.0, 20.0, 20.0, 90, 90, 90]], np.float32)
    edges = np.histogram_bin_edges(np.empty(0), bins=8, range=(0.0, 4.0))
    got, _ = histogram(a, b, dims, 4.0, edges)
    np.testing.assert_array_equal(got, reference(a, b, dims, 4.0, edges))


@pytest.mark.parametrize("cutoff", [6.0, 13.0])   # MDAnalysis's pseudo-box grid, and brute force (> 0.3 span)
@pytest.mark.parametrize("offset", [0.0, 537.25])   # far from the origin: the pseudo-box's shift rounds
def test_frames_without_a_box_count_as_capped_distance_without_one(cutoff, offset):
    rng = np.random.default_rng(21)
    a = (offset + rng.uniform(-20, 20, (3, 150, 3))).astype(np.float32)
    b = (offset + rng.uniform(-20, 20, (3, 700, 3))).astype(np.float32)
    dims = np.zeros((3, 6), np.float32)
    dims[1] = BOXES["orthorhombic"]   # a frame with a box between two without
    edges = np.histogram_bin_edges(np.empty(0), bins=37, range=(0.5, cutoff))
    got, done = histogram(a, b, dims, cutoff, edges)
    assert done.all()
    ref = reference(a, b, dims, cutoff, edges)
    assert ref.sum() > 1000
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("cutoff", [1.8, 4.0])   # grid search, and brute force (> 0.3 span)
def test_frames_without_a_box_on_bin_edges(cutoff):
    """Lattice distances on bin edges and on the cut-off: which side a pair falls depends on the
    rounding of MDAnalysis's shifted coordinates (grid) or of the plain differences (brute force)."""
    steps = np.arange(0, 12.1, 0.3 if cutoff < 3 else 0.9)
    grid = np.stack(np.meshgrid(steps, steps, steps, indexing="ij"), -1).reshape(1, -1, 3) + 1.7
    b = grid.astype(np.float32)
    a = b[:, ::41]
    dims = np.zeros((1, 6), np.float32)
    edges = np.histogram_bin_edges(np.empty(0), bins=12, range=(0.0, cutoff))
    got, done = histogram(a, b, dims, cutoff, edges)
    assert done.all()
    np.testing.assert_array_equal(got, reference(a, b, dims, cutoff, edges))


def test_an_rdf_of_a_run_without_a_box_is_refused(adk_vacuum, adk_vacuum_h5md):
    """AdK in vacuum (no box in any frame): an RDF needs the minimum image and the box volume, so the run is
    refused at frame 0, naming the file, rather than counting plain distances as if the system had no
    periodic images (MDAnalysis's InterRDF with norm="rdf" fails on the same trajectory)."""
    from MDAnalysis import Universe
    from MDAnalysis.analysis.rdf import InterRDF

    import trajscale as ts
    from trajscale.errors import MissingBoxError

    u = Universe(*adk_vacuum)
    ca = u.select_atoms("name CA")
    assert u.dimensions is None
    with pytest.raises((TypeError, ValueError, ZeroDivisionError)):
        InterRDF(ca, ca, nbins=60, range=(0.0, 15.0), exclusion_block=(1, 1)).run()
    with pytest.raises(MissingBoxError, match=r"adk_vacuum\.h5md: frame 0 has no periodic box"):
        ts.run(ts.RDF("name CA", "name CA", nbins=60, range=(0.0, 15.0), exclusion_block=(1, 1), norm="none"),
               adk_vacuum[0], adk_vacuum_h5md)


def test_frames_with_an_invalid_box_are_left_to_the_caller():
    a = np.zeros((3, 12, 3), np.float32)
    dims = np.array([[30, 30, 30, 90, 90, 90], [0, 0, 0, 0, 0, 0], [30, 30, 30, 0, 0, 0]], np.float32)
    _, done = histogram(a, a, dims, 5.0, np.linspace(0, 5, 6))
    assert done.tolist() == [True, True, False]


def test_box_vectors_equal_mdanalysis_bit_for_bit():
    """The kernels wrap with MDAnalysis's float32 box vectors; ours must be the same numbers."""
    rng = np.random.default_rng(3)
    dims = np.zeros((300, 6), np.float32)
    dims[:, :3] = rng.uniform(20, 120, (300, 3))
    dims[:, 3:] = rng.uniform(60, 120, (300, 3))
    dims[:50, 3:] = 90.0
    ours = geometry.triclinic_vectors(dims).astype(np.float32)
    for f in range(len(dims)):
        np.testing.assert_array_equal(ours[f], mda_vectors(dims[f]))


def test_perpendicular_widths():
    h = geometry.triclinic_vectors(np.array([[10, 20, 30, 90, 90, 90], [80.017, 80.017, 80.017, 60, 60, 90]]))
    w = geometry.perpendicular_widths(h)
    np.testing.assert_allclose(w[0], [10, 20, 30])
    # the rhombic dodecahedron's faces are all sqrt(2/3) a apart... except along c (a / sqrt(2))
    for i in range(3):
        n = np.cross(h[1, (i + 1) % 3], h[1, (i + 2) % 3])
        np.testing.assert_allclose(w[1, i], abs(h[1, i] @ n) / np.linalg.norm(n))
    assert np.sqrt(geometry.safe_radius2(h[1:]))[0] == pytest.approx(w[1].min() / 2, rel=1e-5)


def test_other_dtypes_layouts_and_byte_orders_count_alike():
    """float64 (rounded to float32, as MDAnalysis computes), big-endian and strided positions:
    converted once, the counts of C-contiguous float32 (checked against capped_distance)."""
    rng = np.random.default_rng(9)
    dims = np.tile(np.asarray(BOXES["dodecahedron"], np.float32), (2, 1))
    x = rng.uniform(-10, 90, (2, 300, 3)).astype(np.float32)
    edges = np.histogram_bin_edges(np.empty(0), bins=30, range=(0.0, 12.0))
    i1, i2 = np.arange(100), np.arange(100, 300)
    ref = reference(x[:, i1], x[:, i2], dims, 12.0, edges)
    assert ref.sum() > 100
    padded = np.zeros((2, 300, 5), np.float32)
    padded[..., 1:4] = x
    for xs in (x, x.astype(np.float64), x.astype(">f4"), padded[..., 1:4]):
        got, done = pairs.rdf_histogram(xs, i1, i2, dims.astype(">f8"), 12.0, edges)
        assert done.all()
        np.testing.assert_array_equal(got, ref)
    with pytest.raises(ValueError, match=r"atom indices must lie in \[0, 300\)"):
        pairs.rdf_histogram(x, i1, np.array([299, 300]), dims, 12.0, edges)
    with pytest.raises(ValueError, match="frames, atoms, 3"):
        pairs.rdf_histogram(x[..., :2], i1, i2, dims, 12.0, edges)


def _run_python(code: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)


@pytest.mark.cli
def test_an_rdf_run_goes_through_the_built_extension_without_numba():
    """A whole RDF run (the AdK water box, a dodecahedron) in a fresh process where numba cannot be
    imported: the pairs come from the compiled extension, not from MDAnalysis's per-frame search
    (which remains only for frames without a box), and the counts are InterRDF's."""
    from MDAnalysis import Universe
    from MDAnalysis.analysis.rdf import InterRDF
    from MDAnalysisTests import datafiles as D

    sel1, sel2 = "name CA", "name OW and index 3341-9000"
    code = ("import sys, importlib.machinery\nsys.modules['numba'] = None\nimport trajscale as ts\n"
            "import MDAnalysis.lib.distances as D\ncalls, capped = [], D.capped_distance\n"
            "D.capped_distance = lambda *a, **k: calls.append(1) or capped(*a, **k)   # counts MDAnalysis's searches\n"
            f"r = ts.run(ts.RDF({sel1!r}, {sel2!r}, range=(0, 10)), {D.TPR!r}, {D.XTC!r})\n"
            "k = sys.modules.get('trajscale.kernels._pairs')\n"
            "print(k is not None and k.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), "
            "len(calls))\nprint(*r.count.astype(int).tolist())")
    out = _run_python(code).stdout.splitlines()
    assert out[0].split() == ["True", "0"]
    u = Universe(D.TPR, D.XTC)
    ref = InterRDF(u.select_atoms(sel1), u.select_atoms(sel2), range=(0, 10)).run().results.count
    assert ref.sum() > 1000
    np.testing.assert_array_equal(np.array(out[1].split(), float), ref)


@pytest.mark.cli
def test_ctrl_c_interrupts_a_long_kernel_promptly():
    """The kernel releases the GIL in slices and looks for Ctrl-C between them: SIGINT ends a call
    of tens of seconds within a few (a generous bound for a loaded machine)."""
    import signal
    import subprocess
    import sys
    import time

    code = ("import numpy as np, sys\nfrom trajscale.kernels import pairs\n"
            "x = np.random.default_rng(0).uniform(0, 40, (300, 6000, 3)).astype(np.float32)\n"
            "dims = np.tile(np.array([40, 40, 40, 90, 90, 90], np.float32), (300, 1))\n"
            "edges = np.linspace(0, 19, 11)\nprint('go', flush=True)\n"
            "try:\n    pairs.rdf_histogram(x, np.arange(3000), np.arange(3000, 6000), dims, 19.0, edges)\n"
            "except KeyboardInterrupt:\n    print('interrupted', flush=True)\n    sys.exit(3)\n"
            "print('finished')\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "go"
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        rest = p.communicate(timeout=60)[0]
        waited = time.monotonic() - t0
    finally:
        p.kill()
    assert p.returncode == 3 and "interrupted" in rest
    assert waited < 5.0
