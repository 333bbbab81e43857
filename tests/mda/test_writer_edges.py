"""trajscale.mda.Writer makes its output only after a clean close: a pipeline that fails leaves no
file under the output's name and no temporary beside it; an output it cannot create is refused up front,
saying why.  On MDAnalysisTests' AdK in water (GRO/XTC, no forces) and PSF/DCD."""

from __future__ import annotations

import os
import subprocess

import MDAnalysis as mda
import pytest
from MDAnalysisTests import datafiles as D

import trajscale.mda
from trajscale.errors import OutputError


def _left(folder) -> list[str]:
    return sorted(os.listdir(folder))


def test_forces_asked_of_frames_without_forces_leave_no_file(tmp_path):
    u = mda.Universe(D.GRO, D.XTC)
    assert not u.trajectory.ts.has_forces
    out = tmp_path / "f.h5md"
    with pytest.raises(ValueError, match="has no forces"):
        with trajscale.mda.Writer(str(out), u.atoms.n_atoms, forces=True) as w:
            w.write(u.atoms)
    assert _left(tmp_path) == []


@pytest.mark.parametrize("slab_bytes", [1, 1 << 30])   # frames already in the temporary file, or still gathered
def test_an_exception_inside_with_leaves_no_file(tmp_path, slab_bytes):
    u = mda.Universe(D.PSF, D.DCD)
    out = tmp_path / "broken.h5md"
    with pytest.raises(RuntimeError, match="pipeline broke"):
        with mda.Writer(str(out), u.atoms.n_atoms, format="TRAJSCALE", slab_bytes=slab_bytes) as w:
            for ts in u.trajectory[:6]:
                w.write(u.atoms)
                if ts.frame == 4:
                    raise RuntimeError("pipeline broke")
    assert _left(tmp_path) == []
    # the same pipeline without the error makes the file, with every frame
    with mda.Writer(str(out), u.atoms.n_atoms, format="TRAJSCALE", slab_bytes=slab_bytes) as w:
        for _ in u.trajectory[:6]:
            w.write(u.atoms)
    assert _left(tmp_path) == ["broken.h5md"]
    assert mda.Universe(D.PSF, str(out)).trajectory.n_frames == 6


@pytest.fixture()
def read_only_dir(tmp_path):
    """A directory no file can be created in: a read-only tmpfs as root (who ignores modes), else mode 555."""
    d = tmp_path / "ro"
    d.mkdir()
    if os.geteuid() != 0:
        d.chmod(0o555)
        yield d
        d.chmod(0o755)
        return
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(d)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=False)


@pytest.mark.cli
def test_an_unwritable_directory_is_refused_saying_why(read_only_dir):
    out = read_only_dir / "out.h5md"
    with pytest.raises(OutputError) as err:
        trajscale.mda.Writer(str(out), 3341)
    msg = str(err.value)
    assert str(out) in msg and ("Read-only file system" in msg or "Permission denied" in msg), msg
    assert "truncated" not in msg and "HDF5" not in msg
    assert _left(read_only_dir) == []
