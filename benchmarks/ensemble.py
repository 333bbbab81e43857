"""An ensemble of short trajectories in one job against a plain MDAnalysis loop over Universes: whole processes.

    python benchmarks/ensemble.py [--size smallest|default|full] [--workdir DIR] [--workers 2] [--repeat 1]
    python benchmarks/ensemble.py --size smallest --workdir /tmp/bench      # what the test suite runs

The data: ``N`` short trajectories cut from the two systems MDAnalysisTests ships, nine in ten from AdK in
vacuum (PSF + DCD written once as XTC: 3,341 atoms, pieces of 5 to 30 of its 98 frames) and one in ten from
YiiP in a membrane (GRO + XTC: 43,480 atoms, pieces of 2 to 5 of its 5 frames): two topologies, two atom
counts, many lengths.  A piece is the original XTC's frames copied byte for byte (an XTC frame stands alone).
One catalog (CSV) lists them, with their topology and labels.

The workload: the CA RMSD (to each trajectory's first frame) and the CA radius of gyration of every frame of
every trajectory.  Every side is a whole process, timed from just before its start to just after its exit:

* MDAnalysis: one script, a loop over the catalog's rows, a ``Universe(top, traj)`` each, ``rms.RMSD(u,
  select="name CA").run()`` and ``ca.radius_of_gyration()`` at each frame (its own classes, serial);
* trajscale serial: ``trajscale.run([RMSD, RadiusOfGyration], catalog, executor="serial")``: one job;
* trajscale processes(``--workers``): the same on a pool.

The sums of every RMSD and radius of gyration are compared between the sides (exit 1 past 1e-6 relative).
Then, for trajscale alone:

* the per-trajectory overhead: many tiny trajectories (3 atoms x 2 frames; 2,000 at the default size) in
  one serial job, less one such trajectory alone, per trajectory: what opening, planning and handing home a
  trajectory costs;
* the peak RSS of the run's largest process and the most files any of its processes held open (sampled
  every 10 ms from ``/proc``), in one run at ``N`` and one at a larger ``N`` (serial, and processes):
  :func:`measured`, which ``benchmarks/scale.py`` uses too.

The PyTorch epoch over mdCATH-shaped files is ``benchmarks/mdcath_epoch.py``.  The median of ``--repeat``
runs is printed, with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests.support (tiny_ensemble), beside the benchmarks

#: size -> (N for the timings, (smaller N, larger N) for memory and open files, N of tiny trajectories)
SIZES = {"smallest": (12, (12, 48), 12), "default": (200, (100, 1000), 2000), "full": (2000, (100, 2000), 10000)}

MDA_LOOP = r'''
import csv, sys, warnings
import numpy as np
import MDAnalysis as mda
from MDAnalysis.analysis.rms import RMSD
warnings.simplefilter("ignore")
rmsd_sum = rgyr_sum = 0.0
n = 0
for row in csv.DictReader(open(sys.argv[1])):
    u = mda.Universe(row["topology"], row["trajectory"])
    rmsd_sum += float(RMSD(u, select="name CA").run().results.rmsd[:, 2].sum())
    ca = u.select_atoms("name CA")
    rgyr_sum += float(sum(ca.radius_of_gyration() for _ in u.trajectory))
    n += 1
print(f"SUMS {n} {rmsd_sum!r} {rgyr_sum!r}")
'''

TS_RUN = r'''
import sys
import trajscale as ts
catalog, executor, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
rmsd, rgyr = ts.run([ts.RMSD(select="name CA"), ts.RadiusOfGyration(select="name CA")], catalog,
                    executor=executor, n_workers=workers)
assert not rmsd.refused, rmsd.refused
print(f"SUMS {len(rmsd)} {float(rmsd.columns()['rmsd'].sum())!r} {float(rgyr.columns()['rgyr'].sum())!r}")
'''

TINY_RUN = r'''
import sys
import trajscale as ts
r = ts.run(ts.RadiusOfGyration(select="all"), sys.argv[1], executor="serial")
assert len(r) == int(sys.argv[2]) and not r.refused
'''


def xtc_frames(path: Path) -> tuple[bytes, list[int]]:
    """A whole XTC's bytes and each frame's offset (and the end)."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    with XTCFile(str(path)) as f:
        offsets = [int(o) for o in f.offsets]
    data = path.read_bytes()
    return data, [*offsets, len(data)]


