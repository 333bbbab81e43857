"""Small NPZ sample sets (the seed-003 layout, scaled down) and their packed stores; mdCATH-shaped files."""

from __future__ import annotations

import numpy as np
import pytest

N_FILES, PER_FILE, WIDTH = 6, 40, 37


def write_npz_set(folder, n_files=N_FILES, per_file=PER_FILE, width=WIDTH, seed=0):
    """NPZ files with keys x (float64 samples) and y (int32 labels); returns paths and the originals."""
    rng = np.random.default_rng(seed)
    paths, originals = [], []
    for i in range(n_files):
        x = rng.standard_normal((per_file, width))
        y = rng.integers(0, 1000, (per_file, 2)).astype(np.int32)
        p = folder / f"samples_{i:03d}.npz"
        np.savez(p, x=x, y=y)
        paths.append(str(p))
        originals.append({"x": x, "y": y})
    return paths, originals


@pytest.fixture()
def npz_set(tmp_path):
    return write_npz_set(tmp_path)


@pytest.fixture()
def packed(tmp_path, npz_set):
    """(store path, the NPZ originals concatenated with np.load, not with trajscale)."""
    from trajscale.ml.pack import pack

    paths, _ = npz_set
    out = tmp_path / "store.h5"
    pack(paths, out)
    ref = {k: np.concatenate([np.load(p)[k] for p in paths]) for k in ("x", "y")}
    return str(out), ref


def mdcath_files(folder, universe, domains: dict) -> list:
    """One mdCATH-shaped file a domain (``domains``: domain -> (selection, members, frames per member)), cut
    from ``universe`` (:func:`trajscale.testing.mdcath.from_universe`, a seed a file)."""
    from trajscale.testing.mdcath import from_universe

    return [from_universe(folder / f"mdcath_dataset_{dom}.h5", universe, domain=dom, members=keys, n_frames=counts,
                          seed=i, select=sel)
            for i, (dom, (sel, keys, counts)) in enumerate(domains.items())]
