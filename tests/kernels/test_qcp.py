"""The QCP RMSD kernel against MDAnalysis's qcprot and the Kabsch (SVD) path, on real AdK frames;
the compiled module itself: its SIMD widths, the arrays it takes or refuses, Ctrl-C, no numba."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms

from trajscale.kernels import _superpose
from trajscale.kernels.superpose import Reference, rmsd_after_transform, superpose_rmsd


@pytest.fixture(scope="module")
def frames(adk_vacuum):
    """(98 + 20, 3341, 3) float32: the DCD's frames, then 20 randomly moved copies of frame 10."""
    u = mda.Universe(*adk_vacuum)
    x = np.array([ts.positions.copy() for ts in u.trajectory], dtype=np.float32)
    rng = np.random.default_rng(1)
    q, _ = np.linalg.qr(rng.normal(size=(20, 3, 3)))
    q *= np.sign(np.linalg.det(q))[:, None, None]   # proper rotations
    moved = np.einsum("nk,fjk->fnj", x[10], q) + rng.uniform(-30, 30, (20, 1, 3))
    return np.concatenate([x, moved.astype(np.float32)]), u.atoms.masses.astype(np.float64)


@pytest.mark.parametrize("select", [slice(0, 214), slice(None)])
@pytest.mark.parametrize("weighted", [False, True])
def test_qcp_equals_mdanalysis(frames, select, weighted):
    x, masses = frames
    x = np.ascontiguousarray(x[:, select])
    w = masses[select] if weighted else None
    ref = x[0].astype(np.float64)
    ours = superpose_rmsd(x, ref, w)
    theirs = np.array([rms.rmsd(f.astype(np.float64), ref, weights=w, center=True, superposition=True)
                       for f in x])
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)
    # the Kabsch path (SVD), which computes the rotation too, agrees far below that (in MSD:
    # at RMSD 0 the square root turns rounding of 1e-13 A^2 into 3e-7 A)
    kabsch = superpose_rmsd(x, ref, w, want_rotation=True)[0]
    np.testing.assert_allclose(ours**2, kabsch**2, rtol=0, atol=1e-10)
    assert ours[0] < 1e-6   # the reference itself


def test_qcp_rigid_motion_is_zero(frames):
    x, _ = frames
    ours = superpose_rmsd(x[98:], x[10].astype(np.float64))
    assert np.abs(ours).max() < 2e-4   # float32 rounding of the moved copies only


def test_qcp_same_bits_for_any_split(frames):
    x, _ = frames
    ref = Reference.of(x[0])
    whole = superpose_rmsd(x, ref)
    parts = np.concatenate([superpose_rmsd(x[a:b], ref) for a, b in [(0, 7), (7, 50), (50, len(x))]])
    assert np.array_equal(whole, parts)


def test_qcp_non_finite_frames_give_nan(frames):
    x, _ = frames
    x = x[:6].copy()
    x[2, 5, 1] = np.nan
    x[4, 0, 0] = np.inf
    out = superpose_rmsd(x, x[0].astype(np.float64))
    assert np.isnan(out[[2, 4]]).all() and np.isfinite(out[[0, 1, 3, 5]]).all()
    np.testing.assert_array_equal(out[[0, 1, 3, 5]], superpose_rmsd(x[[0, 1, 3, 5]], x[0].astype(np.float64)))


def test_kernel_is_compiled_ahead_of_time():
    # a Cython extension module (no JIT, no Python fallback), built by setup.py
    assert _superpose.__file__.endswith((".so", ".pyd"))
    assert type(_superpose.qcp_rmsd).__name__ == "cython_function_or_method"


@pytest.mark.parametrize("n_atoms", [1, 2, 3, 5, 214, 3341])
@pytest.mark.parametrize("weighted", [False, True])
def test_every_simd_width_gives_the_same_bits(frames, n_atoms, weighted):
    """Scalar C, SSE2 and AVX sum the same lanes in the same order: equal bits, any atom count (tails)."""
    x, masses = frames
    x = np.ascontiguousarray(x[:, :n_atoms])
    ref = Reference.of(x[0], masses[:n_atoms] if weighted else None)
    outs = [_superpose.qcp_rmsd(x, ref.weights, ref.grouped, ref.wsum, ref.norm, ref.uniform, simd=level)
            for level in (0, 1, 2)]
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
    # and the bits do not depend on where the frame sits in memory (alignment of its first atom)
    buf = np.empty(x.size + 1, np.float32)
    shifted = buf[1:].reshape(x.shape)
    shifted[...] = x
    assert np.array_equal(superpose_rmsd(shifted, ref), outs[0])


