"""Two trees of trajscale against each other: a fixed matrix of whole processes, paired and alternated.

    python benchmarks/regress.py OLD NEW [--size smallest|small|full] [--pairs N] [--warmup N]
                                 [--rows PATTERN[,PATTERN...]] [--json OUT [--overwrite]] [--list]
                                 [--workdir demo-output/regress] [--keep-trees] [--check]

OLD and NEW are each a checkout built in place (a folder holding ``src/trajscale`` and its compiled
kernels: ``python setup.py build_ext --inplace``), or a git revision of the repository this script lies in
(``HEAD``, ``main~3``, a commit), which is checked out into a worktree under the work folder
(``git worktree add``), built there the same way and removed at the end (``--keep-trees``: kept and reused
by the next run). Each tree's modules are compiled to bytecode first (``compileall``), as an installation's
are. A tree runs as ``trajscale`` with ``PYTHONPATH=TREE/src``: the same interpreter and the same
dependencies on both sides, only trajscale's own code differs.

The matrix (``--list`` prints it with each row's command), every row a ``trajscale`` command as a user
types it, run as a new process:

* ``h5md/ANALYSIS/SEL/EXECUTOR``: every built-in analysis on an H5MD store of AdK in water (47,681 atoms,
  MDAnalysisTests' TPR and XTC, its 10 frames repeated) with its default selection (for the analyses that
  need two, a typical pair), a large one and a small one, ``--executor serial`` and ``processes -n 2``;
* ``yiip/rmsd/default/EXECUTOR``: the CA RMSD of YiiP in a membrane (43,480 atoms, MDAnalysisTests'
  GRO and XTC) from an H5MD store: the start-up case, a short run dominated by the process's start;
* ``xtc/...``: the same AdK frames read in place from a chain of XTC parts;
* ``s3/...``: the H5MD store read from a local S3 server (moto's, as the test suite starts it; the rows are
  skipped with a line saying so where moto is not installed);
* ``h5md/plan/default/EXECUTOR``: ``run --plan`` with an RMSD, an RMSF and an RDF in one pass;
* ``convert/xtc-h5md/all/serial``: ``trajscale convert`` of the XTC chain to H5MD.

The data are built once per size in the work folder by NEW's ``convert``; each side keeps its own cache
folder (``TRAJSCALE_CACHE_DIR``), filled by its first run. A row runs each side ``--warmup`` times
uncounted, then ``--pairs`` pairs, the order alternating (OLD NEW, NEW OLD, ...) so that a drift of the
machine's speed falls on both. Each run is timed from just before its start to its exit
(``time.perf_counter``), and its CPU is the operating system's account of it and the children it reaped
(``os.wait4``).

A row's line: both sides' median wall seconds, the median over pairs of NEW / OLD and its range
(lowest-highest pair), the median CPU ratio, whether the two sides wrote the same output (``same``: the
same bytes; ``equal``: the same values; ``close``: within 1e-5; ``differs``), the load average when the row
started, and ``SLOWER`` (or ``faster``) where the pairs say so beyond their noise: a one-sided sign test
over the pairs, p <= 0.05 (5 pairs of 5 slower, 9 of 11, ...; one pair can mark nothing). ``--check``:
exit 1 when a row is marked ``SLOWER``; a row that fails on NEW only exits 1 always (a row that fails on
OLD, e.g. an analysis or a store it does not have, is reported and skipped).

Sizes: ``smallest`` 20 frames in 2 XTC parts, 1 pair, no warm-up (the test suite runs it on one tree
against itself: the harness, not a timing); ``small`` 100 frames in 5 parts, 5 pairs; ``full`` 1,000
frames in 20 parts, 11 pairs.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))   # chains (the XTC parts) and remote (the S3 server), sibling scripts
PROG = Path(__file__).name

#: size -> (AdK frames, XTC parts, YiiP frames, pairs, warm-up runs)
SIZES = {"smallest": (20, 2, 20, 1, 0), "small": (100, 5, 100, 5, 1), "full": (1000, 20, 1000, 11, 1)}
#: The sign test's level: a row is marked when the pairs this consistently go one way.
ALPHA = 0.05
BUCKET = "regress"

CA = "protein and name CA"
SMALL = "name CA and resid 1-20"
HEAVY = "protein and not name H*"
#: analysis -> {selection kind: its selection options}; "default" is the analysis's own default where it
#: has one, a typical pair where it needs two; "large" and "small" where the system has them. Every analysis
#: ``trajscale run`` offers has an entry here (the test suite checks it against the registry).
ANALYSES: dict[str, dict[str, list[str]]] = {
    "rmsd": {"default": [], "large": ["--select", "all"], "small": ["--select", SMALL]},
    "rmsf": {"default": [], "large": ["--select", "all"], "small": ["--select", SMALL]},
    "rgyr": {"default": [], "large": ["--select", "all"], "small": ["--select", SMALL]},
    "average": {"default": [], "large": ["--select", "all"], "small": ["--select", SMALL]},
    "distances": {"default": ["--select1", "name CA and resid 1-107", "--select2", "name CA and resid 108-214"],
                  "large": ["--select1", "index 0:1999", "--select2", "index 2000:3999"],
                  "small": ["--select1", "name CA and resid 1-5", "--select2", "name CA and resid 6-10"]},
    "com_distance": {"default": ["--select1", "protein and resid 1-107", "--select2", "protein and resid 108-214"],
                     "large": ["--select1", "protein", "--select2", "name OW"],
                     "small": ["--select1", "name CA and resid 1", "--select2", "name CA and resid 100"]},
    "contacts": {"default": ["--select1", "name CA and resid 1-107", "--select2", "name CA and resid 108-214"],
                 "large": ["--select1", f"{HEAVY} and resid 1-107", "--select2", f"{HEAVY} and resid 108-214"],
                 "small": ["--select1", "name CA and resid 1-10", "--select2", "name CA and resid 11-20"]},
    # the protein is its default and its largest: one selection fewer
    "ramachandran": {"default": [], "small": ["--select", "resid 2-21"]},
    # every residue pair's minimum distance: the CA atoms (one a residue) by default, heavy atoms as large
    "residue_contacts": {"default": ["--select", CA], "large": ["--select", f"{HEAVY} and resid 1-60"],
                         "small": ["--select", SMALL]},
    "rdf": {"default": ["--select1", CA, "--select2", "name OW"],
            # a large first selection against a sparse second one (the protein's heavy atoms and 401 waters)
            "large": ["--select1", HEAVY, "--select2", "name OW and resid 300:700"],
            "small": ["--select1", "name CA and resid 1-10", "--select2", "name CA and resid 100-110"]},
}
#: The output each analysis writes (a format every tree's command takes).
SUFFIX = {"average": ".npy"}
EXECUTORS = {"serial": ["--executor", "serial"], "processes2": ["--executor", "processes", "-n", "2"]}
PLAN = f"""\
[rmsd]
select = "{CA}"
out = "{{out}}/rmsd.csv"

