"""Run plans: several analyses in one TOML file, run in one pass (``trajscale run --plan``, ``trajscale.read_plan``).

The command line and Python read a plan with the same function, so a plan means the same analyses in a script as
on the command line.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError, InputFileError


def command_analyses(plugins: bool = False) -> dict[str, type]:
    """Name -> class of every analysis with a command; ``plugins``: other packages' too."""
    from .analysis import registered

    return {name: cls for name, cls in registered(plugins).items() if cls.command is not None}


@dataclass(frozen=True)
class Planned:
    """One analysis of a run: its command, the analysis, its ``--out`` and its ``select`` (None: not given)."""

    name: str
    analysis: object
    out: str | None = None
    select_given: str | None = None


def read_plan(path: str) -> list[Planned]:
    """The analyses of run plan ``path`` (TOML), in the file's order; one line naming the problem otherwise.

    Raises
    ------
    InputFileError
        The file cannot be read, or is not TOML.
    ConfigError
        A table names no analysis, a key no option of its analysis, or the plan lists none.
    """
    import tomllib

    from .analysis.options import build

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise InputFileError(path, f"cannot read the run plan: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputFileError(path, f"is not a valid TOML run plan: {exc}") from None
    known = command_analyses()
    if any(name not in known for name in data):   # another package's analysis, perhaps
        known = command_analyses(plugins=True)
    planned = []
    for name, tables in data.items():
        if name not in known:
            raise ConfigError(f"--plan {path}: unknown analysis [{name}]; the analyses are {', '.join(known)}")
        cls = known[name]
        tables = tables if isinstance(tables, list) else [tables]
        for i, table in enumerate(tables):
            where = f"--plan {path}: [{name}]" + (f" (the {_ordinal(i + 1)})" if len(tables) > 1 else "")
            if not isinstance(table, dict):
                raise ConfigError(f"{where} must be a table of options ([{name}], or [[{name}]] for several)")
            keys = [o.name for o in cls.command.options] + ["out"]
            unknown = [k for k in table if k not in keys]
            if unknown:
                raise ConfigError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
                                  f"{', '.join(map(repr, unknown))}; {name} takes {', '.join(keys)}")
            given = dict(table)
            out = given.pop("out", None)
            if out is not None and not isinstance(out, str):
                raise ConfigError(f"{where}: out is a file name, got {out!r}")
            planned.append(Planned(name, build(cls, given, where), out, given.get("select")))
    if not planned:
        raise ConfigError(f"--plan {path}: lists no analysis; give one table per analysis ([rmsd], [[rdf]], ...) "
                          f"of {', '.join(known)}")
    return planned


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


__all__ = ["Planned", "command_analyses", "read_plan"]
