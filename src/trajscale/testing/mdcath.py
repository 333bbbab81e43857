"""Small files in mdCATH's layout, written with h5py as mdCATH's builder writes them, for tests and examples.

The layout (compsciencelab/mdCATH, ``builder/molAnalyzer.py``): the root holds one group ``/{domain}`` with
``chain``, ``element``, ``resid``, ``resname``, ``z`` and the texts ``pdb``, ``psf`` and ``pdbProteinAtoms`` (the
PDB's ``ATOM`` and ``MODEL`` lines); each ``/{domain}/{temperature}/{replica}`` holds ``coords`` and ``forces``
(frames x atoms x 3 float32, contiguous, ``unit`` Angstrom and kcal/mol/Angstrom), ``box`` (a diagonal 3x3 matrix,
``unit`` nm), ``rmsd``, ``rmsf``, ``gyrationRadius``, ``dssp`` and the attribute ``numFrames``.

"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence

import h5py
import numpy as np

#: mdCATH's temperatures (K).
TEMPERATURES = ("320", "348", "379", "413", "450")


def write_mdcath(path: str | os.PathLike, domain: str, pdb_text: str, coords: Mapping[tuple[str, str], np.ndarray],
                 forces: Mapping[tuple[str, str], np.ndarray] | None = None,
                 atoms: Mapping[str, np.ndarray] | None = None,
                 box_nm: Sequence[float] | None = (10.0, 10.0, 10.0)) -> str:
    """Write an mdCATH-shaped file: ``coords[(temperature, replica)]`` (F, N, 3) in Å per member, ``forces``
    (kcal/mol/Å; default: none), ``atoms`` (arrays of N atoms) and ``box_nm`` (edges, nm; None: no box)."""
    path = str(path)
    with h5py.File(path, "w") as f:
        g = f.create_group(domain)
        full = pdb_text.encode("utf-8")
        protein = "".join(line for line in pdb_text.splitlines(keepends=True)
                          if line.startswith(("ATOM", "MODEL"))).encode("utf-8")
        g.create_dataset("pdb", data=full)
        g.create_dataset("pdbProteinAtoms", data=protein)
        g.create_dataset("psf", data=b"PSF\n")
        for key, values in (atoms or {}).items():
            g.create_dataset(key, data=values)
        n_res = int(len(np.unique(atoms["resid"]))) if atoms and "resid" in atoms else 1
        g.attrs["numProteinAtoms"] = next(iter(coords.values())).shape[1] if coords else 0
        g.attrs["numResidues"] = n_res
        for (t, r), x in coords.items():
            x = np.ascontiguousarray(x, np.float32)
            rg = g.require_group(str(t)).create_group(str(r))
            rg.attrs["numFrames"] = x.shape[0]
            rg.create_dataset("coords", data=x)
            rg["coords"].attrs["unit"] = "Angstrom"
            if forces is not None and (t, r) in forces:
                rg.create_dataset("forces", data=np.ascontiguousarray(forces[(t, r)], np.float32))
                rg["forces"].attrs["unit"] = "kcal/mol/Angstrom"
            if box_nm is not None:
                rg.create_dataset("box", data=np.diag(np.asarray(box_nm, np.float64)))
                rg["box"].attrs["unit"] = "nm"
            for name, shape in (("rmsd", (x.shape[0],)), ("gyrationRadius", (x.shape[0],)), ("rmsf", (n_res,))):
                rg.create_dataset(name, data=np.zeros(shape, np.float32))
                rg[name].attrs["unit"] = "nm"
            rg.create_dataset("dssp", data=np.full((x.shape[0], n_res), b"C", dtype="S1"))
    return path


def pdb_of(atomgroup) -> str:
    """The PDB text MDAnalysis writes for ``atomgroup`` at its current frame."""
    import warnings

    import MDAnalysis as mda

    with tempfile.TemporaryDirectory() as tmp:
        name = os.path.join(tmp, "top.pdb")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with mda.Writer(name, n_atoms=atomgroup.n_atoms) as w:
                w.write(atomgroup)
        with open(name) as fh:
            return fh.read()


def from_universe(path: str | os.PathLike, universe, domain: str = "1adkA00",
                  members: Sequence[tuple[str, str]] = (("320", "0"), ("348", "0"), ("348", "1")),
                  n_frames: int | Sequence[int] = 10, seed: int = 0,
                  box_nm: Sequence[float] | None = (8.0, 8.5, 9.0), select: str = "all") -> str:
    """An mdCATH-shaped file of ``universe``'s atoms ``select``: member ``i`` holds ``n_frames`` (or
    ``n_frames[i]``) frames from frame ``i`` on (wrapping around the trajectory), each moved by a seeded noise
    of 0.05 Å; forces are seeded noise too."""
    rng = np.random.default_rng(seed)
    atoms = universe.select_atoms(select)
    n_traj = universe.trajectory.n_frames
    universe.trajectory[0]
    text = pdb_of(atoms)
    counts = [n_frames] * len(members) if isinstance(n_frames, int) else list(n_frames)
    coords, forces = {}, {}
    for i, (key, count) in enumerate(zip(members, counts, strict=True)):
        frames = [(i + k) % n_traj for k in range(count)]
        x = np.empty((count, atoms.n_atoms, 3), np.float32)
        for k, fr in enumerate(frames):
            universe.trajectory[fr]
            x[k] = atoms.positions
        coords[key] = (x + rng.normal(0, 0.05, x.shape)).astype(np.float32)
        forces[key] = rng.normal(0, 10, x.shape).astype(np.float32)
    universe.trajectory[0]
    info = {"resid": atoms.resids.astype(np.int64), "resname": atoms.resnames.astype("S"),
            "chain": np.full(atoms.n_atoms, b"A"), "element": _elements(atoms).astype("S"),
            "z": _atomic_numbers(atoms)}
    return write_mdcath(path, domain, text, coords, forces, info, box_nm)


def _elements(atoms) -> np.ndarray:
    try:
        return np.asarray(atoms.elements)
    except AttributeError:   # (a PSF has types, not elements: the name's first letter)
        return np.array([n[0] for n in atoms.names])


def _atomic_numbers(atoms) -> np.ndarray:
    table = {"H": 1, "C": 6, "N": 7, "O": 8, "S": 16, "P": 15}
    return np.array([table.get(str(e).strip().upper()[:1], 0) for e in _elements(atoms)], np.int64)


__all__ = ["TEMPERATURES", "from_universe", "pdb_of", "write_mdcath"]