[rmsf]
select = "all"
out = "{{out}}/rmsf.csv"

[rdf]
select1 = "{CA}"
select2 = "name OW"
nbins = 75
range = [0, 8]
out = "{{out}}/rdf.csv"
"""


@dataclass
class Tree:
    """One side: a built checkout (``root``) and how to name it."""

    label: str            # OLD or NEW
    root: Path
    name: str             # what the user gave, and the commit it is
    worktree: bool = False   # made here (removed at the end unless kept)


@dataclass
class Data:
    """The inputs of the matrix, built once per size."""

    tpr: str
    parts: list[str]
    h5md: str
    yiip_gro: str
    yiip_h5md: str
    url: str | None = None   # the H5MD store on the S3 server
    env: dict = field(default_factory=dict)   # what reaches the server


@dataclass
class Row:
    """A command line per side (``argv(out_dir)``) and what its runs measured."""

    name: str
    argv: Callable[[Path], list[str]]   # the side's output folder -> the arguments after ``trajscale``
    outputs: tuple[str, ...]
    needs: str = ""       # "s3": the server
    files: dict = field(default_factory=dict)   # name -> text ({out}: the side's folder), written before a run
    wall: dict = field(default_factory=lambda: {"OLD": [], "NEW": []})
    cpu: dict = field(default_factory=lambda: {"OLD": [], "NEW": []})
    status: str = ""      # "" (measured) or why the row has no figures
    output: str = "-"
    load: float = 0.0

    @property
    def ratios(self) -> list[float]:
        return [n / o for o, n in zip(self.wall["OLD"], self.wall["NEW"], strict=False)]

    @property
    def cpu_ratios(self) -> list[float]:
        return [n / o for o, n in zip(self.cpu["OLD"], self.cpu["NEW"], strict=False) if o > 0]

    def sign_test(self) -> tuple[int, int, float, float]:
        """(pairs NEW slower, pairs that differ, one-sided p of that many slower, of that many faster)."""
        r = [x for x in self.ratios if x != 1.0]
        k, n = sum(x > 1 for x in r), len(r)
        tail = lambda j: sum(math.comb(n, i) for i in range(j, n + 1)) / 2 ** n   # noqa: E731
        return k, n, tail(k) if n else 1.0, tail(n - k) if n else 1.0

    @property
    def mark(self) -> str:
        if self.status or not self.ratios:
            return ""
        _, _, p_slow, p_fast = self.sign_test()
        med = statistics.median(self.ratios)
        return "SLOWER" if p_slow <= ALPHA and med > 1 else "faster" if p_fast <= ALPHA and med < 1 else ""

    def to_dict(self) -> dict:
        d = {"row": self.name, "status": self.status or "measured", "load": self.load, "output": self.output,
             "old_wall": self.wall["OLD"], "new_wall": self.wall["NEW"], "old_cpu": self.cpu["OLD"],
             "new_cpu": self.cpu["NEW"], "mark": self.mark}
        if self.ratios:
            k, n, p_slow, _ = self.sign_test()
            d.update(ratio=statistics.median(self.ratios), low=min(self.ratios), high=max(self.ratios),
                     cpu_ratio=statistics.median(self.cpu_ratios) if self.cpu_ratios else None,
                     pairs_slower=k, pairs=len(self.ratios), p_slower=p_slow)
        return d


# ---------------------------------------------------------------- the trees

def git(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)


def repo_root() -> Path:
    return HERE.parent


def compiled(root: Path) -> bool:
    return any((root / "src" / "trajscale").rglob("*.so")) or any((root / "src" / "trajscale").rglob("*.pyd"))


def describe(root: Path) -> str:
    """The tree's commit, and whether its files differ from it."""
    head = git("rev-parse", "--short", "HEAD", cwd=root)
    if head.returncode:
        return "not a git checkout"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "src", cwd=root).stdout.strip()
    return head.stdout.strip() + (" + uncommitted changes in src" if dirty else "")


