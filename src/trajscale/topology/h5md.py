"""An H5MD file's own atoms as a topology: names, masses, charges and residues stored beside the frames.

trajscale's writers store, per atom of the particle group, ``name``, ``mass``, ``charge``, ``id`` and the
residues (``resid``, ``resname``, ``segid``; non-standard datasets other readers ignore). MDAnalysis reads no
topology from H5MD, so such a file is made into a Universe here; one without names stays trajectory-only.
"""

from __future__ import annotations

import contextlib

import h5py
import numpy as np

#: Per-atom datasets of a particle group that describe atoms (name -> MDAnalysis topology attribute).
ATOM_DATASETS = {"name": "names", "mass": "masses", "charge": "charges", "id": "ids",
                 "resid": "resids", "resname": "resnames", "segid": "segids"}


def _group(f: h5py.File, group: str | None):
    parts = f.get("particles")
    if not isinstance(parts, h5py.Group):
        return None
    names = [g for g in parts if isinstance(parts[g], h5py.Group) and "position" in parts[g]]
    if group is None:
        return parts[names[0]] if len(names) == 1 else None
    return parts[group] if group in names else None


def stores_topology(path: str, group: str | None = None) -> bool:
    """True if ``path`` is an H5MD file whose particle group stores its atoms' names."""
    try:
        with h5py.File(path, "r") as f:
            pg = _group(f, group)
            return pg is not None and isinstance(pg.get("name"), h5py.Dataset)
    except OSError:
        return False


def _text(ds) -> np.ndarray:
    arr = ds[()]
    return arr.astype(str) if arr.dtype.kind == "S" else np.asarray(arr, dtype=object).astype(str)


def _wide(arr: np.ndarray) -> np.ndarray:
    """Integers as int64 (a writer stores them in the smallest type that holds them), other values as they are."""
    return arr.astype(np.int64) if arr.dtype.kind in "iu" else arr


def h5md_universe(path: str, trajectories=(), group: str | None = None, **kw):
    """A Universe of the atoms ``path`` stores (None without names); residues: runs of one (segid, resid, resname)."""
    import MDAnalysis as mda

    with h5py.File(path, "r") as f:
        pg = _group(f, group)
        if pg is None or not isinstance(pg.get("name"), h5py.Dataset):
            return None
        n = int(pg["position/value"].shape[1])
        data = {}
        for ds, attr in ATOM_DATASETS.items():
            if isinstance(pg.get(ds), h5py.Dataset) and pg[ds].shape == (n,):
                data[attr] = _text(pg[ds]) if ds in ("name", "resname", "segid") else _wide(pg[ds][()])
    resids = data.pop("resids", np.ones(n, dtype=np.int64))
    resnames = data.pop("resnames", np.full(n, "UNK"))
    segids = data.pop("segids", np.full(n, "SYSTEM"))
    key = np.rec.fromarrays([segids, resids, resnames])
    new_res = np.r_[True, key[1:] != key[:-1]] if n else np.zeros(0, bool)
    atom_resindex = np.cumsum(new_res) - 1
    starts = np.flatnonzero(new_res)
    new_seg = np.r_[True, segids[starts][1:] != segids[starts][:-1]] if len(starts) else np.zeros(0, bool)
    residue_segindex = np.cumsum(new_seg) - 1
    u = mda.Universe.empty(n, n_residues=len(starts), n_segments=int(new_seg.sum()) or 1,
                           atom_resindex=atom_resindex, residue_segindex=residue_segindex, trajectory=False)
    for attr, values in data.items():
        u.add_TopologyAttr(attr, values)
    u.add_TopologyAttr("resids", resids[starts])
    u.add_TopologyAttr("resnums", resids[starts])
    u.add_TopologyAttr("resnames", resnames[starts])
    u.add_TopologyAttr("segids", segids[starts][new_seg])
    if trajectories:
        u = mda.Universe(u._topology, *trajectories, **kw)
    u.filename = str(path)
    return u


def atom_arrays(topology) -> dict | None:
    """Names, ids, masses, charges, residues and species of a Universe/AtomGroup, for a writer to store."""
    if topology is None:
        return None
    atoms = topology.atoms
    out = {}
    for key, attr in (("names", "names"), ("ids", "ids"), ("masses", "masses"), ("charges", "charges"),
                      ("resids", "resids"), ("resnames", "resnames"), ("segids", "segids")):
        with contextlib.suppress(AttributeError, Exception):
            out[key] = np.asarray(getattr(atoms, attr))
    with contextlib.suppress(AttributeError, Exception):
        _, out["species"] = np.unique(np.asarray(atoms.types), return_inverse=True)
    return out
