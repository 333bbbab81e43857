"""An mdCATH file's atoms from the file itself: what an analysis labels its features with, without MDAnalysis.

Atom names come from the ``pdbProteinAtoms`` text (read as MDAnalysis's PDB parser reads it), residues and chains
from the per-atom datasets, every field checked before use; a file failing a check is refused
(:class:`~trajscale.errors.InputFileError`) and an ensemble refuses that member alone. Residues are split as
MDAnalysis splits them, so the φ/ψ atoms are those its ``Ramachandran`` finds. The result is kept per file
version and shared by files whose text and datasets are the same bytes.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from typing import TYPE_CHECKING

import numpy as np

from ..block import sorted_unique
from ..errors import InputFileError
from ..storage.bytestore import ByteStore
from ..topology import LabelledTopology, record_columns, residue_starts, wrapped_resids
from ..util import LRU
from . import kept
from .layout import domain_group, hdf5_of, parse_universe, read_text

if TYPE_CHECKING:   # (h5py is imported where a file's HDF5 is read: a described file needs none)
    import h5py

log = logging.getLogger(__name__)

#: The per-atom datasets read, and what each holds.
_INTEGERS, _TEXTS = ("resid",), ("resname", "chain")

#: Topologies read in this process: by their file's store identity, and by the digest of what they were read from.
KEPT = 32
_BY_FILE, _BY_CONTENT = LRU(KEPT), LRU(KEPT)


def labelled_topology(store: ByteStore, path: str, n_atoms: int, prepares: bool = True) -> LabelledTopology:
    """The atoms of the mdCATH file in ``store`` (``n_atoms`` a member), every field checked (else InputFileError)."""
    key = tuple(store.identity)
    top = _BY_FILE.peek(key)
    if top is not None and top.n_atoms == n_atoms:
        return _BY_FILE.get(key)
    file = kept.file_key(store)
    # an earlier run's digest of this file's atoms: a topology read from another file with the same ones serves
    known = _known_digest(file)
    top = _BY_CONTENT.peek(known + n_atoms.to_bytes(8, "little")) if known is not None else None
    if top is not None:
        _BY_FILE.put(key, top)
        return top
    text, raw = _stored(store, path, prepares)
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=20)
    for name, values in raw.items():
        digest.update(name.encode() + (b"\x00" if values is None else values.dtype.str.encode() + values.tobytes()))
    digest = digest.digest()
    if known != digest:
        kept.store(file, "digest", {"digest": digest.hex()})
    digest += n_atoms.to_bytes(8, "little")
    top = _BY_CONTENT.peek(digest)
    if top is None:
        top = LabelledTopology(path, atom_labels(text, raw, n_atoms, path),
                               functools.partial(parse_universe, text, path))
        _BY_CONTENT.put(digest, top)
    _BY_FILE.put(key, top)
    return top


def _known_digest(file: list | None) -> bytes | None:
    """The digest of the file's text and datasets as an earlier run kept it (:mod:`.kept`; None: none kept)."""
    entry = kept.load(file, "digest")
    try:
        return bytes.fromhex(entry["digest"]) if entry is not None else None
    except (KeyError, TypeError, ValueError):   # a damaged entry is only a miss
        return None


def _stored(store: ByteStore, path: str, prepares: bool) -> tuple[str, dict[str, np.ndarray | None]]:
    """The file's ``pdbProteinAtoms`` text and per-atom datasets as stored: from the cache (:mod:`.kept`), or HDF5."""
    file = kept.file_key(store)
    entry = kept.load(file, "atoms")
    if entry is not None:
        try:
            return str(entry["text"]), {name: kept.decode(entry["raw"][name]) for name in (*_INTEGERS, *_TEXTS)}
        except (KeyError, TypeError, ValueError) as exc:   # a damaged entry is only a miss
            log.debug("ignoring the cached atoms of %s: %s", path, exc)
    try:
        with hdf5_of(store, prepares) as f:
            _, group = domain_group(f, path)
            text = read_text(f, path)
            raw = {name: _dataset(group, name, path) for name in (*_INTEGERS, *_TEXTS)}
    except InputFileError:
        raise
    except (KeyError, OSError, RuntimeError, ValueError, TypeError) as exc:   # HDF5 met damage
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputFileError(path, f"its atoms cannot be read ({why}): the file is damaged") from None
    # (kept as read, before the checks: a file that fails them fails them again from its entry)
    kept.store(file, "atoms", {"text": text, "raw": {name: kept.encode(v) for name, v in raw.items()}})
    return text, raw