def resolve(label: str, spec: str, work: Path) -> Tree:
    """A built checkout as it is, or a revision of this repository checked out under ``work``; exits with one
    line when ``spec`` is neither."""
    path = Path(spec)
    if (path / "src" / "trajscale").is_dir():
        if not compiled(path):
            raise SystemExit(f"{PROG}: {spec}: no compiled kernels in src/trajscale (run `python setup.py "
                             f"build_ext --inplace` there, or give a revision)")
        return Tree(label, path.resolve(), f"{spec} ({describe(path)})")
    sha = git("rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}", cwd=repo_root())
    if sha.returncode:
        raise SystemExit(f"{PROG}: {spec}: neither a built checkout (a folder with src/trajscale) nor a revision "
                         f"of {repo_root()}")
    sha = sha.stdout.strip()
    return Tree(label, work / "trees" / sha[:12], f"{spec} ({sha[:9]})", worktree=True)


def build(tree: Tree) -> None:
    """A revision's worktree checked out and built in place (reused when a kept one is complete)."""
    if not tree.worktree:
        return
    stamp = tree.root / ".regress-built"
    if stamp.exists():
        return
    repo, sha = repo_root(), tree.root.name
    if tree.root.exists():   # an earlier run's, not finished
        git("worktree", "remove", "--force", str(tree.root), cwd=repo)
        shutil.rmtree(tree.root, ignore_errors=True)
    git("worktree", "prune", cwd=repo)
    full = git("rev-parse", "--verify", f"{sha}^{{commit}}", cwd=repo).stdout.strip()
    made = git("worktree", "add", "--detach", str(tree.root), full, cwd=repo)
    if made.returncode:
        raise SystemExit(f"{PROG}: git worktree add {tree.root} {full[:9]}: {made.stderr.strip().splitlines()[-1]}")
    env = dict(os.environ)
    if "CC" not in env and shutil.which("ccache"):   # the kernels' objects are shared with earlier builds
        import sysconfig

        env["CC"] = f"ccache {sysconfig.get_config_var('CC') or 'cc'}"
    print(f"building {tree.label} {tree.name} in {tree.root} ...", file=sys.stderr, flush=True)
    done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], cwd=tree.root, env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        log = tree.root / "build.log"
        log.write_text(done.stdout + done.stderr)
        raise SystemExit(f"{PROG}: building {tree.name} failed (exit {done.returncode}); its output: {log}")
    stamp.write_text(full + "\n")


