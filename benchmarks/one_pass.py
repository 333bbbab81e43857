"""Three analyses in one pass against three runs, MDAnalysis and cpptraj: whole processes, cold and warm.

    python benchmarks/one_pass.py [--frames 1000] [--workdir demo-output] [--executor serial] [--repeat 1]
    python benchmarks/one_pass.py --frames 20 --workdir /tmp/bench       # what the test suite runs
    python benchmarks/one_pass.py --frames 1000 --commands               # each side as one command, untimed
    python benchmarks/one_pass.py --search [--repeat 9]                  # the RDF's search alone, in process

The workload: a CA RMSD, an all-atom RMSF and an RDF of the CA atoms against the water oxygens
(``name OW``, 75 bins to 8 Å), on the demo trajectory (AdK in water from MDAnalysisTests'
``adk_oplsaa`` TPR/XTC, 47,681 atoms, copied to ``--frames`` frames and converted to H5MD). The data
has no phosphorus, so the RDF between two kinds of atom is CA-OW, not P-P.

Every side is whole processes, timed from just before the start to just after the exit:

* ``trajscale run --plan PLAN TOP H5MD``: the three in one pass (each block read once);
* three ``trajscale run NAME TOP H5MD``, one after the other (their sum, and the slowest of them);
* MDAnalysis: one script, one ``Universe(TOP, H5MD)`` and three ``AnalysisBase.run`` (``rms.RMSD``,
  ``rms.RMSF``, ``rdf.InterRDF``), serial;
* cpptraj (``rms``, ``atomicfluct``, ``radial`` in one input) when a ``cpptraj`` is on PATH: it is not on
  PyPI (AmberTools), and a line says so when it is absent.

``cold``: before every run the trajectory's pages are dropped from the page cache
(``posix_fadvise(POSIX_FADV_DONTNEED)``, no root needed); ``warm``: the file is read through first. The
median of ``--repeat`` runs is printed, with the load average before and after, and the results of the
one pass are compared with MDAnalysis's (exit 1 past 1e-4 Å for RMSD and RMSF, 1e-6 for the RDF).

``--search`` times only the RDF's search, in this process: the compiled kernel
(``trajscale.kernels.pairs.rdf_histogram``) on the workload's selections, the XTC's 10 frames 20 times over
(200 frames, 0.11 GB), CPU seconds per frame, the best of ``--repeat`` rounds, at each vector width this
CPU has (the scalar code, AVX2, AVX-512), and with 10 CA atoms, where the second selection's wrap and sort
dominate. The counts are checked against the first width's.

``--commands`` times nothing: it writes each side's files into the work folder (``plan.toml``,
``mda_three.py``, ``three_runs.sh`` that runs the three ``trajscale run`` one after the other, and
``cold.sh`` that drops the trajectory's pages and then runs the command it is given) and prints one
command line per side, to be timed and paired by a tool of one's choosing (``/usr/bin/time -v``,
hyperfine, alternating loops).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

PROG = Path(__file__).name
CA = "protein and name CA"
RDF_B = "name OW"

PLAN = f'''\
[rmsd]
select = "{CA}"
out = "rmsd.npy"

[rmsf]
select = "all"
out = "rmsf.npy"

[rdf]
select1 = "{CA}"
select2 = "{RDF_B}"
nbins = 75
range = [0, 8]
out = "rdf.npz"
'''

#: Each analysis alone: its ``trajscale run`` arguments after the command name's files.
SINGLE = {
    "rmsd": ["--select", CA, "--out", "single-rmsd.npy"],
    "rmsf": ["--select", "all", "--out", "single-rmsf.npy"],
    "rdf": ["--select1", CA, "--select2", RDF_B, "--nbins", "75", "--range", "0", "8", "--out", "single-rdf.npz"],
}

MDA_SCRIPT = f'''\
import sys
import warnings

warnings.filterwarnings("ignore")
import numpy as np
import MDAnalysis as mda
from MDAnalysis.analysis import rdf, rms

u = mda.Universe(sys.argv[1], sys.argv[2])
rmsd = rms.RMSD(u, select="{CA}").run()
rmsf = rms.RMSF(u.atoms).run()
g = rdf.InterRDF(u.select_atoms("{CA}"), u.select_atoms("{RDF_B}"), nbins=75, range=(0.0, 8.0)).run()
np.save("mda-rmsd.npy", rmsd.results.rmsd)
np.save("mda-rmsf.npy", rmsf.results.rmsf)
np.save("mda-rdf.npy", g.results.rdf)
'''

CPPTRAJ_INPUT = '''\
parm {top}
trajin {traj}
rms first @CA out cpptraj-rmsd.dat
atomicfluct out cpptraj-rmsf.dat
radial cpptraj-rdf.dat 0.1066667 @CA @OW maxdist 8.0
run
'''


def trajscale_command() -> list[str]:
    exe = Path(sys.executable).with_name("trajscale")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "trajscale.cli.main"]


def set_cache(path: str, case: str) -> None:
    """Drop ``path``'s pages from the page cache (cold) or read it through (warm)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if case == "cold":
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        else:
            while os.read(fd, 16 << 20):
                pass
    finally:
        os.close(fd)


