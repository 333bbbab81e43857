"""Fuzz targets for trajscale's H5MD reading: raw HDF5 bytes, H5MD files built from a recipe, and
``trajscale.mda.Reader`` on both.

Each target takes one input (``bytes``) and returns normally when trajscale either read it or
refused it with one of its own errors; anything else (another exception, a crash, a hang) is a
finding.  ``TARGETS`` maps a name to ``(seed_files, test_one_input)`` for ``benchmarks/fuzz.py``;
this module also runs alone::

    python benchmarks/fuzz_targets/h5md.py --target h5md_build --seconds 60 [--corpus DIR]

Byte mutations of an HDF5 file mostly meet HDF5's own checks (superblock, object headers,
checksums); the ``h5md_build`` target reads its input as a recipe instead (FuzzedDataProvider):
an H5MD file with odd shapes, dtypes, chunkings, attributes, unit strings, step/time/box
datasets, virtual datasets and external links pointing at missing or mismatched files, and a
segment index over such files, so that trajscale's own checks are what the fuzzer reaches.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

#: Exceptions that are trajscale's answer to a bad file (the CLI prints them on one line).
#: mda.Reader turns trajscale's errors into IOError (MDAnalysis's convention) and a frame
#: outside the trajectory into EOFError.
_TMP = Path(tempfile.mkdtemp(prefix="trajscale-fuzz-h5md-"))
atexit.register(shutil.rmtree, _TMP, True)   # (a fuzzing child's is under its campaign's own temporary folder)


def _expected() -> tuple[type, ...]:
    from trajscale.errors import TrajscaleError

    return (TrajscaleError,)


# ---------------------------------------------------------------- seeds
def _seed_dir() -> Path:
    d = _TMP / "seeds"
    d.mkdir(exist_ok=True)
    return d


def seed_files() -> list:
    """MDAnalysisTests' H5MD file, and a small H5MD that trajscale converts from the AdK PSF/DCD."""
    from MDAnalysisTests.datafiles import DCD, PSF, H5MD_xvf

    out = [H5MD_xvf]
    small = _seed_dir() / "adk.h5md"
    if not small.exists():
        import h5py
        import MDAnalysis as mda

        u = mda.Universe(PSF, DCD)
        with h5py.File(small, "w") as f:
            # (the AdK DCD has no box: a fixed 8 nm one gives the seed a periodic box to read)
            _write_h5md(f, u.trajectory.timeseries(order="fac")[:5].astype(np.float32),
                        np.full((5, 3), 8.0, np.float32))
    out.append(str(small))
    return out


def recipe_seeds() -> list[bytes]:
    """Recipes: a valid file first (all zeros), then a few that reach each branch."""
    rng = np.random.default_rng(29)
    return [bytes(64)] + [rng.integers(0, 256, 96, dtype=np.uint8).tobytes() for _ in range(15)]


def _write_h5md(f, pos: np.ndarray, edges: np.ndarray | None = None, unit: str = "nm") -> None:
    g = f.create_group("particles/all")
    p = g.create_group("position")
    p.create_dataset("value", data=pos / 10 if unit == "nm" else pos, chunks=(1, *pos.shape[1:]))
    p["value"].attrs["unit"] = unit
    p.create_dataset("step", data=np.arange(len(pos)))
    p.create_dataset("time", data=np.arange(len(pos), dtype=np.float64))
    p["time"].attrs["unit"] = "ps"
    if edges is not None:
        b = g.create_group("box")
        b.attrs["dimension"] = 3
        b.attrs["boundary"] = np.array([b"periodic"] * 3)
        e = b.create_group("edges")
        e.create_dataset("value", data=edges)
        e["value"].attrs["unit"] = unit
        e.create_dataset("step", data=np.arange(len(edges)))


# ---------------------------------------------------------------- reading
def _read_source(path: str, assume_units: str | None = None) -> None:
    """Open ``path`` as trajscale does, read a block, a strided block and some atoms."""
    from trajscale.sources import open_source

    src = open_source(path, assume_units=assume_units)
    try:
        n = src.n_frames
        fields = src.fields
        if n:
            src.read(0, min(n, 4), None, fields)
            src.read(n - 1, n, np.array([0, src.n_atoms - 1]) if src.n_atoms else None, ("position",))
            if n > 2:
                src.read(0, min(n, 7), None, ("position",), stride=2)
        src.layout_summary()
    finally:
        src.close()