def ready(tree: Tree) -> None:
    """Bytecode compiled in the tree, and its ``src`` is what the side imports."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", "src"], cwd=tree.root, check=False,
                   capture_output=True)
    probe = subprocess.run([sys.executable, "-c", "import trajscale; print(trajscale.__file__)"],
                           env=side_env(tree, None), capture_output=True, text=True, check=False)
    got = probe.stdout.strip()
    if probe.returncode or not Path(got).resolve().is_relative_to(tree.root / "src"):
        raise SystemExit(f"{PROG}: {tree.name}: its side imports trajscale from {got or probe.stderr.strip()[-200:]}, "
                         f"not from {tree.root / 'src'}")


def remove(tree: Tree) -> None:
    if tree.worktree and tree.root.exists():
        git("worktree", "remove", "--force", str(tree.root), cwd=repo_root())
        shutil.rmtree(tree.root, ignore_errors=True)
        git("worktree", "prune", cwd=repo_root())


def side_env(tree: Tree, cache: Path | None, extra: dict | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree.root / "src"), PYTHONUNBUFFERED="1", **(extra or {}))
    env.pop("TRAJSCALE_TOPOLOGY_CACHE", None)
    if cache is not None:
        env["TRAJSCALE_CACHE_DIR"] = str(cache)
    return env


def trajscale_command() -> list[str]:
    """The console script of this interpreter's environment, as a user runs it (``-m`` where it has none)."""
    exe = Path(sys.executable).with_name("trajscale")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "trajscale.cli.main"]


# ---------------------------------------------------------------- the data

def yiip_files() -> tuple[str, str]:
    from MDAnalysisTests.datafiles import GRO_MEMPROT, XTC_MEMPROT

    return GRO_MEMPROT, XTC_MEMPROT


