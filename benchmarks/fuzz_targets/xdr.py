"""XTC and TRR: the frame scans and the compiled decoder, on any bytes.

An input is written to a file (the scans and the decoder read files) and scanned as
a user's run scans it, a cut-short last frame allowed; every frame found is then read
whole and, for an XTC, decoded up to its first atom only (the prefix decoder a
selection uses). :class:`~trajscale.xdr._xdr.XDRFormatError` (a refusal naming
the frame and the field) and trajscale's own errors are the expected outcomes.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

# (a campaign's children run in its own temporary folder, in memory, removed with it: benchmarks/fuzz.py)
_DIR = tempfile.mkdtemp(prefix="trajscale-fuzz-xdr-")
atexit.register(shutil.rmtree, _DIR, True)


def _data_dir() -> Path:
    from MDAnalysisTests.datafiles import COORDINATES_XTC

    return Path(COORDINATES_XTC).parent.parent


def _seeds(names: list[str], frames: int = 3) -> list[str]:
    """The first ``frames`` frames of MDAnalysisTests' small files (short seeds keep inputs short)."""
    from trajscale.xdr._xdr import scan_trr, scan_xtc

    out = []
    for name in names:
        path = _data_dir() / name
        scan = scan_xtc if name.endswith(".xtc") else scan_trr
        offsets = scan(str(path))[1]
        data = path.read_bytes()
        end = int(offsets[frames]) if len(offsets) > frames else len(data)
        seed = Path(_DIR) / f"seed-{path.name}"
        seed.write_bytes(data[:end])
        out.append(str(seed))
    return out


def xtc_seeds() -> list[str]:
    return _seeds(["xtc_test_only_10_frame_10_atoms.xtc", "coordinates/test.xtc", "xyz_random_walk.xtc"])


def trr_seeds() -> list[str]:
    return _seeds(["trr_test_only_10_frame_10_atoms.trr", "coordinates/test.trr", "surface.trr"], frames=2)


def _write(data: bytes, suffix: str) -> str:
    path = os.path.join(_DIR, "input" + suffix)
    with open(path, "wb") as fh:
        fh.write(data)
    return path


def _read_all(cls, path: str, n_atoms: int, offsets, fields, sel) -> None:
    n = len(offsets)
    if not n:
        return
    n_sel = n_atoms if sel is None else len(sel)
    rows = {f: np.empty((n, n_sel, 3), np.float32) for f in fields}
    handle = cls(path, n_atoms)
    try:
        handle.read(offsets, np.arange(n, dtype=np.int64), sel, rows, np.empty((n, 3, 3), np.float32),
                    np.empty(n), np.empty(n, np.int64), {f: np.float32(1.0) for f in fields})
    finally:
        handle.close()


def xtc_one(data: bytes) -> None:
    from trajscale.xdr._xdr import XDRFormatError, XTCFile, scan_xtc

    path = _write(data, ".xtc")
    try:
        n_atoms, offsets, fields, _, _ = scan_xtc(path, partial_last=[])
        _read_all(XTCFile, path, n_atoms, offsets, fields, None)
        if n_atoms:
            _read_all(XTCFile, path, n_atoms, offsets, fields, np.array([0], np.intp))
    except XDRFormatError:
        pass


def trr_one(data: bytes) -> None:
    from trajscale.xdr._xdr import TRRFile, XDRFormatError, scan_trr

    path = _write(data, ".trr")
    try:
        n_atoms, offsets, fields, _, _ = scan_trr(path, partial_last=[])
        if fields:
            _read_all(TRRFile, path, n_atoms, offsets, fields, None)
    except XDRFormatError:
        pass


def parts_one(data: bytes) -> None:
    """The same bytes through :class:`~trajscale.xdr.source.XDRSource`, as XTC and as TRR."""
    from trajscale.errors import TrajscaleError
    from trajscale.xdr.source import XDRSource

    for suffix in (".xtc", ".trr"):
        path = _write(data, suffix)
        try:
            with XDRSource(path) as src:
                if src.n_frames and "position" in src.fields:
                    src.read(0, src.n_frames)
        except TrajscaleError:
            pass


TARGETS = {
    "xtc": (xtc_seeds, xtc_one),
    "trr": (trr_seeds, trr_one),
    "xdr-parts": (lambda: xtc_seeds() + trr_seeds(), parts_one),
}