def timed(cmd: list[str], cwd: Path, traj: str, case: str) -> float:
    """Wall seconds of one whole process, the trajectory's page cache set first."""
    set_cache(traj, case)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    dt = time.monotonic() - t0
    if proc.returncode:
        raise SystemExit(f"{PROG}: {' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return dt


def median_of(repeat: int, run) -> float:
    return statistics.median(run() for _ in range(repeat))


COLD_SH = """#!/bin/sh
# cold.sh COMMAND...: drop {traj}'s pages from the page cache, then run COMMAND (a cold read)
{python} -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); \\
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' {traj}
exec "$@"
"""


def write_commands(work: Path, traj: str, sides: dict[str, list[list[str]]]) -> None:
    """Each side as one command line, cold (its scripts written into ``work``); the three single runs as
    one script whose every run starts cold, as the table's cold cells are measured."""
    import shlex

    cold = work / "cold.sh"
    cold.write_text(COLD_SH.format(python=shlex.quote(sys.executable), traj=shlex.quote(os.path.abspath(traj))))
    singles = [c for side, cmds in sides.items() if side.startswith("trajscale run ") for c in cmds]
    three = work / "three_runs.sh"
    three.write_text("#!/bin/sh\n# the three trajscale runs one after the other, each cold\nset -e\n"
                     "cd \"$(dirname \"$0\")\"\n" + "".join(f"./cold.sh {shlex.join(c)}\n" for c in singles))
    for f in (cold, three):
        f.chmod(0o755)
    print(f"# in {work}: each side as one command, its trajectory cold (pair them with a timing tool)")
    for side, cmds in sides.items():
        if not side.startswith("trajscale run "):
            print(f"{side}: ./cold.sh {shlex.join(cmds[0])}")
    print("three separate runs: ./three_runs.sh")
    for c in singles:
        print(f"{c[c.index('run') + 1]} alone: ./cold.sh {shlex.join(c)}")


def search_timing(rounds: int) -> None:
    """The RDF's search alone (``--search``): CPU ms per frame, the best of ``rounds``, at each vector width."""
    import warnings

    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import TPR, XTC

    from trajscale.kernels import _pairs, pairs

    warnings.filterwarnings("ignore")
    u = mda.Universe(TPR, XTC)
    x = np.ascontiguousarray(np.tile(np.array([ts.positions for ts in u.trajectory], np.float32), (20, 1, 1)))
    dims = np.tile(np.array([ts.dimensions.copy() for ts in u.trajectory], np.float32), (20, 1))
    ca, ow = u.select_atoms(CA).indices, u.select_atoms(RDF_B).indices
    edges = np.histogram_bin_edges(np.empty(0), bins=75, range=(0.0, 8.0))
    levels = sorted({0, 2, _pairs.SIMD_LEVEL} & set(range(_pairs.SIMD_LEVEL + 1)))
    names = {0: "scalar", 2: "AVX2", 3: "AVX-512"}
    best: dict[tuple[int, int], float] = {}
    ref = None
    before = _pairs.set_simd_level(_pairs.SIMD_LEVEL)
    try:
        for _ in range(rounds):
            for level in levels:
                _pairs.set_simd_level(level)
                for n in (len(ca), 10):
                    t0 = time.process_time()
                    counts, _ = pairs.rdf_histogram(x, ca[:n], ow, dims, 8.0, edges)
                    dt = (time.process_time() - t0) / len(x) * 1e3
                    best[level, n] = min(best.get((level, n), np.inf), dt)
                    if n == len(ca):
                        ref = counts if ref is None else ref
                        if not np.array_equal(counts, ref):
                            raise SystemExit(f"{PROG}: the counts at {names[level]} differ from the first width's")
    finally:
        _pairs.set_simd_level(before)
    print(f"RDF search, {len(x)} frames, {len(ca)} CA x {len(ow)} OW, 75 bins to 8 Å; CPU ms per frame, "
          f"best of {rounds}; load average {os.getloadavg()[0]:.2f}")
    for level in levels:
        print(f"{names[level]:<8} {best[level, len(ca)]:.3f} ms/frame; with 10 CA atoms {best[level, 10]:.3f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=1000)
    p.add_argument("--workdir", default="demo-output")
    p.add_argument("--executor", default="serial", help="trajscale's executor (default serial, as MDAnalysis's)")
    p.add_argument("-n", "--n-workers", type=int, default=None)
    p.add_argument("--repeat", type=int, default=1, help="runs per cell (the median is printed)")
    p.add_argument("--cases", nargs="+", default=["cold", "warm"], choices=["cold", "warm"])
    p.add_argument("--commands", action="store_true",
                   help="write each side's scripts into the work folder and print its command line; time nothing")
    p.add_argument("--search", action="store_true",
                   help="time only the RDF's search, in this process, at each vector width (best of --repeat)")
    a = p.parse_args(argv)
    if a.search:
        search_timing(max(a.repeat, 1))
        return 0

    from trajscale.demo import build_demo_file

    top, traj = build_demo_file(a.workdir, a.frames, progress=False)
    work = Path(a.workdir) / f"one-pass-{a.frames}"
    work.mkdir(parents=True, exist_ok=True)
    (work / "plan.toml").write_text(PLAN)
    (work / "mda_three.py").write_text(MDA_SCRIPT)
    ts_cmd = [*trajscale_command(), "-q", "run"]
    opts = ["--executor", a.executor, "--overwrite", *(["-n", str(a.n_workers)] if a.n_workers else [])]
    sides = {"one pass": [[*ts_cmd, "--plan", "plan.toml", top, traj, *opts]]}
    for name, args in SINGLE.items():
        sides[f"trajscale run {name}"] = [[*ts_cmd, name, top, traj, *args, *opts]]
    sides["MDAnalysis"] = [[sys.executable, "mda_three.py", top, traj]]
    cpptraj = shutil.which("cpptraj")
    if cpptraj:
        (work / "cpptraj.in").write_text(CPPTRAJ_INPUT.format(top=top, traj=traj))
        sides["cpptraj"] = [[cpptraj, "-i", "cpptraj.in"]]

    if a.commands:
        write_commands(work, traj, sides)
        return 0
    print(f"{a.frames} frames x 47681 atoms ({os.path.getsize(traj) / 1e9:.2f} GB H5MD); trajscale executor "
          f"{a.executor}; median of {a.repeat} run(s) per cell; whole processes")
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    seconds: dict[tuple[str, str], float] = {}
    for case in a.cases:
        for side, cmds in sides.items():
            seconds[side, case] = median_of(a.repeat, lambda cmds=cmds, case=case: sum(
                timed(c, work, traj, case) for c in cmds))
        singles = [seconds[f"trajscale run {n}", case] for n in SINGLE]
        seconds["three runs", case] = sum(singles)
        seconds["slowest run", case] = max(singles)

    rows = ["one pass", *(f"trajscale run {n}" for n in SINGLE), "three runs", "MDAnalysis",
            *(["cpptraj"] if cpptraj else [])]
    print(f"{'side':<31}" + "".join(f"{c + ' s':>10}{'/ one pass':>12}" for c in a.cases))
    for side in rows:
        label = {"three runs": "three separate runs (sum)", "MDAnalysis": "MDAnalysis, 3 runs, 1 Universe",
                 "one pass": "trajscale one pass (--plan)"}.get(side, side)
        print(f"{label:<31}" + "".join(f"{seconds[side, c]:>10.2f}{seconds[side, c] / seconds['one pass', c]:>11.2f}x"
                                       for c in a.cases))
    if not cpptraj:
        print("cpptraj: not on PATH (it is not on PyPI: AmberTools, e.g. conda-forge's ambertools); no row")
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    for c in a.cases:
        one = seconds["one pass", c]
        print(f"{c}: one pass / slowest single run {one / seconds['slowest run', c]:.2f}x (target <= 1.3); "
              f"three runs / one pass {seconds['three runs', c] / one:.2f}x (target >= 2); "
              f"MDAnalysis / one pass {seconds['MDAnalysis', c] / one:.2f}x (target >= 10)")

    d_rmsd = float(np.abs(np.load(work / "rmsd.npy")[:, 2] - np.load(work / "mda-rmsd.npy")[:, 2]).max())
    d_rmsf = float(np.abs(np.load(work / "rmsf.npy") - np.load(work / "mda-rmsf.npy")).max())
    d_rdf = float(np.abs(np.load(work / "rdf.npz")["rdf"] - np.load(work / "mda-rdf.npy")).max())
    same = all(np.array_equal(np.load(work / f), np.load(work / f"single-{f}")) for f in ("rmsd.npy", "rmsf.npy"))
    same = same and np.array_equal(np.load(work / "rdf.npz")["rdf"], np.load(work / "single-rdf.npz")["rdf"])
    print(f"largest difference from MDAnalysis: RMSD {d_rmsd:.1e} A, RMSF {d_rmsf:.1e} A, RDF {d_rdf:.1e}; "
          f"one pass equal to the single runs: {same}")
    return 0 if d_rmsd <= 1e-4 and d_rmsf <= 1e-4 and d_rdf <= 1e-6 and same else 1


if __name__ == "__main__":
    sys.exit(main())