def make_data(work: Path, size: str, new: Tree, rows: list[Row]) -> Data:
    """What ``rows`` read: AdK's XTC chain and H5MD store, YiiP's H5MD store (each built once, by NEW), the
    S3 bucket."""
    from MDAnalysisTests.datafiles import TPR

    frames, n_parts, yiip_frames = SIZES[size][:3]
    folder = work / f"data-{size}"
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {r.name.split("/")[0] for r in rows}
    env = side_env(new, folder / "cache")
    h5md, yiip = folder / "adk.h5md", folder / "yiip.h5md"
    gro, xtc = yiip_files()
    parts, todo = [], []
    if wanted - {"yiip"}:
        from chains import build_chain

        parts = build_chain(folder / "parts", frames, n_parts)
        todo.append((h5md, [TPR, *parts]))
    if "yiip" in wanted:
        todo.append((yiip, [gro, *[xtc] * math.ceil(yiip_frames / n_frames(xtc)), "--stop", str(yiip_frames)]))
    for out, argv in todo:
        if not out.exists():   # convert writes a temporary name and renames it when complete
            cmd = [*trajscale_command(), "-q", "convert", *argv, "-o", str(out)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                raise SystemExit(f"{PROG}: {' '.join(cmd[:4])} ... -o {out}: {done.stderr.strip()[-400:]}")
    data = Data(TPR, parts, str(h5md), gro, str(yiip))
    if "s3" in wanted:
        data.url, data.env = start_s3(h5md)
    return data


def n_frames(xtc: str) -> int:
    import MDAnalysis as mda

    return mda.coordinates.XTC.XTCReader(xtc).n_frames


_SERVER = []


def start_s3(h5md: Path) -> tuple[str | None, dict]:
    """The store uploaded to a moto S3 server of this run's own; (None, {}) where moto is not installed."""
    import importlib.util

    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("boto3") is None:
        return None, {}
    import boto3
    from remote import KEY_ID, SECRET, Server

    server = Server()
    _SERVER.append(server)
    s3 = boto3.client("s3", endpoint_url=server.url, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET,
                      region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    s3.upload_file(str(h5md), BUCKET, h5md.name)
    env = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": server.url}
    return f"s3://{BUCKET}/{h5md.name}", env


def stop_s3() -> None:
    while _SERVER:
        _SERVER.pop().stop()


# ---------------------------------------------------------------- the matrix

def matrix(data: Data) -> list[Row]:
    """Every row, in the order they run."""
    rows = []

    def run_row(name: str, top: str, traj: list[str], analysis: str, sel: list[str], ex: str,
                needs: str = "") -> None:
        out = "out" + SUFFIX.get(analysis, ".csv")
        rows.append(Row(name, lambda d: ["-q", "run", analysis, top, *traj, *sel, *EXECUTORS[ex],
                                         "--out", str(d / out), "--overwrite"], (out,), needs))

    for analysis, sels in ANALYSES.items():
        for kind, sel in sels.items():
            for ex in EXECUTORS:
                run_row(f"h5md/{analysis}/{kind}/{ex}", data.tpr, [data.h5md], analysis, sel, ex)
    for ex in EXECUTORS:
        run_row(f"yiip/rmsd/default/{ex}", data.yiip_gro, [data.yiip_h5md], "rmsd", ["--select", CA], ex)
    for where, traj, needs in (("xtc", data.parts, ""), ("s3", [data.url or "s3://-"], "s3")):
        for ex in EXECUTORS:
            run_row(f"{where}/rmsd/default/{ex}", data.tpr, traj, "rmsd", [], ex, needs)
        run_row(f"{where}/rmsf/large/serial", data.tpr, traj, "rmsf", ANALYSES["rmsf"]["large"], "serial", needs)

    for ex in EXECUTORS:
        rows.append(Row(f"h5md/plan/default/{ex}",
                        lambda d, ex=ex: ["-q", "run", "--plan", str(d / "plan.toml"), data.tpr, data.h5md,
                                          *EXECUTORS[ex]],
                        ("rmsd.csv", "rmsf.csv", "rdf.csv"), files={"plan.toml": PLAN}))
    rows.append(Row("convert/xtc-h5md/all/serial",
                    lambda d: ["-q", "convert", data.tpr, *data.parts, "-o", str(d / "out.h5md"), "--overwrite"],
                    ("out.h5md",)))
    return rows


def chosen(rows: list[Row], patterns: str | None) -> list[Row]:
    """The rows whose names match one of the comma-separated shell patterns (``*`` spans ``/``), less those
    matching a pattern that starts with ``!``; only ``!`` patterns: every other row."""
    pats = [p.strip() for p in (patterns or "").split(",") if p.strip()]
    keep = [p for p in pats if not p.startswith("!")]
    drop = [p[1:] for p in pats if p.startswith("!")]
    return [r for r in rows if (not keep or any(fnmatch.fnmatchcase(r.name, p) for p in keep))
            and not any(fnmatch.fnmatchcase(r.name, p) for p in drop)]


# ---------------------------------------------------------------- running

def run_once(argv: list[str], env: dict, log: Path, timeout: float) -> tuple[float, float, int]:
    """One whole process: (wall seconds, CPU seconds of it and its reaped children, exit status)."""
    import threading

    with open(log, "ab") as f:
        f.write(("$ " + " ".join(argv) + "\n").encode())
        f.flush()
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=f, env=env)
        killer = threading.Timer(timeout, proc.kill)   # wait4 blocks: no polling adds to the wall time
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        wall = time.perf_counter() - t0
    proc.returncode = rc = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, rc


def last_line(log: Path) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip() and not ln.startswith("$ ")]
    return lines[-1][:200] if lines else "no output"


def measure(row: Row, trees: dict[str, Tree], work: Path, data: Data, pairs: int, warmup: int,
            timeout: float) -> None:
    """Warm-up runs of each side, then the pairs, the order alternating; fills ``row``."""
    row.load = os.getloadavg()[0]
    base = work / "runs" / row.name.replace("/", "-")
    dirs, envs, logs = {}, {}, {}
    for label, tree in trees.items():
        dirs[label] = base / label
        shutil.rmtree(dirs[label], ignore_errors=True)
        dirs[label].mkdir(parents=True)
        for name, text in row.files.items():
            (dirs[label] / name).write_text(text.format(out=dirs[label]))
        envs[label] = side_env(tree, work / "caches" / label, data.env if row.needs == "s3" else None)
        logs[label] = base / f"{label}.log"
        logs[label].unlink(missing_ok=True)

    def once(label: str, record: bool) -> bool:
        for name in row.outputs:
            (dirs[label] / name).unlink(missing_ok=True)
        argv = [*trajscale_command(), *row.argv(dirs[label])]
        wall, cpu, rc = run_once(argv, envs[label], logs[label], timeout)
        if rc != 0:
            row.status = f"{label} failed (exit {rc}): {last_line(logs[label])}"
            # NEW's failure is the one that matters: where OLD fails (an analysis it lacks), NEW is tried too
            if label == "OLD":
                once("NEW", False)
            return False
        if record:
            row.wall[label].append(wall)
            row.cpu[label].append(cpu)
        return True

    order = ("OLD", "NEW")
    for i in range(max(warmup, 0) + pairs):
        counted = i >= warmup
        for label in order if i % 2 == 0 else order[::-1]:
            if not once(label, counted):
                row.wall, row.cpu = {"OLD": [], "NEW": []}, {"OLD": [], "NEW": []}
                return
    row.output = compare_outputs([dirs["OLD"] / n for n in row.outputs], [dirs["NEW"] / n for n in row.outputs])


