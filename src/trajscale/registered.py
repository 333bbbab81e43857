"""What the package's root registers downward, for the registries below it to read: where each kind of Source
declares its traits, and the analyses the run engine makes above the analysis package.

The root (``trajscale/__init__.py``) stands above every layer and may name any package; the registries
(:mod:`trajscale.formats`, :mod:`trajscale.analysis`) read these tables, so that no layer names a package above
it, not even in a string. Nothing here imports anything: ``import trajscale`` stays cheap."""

from __future__ import annotations

#: ``"module:NAME"`` of the format records files are matched to (:class:`~trajscale.formats.FormatTraits`).
FORMATS: list[str] = []
#: ``"module:NAME"`` of the records of Sources made by another Source or from a config, never matched to a file.
KINDS: list[str] = []
#: Analyses rebuilt on workers by name that no command makes: name -> ``"module:Class"``.
ANALYSES: dict[str, str] = {}


def register(formats: tuple[str, ...] = (), kinds: tuple[str, ...] = (), analyses: dict | None = None) -> None:
    """Add records of formats and of other kinds of Source (``"module:NAME"``, in modules that import nothing of
    their Source), and analyses; before the registries are first read (they keep what they found)."""
    FORMATS.extend(t for t in formats if t not in FORMATS)
    KINDS.extend(t for t in kinds if t not in KINDS)
    ANALYSES.update(analyses or {})


__all__ = ["ANALYSES", "FORMATS", "KINDS", "register"]
