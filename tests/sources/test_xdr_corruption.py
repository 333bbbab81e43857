"""Corrupted XTC and TRR files never crash, hang or exhaust trajscale.

Variants of MDAnalysisTests' own files, each with one change: every 4-byte field of
the first two frames set to 0, -1, small negatives, huge values, INT_MIN/INT_MAX and
NaN/inf floats; the file cut at every byte of its first frame and of the second's header, at each later
frame's first byte and the bytes beside it, and at every 17th byte between; random byte flips; and
the damage seen in the wild (a byte count past the decode buffer with the next frame
where it says, a small negative byte count, extreme integer ranges, ``smallidx``
outside its table, atom counts that disagree).

Each variant is scanned and read through ``trajscale inspect`` and
:class:`~trajscale.xdr.source.XDRSource` (and a sample through ``trajscale run
rmsd``) in a worker process under a memory limit and a timeout, many variants per
worker: a worker killed by a signal, a memory limit or the timeout marks the
variant it was on as a failure, and a new worker goes on with the rest. A variant
either reads, or is refused with one line that names the file; nothing else.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import resource
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("MDAnalysisTests")
pytestmark = pytest.mark.timeout(1800)   # thousands of variants, on a loaded machine
from MDAnalysisTests.datafiles import COORDINATES_GRO, COORDINATES_TRR, COORDINATES_XTC  # noqa: E402

DATA = Path(COORDINATES_XTC).parent.parent
XTC10 = str(DATA / "xtc_test_only_10_frame_10_atoms.xtc")
TRR10 = str(DATA / "trr_test_only_10_frame_10_atoms.trr")
COBROTOXIN_XTC = str(DATA / "cobrotoxin.xtc")
#: Address space a worker may use: a scan or a buffer that grows with a damaged field hits it.
MEMORY_LIMIT = 3 << 30
WORKER_TIMEOUT = 900

INTS = [0, -1, -4, -8, -100, 1, 7, 1 << 20, 0x7FFFFF00, -(1 << 31), (1 << 31) - 1]
FLOATS = [float("nan"), float("inf"), float("-inf"), -1.0, 1e-38, 3.0e38]


def _int_bytes(v: int) -> bytes:
    return struct.pack(">i", v)


def _float_bytes(v: float) -> bytes:
    return struct.pack(">f", v)


def _put(data: bytes, at: int, word: bytes) -> bytes:
    return data[:at] + word + data[at + len(word):]


def _frame_offsets(path: str) -> list[int]:
    from trajscale.xdr._xdr import scan_trr, scan_xtc

    return [int(o) for o in (scan_xtc if path.endswith(".xtc") else scan_trr)(path)[1]]


def _field_variants(name: str, data: bytes, offsets: list[int], header_bytes: int) -> dict[str, bytes]:
    """Every 4-byte word of the first two frames' first ``header_bytes`` set to each test value."""
    out = {}
    for f, start in enumerate(offsets[:2]):
        end = min(start + header_bytes, offsets[f + 1] if f + 1 < len(offsets) else len(data))
        for at in range(start, end - 3, 4):
            for v in INTS:
                out[f"{name}-f{f}-b{at - start}-i{v}"] = _put(data, at, _int_bytes(v))
            for v in FLOATS:
                out[f"{name}-f{f}-b{at - start}-x{v}"] = _put(data, at, _float_bytes(v))
    return out


def _cuts(size: int, offsets: list[int], header_bytes: int) -> list[int]:
    """Where a file of ``size`` bytes is cut: every byte of frame 0 (each field of a frame, each block's
    edges) and of frame 1's first ``header_bytes`` (a later frame's header after a whole one), each later
    frame's first byte and the bytes beside it, and every 17th byte between. A cut inside frame 2 or later
    meets what a cut at the same byte of frame 1 meets (the same header read after whole frames, the same
    block sizes checked against what is left), so those frames are sampled, not cut at every byte."""
    first = set(range(min(size, offsets[1] + header_bytes)))
    edges = {o + d for o in offsets[2:] for d in (-1, 0, 1)}
    return sorted(c for c in first | edges | set(range(0, size, 17)) if 0 <= c < size)