def compare_outputs(old: list[Path], new: list[Path]) -> str:
    """The worst of the outputs' agreement: same (bytes), equal (values), close (1e-5), differs."""
    rank = ["same", "equal", "close", "differs"]
    worst = "same"
    for a, b in zip(old, new, strict=True):
        got = compare_one(a, b)
        worst = max(worst, got, key=rank.index)
    return worst


def compare_one(a: Path, b: Path) -> str:
    import numpy as np

    if not (a.exists() and b.exists()):
        return "differs"
    if a.read_bytes() == b.read_bytes():
        return "same"
    try:
        x, y = load_values(a), load_values(b)
    except (OSError, ValueError, KeyError):
        return "differs"
    if len(x) != len(y) or any(u.shape != v.shape for u, v in zip(x, y, strict=True)):
        return "differs"
    pairs = list(zip(x, y, strict=True))
    if all(np.array_equal(u, v, equal_nan=u.dtype.kind in "fc") for u, v in pairs):
        return "equal"
    if all(np.allclose(u, v, rtol=1e-5, atol=1e-5, equal_nan=True) if u.dtype.kind in "fciu"
           else np.array_equal(u, v) for u, v in pairs):
        return "close"
    return "differs"


def load_values(path: Path) -> list:
    """An output's numbers: a CSV's columns, an array file's arrays, an H5MD store's datasets."""
    import numpy as np

    if path.suffix == ".csv":
        return [np.genfromtxt(path, delimiter=",", skip_header=1, ndmin=2)]
    if path.suffix == ".npy":
        return [np.load(path)]
    if path.suffix == ".npz":
        with np.load(path) as z:
            return [z[k] for k in sorted(z.files)]
    import h5py

    arrays = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: arrays.append((name, obj[()])) if isinstance(obj, h5py.Dataset) else None)
    return [np.asarray(v) for _, v in sorted(arrays, key=lambda t: t[0])]


# ---------------------------------------------------------------- presentation

def line(row: Row, width: int) -> str:
    if row.status:
        return f"{row.name:<{width}}  {row.status}"
    r, lo, hi = statistics.median(row.ratios), min(row.ratios), max(row.ratios)
    cpu = f"{statistics.median(row.cpu_ratios):.2f}x" if row.cpu_ratios else "-"
    k, n, _, _ = row.sign_test()
    return (f"{row.name:<{width}}{statistics.median(row.wall['OLD']):>8.2f}{statistics.median(row.wall['NEW']):>8.2f}"
            f"{r:>9.2f}x{f'{lo:.2f}-{hi:.2f}':>12}{cpu:>8}{f'{k}/{n}':>7}{row.output:>9}{row.load:>6.1f}"
            f"  {row.mark}").rstrip()


