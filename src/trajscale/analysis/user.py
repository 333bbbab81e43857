"""User functions as analyses: ``@per_frame`` series and ``Reduce`` accumulators.

A function of an importable module travels to workers by its import path; one of a script or a notebook
(``__main__``, which workers do not have) by value, pickled with cloudpickle. It runs on whole blocks, so it
can stay vectorised over frames.
"""

from __future__ import annotations

import base64
import functools
import importlib
import inspect
from dataclasses import dataclass

import numpy as np

from ..block import Block, check_finite
from ..errors import ConfigError
from ..topology import select_atoms
from .base import Analysis, FrameRows, OneSelection, Prepared
from .results import TimeSeries

#: A function of ``__main__`` travels as this prefix + its cloudpickle, base64 (configs stay plain strings).
BY_VALUE = "pickled:"


def _check_top_level(fn) -> tuple[str, str]:
    qual = getattr(fn, "__qualname__", "")
    mod = getattr(fn, "__module__", None)
    if not callable(fn) or mod is None or "<" in qual or "." in qual:
        raise ConfigError(f"{fn!r}: user functions must be top-level functions (no lambdas, closures or "
                          "methods): they travel to workers by import path, or by value from a script")
    return mod, qual


def function_path(fn) -> str:
    """How ``fn`` travels: ``"module:qualname"`` (checked to import back to the same function), or, for a
    function of ``__main__`` (a script, a notebook), ``"pickled:..."`` (its cloudpickle, base64)."""
    if isinstance(fn, str):
        resolve(fn)
        return fn
    mod, qual = _check_top_level(fn)
    if mod == "__main__":
        import cloudpickle

        return BY_VALUE + base64.b64encode(cloudpickle.dumps(getattr(fn, "__wrapped__", fn))).decode("ascii")
    path = f"{mod}:{qual}"
    if resolve(path) is not getattr(fn, "__wrapped__", fn) and resolve(path) is not fn:
        raise ConfigError(f"{path} does not import back to the same function")
    return path


@functools.lru_cache(maxsize=64)
def resolve(path: str):
    """The function at ``"module:qualname"``, or the one a ``"pickled:..."`` string holds (a ConfigError
    naming it if it cannot be had).  Cached: a worker unpickles or imports it once."""
    if path.startswith(BY_VALUE):
        import cloudpickle

        try:
            return cloudpickle.loads(base64.b64decode(path[len(BY_VALUE):]))
        except Exception as exc:   # noqa: BLE001 - e.g. a global the function uses is missing here
            raise ConfigError(f"cannot rebuild a user function from a script on this worker: "
                              f"{type(exc).__name__}: {exc}") from None
    mod, _, name = path.partition(":")
    try:
        fn = getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import user function {path!r}: {exc}") from None
    return getattr(fn, "__wrapped__", fn)


def describe(path: str) -> str:
    """A user function's name for messages (not its pickle)."""
    if path.startswith(BY_VALUE):
        fn = resolve(path)
        return f"__main__:{getattr(fn, '__qualname__', '?')}"
    return path


def readable_config(config: dict) -> dict:
    """An analysis config for reports: a function travelling by value is shown by its name."""
    return {k: describe(v) if isinstance(v, str) and v.startswith(BY_VALUE) else v for k, v in config.items()}


def per_frame(fn):
    """Mark ``fn(positions, box) -> (F,) or (F, k)`` as a per-frame user function.

    ``trajscale.run(PerFrame(fn, select=...), top, traj)`` runs it; whether workers can import it is
    checked when a ``PerFrame`` is made.  ``fn`` stays callable as before.
    """
    _check_top_level(fn)
    if len(inspect.signature(fn).parameters) < 1:
        raise ConfigError(f"{fn.__qualname__} must take (positions, box)")
    fn.__trajscale_per_frame__ = True
    return fn


@dataclass(frozen=True)
class ReduceResult:
    """``value``: the reduced partial of a :class:`Reduce`; ``report``: the RunReport."""

    value: object
    report: object = None


class _UserAnalysis(OneSelection, Analysis):
    def __init__(self, select: str = "all", needs_box: bool = False) -> None:
        self.select = select
        #: The function computes with the box (minimum image, a volume): frames without one are refused.
        self.needs_box = bool(needs_box)

    def prepare(self, universe, source) -> Prepared:
        return Prepared(atoms=select_atoms(universe, self.select, "selection").indices, state={"path": source.path})

    def _call(self, fn, block: Block, path: str, state: dict):
        check_finite(block, block.positions, state["path"])
        try:
            return fn(block.positions, block.box)
        except Exception as exc:   # the executor's wrapper names the worker and frames
            raise RuntimeError(f"user function {describe(path)} failed: {type(exc).__name__}: {exc}") from exc


class PerFrame(_UserAnalysis):
    """A user function giving one value or a fixed-size array per frame: ``r.values`` (F, ...).

    ``needs_box=True``: the function uses the box (minimum image, a volume), so a frame without a
    periodic box, or with one of zero volume, is refused instead of handed to it.
    """

    name = "per_frame"
    formats = TimeSeries.formats

    def __init__(self, function, select: str = "all", needs_box: bool = False) -> None:
        super().__init__(select, needs_box)
        self.function = function_path(function)

    def get_config(self) -> dict:
        return {"name": self.name, "function": self.function, "select": self.select, "needs_box": self.needs_box}

    def map(self, block: Block, prep: Prepared) -> FrameRows:
        out = np.array(self._call(resolve(self.function), block, self.function, prep.state), copy=True)
        if out.shape[:1] != (block.n_frames,):
            raise ConfigError(f"user function {describe(self.function)} returned shape {out.shape} for "
                              f"{block.n_frames} frames: the first axis must be the frames")
        return FrameRows(block.frames, block.time, {"values": out})

    def result(self, reduced: FrameRows, prep: Prepared) -> TimeSeries:
        return TimeSeries(reduced.frame, reduced.time, reduced.columns.get("values", np.empty(0)), "values")


class Reduce(_UserAnalysis):
    """An accumulator: ``map_fn(positions, box) -> partial`` per block, ``reduce_fn(partials) -> partial``
    (associative: it also combines already-reduced partials). ``r.value`` is the reduced partial;
    ``needs_box`` as for :class:`PerFrame`."""

    name = "user_reduce"
    per_frame = False

    def __init__(self, map_fn, reduce_fn, select: str = "all", needs_box: bool = False) -> None:
        super().__init__(select, needs_box)
        self.map_fn, self.reduce_fn = function_path(map_fn), function_path(reduce_fn)

    def get_config(self) -> dict:
        return {"name": self.name, "map_fn": self.map_fn, "reduce_fn": self.reduce_fn, "select": self.select,
                "needs_box": self.needs_box}

    def map(self, block: Block, prep: Prepared) -> dict:
        value = self._call(resolve(self.map_fn), block, self.map_fn, prep.state)
        return {"value": value, "start": block.start}

    def reduce(self, partials: list[dict]) -> dict:
        parts = sorted((p for p in partials if p), key=lambda p: p["start"])
        if not parts:
            return {}
        return {"value": resolve(self.reduce_fn)([p["value"] for p in parts]), "start": parts[0]["start"]}

    def result(self, reduced: dict, prep: Prepared) -> ReduceResult:
        return ReduceResult(reduced.get("value"))
