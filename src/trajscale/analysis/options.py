"""What an analysis offers the command line: its options, declared once beside the analysis.

An option's default is its constructor keyword's, so Python and the command line cannot disagree about it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ConfigError

#: ``Option.switch`` of an option that takes a value.
TAKES_VALUE = object()


@dataclass(frozen=True)
class Option:
    """One option of ``trajscale run NAME`` (``--name``), and the key ``name`` of a plan's table.

    ``keyword`` is the constructor's keyword it sets (default: ``name`` with ``_`` for ``-``); options that
    share one set it together, as a tuple in their order (``select1``, ``select2`` of Contacts' ``select``).
    """

    name: str                       # without its dashes (``"fit-select"``)
    help: str                       # the default is added from the constructor's signature
    keyword: str | None = None
    type: type = str                # what its value is converted to
    nargs: int | None = None        # values it takes (``range MIN MAX``: 2); None: one
    choices: tuple = ()             # the values allowed (empty: any)
    required: bool = False          # the analysis has no default for it
    switch: object = TAKES_VALUE    # for an option without a value (``--no-pbc``): the keyword's value
    repeat: bool = False            # given several times, the keyword gets the list
    metavar: str | tuple[str, ...] | None = None

    @property
    def dest(self) -> str:
        """The parsed namespace's attribute (``fit_select``)."""
        return self.name.replace("-", "_")

    @property
    def kw(self) -> str:
        return self.keyword or self.dest

    @property
    def is_switch(self) -> bool:
        return self.switch is not TAKES_VALUE


@dataclass(frozen=True)
class Command:
    """An analysis's ``trajscale run NAME``: one line of help, what ``--out`` writes, its options."""

    help: str
    out: str
    options: tuple[Option, ...] = ()


#: Options several analyses share.
FIT_SELECT = Option("fit-select", "superpose these atoms on the reference first")
REF_FRAME = Option("ref-frame", "reference frame (negative counts from the end)", type=int)
NO_PBC = Option("no-pbc", "plain distances, for a trajectory without periodic boundaries (by default minimum "
                "image, and every frame must have a box)", keyword="pbc", switch=False)


def defaults(cls) -> dict[str, object]:
    """The constructor's keyword defaults of analysis class ``cls`` (the one place they are written)."""
    return {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}


def default_text(cls, option: Option) -> str | None:
    """The default of ``option`` as its help says it (None: required, a switch, or shared keyword)."""
    if (option.required or option.is_switch or option.repeat
            or sum(o.kw == option.kw for o in cls.command.options) > 1):
        return None
    d = defaults(cls).get(option.kw, inspect.Parameter.empty)
    if d is inspect.Parameter.empty:
        return None
    if isinstance(d, tuple | list):
        return " ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in d) or "none"
    return "none" if d is None else repr(d) if isinstance(d, str) else str(d)


def help_text(cls, option: Option) -> str:
    """``option``'s help with its default (``"reference frame (negative counts from the end; default: 0)"``)."""
    d = default_text(cls, option)
    if d is None:
        return option.help
    if option.help.endswith(")"):
        return f"{option.help[:-1]}; default: {d})"
    return f"{option.help} (default: {d})"


def build(cls, given: Mapping[str, object], where: str):
    """An instance of analysis ``cls`` from its options ``given`` (option name -> value, as parsed or as
    a plan's table holds them; switches as booleans); options not given keep the constructor's defaults.
    ``where`` names the options' origin in errors (``"--plan FILE: [rdf]"``)."""
    by_name = {o.name: o for o in cls.command.options}
    unknown = [k for k in given if k not in by_name]
    if unknown:
        raise ConfigError(f"{where}: unknown option{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(map(repr, unknown))}; {cls.name} takes {', '.join(by_name) or 'none'}")
    missing = [o.name for o in cls.command.options if o.required and given.get(o.name) is None]
    if missing:
        raise ConfigError(f"{where}: {cls.name} needs {', '.join(missing)}")
    kw: dict[str, object] = {}
    shared: dict[str, list] = {}
    for o in cls.command.options:
        value = given.get(o.name)
        if value is None or value is False and o.is_switch:
            continue
        value = _checked(o, value, where, cls.name)
        if sum(p.kw == o.kw for p in cls.command.options) > 1:
            shared.setdefault(o.kw, []).append(value)
        else:
            kw[o.kw] = value
    kw.update({k: tuple(v) for k, v in shared.items()})
    return cls(**kw)


def _checked(o: Option, value, where: str, name: str):
    """``value`` of option ``o`` converted to what the constructor takes, or a one-line error."""
    def bad(why: str) -> ConfigError:
        return ConfigError(f"{where}: {name} option {o.name!r} {why}")

    if o.is_switch:
        if value is not True:
            raise bad(f"is a switch: true or false, got {value!r}")
        return o.switch
    if o.repeat:
        values = list(value) if isinstance(value, list | tuple) else [value]
        return [_one(o, v, bad) for v in values]
    if o.nargs:
        if not isinstance(value, list | tuple) or len(value) != o.nargs:
            raise bad(f"takes {o.nargs} values, got {value!r}")
        return tuple(_one(o, v, bad) for v in value)
    return _one(o, value, bad)


def _one(o: Option, value, bad):
    if isinstance(value, bool) or isinstance(value, list | tuple | dict):
        raise bad(f"takes a {o.type.__name__}, got {value!r}")
    try:
        v = o.type(value) if not (o.type is int and isinstance(value, float)) else _int(value)
    except (TypeError, ValueError):
        raise bad(f"takes a {o.type.__name__}, got {value!r}") from None
    if o.choices and v not in o.choices:
        raise bad(f"is one of {', '.join(map(str, o.choices))}, got {value!r}")
    return v


def _int(value: float) -> int:
    if value != int(value):
        raise ValueError(value)
    return int(value)


def defaults_table() -> str:
    """The documentation's table of every analysis's options and defaults (Markdown), made from the
    registry: one row per option, its default read from the constructor."""
    from . import ANALYSES

    lines = ["| `trajscale run` | Python | option (plan key) | keyword | default |", "| --- | --- | --- | --- | --- |"]
    for name, cls in ANALYSES.items():
        if cls.command is None:
            continue
        for i, o in enumerate(cls.command.options):
            first = (f"`{name}`", f"`trajscale.{cls.__name__}`") if i == 0 else ("", "")
            if o.is_switch:
                default = f"off (on: `{o.kw}={o.switch!r}`)"
            elif o.repeat:
                default = "none (repeatable; a plan's key takes a list)"
            else:
                d = default_text(cls, o)
                default = "required" if o.required else f"`{d}`" if d else "-"
            lines.append(f"| {first[0]} | {first[1]} | `--{o.name}` | `{o.kw}` | {default} |")
    return "\n".join(lines)


__all__ = ["FIT_SELECT", "NO_PBC", "REF_FRAME", "Command", "Option", "build", "default_text", "defaults",
           "defaults_table", "help_text"]