def _read_mda(path: str, assume_units: str | None = None) -> None:
    """Iterate ``trajscale.mda.Reader`` over a few frames with small blocks, jump, and ask dt."""
    from trajscale.mda import Reader

    try:
        r = Reader(path, assume_units=assume_units, block_bytes=64)
    except (IOError, EOFError):
        return
    try:
        for i, _ in enumerate(r):
            if i >= 5:
                break
        if r.n_frames:
            _ = r[r.n_frames - 1]
        _ = r.dt
    except (IOError, EOFError):   # a refused frame, as MDAnalysis's readers say it
        pass
    finally:
        r.close()


def _guarded(fn, *args) -> None:
    """Run ``fn``; trajscale's own errors are answers.  With ``TRAJSCALE_FUZZ_FINDINGS`` set (a folder),
    any other exception is saved there (one file per place it was raised) and the campaign goes on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fn(*args)
        except _expected():
            pass
        except Exception as exc:
            keep = os.environ.get("TRAJSCALE_FUZZ_FINDINGS")
            if not keep:
                raise
            import hashlib
            import traceback

            where = traceback.extract_tb(exc.__traceback__)[-1]
            key = hashlib.sha1(f"{type(exc).__name__}:{where.filename}:{where.lineno}".encode()).hexdigest()[:12]
            out = Path(keep) / f"finding-{key}.txt"
            if not out.exists():
                out.write_text("".join(traceback.format_exception(exc)) + f"\ninput: {_CURRENT[0].hex()}\n")


_CURRENT = [b""]   # the input being run, saved with a finding


def _raw_file(data: bytes) -> str:
    path = _TMP / f"raw-{os.getpid()}.h5md"
    path.write_bytes(data)
    return str(path)


def h5md_open(data: bytes) -> None:
    """Raw bytes as an H5MD file, through trajscale's source."""
    _CURRENT[0] = data
    _guarded(_read_source, _raw_file(data), "nm")


# ---------------------------------------------------------------- recipes
DTYPES = [np.float32, np.float64, np.float16, np.int32, np.uint8, np.int64, np.complex64, "S4", "compound"]
UNITS = ["nm", "Angstrom", "", "furlong", "nm nm", "A", "pm", b"nm", 7, np.array([b"nm", b"A"]),
         np.array([], dtype="S1"), "\u00c5ngstr\u00f6m", None, "nm^-1"]
TIME_UNITS = ["ps", "fs", "ns", "", "s", "m", None, 3.5]
HUGE = [0, 1, 2, 3, 5, 17, 2**31, 10**12, 2**62]