def header(width: int) -> str:
    return (f"{'row':<{width}}{'OLD s':>8}{'NEW s':>8}{'NEW/OLD':>10}{'range':>12}{'cpu':>8}{'slower':>7}"
            f"{'output':>9}{'load':>6}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__[__doc__.index(
                                    "The matrix"):])
    p.add_argument("old", metavar="OLD", help="the tree before: a built checkout, or a git revision")
    p.add_argument("new", metavar="NEW", help="the tree after: a built checkout, or a git revision")
    p.add_argument("--size", choices=SIZES, default="small", help="data and default pairs (default small)")
    p.add_argument("--pairs", type=int, default=None, help="counted pairs a row (default: the size's)")
    p.add_argument("--warmup", type=int, default=None, help="uncounted runs of each side first (default: the size's)")
    p.add_argument("--rows", default=None, metavar="PATTERN",
                   help="only the rows matching these comma-separated shell patterns (h5md/rmsd/*,yiip/*); "
                        "!PATTERN leaves rows out ('!h5md/rdf/*')")
    p.add_argument("--workdir", default="demo-output/regress", help="data, trees, runs and logs (kept)")
    p.add_argument("--json", default=None, metavar="OUT", help="every row's figures as JSON")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --json file")
    p.add_argument("--keep-trees", action="store_true", help="keep the revisions' worktrees for the next run")
    p.add_argument("--timeout", type=float, default=900, help="seconds a run may take before it is killed")
    p.add_argument("--check", action="store_true", help="exit 1 when a row is marked SLOWER")
    p.add_argument("--list", action="store_true", help="print the rows and their commands; run nothing")
    args = p.parse_args(argv)
    from _script_output import check_script_output, write_script_json

    if args.json:
        check_script_output(PROG, args.json, args.overwrite)
    frames, n_parts, yiip_frames, pairs, warmup = SIZES[args.size]
    pairs = pairs if args.pairs is None else args.pairs
    warmup = warmup if args.warmup is None else args.warmup
    if pairs < 1 or warmup < 0:
        p.error("--pairs must be 1 or more, --warmup 0 or more")
    work = Path(args.workdir).resolve()
    trees = {"OLD": resolve("OLD", args.old, work), "NEW": resolve("NEW", args.new, work)}
    if args.list:
        rows = chosen(matrix(Data("TOP", ["PART1.xtc", "PART2.xtc"], "STORE.h5md", "YIIP.gro", "YIIP.h5md",
                                  "s3://bucket/STORE.h5md")), args.rows)
        for row in rows:
            print(f"{row.name}\n    trajscale {' '.join(map(_quote, row.argv(Path('OUT'))))}")
            for name, text in row.files.items():
                print(f"    OUT/{name}:\n" + "".join(f"      {ln}\n" for ln in text.format(out="OUT").splitlines()))
        return 0
    work.mkdir(parents=True, exist_ok=True)
    try:
        for tree in trees.values():
            build(tree)
            ready(tree)
        rows = chosen(matrix(Data("", [], "", "", "")), args.rows)   # which rows, before the data exist
        if not rows:
            p.error(f"--rows {args.rows}: no row matches (--list shows them)")
        data = make_data(work, args.size, trees["NEW"], rows)
        rows = chosen(matrix(data), args.rows)
        print(f"OLD: {trees['OLD'].name}\nNEW: {trees['NEW'].name}\n"
              f"AdK in water 47,681 atoms x {frames} frames (H5MD, and {n_parts} XTC parts); YiiP 43,480 atoms x "
              f"{yiip_frames} frames (H5MD); {os.cpu_count()} CPUs; load average {_load()} before; "
              f"{pairs} pair(s) a row after {warmup} warm-up run(s) of each side", flush=True)
        width = max(len(r.name) for r in rows) + 2
        print(header(width), flush=True)
        for row in rows:
            if row.needs == "s3" and data.url is None:
                row.status = "skipped: moto is not installed (pip install 'moto[server]' boto3)"
            else:
                measure(row, trees, work, data, pairs, warmup, args.timeout)
            print(line(row, width), flush=True)
    finally:
        stop_s3()
        if not args.keep_trees:
            for tree in trees.values():
                remove(tree)
    print(f"\nNEW/OLD: wall seconds, median of the pairs (range: lowest-highest pair); cpu: the same of CPU "
          f"seconds; slower: pairs where NEW took longer; output: the two sides' files; load average after "
          f"{_load()}")
    if args.json:
        write_script_json(PROG, args.json, {"old": trees["OLD"].name, "new": trees["NEW"].name, "size": args.size,
                                            "pairs": pairs, "warmup": warmup, "rows": [r.to_dict() for r in rows]},
                          args.overwrite)
    failed_new = [r for r in rows if r.status.startswith("NEW failed")]
    slower = [r for r in rows if r.mark == "SLOWER"]
    return 1 if failed_new or (args.check and slower) else 0


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _quote(arg: str) -> str:
    return f'"{arg}"' if (" " in arg or "*" in arg) else arg


if __name__ == "__main__":
    raise SystemExit(main())
