"""Ensembles of tiny trajectories for tests and benchmarks: thousands of members made in a moment.

Each member is an XTC file of 3 atoms x 2 frames (XTC stores 9 or fewer atoms uncompressed, so the
positions read back are the float32 values written), beside one shared PDB topology, listed in a CSV
catalog whose paths are relative to it (as a catalog written beside its trajectories has them).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

#: The shared topology: three atoms, one residue (MDAnalysis guesses their masses: C, O, N).
PDB = ("ATOM      1  C   ALA A   1       0.000   0.000   0.000  1.00  0.00           C\n"
       "ATOM      2  O   ALA A   1       1.000   0.000   0.000  1.00  0.00           O\n"
       "ATOM      3  N   ALA A   1       0.000   1.000   0.000  1.00  0.00           N\nEND\n")


def tiny_ensemble(folder, n: int, seed: int = 3, numbered: bool = False) -> tuple[Path, np.ndarray]:
    """``n`` members ``t00000.xtc`` ... in ``folder`` (made if missing), ``top.pdb`` and ``catalog.csv``
    (columns name, topology, trajectory; ``numbered``: and ``k``, the member's number, a label).

    Returns
    -------
    The catalog's path, and the positions written, in Å (float32, ``(n, 2, 3, 3)``).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "top.pdb").write_text(PDB)
    pos_nm = (np.random.default_rng(seed).random((n, 2, 3, 3)) * 2.0).astype(np.float32)
    box = np.diag([3.0, 3.0, 3.0]).astype(">f4").tobytes()
    lines = ["name,topology,trajectory" + (",k" if numbered else "")]
    for i in range(n):
        (folder / f"t{i:05d}.xtc").write_bytes(b"".join(
            struct.pack(">iiif", 1995, 3, f, float(f)) + box + struct.pack(">i", 3) + pos_nm[i, f].astype(">f4")
            .tobytes() for f in range(2)))
        lines.append(f"t{i:05d},top.pdb,t{i:05d}.xtc" + (f",{i}" if numbered else ""))
    catalog = folder / "catalog.csv"
    catalog.write_text("\n".join(lines) + "\n")
    return catalog, pos_nm * np.float32(10.0)


__all__ = ["PDB", "tiny_ensemble"]
