"""Recommend a layout and compression for an access pattern, from measured trade-offs (:data:`MEASURED`)."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, replace

import numpy as np

from ..block import sorted_unique
from ..errors import ConfigError
from ..facts import LayoutFacts, RunRead

#: From ``python benchmarks/layouts.py --frames 500`` (docs/benchmarks.md, "The layout study with RMSD runs"):
#: size relative to plain float32, serial whole-frame slab read GB/s, one-frame read ms. Re-measure together.
MEASURED = {
    # name:            (chunks,  compression,  precision, encoding, size, slab GB/s, 1 frame ms)
    "planned":         ("auto",  "none",       None, None,     1.00, 8.35, 0.13),
    "frame chunks":    ("frame", "none",       None, None,     1.00, 7.35, 0.14),
    "blosc-lz4":       ("auto",  "blosc-lz4",  None, None,     0.82, 3.31, 0.70),
    "blosc-zstd":      ("auto",  "blosc-zstd", None, None,     0.67, 1.19, 1.61),
    # (uint16 deltas with references; `layouts.py --frames 500 --only "lossy deltas"`, load ~1)
    "lossy deltas":    ("auto",  "blosc-lz4",  0.01, "deltas", 0.31, 3.3,  0.47),
}


@dataclass(frozen=True)
class Recommendation:
    """A recommended layout for an access pattern: why, the command that writes it, and a smaller alternative."""

    pattern: str
    layout: str           # a key of MEASURED
    why: str
    command: str
    compact: str | None   # the smaller alternative, with its command
    already: bool         # the file already has this layout

    def to_dict(self) -> dict:
        return {"pattern": self.pattern, "layout": self.layout, "why": self.why, "command": self.command,
                "compact": self.compact, "already": self.already}


def parse_pattern(spec: str) -> tuple[str, str | None]:
    """``"frames"``, ``"blocks"`` or ``"atoms:SEL"`` -> (kind, SEL)."""
    kind, _, sel = spec.partition(":")
    if kind in ("frames", "blocks") and not sel:
        return kind, None
    if kind == "atoms" and sel.strip():
        return kind, sel.strip()
    raise ConfigError(f"--pattern must be frames, blocks or atoms:SEL (an MDAnalysis selection with --topology, "
                      f"or atom indices A-B), got {spec!r}")


def selected_atoms(sel: str, n_atoms: int, topology: str | None = None) -> np.ndarray:
    """Indices of ``sel``: ``A-B`` (inclusive) or, with a topology, an MDAnalysis selection."""
    lo, dash, hi = sel.partition("-")
    if dash and lo.strip().isdigit() and hi.strip().isdigit():
        a, b = int(lo), int(hi)
        if not 0 <= a <= b < n_atoms:
            raise ConfigError(f"atoms {sel} out of range for {n_atoms} atoms")
        return np.arange(a, b + 1)
    if topology is None:
        raise ConfigError(f"atoms:{sel} is a selection: give --topology TOP (or atom indices as A-B)")
    from MDAnalysis import Universe

    idx = Universe(topology).select_atoms(sel).indices
    if idx.size == 0:
        raise ConfigError(f"atoms:{sel} selects no atoms of {topology}")
    return idx


def recommend(facts: dict, pattern: str, atoms: np.ndarray | None = None,
              topology: str | None = None) -> Recommendation:
    """The layout for ``pattern`` on the file ``facts`` describes (``inspect_file``'s dict); with
    ``topology``, a small selection also gets the command writing a file of only its atoms."""
    kind, sel = parse_pattern(pattern)
    layout = LayoutFacts.from_dict(facts)
    n_atoms, path = layout.n_atoms, str(layout.path)
    if kind == "frames":
        pick, compact = "frame chunks", "blosc-lz4"
        why = (f"one frame per chunk: a random frame costs only itself ({_m('frame chunks')[6]} ms measured; "
               f"chunks of several frames read them all, and compressed chunks decode whole)")
    elif kind == "blocks":
        pick, compact = "planned", "lossy deltas"
        why = (f"~2 MiB chunks of whole frames, uncompressed: the fastest slab reads measured "
               f"({_m('planned')[5]} GB/s per worker; blosc-lz4 {_m('blosc-lz4')[5]} GB/s at "
               f"{_m('blosc-lz4')[4]:.2f}x the size)")
    else:
        from .inspect import facts_amplification

        frac = (len(atoms) if atoms is not None else n_atoms) / max(1, n_atoms)
        pick, compact = "planned", None
        planned = replace(layout, chunks=layout.planned_chunks or layout.chunks, compression="none")
        in_place = facts_amplification(planned, atoms, min(100, layout.n_frames)) or 1.0
        spans = ", the gaps between its atoms included" if in_place > 1.05 else ""
        why = (f"the selection is {frac:.1%} of each frame: uncompressed chunks are read in place "
               f"({in_place:.1f}x the bytes asked for{spans}), while any compressed chunk is decoded whole, "
               f"~{1 / max(frac, 1e-9):.0f}x the bytes asked for")
        if frac < 0.25 or in_place > 2:
            why += "; if only these atoms are ever analysed, a file of just them is smaller and reads 1.0x"
            if topology is None:
                why += " (add --topology TOP for the command that writes it)"
            else:
                lo, dash, hi = sel.partition("-")   # (indices A-B: convert's --select takes an MDAnalysis one)
                mda_sel = index_selection(atoms) if dash and lo.strip().isdigit() and hi.strip().isdigit() else sel
                stem = os.path.splitext(os.path.basename(path))[0]
                why += ": " + " ".join(shlex.quote(c) for c in (
                    "trajscale", "convert", topology, path, "--select", mda_sel,
                    "-o", f"{stem}.selection.h5md"))
    command = _command(path, pick)
    alt = None
    if compact:
        c = _m(compact)
        alt = (f"{compact}: {c[4]:.2f}x the size, {c[5]} GB/s, {c[6]} ms per frame"
               + (" (lossy to 0.005 A, like XTC; read back only by trajscale)" if c[3] == "deltas" else "")
               + f": {_command(path, compact)}")
    return Recommendation(pattern, pick, why, command, alt, _matches(layout, pick))


def _m(name: str) -> tuple:
    return MEASURED[name]


def _command(path: str, name: str) -> str:
    chunks, comp, precision, encoding = MEASURED[name][:4]
    stem = os.path.splitext(os.path.basename(path))[0]
    tag = name.replace(" ", "-")
    cmd = ["trajscale", "rechunk", path, "-o", f"{stem}.{tag}.h5md", "--chunks", chunks, "--compression", comp]
    if precision is not None:
        cmd += ["--precision", str(precision), "--encoding", encoding]
    return " ".join(shlex.quote(c) for c in cmd)


def _matches(facts: LayoutFacts, name: str) -> bool:
    chunks, comp, precision, _ = MEASURED[name][:4]
    have = facts.chunks
    if not have or have[1] != facts.n_atoms:
        return False
    from .layout import plan_frames_per_chunk

    want_frames = 1 if chunks == "frame" else min(plan_frames_per_chunk(facts.n_atoms), facts.n_frames)
    same_comp = str(facts.compression).split(":")[0] == comp
    return have[0] == want_frames and same_comp and (precision is None) == (facts.precision is None)


#: Rechunk options whose read cost :func:`run_read` compares with the file's own layout.
ALTERNATIVES = ("--chunks auto", "--chunks frame", "--chunks auto --compression none")


def index_selection(atoms: np.ndarray) -> str:
    """An MDAnalysis selection of exactly ``atoms`` (sorted global indices): ``index 0:3340 3345``."""
    a = sorted_unique(np.asarray(atoms, dtype=np.int64))
    if a.size == 0:
        return "index"
    breaks = np.flatnonzero(np.diff(a) != 1) + 1
    parts = []
    for run in np.split(a, breaks):
        lo, hi = int(run[0]), int(run[-1])
        parts.append(str(lo) if lo == hi else f"{lo}:{hi}")   # MDAnalysis ranges include both ends
    return "index " + " ".join(parts)


def run_selection(selections: tuple[str, ...], atoms: np.ndarray | None) -> str:
    """The atoms a run read, in the user's words: its selection strings joined by ``or`` (``all`` without any)."""
    if atoms is None:   # whole frames
        return "all"
    given = list(dict.fromkeys(s.strip() for s in selections if s.strip()))
    if len(given) == 1:
        return given[0]
    if given:
        return " or ".join(f"({s})" for s in given)
    return index_selection(atoms)


def run_read(facts: LayoutFacts, atoms: np.ndarray | None, frames_per_task: int, step: int = 1) -> RunRead | None:
    """What a run's reads cost on the file ``facts`` describes and on :data:`ALTERNATIVES` (None: not H5MD)."""
    from .inspect import facts_amplification

    amp = facts_amplification(facts, atoms, frames_per_task, step)
    if amp is None:
        return None
    n = facts.n_atoms
    planned = facts.planned_chunks or (facts.n_frames, n, 3)
    alts = []
    for opt in ALTERNATIVES:
        uncompressed = "--compression none" in opt
        if uncompressed and (facts.precision is not None or facts.compression == "none"):
            continue   # a lossy file stays compressed; an uncompressed one is the first alternative
        alt = replace(facts, chunks=(1, n, 3) if "frame" in opt else tuple(planned),
                      compression="none" if uncompressed else facts.compression)
        alts.append((opt, facts_amplification(alt, atoms, frames_per_task, step)))
    return RunRead(n_atoms=n if atoms is None else len(atoms), frames_per_task=int(frames_per_task), step=int(step),
                   amplification=amp,
                   amplification_hdf5_default=facts_amplification(facts, atoms, frames_per_task, step, "hdf5"),
                   alternatives=tuple(alts))
