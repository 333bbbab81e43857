"""Run the same ``trajscale run`` commands with two source trees and compare their outputs byte for byte.

    python scripts/compare_trees.py OLD_TREE NEW_TREE [--work DIR] [--only SUBSTRING] [--keep]

Each tree is a checkout whose compiled extensions are built in place (``python setup.py build_ext
--inplace`` in it); the commands run with ``PYTHONPATH=TREE/src`` and this interpreter. The inputs are
made once, with the new tree, and both trees read the same files:

* AdK in vacuum (PSF/DCD, 98 frames) converted to H5MD, and split into a segment index of 4 parts;
* AdK in water (GRO/XTC, 10 frames, 47,681 atoms, with a box): the XTC whole, and as a chain of two parts.

Every analysis (RMSD, RMSF, RDF) runs on every executor (serial, processes, Dask, ``mpiexec -n 2``),
over finished trajectories and followed ones (``--follow`` on files marked complete), and writes
``--out``. ``convert`` (the DCD, the XTC chain) and ``rechunk`` (the H5MD file) write H5MD files on the
same executors; an H5MD output that is not the same bytes is compared object by object (every
dataset's values, dtype, shape, chunks and filters, every attribute), which is what a reader sees.
The script prints one line per command and exits 1 if any output differs or a command fails.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

EXECUTORS = {"serial": [], "processes": ["-n", "2"], "dask": ["-n", "2"], "mpi": []}


def cases(inputs: dict[str, object]) -> list[tuple[str, list[str]]]:
    """``(name, arguments of trajscale run)`` for every analysis, input, executor and mode."""
    psf, gro = inputs["psf"], inputs["gro"]
    rdf = ["--select1", "protein and name CA", "--select2", "name NA+ or (resid 1000:1100 and name OW)",
           "--range", "0", "12"]
    runs = [  # (name, analysis and its options with topology and trajectories, followable)
        ("rmsd-h5md", ["rmsd", psf, inputs["h5md"], "--select", "name CA"], True),
        ("rmsf-h5md", ["rmsf", psf, inputs["h5md"], "--select", "name CA"], True),
        ("rmsd-segments", ["rmsd", psf, inputs["index"], "--select", "backbone"], True),
        ("rmsf-segments", ["rmsf", psf, inputs["index"], "--select", "name CA", "--fit-select", "name CA"], True),
        ("rmsd-xtc-chain", ["rmsd", gro, *inputs["chain"], "--select", "name CA"], False),
        ("rdf-xtc-chain", ["rdf", gro, *inputs["chain"], *rdf], False),
        ("rdf-xtc", ["rdf", gro, inputs["xtc"], *rdf], True),
        ("rmsf-xtc", ["rmsf", gro, inputs["xtc"], "--select", "name CA"], True),
    ]
    out = []
    h5_args = ["--chunks", "7", "--compression", "gzip:4"]
    for executor, extra in EXECUTORS.items():   # outputs an H5MD file: the name ends .h5md
        base = ["--executor", executor, *extra, *h5_args]
        out.append((f"convert-dcd-{executor}.h5md", ["convert", psf, inputs["dcd"], *base]))
        out.append((f"convert-xtc-chain-{executor}.h5md", ["convert", gro, *inputs["chain"], *base]))
        out.append((f"rechunk-h5md-{executor}.h5md", ["rechunk", inputs["h5md"], *base]))
    for name, args, followable in runs:
        for executor, extra in EXECUTORS.items():
            base = [*args, "--executor", executor, *extra]
            out.append((f"{name}-{executor}", base))
            if followable:
                out.append((f"{name}-{executor}-followed", [*base, "--follow", "--idle", "30"]))
    return out


def make_inputs(new_tree: Path, work: Path) -> dict[str, object]:
    """The trajectories both trees read, written once with the new tree."""
    from MDAnalysisTests.datafiles import DCD, GRO, PSF, XTC

    work.mkdir(parents=True, exist_ok=True)
    h5md, index = work / "adk.h5md", work / "adk-parts"
    if not h5md.exists():
        _cli(new_tree, ["convert", PSF, DCD, "-o", str(h5md)], must_succeed=True)
    if not index.exists():
        _cli(new_tree, ["split", str(h5md), "-o", str(index), "--parts", "4"], must_succeed=True)
    (index / "index.json.done").touch()   # a followed index ends when it is marked finished
    xtc = work / "adk-water.xtc"
    shutil.copy(XTC, xtc)
    Path(str(xtc) + ".done").touch()
    chain = [work / "adk-water.part1.xtc", work / "adk-water.part2.xtc"]
    if not all(p.exists() for p in chain):
        import MDAnalysis as mda

        u = mda.Universe(GRO, XTC)
        for path, frames in zip(chain, (slice(0, 5), slice(5, None)), strict=True):
            with mda.Writer(str(path), u.atoms.n_atoms) as w:
                for _ in u.trajectory[frames]:
                    w.write(u.atoms)
    return {"psf": PSF, "gro": GRO, "dcd": DCD, "h5md": str(h5md), "index": str(index / "index.json"), "xtc": str(xtc),
            "chain": [str(p) for p in chain]}


def _env(tree: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(tree / "src"), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def _cli(tree: Path, args: list[str], mpi: bool = False, timeout: float = 600,
         must_succeed: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "trajscale.cli.main", *args]
    if mpi:
        cmd = [shutil.which("mpiexec.mpich") or shutil.which("mpiexec") or "mpiexec", "-n", "2", *cmd]
    proc = subprocess.run(cmd, env=_env(tree), capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=tempfile.gettempdir())
    if proc.returncode != 0 and must_succeed:
        raise SystemExit(f"{' '.join(args)} failed with {tree}:\n{proc.stderr}")
    return proc


def compare(old: Path, new: Path, work: Path, only: str | None) -> int:
    inputs = make_inputs(new, work / "inputs")
    failures = same = 0
    for name, args in cases(inputs):
        if only and only not in name:
            continue
        outs = {}
        h5 = name.endswith(".h5md")
        for label, tree in (("old", old), ("new", new)):
            out = work / label / (name if h5 else f"{name}.csv")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.unlink(missing_ok=True)
            cmd = [*args, "-o", str(out)] if h5 else ["run", *args, "--out", str(out)]
            proc = _cli(tree, [*cmd, "--no-progress"], mpi="mpi" in args)
            if proc.returncode != 0:
                print(f"FAIL {name}: the {label} tree exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
                failures += 1
                break
            outs[label] = out
        else:
            if filecmp.cmp(outs["old"], outs["new"], shallow=False):
                same += 1
                print(f"same {name} ({outs['new'].stat().st_size} bytes)")
            elif h5 and not (diffs := h5_differences(outs["old"], outs["new"])):
                same += 1
                print(f"same {name} (every object and attribute; the files' bytes differ)")
            else:
                failures += 1
                print(f"DIFF {name}: {outs['old']} {outs['new']} {(diffs if h5 else [])[:3]}")
    print(f"{same} outputs identical byte for byte, {failures} differing or failed")
    return 1 if failures else 0


def h5_differences(a: Path, b: Path) -> list[str]:
    """What differs between two HDF5 files as a reader sees them: objects, values, layouts, attributes."""
    import h5py
    import numpy as np

    found: list[str] = []

    def layout(d):
        return (d.dtype, d.shape, d.chunks, d.compression, d.compression_opts, d.shuffle)

    def attrs(name, x, y):
        if sorted(x.attrs) != sorted(y.attrs):
            found.append(f"{name}: attributes {sorted(x.attrs)} != {sorted(y.attrs)}")
            return
        for k in x.attrs:
            if not np.array_equal(np.asarray(x.attrs[k]), np.asarray(y.attrs[k])):
                found.append(f"{name}@{k}: {x.attrs[k]!r} != {y.attrs[k]!r}")

    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        names: list[str] = []
        fa.visit(names.append)
        other: list[str] = []
        fb.visit(other.append)
        if names != other:
            return [f"objects differ: {sorted(set(names) ^ set(other))}"]
        attrs("/", fa, fb)
        for n in names:
            x, y = fa[n], fb[n]
            attrs(n, x, y)
            if isinstance(x, h5py.Dataset):
                if layout(x) != layout(y):
                    found.append(f"{n}: layout {layout(x)} != {layout(y)}")
                elif x[()].tobytes() != y[()].tobytes():
                    found.append(f"{n}: values differ")
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old", type=Path, help="the tree before the change (extensions built in place)")
    p.add_argument("new", type=Path, help="the tree after the change (extensions built in place)")
    p.add_argument("--work", type=Path, default=None, help="folder for inputs and outputs (default: a temporary one)")
    p.add_argument("--only", default=None, help="run only the cases whose name contains this")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="trajscale-compare-"))
    try:
        return compare(args.old.resolve(), args.new.resolve(), work, args.only)
    finally:
        if args.work is None and not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