def _named_xtc_variants(name: str, data: bytes, offsets: list[int]) -> dict[str, bytes]:
    """The damage seen in crashed runs and bad copies, on frame 0 of a compressed XTC."""
    out = {}
    count = struct.unpack(">i", data[88:92])[0]
    for extra in (4096, 1 << 16, 1 << 20):   # byte count past the buffer, the next frame where it says
        out[f"{name}-bytecount-plus{extra}"] = (_put(data[:offsets[1]], 88, _int_bytes(count + extra))
                                               + bytes(extra) + data[offsets[1]:])
    for v in (-1, -4, -8, -92, -96, -count, -(1 << 31)):   # small negatives: a frame size of 0 or less
        out[f"{name}-bytecount{v}"] = _put(data, 88, _int_bytes(v))
    for lo, hi in ((-(1 << 31), (1 << 31) - 1), (1, 0), (0, -1), ((1 << 31) - 1, -(1 << 31)),
                   (-(1 << 30), 1 << 30), (0, 0xFFFFFF), (0, 0x1000000)):
        v = data
        for d in range(3):
            v = _put(_put(v, 60 + 4 * d, _int_bytes(lo)), 72 + 4 * d, _int_bytes(hi))
        out[f"{name}-ranges{lo}_{hi}"] = v
    for idx in (0, 8, 73, 74, 1000, -1, -(1 << 31), 72):
        out[f"{name}-smallidx{idx}"] = _put(data, 84, _int_bytes(idx))
    natoms = struct.unpack(">i", data[4:8])[0]
    for v in (natoms + 1, natoms - 1, natoms * 100, 0, 9, -1):
        out[f"{name}-natoms2-{v}"] = _put(data, 52, _int_bytes(v))
        out[f"{name}-natoms1-{v}"] = _put(data, 4, _int_bytes(v))
    out[f"{name}-natoms-second-frame"] = _put(data, offsets[1] + 4, _int_bytes(natoms + 1))
    for v in (0.0, -0.001, float("nan"), float("inf")):
        out[f"{name}-precision{v}"] = _put(data, 56, _float_bytes(v))
    # the compressed bits: zeroed, all ones (runs and smallidx steps past the table)
    out[f"{name}-bits-zero"] = data[:92] + bytes(offsets[1] - 92) + data[offsets[1]:]
    out[f"{name}-bits-ones"] = data[:92] + b"\xff" * (offsets[1] - 92) + data[offsets[1]:]
    out[f"{name}-bits-short"] = _put(data, 88, _int_bytes(4))
    return out


def _named_trr_variants(name: str, data: bytes) -> dict[str, bytes]:
    """Block sizes and atom counts of a TRR's frame 0 that disagree with each other."""
    out = {}
    # after magic (4), version length (4), string length (4) and "GMX_trn_file" (12): 13 ints
    fields = ["ir", "e", "box", "vir", "pres", "top", "sym", "x", "v", "f", "natoms", "step", "nre"]
    for k, field in enumerate(fields):
        at = 24 + 4 * k
        for v in (0, -1, -4, 4, 36, 72, 1 << 30, -(1 << 31), (1 << 31) - 1, 120, 240):
            out[f"{name}-{field}{v}"] = _put(data, at, _int_bytes(v))
    return out


def build_variants(root: Path) -> dict[str, dict]:
    """Write every variant under ``root``; ``{name: {"path", "topology", "run"}}`` (``run``: also
    through ``trajscale run rmsd``)."""
    rng = random.Random(20261125)
    small_gro = str(root / "ten.gro")
    _write_gro(small_gro, 10)
    cobro = Path(COBROTOXIN_XTC).read_bytes()
    cobro_offsets = _frame_offsets(COBROTOXIN_XTC)
    bases = {
        "xtc10": (XTC10, small_gro, 96),
        "xtc5": (COORDINATES_XTC, COORDINATES_GRO, 128),
        "trr10": (TRR10, small_gro, 120),
        "trr5": (COORDINATES_TRR, COORDINATES_GRO, 120),
    }
    variants: dict[str, tuple[bytes, str | None, bool]] = {}
    for name, (path, top, header) in bases.items():
        data = Path(path).read_bytes()
        offsets = _frame_offsets(path)
        for k, v in _field_variants(name, data, offsets, header).items():
            variants[k] = (v, top, False)
        for cut in _cuts(len(data), offsets, header):
            variants[f"{name}-cut{cut}"] = (data[:cut], top, False)
        for i in range(150):
            flipped = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                flipped[rng.randrange(min(len(data), offsets[1] + 64))] ^= 1 << rng.randrange(8)
            variants[f"{name}-flip{i}"] = (bytes(flipped), top, False)
    xtc10 = Path(XTC10).read_bytes()
    named = _named_xtc_variants("xtc10", xtc10, _frame_offsets(XTC10))
    two_frames = cobro[:cobro_offsets[2]]
    named.update(_named_xtc_variants("cobro", two_frames, cobro_offsets[:2]))
    named.update(_named_trr_variants("trr10", Path(TRR10).read_bytes()))
    for k, v in named.items():
        variants[k] = (v, small_gro if k.startswith(("xtc10", "trr10")) else None, True)
    for k, v in _field_variants("cobro", two_frames, cobro_offsets[:2], 96).items():
        variants[k] = (v, None, False)
    out = {}
    for k, (data, top, run) in variants.items():
        path = root / (k.replace(".", "p") + (".trr" if k.startswith("trr") else ".xtc"))
        path.write_bytes(data)
        out[k] = {"path": str(path), "topology": top, "run": run}
    return out