def test_float64_non_contiguous_and_big_endian_inputs_are_converted(frames):
    """Each such array is converted once by the wrapper: the same numbers as native float32."""
    x, masses = frames
    x32 = np.ascontiguousarray(x[:12, :300])
    ref = Reference.of(x32[0], masses[:300])
    want = superpose_rmsd(x32, ref)
    wide = np.zeros((12, 300, 4), np.float32)
    wide[..., :3] = x32
    cases = {"float64": x32.astype(np.float64), "big-endian": x32.astype(">f4"),
             "strided atoms": wide[..., :3], "every other frame": np.repeat(x32, 2, axis=0)[::2],
             "Fortran order": np.asfortranarray(x32)}
    for name, arr in cases.items():
        assert np.array_equal(superpose_rmsd(arr, ref), want), name
    # the rotation path and the group RMSD take them too
    r, rot, xcom, ycom = superpose_rmsd(x32, ref, want_rotation=True)
    for name, arr in cases.items():
        got = superpose_rmsd(arr, ref, want_rotation=True)
        assert np.array_equal(got[0], r) and np.array_equal(got[1], rot), name
        big_endian = (x32[0].astype(">f8"), rot, xcom, ycom, masses[:300].astype(">f8"))
        assert np.array_equal(rmsd_after_transform(arr, *big_endian),
                              rmsd_after_transform(x32, x32[0], rot, xcom, ycom, masses[:300])), name


def test_kernel_refuses_arrays_it_cannot_read_with_a_clear_error(frames):
    x, _ = frames
    x32 = np.ascontiguousarray(x[:4, :50])
    ref = Reference.of(x32[0])
    args = (ref.weights, ref.grouped, ref.wsum, ref.norm, ref.uniform)
    with pytest.raises(ValueError, match="dtype mismatch"):
        _superpose.qcp_rmsd(x32.astype(np.float64), *args)
    with pytest.raises(ValueError, match="Big-endian"):
        _superpose.qcp_rmsd(x32.astype(">f4"), *args)
    with pytest.raises(ValueError, match="each frame C-contiguous"):
        _superpose.qcp_rmsd(np.asfortranarray(x32), *args)
    with pytest.raises(ValueError, match=r"reference of 50 atoms \(13 groups of 4\) for coordinates of 49"):
        _superpose.qcp_rmsd(np.ascontiguousarray(x32[:, :49]), *args)
    with pytest.raises(ValueError, match="49 mobile atoms for a reference of 50"):
        superpose_rmsd(x32[:, :49], ref)
    with pytest.raises(ValueError, match=r"\(frames, atoms, 3\)"):
        superpose_rmsd(x32[0], ref)


def test_a_frame_view_is_not_copied(frames):
    """Frames that are each C-contiguous (a slice of frames, a broadcast) go to the kernel as they are."""
    x, _ = frames
    one = np.ascontiguousarray(x[5, :400])
    ref = Reference.of(x[0, :400])
    many = np.broadcast_to(one, (1000, 400, 3))   # 1000 frames in 4.8 kB: a copy would show as a 4.8 MB array
    out = superpose_rmsd(many, ref)
    assert out.shape == (1000,) and np.all(out == superpose_rmsd(one[None], ref)[0])


@pytest.mark.cli
def test_ctrl_c_interrupts_a_long_kernel_promptly():
    """SIGINT during a kernel of 10 million frames (a broadcast view: no memory) ends it within seconds."""
    code = textwrap.dedent("""
        import sys, time
        import numpy as np
        from trajscale.kernels.superpose import Reference, superpose_rmsd
        rng = np.random.default_rng(0)
        frame = rng.normal(size=(3000, 3)).astype(np.float32)
        many = np.broadcast_to(frame, (10_000_000, 3000, 3))   # ~30 s or more of kernel time
        ref = Reference.of(frame)
        print("go", flush=True)
        try:
            superpose_rmsd(many, ref)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
        print("finished", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "go"
        time.sleep(0.5)   # inside the kernel by now
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        waited = time.monotonic() - t0
    finally:
        proc.kill()
    assert proc.returncode == 3 and out.strip() == "interrupted", (out, err)
    assert waited < 5.0, waited   # one chunk of frames (milliseconds), not the whole kernel


@pytest.mark.cli
def test_an_rmsd_run_imports_no_numba(adk_vacuum, adk_vacuum_h5md):
    code = textwrap.dedent(f"""
        import sys
        import trajscale as ts
        r = ts.run(ts.RMSD(select="name CA"), {adk_vacuum[0]!r}, {str(adk_vacuum_h5md)!r})
        rg = ts.run(ts.RadiusOfGyration(select="protein"), {adk_vacuum[0]!r}, {str(adk_vacuum_h5md)!r})
        assert len(r.rmsd) == 98 and len(rg.rgyr) == 98
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "llvmlite")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
