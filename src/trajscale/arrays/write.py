"""Write a trajectory Dataset back as an H5MD file, one slab of frames computed and held at a time."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..h5md.codecs import ENCODINGS
from ..h5md.layout import Layout
from ..units import WRITE_UNITS

log = logging.getLogger(__name__)

#: Variable -> H5MD field written from it.
FIELDS = {"positions": "position", "velocities": "velocity", "forces": "force"}
#: Per-atom coordinate -> the writer's keyword that stores it.
LABELS = {"name": "names", "resname": "resnames", "resid": "resids", "segid": "segids", "mass": "masses"}


@dataclass(frozen=True, slots=True)
class WriteSpec:
    """How :func:`to_h5md` writes: overwrite, the layout (None: ``convert``'s), lossy positions, slab size (MiB)."""

    overwrite: bool = False
    layout: Layout | str | None = None
    precision: float | None = None
    encoding: str = "floats"
    max_slab_mb: float = 64.0

    def resolved_layout(self) -> Layout:
        if self.layout is None:
            return Layout()
        if isinstance(self.layout, Layout):
            return self.layout
        if not isinstance(self.layout, str):
            raise ConfigError(f"to_h5md: layout= takes a trajscale.Layout (or a chunks string such as 'auto'), "
                              f"not {type(self.layout).__name__}")
        try:
            return Layout.parse(self.layout)
        except ConfigError as exc:
            raise ConfigError(f"to_h5md: layout={self.layout!r}: {exc}; give layout=Layout(chunks=...) "
                              "(chunks: 'auto', 'frame', 'contiguous' or a number of frames)") from None

    def check(self, layout: Layout) -> None:
        """The lossy options, refused (or warned about) in the words of the Python call."""
        if self.precision is not None and not self.precision > 0:
            raise ConfigError(f"to_h5md: precision= must be positive, got {self.precision}")
        if self.encoding not in ENCODINGS:
            raise ConfigError(f"to_h5md: encoding= must be one of {', '.join(map(repr, ENCODINGS))}, "
                              f"got {self.encoding!r}")
        if self.encoding != "floats" and (self.precision is None or not layout.compression):
            raise ConfigError(f"to_h5md: encoding={self.encoding!r} needs precision= and a compressed layout: "
                              "layout=Layout(compression='blosc-lz4', shuffle=True)")
        if self.precision is not None and not layout.compression:
            log.warning("to_h5md: precision=%g without compression only loses precision (rounded float32 "
                        "positions take as much space as exact ones): give layout=Layout(compression='gzip', "
                        "shuffle=True) or 'blosc-lz4' to store them smaller", self.precision)


def _check(ds) -> tuple[int, int, tuple[str, ...]]:
    """Frames, atoms and the fields to write; one clear error for what an H5MD file cannot hold."""
    if "positions" not in ds.data_vars:
        raise ConfigError("to_h5md writes a Dataset with a 'positions' variable (frame, atom, spatial)")
    for var in ("positions", "velocities", "forces", "box"):
        if var in ds.data_vars:
            need = {"frame", "atom", "spatial"} if var != "box" else {"frame", "cell"}
            if set(ds[var].dims) != need:
                raise ConfigError(f"to_h5md: {var!r} has dimensions {ds[var].dims}, expected {sorted(need)}")
            quantity = FIELDS.get(var, "box")
            unit = ds[var].attrs.get("units")
            if unit is not None and var != "box" and unit != WRITE_UNITS[quantity]:
                raise ConfigError(f"to_h5md: {var!r} is in {unit!r}; trajscale writes values in "
                                  f"{WRITE_UNITS[quantity]!r} (convert them and set its units attribute)")
    for coord in ("time", "step"):
        if coord not in ds.coords or ds[coord].dims != ("frame",):
            raise ConfigError(f"to_h5md: the Dataset has no {coord!r} along 'frame' (H5MD stores both for "
                              "every frame); a reduction over frames is not a trajectory")
    if ds.sizes["spatial"] != 3 or ds.sizes["frame"] == 0 or ds.sizes["atom"] == 0:
        raise ConfigError(f"to_h5md: {ds.sizes['frame']} frames of {ds.sizes['atom']} atoms in "
                          f"{ds.sizes['spatial']} dimensions: nothing an H5MD trajectory holds")
    fields = tuple(fl for var, fl in FIELDS.items() if var in ds.data_vars)
    return int(ds.sizes["frame"]), int(ds.sizes["atom"]), fields


def _slab_frames(layout: Layout, n_frames: int, n_atoms: int, n_fields: int, max_mb: float) -> int:
    """Frames per slab: whole output chunks, at most ``max_mb`` MiB of per-atom values."""
    shape = layout.chunk_shape(n_atoms, 4, n_frames)
    chunk = shape[0] if isinstance(shape, tuple) else 1
    fit = int(max_mb * 1024**2) // max(1, n_atoms * 12 * n_fields)
    return max(chunk, fit // chunk * chunk)


def _frames(da, a: int, b: int, dims: tuple[str, ...], dtype) -> np.ndarray:
    """Frames ``a:b`` of ``da`` in memory (computed here if lazy), in ``dims`` order."""
    return np.ascontiguousarray(da.isel(frame=slice(a, b)).transpose(*dims).values, dtype=dtype)


def to_h5md(ds, path, spec: WriteSpec | None = None) -> Path:
    """Write ``ds`` (positions, and velocities, forces, box where it has them; its per-atom labels)
    to ``path`` as H5MD; return the path.

    Raises
    ------
    OutputError
        ``path`` exists (without ``overwrite``), is the Dataset's own trajectory, or cannot be written.
    ConfigError
        The Dataset is not a trajectory (no positions, time or step along frames; values not in
        trajscale's units) or the lossy options are invalid.
    """
    from ..errors import OutputError
    from ..h5md.codecs import check_lossy_options
    from ..h5md.writer import H5MDWriter
    from ..sources import with_parts
    from ..util import atomic_output, check_output_path, refuse_input_as_output

    spec = spec or WriteSpec()
    n_frames, n_atoms, fields = _check(ds)
    layout = spec.resolved_layout()
    spec.check(layout)
    check_lossy_options(spec.precision, spec.encoding, layout.compression, warn=False)
    inputs = with_parts([ds.attrs["path"]] if ds.attrs.get("path") else [])
    refuse_input_as_output(Path(path), inputs)
    if Path(path).exists() and not Path(path).is_dir() and not spec.overwrite:
        raise OutputError(path, "already exists (pass overwrite=True to replace it)")
    check_output_path(path, spec.overwrite, inputs=inputs)
    labels = {kw: np.asarray(ds[c].values) for c, kw in LABELS.items() if c in ds.coords and ds[c].dims == ("atom",)}
    has_box = "box" in ds.data_vars
    per = _slab_frames(layout, n_frames, n_atoms, len(fields), spec.max_slab_mb)
    with atomic_output(path, overwrite=spec.overwrite) as tmp:
        with H5MDWriter(tmp, n_atoms, n_frames=n_frames, layout=layout, fields=fields,
                        box="triclinic" if has_box else None, precision=spec.precision,
                        encoding=spec.encoding, **labels) as writer:
            for a in range(0, n_frames, per):
                b = min(n_frames, a + per)
                arrays = {fl: _frames(ds[var], a, b, ("frame", "atom", "spatial"), np.float32)
                          for var, fl in FIELDS.items() if var in ds.data_vars}
                writer.write(**arrays, step=_frames(ds["step"], a, b, ("frame",), np.int64),
                             time=_frames(ds["time"], a, b, ("frame",), np.float64),
                             box=_frames(ds["box"], a, b, ("frame", "cell"), np.float32) if has_box else None)
                log.debug("%s: frames %d-%d of %d written", path, a, b, n_frames)
    return Path(path)