class _Recipe:
    """Choices drawn from the fuzzer's bytes (zeros after the end: the input's tail is plain)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.i = data, 0

    def byte(self) -> int:
        b = self.data[self.i] if self.i < len(self.data) else 0
        self.i += 1
        return b

    def pick(self, options):
        return options[self.byte() % len(options)]

    def flag(self, p: int = 4) -> bool:
        """True about once in ``p`` draws (never for a zero byte: a zero recipe is a valid file)."""
        b = self.byte()
        return b != 0 and b % p == 0

    def small(self, hi: int) -> int:
        return self.byte() % (hi + 1)


def _dataset(g, name: str, shape: tuple, dtype, r: _Recipe, chunks=True):
    """A dataset of ``shape`` that stores no more than ~1 MB: huge shapes stay unwritten (fill value)."""

    if dtype == "compound":
        dtype = np.dtype([("x", np.float32), ("y", np.int8)])
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=object)) if shape else 1
    kw = {}
    if n * dtype.itemsize > 1 << 20 or chunks and shape and r.flag(3):
        if not shape or 0 in shape and n * dtype.itemsize > 1 << 20:
            return g.create_dataset(name, shape=shape, dtype=dtype)
        c = tuple(max(1, min(s, r.pick([1, 2, 3, 64]))) for s in shape)
        kw = {"chunks": c, "maxshape": tuple(None if r.flag() else s for s in shape)}
        if r.flag(5):
            kw["compression"] = "gzip"
        try:
            return g.create_dataset(name, shape=shape, dtype=dtype, **kw)
        except (ValueError, TypeError, OSError):
            return g.create_dataset(name, shape=shape, dtype=dtype)
    data = (np.arange(n) % 97).astype(dtype if dtype.kind not in "SV" else np.uint8).reshape(shape) \
        if dtype.kind not in "SV" else None
    ds = g.create_dataset(name, shape=shape, dtype=dtype)
    if data is not None and n:
        ds[...] = data
    return ds


def _set_attr(obj, name: str, value) -> None:
    if value is None:
        return
    try:
        obj.attrs[name] = value
    except (TypeError, ValueError):
        pass


def _build(f, r: _Recipe, other: str) -> str | None:
    """Write one H5MD particle group from the recipe ``r``; ``other`` is a second file to point at."""
    import h5py

    n_frames = r.pick([3, 4, 1, 0, 2, 10**12, 2**40, 6])
    n_atoms = r.pick([5, 1, 0, 3, 2**31, 10**9, 7])
    last = r.pick([3, 3, 3, 2, 4, 1])
    shape = r.pick([(n_frames, n_atoms, last), (n_frames, n_atoms, last), (n_frames, n_atoms),
                    (n_frames, n_atoms, last, 2), (n_frames,), ()])
    group = r.pick(["all", "all", "protein"])
    if r.flag(16):
        return None   # no particles group at all
    g = f.require_group(f"particles/{group}")
    if r.flag(12):
        f.create_group("particles/second/position").create_dataset("value", data=np.zeros((1, 1, 3)))
    pos = g.create_group("position")
    how = r.pick(["plain", "plain", "plain", "virtual", "external", "softloop", "group"])
    if how == "virtual":
        layout = h5py.VirtualLayout(shape=shape or (1,), dtype=np.float32)
        target = r.pick([other, str(_TMP / "missing.h5"), "."])
        layout[...] = h5py.VirtualSource(target, r.pick(["particles/all/position/value", "nothing"]),
                                         shape=shape or (1,))
        ds = pos.create_virtual_dataset("value", layout, fillvalue=r.pick([0.0, np.nan]))
    elif how == "external":
        pos["value"] = h5py.ExternalLink(r.pick([str(_TMP / "missing.h5"), other]), "particles/all/position/value")
        ds = None
    elif how == "softloop":
        pos["value"] = h5py.SoftLink(f"/particles/{group}/position/value")
        ds = None
    elif how == "group":
        ds = pos.create_group("value")
    else:
        ds = _dataset(pos, "value", shape, r.pick(DTYPES[:3] if r.byte() < 200 else DTYPES), r)
    if ds is not None:
        _set_attr(ds, "unit", r.pick(UNITS))
        if r.flag(6):
            _set_attr(ds, "trajscale_quantum", r.pick([0.0, -1.0, np.nan, 1e-3, np.inf, "x", np.array([1.0, 2.0])]))
            _set_attr(ds, "trajscale_encoding", r.pick(["floats", "deltas", "deltas32", "zip", b"deltas", 5]))
            _set_attr(ds, "trajscale_precision", r.pick([0.01, -1.0, np.nan, "fine"]))
            _set_attr(ds, "trajscale_unit", r.pick(UNITS))
            _set_attr(ds, "trajscale_center", r.pick([np.zeros(3), np.zeros(2), 1.0, "c"]))
    n_rows = n_frames + r.pick([0, 0, 0, -1, 1, -n_frames, 5])
    step_kind = r.pick(["rows", "rows", "rows", "missing", "scalar", "2d", "float", "string", "group"])
    if step_kind == "rows":
        _dataset(pos, "step", (max(0, n_rows),), r.pick([np.int64, np.int64, np.int32, np.uint8]), r)
    elif step_kind == "scalar":
        pos.create_dataset("step", data=r.pick([1, 0, -5, 2**62]))
        _set_attr(pos["step"], "offset", r.pick([0, "x", np.array([1, 2]), 1e300]))
    elif step_kind == "2d":
        _dataset(pos, "step", (max(0, n_rows), 2), np.int64, r)
    elif step_kind == "float":
        _dataset(pos, "step", (max(0, n_rows),), np.float64, r)
    elif step_kind == "string":
        _dataset(pos, "step", (max(0, n_rows),), "S4", r)
    elif step_kind == "group":
        pos.create_group("step")
    time_kind = r.pick(["rows", "rows", "missing", "scalar", "2d", "string", "rows-short"])
    if time_kind in ("rows", "rows-short"):
        t = _dataset(pos, "time", (max(0, n_rows - (time_kind == "rows-short") * r.small(3)),),
                     r.pick([np.float64, np.float32, np.int32]), r)
        _set_attr(t, "unit", r.pick(TIME_UNITS))
    elif time_kind == "scalar":
        t = pos.create_dataset("time", data=r.pick([1.0, 0.0, np.nan, np.inf, -1.0, 1e308]))
        _set_attr(t, "unit", r.pick(TIME_UNITS))
        _set_attr(t, "offset", r.pick([None, 0.0, "x", np.array([1.0, 2.0]), np.nan]))
    elif time_kind == "2d":
        _set_attr(_dataset(pos, "time", (max(0, n_rows), 3), np.float64, r), "unit", "ps")
    elif time_kind == "string":
        _set_attr(_dataset(pos, "time", (max(0, n_rows),), "S4", r), "unit", "ps")
    if r.flag(3):
        box = g.create_group("box")
        _set_attr(box, "boundary", r.pick([np.array([b"periodic"] * 3), np.array(["periodic", "none", "none"],
                  dtype=h5py.string_dtype()), "periodic", np.array([b"periodic"] * 2), 5, np.array([1, 2, 3]),
                  np.array([b"periodic"] * 4)]))
        _set_attr(box, "dimension", r.pick([3, 2, "three", None]))
        edges_kind = r.pick(["fixed", "td", "td", "scalar", "group-empty"])
        eshape = r.pick([(3,), (3, 3), (2,), (4,), (0,), (3, 2)])
        if edges_kind == "fixed":
            e = _dataset(box, "edges", eshape, r.pick([np.float32, np.float64, "S4", np.int8]), r)
            _set_attr(e, "unit", r.pick(UNITS))
        elif edges_kind == "td":
            eg = box.create_group("edges")
            e = _dataset(eg, "value", (max(0, n_frames + r.pick([0, 0, -1, 1, -n_frames])), *eshape),
                         r.pick([np.float32, np.float64, "S4"]), r)
            _set_attr(e, "unit", r.pick(UNITS))
            if r.flag():
                eg["value_link"] = h5py.ExternalLink(str(_TMP / "missing.h5"), "x")
        elif edges_kind == "scalar":
            _set_attr(box.create_dataset("edges", data=r.pick([1.0, 0.0, np.nan])), "unit", "nm")
        else:
            box.create_group("edges")
    for fl in ("velocity", "force"):
        if r.flag(5):
            vg = g.create_group(fl)
            v = _dataset(vg, "value", r.pick([shape, (n_frames, n_atoms + 1, 3), (max(0, n_frames - 1), n_atoms, 3),
                                              (n_frames, n_atoms)]), r.pick([np.float32, np.float64, "S4"]), r)
            _set_attr(v, "unit", r.pick(["nm ps-1", "kJ mol-1 nm-1", "", "nm", None, "Angstrom/ps"]))
    if r.flag(8):
        f.create_group("observables/energy").create_dataset("value", data=np.zeros(3))
    return group


def _index(r: _Recipe, files: list[str]) -> str:
    """A segment index over ``files``, with the recipe's idea of their frame counts."""
    segments, start = [], 0
    for p in files:
        n = r.pick([3, 3, 4, 0, -1, 10**12, "3", None, 2.5])
        seg = {"path": r.pick([os.path.basename(p), os.path.basename(p), p, "missing.h5md", "", ".", 5]),
               "start": r.pick([start, start, start, start + 1, -1, "0", None]), "n_frames": n}
        if r.flag(6):
            seg["file_frames"] = r.pick([2, 5, -3, "x", 10**12])
        if r.flag(6):
            seg["shift_step"], seg["shift_time"] = r.pick([1, "x", None, 2**70]), r.pick([1.0, "y", np.nan])
        if r.flag(8):
            seg["format"] = r.pick(["H5MD", "XTC", "DCD", 3, None])
        segments.append(seg)
        start += n if isinstance(n, int) and not isinstance(n, bool) else 0
    index = {"format": "trajscale-segments", "version": r.pick([1, 1, 2, "1"]),
             "n_atoms": r.pick([5, 5, 0, -1, "5", None, 10**12, 3.5]), "segments": segments}
    if r.flag(6):
        index["topology"] = r.pick(["missing.psf", 3, ".", None])
    if r.flag(6):
        index["fields"] = r.pick([["position"], ["velocity"], "position", [3], []])
    if r.flag(6):
        index["group"] = r.pick(["protein", 3, "", None])
    text = json.dumps(index)
    if r.flag(10):
        text = text[: r.small(len(text))]
    out = Path(files[0]).parent / "index.json"
    out.write_text(text)
    return str(out)