def make_sources(work: Path) -> dict:
    """AdK's DCD as XTC, and YiiP's XTC: ``{system: (topology, bytes, offsets)}``."""
    import warnings

    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, GRO_MEMPROT, PSF, XTC_MEMPROT

    adk = work / "adk.xtc"
    if not adk.exists():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            u = mda.Universe(PSF, DCD)
            with mda.Writer(str(adk) + ".tmp.xtc", u.atoms.n_atoms) as w:
                for _ in u.trajectory:
                    w.write(u.atoms)
        os.replace(str(adk) + ".tmp.xtc", adk)
    return {"adk": (PSF, *xtc_frames(adk)), "yiip": (GRO_MEMPROT, *xtc_frames(Path(XTC_MEMPROT)))}


def made_once(folder: Path, header: str, rows: Callable[[Path], Iterator[str]]) -> Path:
    """``folder``'s catalog, made once (the benchmarks' one builder of trajectories): ``header``, then the row of
    each trajectory ``rows(folder)`` writes there."""
    catalog = folder / "catalog.csv"
    if not catalog.exists():
        folder.mkdir(parents=True, exist_ok=True)
        catalog.write_text("\n".join([header, *rows(folder)]) + "\n")
    return catalog


def make_ensemble(work: Path, n: int, sources: dict) -> Path:
    """``n`` pieces and their catalog in ``work/N<n>`` (made once)."""
    def rows(folder: Path) -> Iterator[str]:
        rng = np.random.default_rng(n)
        for k in range(n):
            system = "yiip" if k % 10 == 9 else "adk"
            top, data, offsets = sources[system]
            total = len(offsets) - 1
            length = int(rng.integers(2, 6)) if system == "yiip" else int(rng.integers(5, 31))
            length = min(length, total)
            a = int(rng.integers(0, total - length + 1))
            (folder / f"t{k:05d}.xtc").write_bytes(data[offsets[a]:offsets[a + length]])
            yield f"t{k:05d},{top},{folder / f't{k:05d}.xtc'},{system},{k}"

    return made_once(work / f"N{n}", "name,topology,trajectory,system,replica", rows)


def make_tiny(work: Path, n: int) -> Path:
    """``n`` XTC trajectories of 3 atoms x 2 frames (stored uncompressed) and their catalog, made once in
    ``work/tinyN`` (:func:`tests.support.ensembles.tiny_ensemble`)."""
    from tests.support.ensembles import tiny_ensemble

    catalog = work / f"tiny{n}" / "catalog.csv"
    return catalog if catalog.exists() else tiny_ensemble(work / f"tiny{n}", n)[0]


