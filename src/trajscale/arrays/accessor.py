"""The ``.trajscale`` accessor of a trajectory Dataset: selections, read counters, writing back."""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..errors import SelectionError
from ..sources.registry import source_class
from .dataset import SOURCE_ATTR, TOPOLOGY_ATTR, opener_of
from .labels import selected_atoms


@xr.register_dataset_accessor("trajscale")
class TrajscaleAccessor:
    """``ds.trajscale``: what trajscale adds to a trajectory Dataset."""

    def __init__(self, ds: xr.Dataset) -> None:
        self._ds = ds

    def atoms(self, selection: str) -> np.ndarray:
        """The trajectory's indices of the atoms ``selection`` picks (from the selection cache when seen before)."""
        topology = self._ds.attrs.get(TOPOLOGY_ATTR) or self._stored_topology()
        return selected_atoms(topology, opener_of(self._ds).config, selection)

    def select(self, selection: str) -> xr.Dataset:
        """The Dataset over the atoms ``selection`` picks, in the trajectory's order; lazy variables stay
        lazy, and reading them reads only those atoms' runs. (Dask chunks are read whole before any
        indexing: on a Dataset opened with ``chunks``, give the selection at open, ``select=``.)

        Raises
        ------
        SelectionError
            The selection is invalid, selects nothing, or picks atoms this Dataset no longer holds.
        """
        wanted = self.atoms(selection)
        held = self._ds["atom"].values
        missing = np.setdiff1d(wanted, held)
        if len(missing):
            raise SelectionError(f"selection {selection!r} picks {len(missing)} atom(s) this Dataset does not "
                                 f"hold (atom {int(missing[0])} first): select on the Dataset before it was cut")
        return self._ds.isel(atom=np.searchsorted(held, wanted) if np.all(np.diff(held) > 0)
                             else np.flatnonzero(np.isin(held, wanted)))

    @property
    def bytes_read(self) -> int:
        """Bytes this process's threads have read from the trajectory's storage so far (Dask workers count theirs)."""
        return opener_of(self._ds).bytes_read

    def to_h5md(self, path, *, overwrite: bool = False, layout=None, precision: float | None = None,
                encoding: str = "floats", max_slab_mb: float = 64.0):
        """Write this Dataset as an H5MD file (see :func:`trajscale.arrays.write.to_h5md`)."""
        from .write import WriteSpec, to_h5md

        return to_h5md(self._ds, path, WriteSpec(overwrite=overwrite, layout=layout, precision=precision,
                                                  encoding=encoding, max_slab_mb=max_slab_mb))

    def _stored_topology(self) -> str:
        """The trajectory file itself when its atoms' names came from it (an H5MD file that stores them)."""
        if "name" in self._ds.coords and self._ds.attrs.get(SOURCE_ATTR) \
                and source_class(opener_of(self._ds).config["kind"]).stores_atom_labels:
            return str(self._ds.attrs["path"])
        raise SelectionError("selections need a topology: open the trajectory with one "
                             "(trajscale.open_dataset(topology, trajectory) or topology= in xr.open_dataset)")