def build(data: bytes) -> tuple[str, str | None]:
    """The file the recipe ``data`` describes (and the units to assume, or None)."""
    import h5py

    r = _Recipe(data)
    d = _TMP / f"build-{os.getpid()}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    other = str(d / "other.h5md")
    with h5py.File(other, "w") as f:
        _write_h5md(f, np.zeros((r.pick([3, 2, 4]), r.pick([5, 4]), 3), np.float32))
    main = str(d / "part0.h5md")
    with h5py.File(main, "w", libver=r.pick(["earliest", "latest"])) as f:
        _build(f, r, other)
    assume = r.pick([None, "nm", "Angstrom", "parsec"])
    if r.flag(4):
        files = [main, other] if r.flag(2) else [main]
        return _index(r, files), assume
    return main, assume


def h5md_build(data: bytes) -> None:
    """An H5MD file (or a segment index) built from the recipe ``data``, through trajscale's source."""
    _CURRENT[0] = data
    try:
        path, assume = build(data)
    except (ValueError, TypeError, OSError, OverflowError):   # h5py refused the recipe: not trajscale's
        return
    _guarded(_read_source, path, assume)


def mda_reader(data: bytes) -> None:
    """``trajscale.mda.Reader`` on raw bytes (an input starting with HDF5's signature) or a recipe."""
    _CURRENT[0] = data
    if data[:8] == b"\x89HDF\r\n\x1a\n":
        path, assume = _raw_file(data), "nm"
    else:
        try:
            path, assume = build(data)
        except (ValueError, TypeError, OSError, OverflowError):
            return
    _guarded(_read_mda, path, assume)