def env_for(work: Path) -> dict:
    return dict(os.environ, TRAJSCALE_CACHE_DIR=str(work / "cache"), OMP_NUM_THREADS="1",
                OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def _descendants(root: int) -> list[int]:
    # Every process's parent from /proc/PID/stat, read as bytes with os.read: this runs every 10 ms beside
    # the run it measures, and a file object and text decoding per process cost 2.4x the CPU.
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{d}/stat", os.O_RDONLY)
            try:
                raw = os.read(fd, 1024)
            finally:
                os.close(fd)
            ppid = int(raw[raw.rindex(b")") + 2:].split(None, 2)[1])
        except (OSError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def timed(cmd: list[str], work: Path) -> tuple[float, str]:
    """Run ``cmd``; its wall time and stdout (exit when it fails)."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env_for(work), cwd=work)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])} ... exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return wall, proc.stdout


#: Runs the command as its child subreaper, reaps every process it started, prints its peak RSS (bytes).
_HELPER = r"""
import ctypes, json, os, resource, subprocess, sys
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER
proc = subprocess.run(json.loads(sys.argv[1]), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
print(json.dumps({"rc": proc.returncode, "stderr": proc.stderr[-3000:],
                  "peak": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
"""


def measured(cmd: list[str], work: Path) -> dict:
    """Run ``cmd`` once: wall seconds (from just before its start to just after its exit), exit status and
    stderr, the peak RSS of its largest process (the kernel's, every process it started reaped by a
    subreaper, as :mod:`tests.support.peak_rss`), and the most open files any of its processes held
    (sampled from ``/proc`` every 10 ms)."""
    most = [0]
    t0 = time.perf_counter()
    helper = subprocess.Popen([sys.executable, "-c", _HELPER, json.dumps(cmd)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env_for(work), cwd=work)
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for pid in _descendants(helper.pid)[1:]:   # (the helper's own files are not the run's)
                try:
                    most[0] = max(most[0], len(os.listdir(f"/proc/{pid}/fd")))
                except OSError:
                    pass
            done.wait(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, err = helper.communicate()
    wall = time.perf_counter() - t0
    done.set()
    watcher.join()
    if helper.returncode != 0:
        sys.exit(f"the measuring helper exited {helper.returncode}:\n{err[-3000:]}")
    got = json.loads(out.strip().splitlines()[-1])
    return {"wall": wall, "rc": got["rc"], "stderr": got["stderr"], "peak": got["peak"], "fds": most[0]}


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def finish(work: Path, keep: bool, ok: bool, patterns: tuple[str, ...] = ("tiny*",)) -> None:
    """The load average after; the trajectories made in ``work`` removed (unless ``keep``); exit 1 unless ``ok``."""
    print(f"load average after: {load_average()}")
    if not keep:
        for pattern in patterns:
            for d in work.glob(pattern):
                shutil.rmtree(d, ignore_errors=True)
    if not ok:
        sys.exit(1)


def sums(out: str) -> tuple[int, float, float]:
    line = next(x for x in out.splitlines() if x.startswith("SUMS "))
    n, a, b = line.split()[1:]
    return int(n), float(a), float(b)


def median_run(cmd, work, repeat) -> tuple[float, str]:
    walls, out = [], ""
    for _ in range(repeat):
        wall, out = timed(cmd, work)
        walls.append(wall)
    return statistics.median(walls), out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=list(SIZES), default="default")
    p.add_argument("--workdir", default="demo-output/ensemble")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep the trajectories made in the work folder")
    args = p.parse_args()
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    n, (n_small, n_large), n_tiny = SIZES[args.size]
    print(f"load average before: {load_average()}")
    sources = make_sources(work)
    catalog = make_ensemble(work, n, sources)
    (work / "mda_loop.py").write_text(MDA_LOOP)
    (work / "ts_run.py").write_text(TS_RUN)
    (work / "tiny_run.py").write_text(TINY_RUN)
    py = sys.executable
    ts_run, tiny_run = str(work / "ts_run.py"), str(work / "tiny_run.py")
    sides = [("MDAnalysis loop (serial)", [py, str(work / "mda_loop.py"), str(catalog)]),
             ("trajscale serial", [py, ts_run, str(catalog), "serial", "1"]),
             (f"trajscale processes({args.workers})", [py, ts_run, str(catalog), "processes", str(args.workers)])]
    rows = []
    for name, cmd in sides:
        wall, out = median_run(cmd, work, args.repeat)
        rows.append((name, wall, sums(out)))
    base = rows[0][1]
    print(f"\n{'side':<28}{'N':>6}{'wall s':>10}{'traj/s':>10}{'MDA / side':>12}")
    for name, wall, (k, _, _) in rows:
        print(f"{name:<28}{k:>6}{wall:>10.3f}{k / wall:>10.1f}{base / wall:>11.2f}x")
    ref = rows[0][2]
    same = all(s[0] == ref[0] and np.isclose(s[1], ref[1], rtol=1e-6) and np.isclose(s[2], ref[2], rtol=1e-6)
               for _, _, s in rows)
    print(f"serial / processes({args.workers}): {rows[1][1] / rows[2][1]:.2f}x; same sums (RMSD, Rg): {same}")

    tiny = make_tiny(work, n_tiny)
    one = make_tiny(work, 1)
    t_n, _ = median_run([py, tiny_run, str(tiny), str(n_tiny)], work, args.repeat)
    t_1, _ = median_run([py, tiny_run, str(one), "1"], work, args.repeat)
    print(f"per-trajectory overhead (open, plan, result; {n_tiny} tiny trajectories, serial): "
          f"{1e3 * (t_n - t_1) / max(1, n_tiny - 1):.2f} ms ({t_n:.3f} s for {n_tiny}, {t_1:.3f} s for 1)")

    print(f"\n{'memory and open files':<28}{'N':>6}{'peak RSS MB':>13}{'open files':>12}")
    for executor, workers in (("serial", 1), ("processes", args.workers)):
        for k in (n_small, n_large):
            cat = make_ensemble(work, k, sources)
            got = measured([py, ts_run, str(cat), executor, str(workers)], work)
            if got["rc"] != 0:
                sys.exit(f"ts_run.py exited {got['rc']}: {got['stderr'][-2000:]}")
            print(f"{executor + ('' if workers == 1 else f'({workers})'):<28}{k:>6}{got['peak'] / 2**20:>13.0f}"
                  f"{got['fds']:>12}")
    print("(peak RSS: the run's largest process; open files: the most any of its processes held, sampled)")
    print("the PyTorch epoch over mdCATH-shaped files: benchmarks/mdcath_epoch.py")
    finish(work, args.keep, same, ("N*", "tiny*"))

if __name__ == "__main__":
    main()