def _write_gro(path: str, n: int) -> None:
    lines = ["ten atoms", f"{n:5d}"]
    for i in range(n):
        lines.append(f"{1:5d}{'ALA':<5s}{'CA':>5s}{i + 1:5d}{0.1 * i:8.3f}{0.2 * i:8.3f}{0.05 * i:8.3f}")
    lines.append(f"{5.0:10.5f}{5.0:10.5f}{5.0:10.5f}")
    Path(path).write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------
# the worker: one process, many variants, one JSON line per step (so the parent knows which
# variant a killed worker was on)

def _one_line_naming(text: str, path: str) -> bool:
    """One error line naming the file (a warning that the frames after damage are left out may come first)."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and "(--strict refuses such a file)" not in ln]
    return len(lines) == 1 and path in lines[0]


def _cli(argv: list[str]) -> tuple[int, str]:
    from trajscale.cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:   # noqa: BLE001 - what a user would see as a traceback
            import traceback

            return 1, err.getvalue() + "Traceback\n" + "".join(traceback.format_exception(exc))
    return int(code or 0), err.getvalue()


def check_variant(info: dict, out_dir: str) -> list[str]:
    """What is wrong with how trajscale handles one variant ([] when nothing is)."""
    from trajscale.errors import TrajscaleError
    from trajscale.xdr.source import XDRSource

    path, problems = info["path"], []
    code, err = _cli(["inspect", path])
    if "Traceback" in err or code not in (0, 1, 2):
        problems.append(f"inspect: exit {code}: {err[-600:]}")
    elif code and not _one_line_naming(err, path):
        problems.append(f"inspect: not one line naming the file: {err!r}")
    try:
        with XDRSource(path) as src:
            src.read(0, src.n_frames, fields=src.fields[:1] or ("position",))
    except TrajscaleError as exc:
        if not _one_line_naming(str(exc), path):
            problems.append(f"read: not one line naming the file: {exc}")
    except Exception as exc:   # noqa: BLE001 - anything else is a finding
        problems.append(f"read: {type(exc).__name__}: {exc}")
    if info["run"] and info["topology"]:
        out = os.path.join(out_dir, Path(path).stem + ".csv")
        code, err = _cli(["run", "rmsd", info["topology"], path, "--select", "all", "--out", out,
                          "--no-progress", "--executor", "serial"])
        if "Traceback" in err or code not in (0, 1, 2):
            problems.append(f"run: exit {code}: {err[-600:]}")
        elif code:
            if not _one_line_naming(err, path):
                problems.append(f"run: not one line naming the file: {err!r}")
            if os.path.exists(out):
                problems.append("run: failed, yet wrote its output")
    return problems


def _parsers_built_once() -> None:
    """In a worker, each command's parser is built once and parses every variant's line (an argparse parser
    parses any number of lines): building it was a third of a variant's CPU, and the parser is not what a
    variant tests. A command whose parser depends on the whole line (``add_parser_for``) is built each time."""
    import importlib

    from trajscale.cli import main as cli

    build, built = cli.build_parser, {}

    def once(only: str | None = None, argv: list[str] | None = None):
        if only is None or hasattr(importlib.import_module(cli.COMMANDS[only]), "add_parser_for"):
            return build(only, argv)
        if only not in built:
            built[only] = build(only, argv)
        return built[only]

    cli.build_parser = once


def _worker(list_file: str, out_dir: str) -> None:
    _parsers_built_once()
    todo = json.loads(Path(list_file).read_text())
    for name, info in todo.items():
        print(json.dumps({"start": name}), flush=True)
        print(json.dumps({"done": name, "problems": check_variant(info, out_dir)}), flush=True)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_variants(variants: dict[str, dict], tmp: Path) -> dict[str, list[str]]:
    """``{name: problems}`` for every variant, through workers restarted past any that dies."""
    results: dict[str, list[str]] = {}
    todo = dict(variants)
    env = dict(os.environ, PYTHONFAULTHANDLER="", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    while todo:
        list_file = tmp / "todo.json"
        list_file.write_text(json.dumps(todo))
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, __file__, "worker", str(list_file), str(tmp)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                preexec_fn=_limit_memory)
        try:
            out, err = proc.communicate(timeout=WORKER_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        current = None
        for line in out.splitlines():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "start" in msg:
                current = msg["start"]
            else:
                results[msg["done"]] = msg["problems"]
                todo.pop(msg["done"], None)
                current = None
        if proc.returncode == 0 and not todo:
            break
        if current is None:   # died before its first variant: nothing can go on
            raise RuntimeError(f"corruption worker failed to start (exit {proc.returncode}): {err[-2000:]}")
        how = (f"killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
               else f"exit {proc.returncode}")
        elapsed = time.monotonic() - started
        results[current] = [f"worker {how} after {elapsed:.0f} s: {err[-800:]}"]
        todo.pop(current, None)
    return results


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, list[str]]:
    root = tmp_path_factory.mktemp("xdr-variants")
    variants = build_variants(root)
    return run_variants(variants, root)


@pytest.mark.cli   # the variants are read in worker processes (the outcomes fixture)
@pytest.mark.slow
def test_many_variants_were_tried(outcomes):
    assert len(outcomes) > 3000


@pytest.mark.cli   # the variants are read in worker processes (the outcomes fixture)
@pytest.mark.slow
def test_no_variant_crashes_hangs_or_gives_a_traceback(outcomes):
    bad = {k: v for k, v in outcomes.items() if v}
    assert not bad, f"{len(bad)} of {len(outcomes)} variants mishandled, e.g. " + \
        json.dumps(dict(list(bad.items())[:8]), indent=1)


# ---------------------------------------------------------------------------------------------
# the damage the reports describe, as a user's processes meet it

def _cli_process(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trajscale.cli.main", *args], capture_output=True, text=True,
                          timeout=300, preexec_fn=_limit_memory, cwd=tmp)


@pytest.mark.cli
@pytest.mark.parametrize("change", ["bytecount-plus65536", "bytecount-4", "ranges-2147483648_2147483647",
                                    "smallidx1000", "natoms2-11"])
def test_cli_processes_refuse_a_damaged_xtc_with_one_line(tmp_path, change):
    data = Path(XTC10).read_bytes()
    variants = _named_xtc_variants("x", data, _frame_offsets(XTC10))
    bad = tmp_path / "bad.xtc"
    bad.write_bytes(variants[f"x-{change}"])
    gro = str(tmp_path / "ten.gro")
    _write_gro(gro, 10)
    out = tmp_path / "r.csv"
    for args in (["inspect", str(bad)], ["run", "rmsd", gro, str(bad), "--out", str(out), "--no-progress"]):
        proc = _cli_process(args, tmp_path)
        assert proc.returncode in (1, 2), (args, proc.returncode, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and str(bad) in lines[0] and "frame 0 at byte 0" in lines[0], proc.stderr
    assert not out.exists()


def test_refusals_name_the_field(tmp_path):
    from trajscale.xdr._xdr import XDRFormatError, scan_trr, scan_xtc

    data = Path(XTC10).read_bytes()
    variants = _named_xtc_variants("x", data, _frame_offsets(XTC10))
    expect = {"bytecount-4": "byte count -4", "ranges1_0": "minint", "smallidx73": "smallidx 73",
              "natoms2-11": "atom count before the coordinates is 11", "precisionnan": "precision nan",
              "natoms-second-frame": "frame 1 at byte 104 has 11 atoms"}
    for change, words in expect.items():
        path = tmp_path / f"{change}.xtc"
        path.write_bytes(variants[f"x-{change}"])
        with pytest.raises(XDRFormatError, match=words):
            scan_xtc(str(path))
    trr = _named_trr_variants("t", Path(TRR10).read_bytes())
    for change, words in {"x-1": "x_size", "box4": "box_size", "natoms-1": "natoms", "ir4": "ir_size",
                          "natoms0": "x_size"}.items():
        path = tmp_path / f"{change}.trr"
        path.write_bytes(trr[f"t-{change}"])
        with pytest.raises(XDRFormatError, match=words):
            scan_trr(str(path))


def test_a_frame_changed_after_its_scan_is_refused_by_the_decoder(tmp_path):
    """The decoder checks what the scan checked: a file rewritten between a job's scan and a
    worker's read is refused, not decoded past its buffers."""
    from trajscale.xdr._xdr import XDRFormatError, XTCFile, scan_xtc

    data = Path(XTC10).read_bytes()
    path = tmp_path / "changed.xtc"
    path.write_bytes(data)
    n_atoms, offsets, *_ = scan_xtc(str(path))
    rows = {"position": np.empty((1, n_atoms, 3), np.float32)}
    args = (np.empty((1, 3, 3), np.float32), np.empty(1), np.empty(1, np.int64), {"position": np.float32(1)})
    for at, word, words in ((88, _int_bytes(1 << 20), "byte count"), (84, _int_bytes(200), "smallidx"),
                            (60, _int_bytes(1 << 30), "ranges"), (56, _float_bytes(-1.0), "precision"),
                            (92, b"\xff" * 12, "run of atoms|past their byte count|smallidx")):
        path.write_bytes(_put(data, at, word))
        f = XTCFile(str(path), n_atoms)
        try:
            with pytest.raises(XDRFormatError, match=words):
                f.read(offsets, np.array([0], np.int64), None, rows, *args)
        finally:
            f.close()


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    _worker(sys.argv[2], sys.argv[3])