def _mda_seeds() -> list:
    return seed_files() + recipe_seeds()


TARGETS = {
    "h5md_open": (seed_files, h5md_open),
    "h5md_build": (recipe_seeds, h5md_build),
    "mda_reader": (_mda_seeds, mda_reader),
}


# ---------------------------------------------------------------- standalone runner
def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=sorted(TARGETS), required=True)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--corpus", help="corpus folder (default: a temporary one, seeded)")
    ap.add_argument("--replay", nargs="*", help="run these inputs once each, no fuzzing")
    args, rest = ap.parse_known_args(argv)
    seeds, fn = TARGETS[args.target]
    if args.replay is not None:
        for p in args.replay:
            fn(Path(p).read_bytes())
            print(f"{p}: ok")
        return 0
    import atheris

    corpus = Path(args.corpus or _TMP / "corpus")
    corpus.mkdir(parents=True, exist_ok=True)
    for k, s in enumerate(seeds()):
        blob = s if isinstance(s, bytes) else Path(s).read_bytes()
        (corpus / f"seed-{k:03d}").write_bytes(blob)
    with atheris.instrument_imports(include=["trajscale"]):
        import trajscale.h5md.source  # noqa: F401
        import trajscale.mda  # noqa: F401
        import trajscale.sources.segments  # noqa: F401
    atheris.Setup([sys.argv[0], f"-max_total_time={args.seconds}", "-timeout=20", "-rss_limit_mb=4096",
                   "-print_final_stats=1", *rest, str(corpus)], fn)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    sys.exit(main())