def _dataset(group: h5py.Group, name: str, where: str) -> np.ndarray | None:
    """The per-atom dataset ``name`` as stored (None if absent), checked to be 1-D integers (``resid``) or text."""
    import h5py

    ds = group.get(name)
    if ds is None:
        return None
    if not isinstance(ds, h5py.Dataset) or ds.ndim != 1:
        raise InputFileError(where, f"{name} is {'not a dataset' if not isinstance(ds, h5py.Dataset) else ds.shape}, "
                                    "not one value per atom: the file is damaged")
    if name in _INTEGERS:
        if ds.dtype.kind not in "iu":
            raise InputFileError(where, f"{name} holds {ds.dtype}, not integers: the file is damaged")
        values = np.empty(ds.shape, ds.dtype)
        if ds.size:
            ds.read_direct(values)
        return values
    if ds.dtype.kind == "S":
        values = np.empty(ds.shape, ds.dtype)
        if ds.size:
            ds.read_direct(values)
        return values
    if h5py.check_string_dtype(ds.dtype) is not None:   # variable-length text
        return np.asarray(ds.asstr()[()], dtype=str)
    raise InputFileError(where, f"{name} holds {ds.dtype}, not text: the file is damaged")


def atom_labels(text: str, raw: dict[str, np.ndarray | None], n_atoms: int, where: str) -> dict[str, np.ndarray]:
    """The labels of :class:`~trajscale.topology.labelled.LabelledTopology` from the ``pdbProteinAtoms`` text and the
    datasets ``raw`` (None: the file has none), checked against each other and against ``n_atoms``."""
    cols = _columns(text)
    n = len(cols("name"))
    if n != n_atoms:
        raise InputFileError(where, f"pdbProteinAtoms holds {n} atoms but the coordinates {n_atoms}: the file is "
                                    "damaged")
    for name, values in raw.items():
        if values is not None and len(values) != n_atoms:
            raise InputFileError(where, f"{name} holds {len(values)} values but the coordinates {n_atoms} atoms: "
                                        "the file is damaged")
    pdb_resid = _resids(cols("resid"), where)
    resid = pdb_resid if raw["resid"] is None else raw["resid"].astype(np.int64)
    resname = cols("resname") if raw["resname"] is None else _text(raw["resname"], "resname", where)
    segid = cols("segid")
    if not any(segid):   # (MDAnalysis: no segment IDs, the chain IDs)
        segid = cols("chainid")
    chain = segid if raw["chain"] is None else _text(raw["chain"], "chain", where)
    _agree(resid, pdb_resid, "resid", where)
    _agree(resname, cols("resname"), "resname", where)
    chains, chain_at = np.unique(chain, return_inverse=True)
    segids, segid_at = np.unique(segid, return_inverse=True)
    # (sorted_unique: np.unique imports numpy.ma, 15 ms of a process's start)
    pairs = sorted_unique(chain_at.reshape(-1) * len(segids) + segid_at.reshape(-1))
    if len(pairs) != len(chains) or len(pairs) != len(segids):
        raise InputFileError(where, "chain does not follow pdbProteinAtoms' segments one for one: the file is "
                                    "damaged")
    new = residue_starts(resid, resname, cols("icode"), chain)
    return {"name": cols("name"), "resname": resname, "resid": resid, "resindex": np.cumsum(new) - 1,
            "segid": chain, "icode": cols("icode")}


def _columns(text: str):
    """``cols(field)`` of each atom record of the first model, as MDAnalysis's PDB parser reads them."""
    return record_columns(text)[1]


def _resids(column: np.ndarray, where: str) -> np.ndarray:
    """The residue numbers of the text's column, as MDAnalysis's PDB parser reads them (four digits wrapped)."""
    try:
        resid = column.astype(np.int64)
    except ValueError:
        raise InputFileError(where, "pdbProteinAtoms has a residue number that is not a number: the file is "
                                    "damaged") from None
    return wrapped_resids(resid)


def _text(values: np.ndarray, name: str, where: str) -> np.ndarray:
    try:
        out = values.astype(str)   # (bytes: as ASCII)
    except UnicodeDecodeError:
        raise InputFileError(where, f"{name} holds text that is not ASCII: the file is damaged") from None
    return np.char.strip(out)


def _agree(values: np.ndarray, text_values: np.ndarray, name: str, where: str) -> None:
    bad = np.flatnonzero(values != text_values)
    if len(bad):
        k = int(bad[0])
        raise InputFileError(where, f"{name} of atom {k + 1} is {values[k].item()!r} but pdbProteinAtoms says "
                                    f"{text_values[k].item()!r}: the file is damaged")


__all__ = ["KEPT", "atom_labels", "labelled_topology"]
