"""Lazy package namespaces (PEP 562): exported names are imported on first use, so ``import trajscale`` is cheap."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from typing import ClassVar


class _LazyPackage(types.ModuleType):
    """A package whose exported names stay bound to their objects when a same-named submodule loads (``import
    trajscale.run`` would rebind ``trajscale.run`` to the module); the submodule stays in ``sys.modules``."""

    _lazy_exports: ClassVar[dict] = {}   # set per package (an instance attribute) by attach

    def __setattr__(self, name: str, value) -> None:
        if (name in self._lazy_exports and isinstance(value, types.ModuleType)
                and value.__name__ == f"{self.__name__}.{name}"):
            return
        super().__setattr__(name, value)


#: Names the lazy machinery adds to a package, left out of its ``dir()``.
_MACHINERY = frozenset({"attach", "TYPE_CHECKING", "__getattr__", "__dir__"})


def attach(package: str, exports: dict[str, str | Callable[[], object]], submodules: tuple[str, ...] = ()):
    """``(__getattr__, __dir__)`` for ``package``: each name in ``exports`` comes from its module.

    Parameters
    ----------
    package
        The package's ``__name__``.
    exports
        Public name -> module that defines it, relative to the package (``".rmsd"``), or a
        function without arguments that builds the value (a registry of several modules' classes).
    submodules
        Submodules reachable as attributes without an import of their own
        (``trajscale.analysis`` after ``import trajscale``), as the eager imports made them.
    """
    module = sys.modules[package]
    module.__class__ = _LazyPackage
    module._lazy_exports = dict(exports)
    subs = frozenset(submodules)

    def __getattr__(name: str):
        where = exports.get(name)
        if callable(where):
            value = where()
        elif where is not None:
            value = getattr(importlib.import_module(where, package), name)
        elif name in subs:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(module, name, value)   # a plain attribute from now on
        return value

    def __dir__() -> list[str]:
        # What the eager imports left: no private helpers of the package or of this machinery.
        shown = {n for n in vars(module) if not n.startswith("_") or n.startswith("__")} - _MACHINERY
        return sorted(shown | set(exports) | subs)

    return __getattr__, __dir__
