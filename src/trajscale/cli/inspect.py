"""``trajscale inspect``: an H5MD file's layout, units and read amplification; any other trajectory's facts."""

from __future__ import annotations

import json
import os

from ..storage import redacted
from ..storage.location import Location
from .options import add_h5md_options, add_strict_option


def add_parser(sub) -> None:
    p = sub.add_parser("inspect", help="describe an H5MD file and its layout (or another trajectory)",
                       description="Groups, frames, atoms, units, chunk shape, compression, file size and "
                                   "the read amplification of common access patterns. A trajectory in "
                                   "another format (XTC, TRR, DCD, ...) gets its frames, atoms, fields, units "
                                   "and times (XTC and TRR: read from their frame headers).")
    p.add_argument("file", help="H5MD file (or XTC, TRR, DCD, a segment index, ...)")
    add_h5md_options(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    add_strict_option(p)
    p.add_argument("--pattern", default=None, metavar="frames|blocks|atoms:SEL",
                   help="recommend a layout and compression for this access pattern (random single frames, "
                        "blocks of whole frames, or atoms SEL over many frames: an MDAnalysis selection with "
                        "--topology, or indices A-B) from measured trade-offs, with the rechunk command")
    p.add_argument("--topology", default=None, help="topology for --pattern atoms:SELECTION")
    p.add_argument("--remote-costs", action="store_true",
                   help="say what opening the file, a frame, a block of frames and a selection cost when it "
                        "is read over the network: range requests and bytes, from its layout (always shown "
                        "for a URL)")
    p.add_argument("--follow", action="store_true",
                   help="while a job writes FILE (H5MD, XTC, TRR or a segment index, as run --follow reads "
                        "them), print its whole frame count as it grows, until it is marked complete, "
                        "damaged, replaced, or --idle seconds pass without a new frame; the last line says "
                        "which, and the exit status is run --follow's")
    p.add_argument("--idle", type=float, default=None,
                   help="with --follow: seconds without a new frame to stop (default 30)")
    p.set_defaults(func=main, kept_when_interrupted=lambda a: "it writes no file" if a.follow else
                   "no partial output was kept")


def main(args) -> int:
    if args.idle is not None and not args.follow:
        from ..errors import ConfigError

        raise ConfigError("--idle: for --follow (how long to wait for a new frame)")
    if args.follow:
        return _follow(args)
    from ..sources.base import OpenRequest
    from ..sources.registry import guess

    where = Location(args.file)   # (with the command line's options)
    match = guess(where)   # the format registry: one line listing what is read, for a file it is not
    facts = match.source.layout_report(args.file, OpenRequest(group=args.h5md_group,
                                                              assume_units=args.assume_units))
    if facts is None:   # a format with no layout report of its own (H5MD has one): read by its Source
        return _inspect_other(args, match, where)
    selection = None   # --pattern atoms:SEL: {its row's name: its atoms}
    if args.pattern:
        from ..h5md.recommend import parse_pattern, recommend, selected_atoms

        kind, sel = parse_pattern(args.pattern)
        if facts.get("n_atoms") is None:
            from ..errors import ConfigError

            raise ConfigError(f"{args.file} has several particle groups: add --group NAME for --pattern")
        atoms = selected_atoms(sel, facts["n_atoms"], args.topology) if kind == "atoms" else None
        if atoms is not None:   # the selection's own row beside the standard patterns
            label = f"atoms:{sel} ({len(atoms)} atoms)"
            _add_selection_row(facts, label, atoms)
            selection = {label: atoms}
        facts["recommendation"] = recommend(facts, args.pattern, atoms, args.topology).to_dict()
    if getattr(args, "remote_costs", False) or not where.local:
        facts["remote_costs"] = _remote_costs(args, facts, where, selection)
    if not where.local:
        facts["validator"] = store_validator(where)
    facts = redacted(facts)   # (what is printed names the file: never a URL's password)
    if args.json:
        print(json.dumps(facts, indent=1))
        return 0
    print(format_facts(facts))
    return 0


def store_validator(location: Location) -> dict:
    """What tells the bytes at ``location`` from a replacement's (:class:`~trajscale.storage.bytestore.Validator`):
    ``kind``, ``complete`` and ``says``; a store that cannot see every replacement is logged as a warning."""
    import logging

    v = location.store().validator
    if not v.complete:
        logging.getLogger("trajscale.inspect").warning("%s: a replacement may go unseen: %s", location, v.says)
    return {"kind": v.kind, "complete": v.complete, "says": v.says}


def _remote_costs(args, facts: dict, where: Location, atoms: dict | None) -> dict:
    """Requests and bytes of opening the file and of each access pattern (``atoms``: the selection's too), as the
    remote reader fetches them."""
    from ..errors import ConfigError
    from ..h5md.inspect import file_remote_costs
    from ..hdf5.chunks import MAX_REQUEST
    from ..storage.fileobj import BLOCK_BYTES
    from ..storage.ranges import merge_gap_of

    if facts.get("n_atoms") is None:
        raise ConfigError(f"{args.file} has several particle groups: add --group NAME for --remote-costs")
    # (the merge gap a run would use: --storage-option merge_gap=BYTES, else the reader's default)
    reader = {"block_bytes": BLOCK_BYTES, "merge_gap": merge_gap_of(where.options), "max_request": MAX_REQUEST}
    store = where.store()
    if not store.costs_request:   # a file at hand: its costs as if it were behind a URL
        return file_remote_costs(args.file, args.h5md_group, args.assume_units, atoms, **reader)
    from ..hdf5.metadata import children_ahead
    from ..storage.fileobj import CachingFile

    # (the B-tree's children fetched ahead as HDF5 reads its nodes, as a run's open does)
    fh = CachingFile(store, on_read=children_ahead)
    return file_remote_costs(args.file, args.h5md_group, args.assume_units, atoms, fileobj=fh, size=store.size,
                             **reader)


def _follow(args) -> int:
    """``inspect --follow``: the whole frame count as it grows, then how the trajectory ended."""
    import sys

    from ..sources.follow import frame_counts

    given = [opt for opt, on in (("--pattern", args.pattern), ("--json", args.json),
                                 ("--remote-costs", getattr(args, "remote_costs", False))) if on]
    if given:
        from ..errors import ConfigError

        raise ConfigError(f"{' and '.join(given)}: not with --follow, which prints frame counts as they grow")
    shown = redacted(args.file)
    for n, ended in frame_counts(args.file, idle=30.0 if args.idle is None else args.idle,
                                 group=args.h5md_group, assume_units=args.assume_units):
        if ended is None:
            print(f"{shown}: {n} complete frames", flush=True)
            continue
        print(f"{shown}: {n} complete frames; ended: {redacted(ended[0].why(ended[1]))}", file=sys.stderr)
        return ended[0].exit_status()
    return 0


def _inspect_other(args, match, where: Location) -> int:
    """A trajectory in another format: what its Source reads, and how to make it an H5MD file."""
    import shlex

    from ..errors import ConfigError
    from ..sources.registry import open_file

    given = [opt for opt, on in (("--pattern", args.pattern), ("--group", args.h5md_group),
                                 ("--assume-units", args.assume_units),
                                 ("--remote-costs", getattr(args, "remote_costs", False))) if on]
    if given:
        raise ConfigError(f"{' and '.join(given)}: for H5MD files; {args.file} is {match.format} "
                          "(convert it first)")
    with open_file(where) as src:
        facts = describe_source(src)
    if not where.local:
        facts["validator"] = store_validator(where)
    stem = os.path.splitext(os.path.basename(args.file.rstrip("/")))[0] or "traj"
    facts["convert"] = f"trajscale convert TOPOLOGY {shlex.quote(args.file)} -o {shlex.quote(stem + '.h5md')}"
    facts = redacted(facts)
    if args.json:
        print(json.dumps(facts, indent=1))
        return 0
    print("\n".join([
        f"file          {facts['path']}  ({facts['file_bytes'] / 1e6:.1f} MB)",
        f"format        {facts['format'].upper()}, read by {facts['source']} (nothing written beside it)",
        f"frames x atoms {facts['n_frames']} x {facts['n_atoms']}  fields {', '.join(facts['fields'])}",
        format_time(facts["time"]),
        "units         " + (", ".join(f"{k}: {v}" for k, v in facts["units"].items()) or "none declared")
        + "  (blocks and results: MDAnalysis's, Å and ps)",
        f"to H5MD       {facts['convert']}  (TOPOLOGY: its .tpr, .psf or .gro)",
        *validator_lines(facts),
    ]))
    return 0


def describe_source(src) -> dict:
    """Format, size, frames, atoms, fields, units and times of an open Source (XTC/TRR: from frame headers)."""
    from ..h5md.inspect import times_summary

    times, steps = src.frame_times()
    size = Location(src.path).size   # a file's, or an object's from the request that told its format
    return {"format": src.format.lower(), "source": type(src).__name__, "path": src.path,
            "file_bytes": size, "n_frames": src.n_frames, "n_atoms": src.n_atoms,
            "fields": list(src.fields), "units": dict(src.native_units), "time": times_summary(times, steps)}


def _add_selection_row(facts: dict, label: str, atoms) -> None:
    """Read amplification of ``atoms`` over a block of frames (100, or all of a shorter file)."""
    from ..facts import LayoutFacts
    from ..h5md.inspect import facts_amplification

    layout = LayoutFacts.from_dict(facts)
    n = min(100, facts["n_frames"])
    name = f"{label}, {'all ' if n == facts['n_frames'] else ''}{n} frames"
    facts["read_amplification"][name] = facts_amplification(layout, atoms, n)
    facts.setdefault("read_amplification_hdf5_default", {})[name] = facts_amplification(layout, atoms, n, cache="hdf5")


def format_time(t: dict | None) -> str:
    """``time          0 - 9000 ps, dt 10 ps  (steps 0 - 4500000)``."""
    if not t:
        return "time          none stored"
    if t["dt"] is None:
        span = f"{t['first']:g} ps (one frame)"
    elif t["even"]:
        span = f"{t['first']:g} - {t['last']:g} ps, dt {t['dt']:.6g} ps"
    else:
        lo, hi = t["dt_range"]
        span = f"{t['first']:g} - {t['last']:g} ps, dt {t['dt']:.6g} ps (uneven: {lo:.6g} to {hi:.6g} ps)"
    steps = t.get("steps")
    return f"time          {span}" + (f"  (steps {steps[0]} - {steps[1]})" if steps else "")


def validator_lines(facts: dict) -> list[str]:
    """What tells an object from a replacement (none for a local file), and a warning where one may go unseen."""
    v = facts.get("validator")
    if not v:
        return []
    return [f"validator     {v['says']}",
            *([] if v["complete"] else ["warning       a replacement of this object may go unseen while it is read"])]


def format_facts(f: dict) -> str:
    from ..h5md.inspect import unused_space_note

    size = f.get("file_bytes", 0)
    lines = [
        (f"file          {f['path']}  ({size / 1e6:.1f} MB"
         + (f", {f['unused_bytes'] / 1e6:.1f} MB of it unused)" if "unused_bytes" in f else ")")),
        *validator_lines(f),
        f"H5MD          version {f.get('h5md_version', '?')}  creator {f.get('creator', '?')}",
        f"particle groups ({len(f['particle_groups'])}):",
    ]
    for name, g in f["particle_groups"].items():
        mark = "*" if name == f["group"] else " "
        if "problem" in g:
            lines.append(f" {mark}{name:12s} cannot be read: {g['problem']}")
            continue
        units = ", ".join(f"{k} {v}" for k, v in g["units"].items())
        lines.append(f" {mark}{name:12s} {g['n_frames']} frames x {g['n_atoms']} atoms  "
                     f"{'+'.join(g['fields'])}  ({units})")
    if f["group"] is None:
        lines.append("several particle groups: add --group NAME for one group's layout and read amplification")
        return "\n".join(lines)
    lines += [
        f"reading       '{f['group']}'"
        + (f"  (units assumed: {f['assumed_units']})" if f.get("assumed_units") else ""),
        f"frames x atoms {f['n_frames']} x {f['n_atoms']}  fields {', '.join(f['fields'])}  dtype {f['dtype']}",
        format_time(f.get("time")),
        "units         " + ", ".join(f"{k}: {v}" for k, v in f["units"].items()),
        f"boundary      {' '.join(f['boundary'])}",
        f"chunks        {f['chunks']}   compression {f['compression']}",
        *([f"precision     positions within {f['precision']['angstrom'] / 2:g} A (stated precision "
           f"{f['precision']['angstrom']:g} A, step {f['precision']['quantum']:.4g} in the file's unit, "
           f"{f['precision']['encoding']})"] if f.get("precision") else []),
        "read amplification (bytes HDF5 reads and decodes / bytes asked for):",
        f"  {'access pattern':32s} {'trajscale':>10s} {'HDF5 1 MiB cache':>17s}",
    ]
    dflt = f.get("read_amplification_hdf5_default", {})
    width = max([32, *map(len, f["read_amplification"])])
    lines[-1] = f"  {'access pattern':{width}s} {'trajscale':>10s} {'HDF5 1 MiB cache':>17s}"
    lines += [f"  {name:{width}s} {amp:9.2f}x {dflt.get(name, amp):16.2f}x"
              for name, amp in f["read_amplification"].items()]
    if not f["n_frames"]:   # an empty file (a writer that failed before its first frame): nothing to read
        lines[-2:] = ["read amplification  none: the file has no frames"]
    if f.get("observables"):
        lines.append(f"observables   {', '.join(f['observables'])}")
    if f.get("remote_costs"):
        from ..h5md.inspect import remote_cost_lines

        lines += remote_cost_lines(f, f["path"])
    lines += [f"WARNING: {w}" for w in f["warnings"]]
    note = unused_space_note(f)
    if note:
        lines.append(f"WARNING: {note}")
    rec = f.get("recommendation")
    if rec:
        lines.append(f"for --pattern {rec['pattern']}: {rec['layout']}"
                     + (" (this file already has it)" if rec["already"] else ""))
        lines.append(f"  why: {rec['why']}")
        if not rec["already"]:
            lines.append(f"  run: {rec['command']}")
        if rec["compact"]:
            lines.append(f"  smaller: {rec['compact']}")
    return "\n".join(lines)
