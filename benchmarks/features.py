"""φ/ψ features over an ensemble, a Markov model's streamed fit and a time-lagged epoch: whole processes.

    python benchmarks/features.py [--size smallest|small|medium|full] [--workdir features-bench] [--pairs 3]
                                  [--warmup 1] [-n 2] [--rows ...] [--json FILE [--overwrite]]
    python benchmarks/features.py --size smallest --workdir /tmp/bench      # what the test suite runs

The data (made once per size in ``--workdir``): ``files`` files in mdCATH's layout
(:func:`trajscale.testing.mdcath.write_mdcath`), every other one all of AdK (MDAnalysisTests' PSF/DCD:
214 residues, 3,341 atoms) and the others its residues 1-120 (1,878 atoms), so two residue counts; each
file ``members`` temperature/replica members of ``frames`` frames (a stretch of the DCD's 98 frames from a
seeded start, moved by a seeded noise of 0.05 Å), a box of 8 nm; and the same members again as one XTC
each (0.001 nm precision), with the PDB of their system as a shared topology, listed in one CSV catalog.

Paired rows: every side is a whole process (the interpreter's start, the imports, the work; nothing kept
between runs but the page cache, Python's byte-code cache (on whatever the shell says: :func:`env_for`) and
trajscale's topology cache in ``workdir/cache``). The sides of a
group (the XTC members: trajscale serial, MDTraj, MDAnalysis, trajscale processes; the mdCATH-shaped
files: trajscale serial, MDTraj + h5py, trajscale processes; the lagged epoch's two loaders) run in turn,
one round at a time, ``--pairs`` rounds after ``--warmup`` uncounted ones, so that a drift in the
machine's speed falls on every side. A row's ratio is the median over the rounds of the other side's
seconds over trajscale's (higher: trajscale faster; for processes, serial's over processes'), with its
range:

* ``phi/psi XTC vs MDTraj``: ``ts.run(ts.Ramachandran(select="protein", sincos=True), catalog,
  executor="serial")`` then ``r.arrays()``, against a loop over the catalog with MDTraj (each topology
  loaded once, ``md.load_xtc``, ``md.compute_phi``/``compute_psi``, sin and cos);
* ``phi/psi mdCATH vs MDTraj + h5py``: the same over the glob of mdCATH-shaped files, against a loop that
  opens each file with h5py, loads its PDB text with ``md.load_pdb`` and makes an ``md.Trajectory`` of each
  member's ``coords``;
* ``phi/psi XTC vs MDAnalysis``: against a loop of ``Universe(top, xtc)`` and MDAnalysis's
  ``Ramachandran(u.select_atoms("protein")).run()``, sin and cos of its angles;
* ``processes(n) vs serial``: trajscale on ``n`` processes against trajscale serial (XTC and mdCATH);
* ``distances XTC vs MDTraj``: ``ts.Distances(*PAIRS)`` (60 pairs: each CA of residues 1-60 with the CA 60
  residues on, minimum image) over the catalog, against a loop with MDTraj (each topology loaded and its
  pairs selected once, ``md.load_xtc``, ``md.compute_distances``, nm to Å);
* ``lagged epoch vs h5py per sample``: one shuffled epoch of time-lagged pairs (lag ``LAG`` frames, batch 32,
  workers 0) with ``LaggedEnsembleDataset`` + ``make_loader`` (blocks of 8), against a torch ``DataLoader``
  whose dataset opens ``h5py.File`` for every sample and reads its frames t and t + lag.

Every side's features are compared, member by member, to trajscale serial's (three checksums of each
member's array, each at most the largest difference of one value); the epochs' sums are compared.

Then, for trajscale alone:

* the per-member overhead of every registered analysis (but the user's own, ``per_frame`` and
  ``user_reduce``) when members share a topology: inside one fresh process, after a warm-up run of each,
  the best of three runs (one at the smallest size) over ``n_over`` members (2 frames of AdK each, one
  PDB) less the best over one, per member; and the preparation per distinct topology: a run over
  ``n_top`` members each with its own copy of the PDB less the same members sharing one, per member,
  trajscale's disk caches empty, then again in a fresh process with the caches holding those topologies
  (a later run's case; not at the smallest size). MDAnalysis is imported before the clock (a topology new
  to a process is parsed, or its cached parse loaded, through it: a cost once per process, not per
  topology); at the smallest size, without the warm-up runs;
* the peak RSS (:func:`tests.support.peak_rss.peak_rss`) of a TICA on φ/ψ sin/cos of the AdK members
  (one feature space) at two member counts (a fifth of the size's AdK files and all of them; one count at
  the smallest size): streamed (``stream_fit(TICA(lagtime=LAG, dim=2), FeatureStream(...))``) against
  deeptime's fit in memory (``TICA(...).fit(ts.run(...).arrays())``); the two models' covariances are
  compared (at the smallest size both fits run in one process, deeptime imported once, and no peak RSS is
  shown).

Sizes (files x members x frames; overhead members; distinct topologies; rounds): ``smallest`` 4 x 2 x 5,
2, 1, 1 without warm-up (the test suite's: its figures mean nothing); ``small`` 20 x 5 x 30, 100, 10, 3
after 1; ``medium`` the same files with 100 frames a member (an epoch of 9,800 lagged pairs: the loaders'
reads, not the processes' start, take most of its time), 100, 10, 3 after 1; ``full`` 200 x 25 x 30
(5,000 members: 2,500 of each system), 1,000, 50, 3 after 1 (about 6 GB of files, and the MDAnalysis loop
alone some minutes a round).

Targets (a 2-core machine): ≥ 3x MDTraj on XTC (φ/ψ and distances), ≥ 5x MDTraj on mdCATH-shaped files,
≥ 20x MDAnalysis, processes(2) ≥ 1.3x serial, the lagged epoch ≥ 5x, per-member overhead ≤ 5 ms, preparation ≤ 20 ms
per distinct topology, the streamed TICA's peak RSS ≤ 1.2x from the smaller count to the larger. They are
printed beside the figures; a figure that misses its target is marked ``MISSED``. MDTraj is a peer for
the benchmark only (``pip install -e .[bench]``): without it its rows say so.
"""

from __future__ import annotations

# A side's process imports what its side needs and no more (as a user's script would): the harness's own
# modules (argparse, subprocess, statistics, importlib.metadata, ...) are imported where the runner uses them.
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests.support (peak_rss), beside the benchmarks

PROG = Path(__file__).name
#: --size -> (files, members per file, frames per member, members for the overhead, distinct topologies,
#: pairs, warm-up pairs)
SIZES = {"smallest": (4, 2, 5, 2, 1, 1, 0), "small": (20, 5, 30, 100, 10, 3, 1),
         "medium": (20, 5, 100, 100, 10, 3, 1),
         "full": (200, 25, 30, 1000, 50, 3, 1)}
TEMPERATURES = ("320", "348", "379", "413", "450")
SYSTEMS = {"adk": "all", "prt": "resid 1-120"}
LAG = 2
BOX_NM = 8.0
ROWS = ("xtc-mdtraj", "h5-mdtraj", "xtc-mda", "xtc-processes", "h5-processes", "dist-mdtraj", "lagged-epoch",
        "overhead", "tica")
#: The distances row's pairs (both systems have residues 1-120): CA of residue i with CA of residue i + 60, as
#: trajscale and MDTraj select them.
PAIRS = ("name CA and resid 1-60", "name CA and resid 61-120")
PAIRS_MDTRAJ = ("name CA and resSeq 1 to 60", "name CA and resSeq 61 to 120")


# ----------------------------------------------------------------------------- the data

def data_folder(work: Path, n_files: int, n_members: int, n_frames: int) -> Path:
    return work / f"data-{n_files}x{n_members}x{n_frames}"


def make_data(work: Path, n_files: int, n_members: int, n_frames: int) -> Path:
    """The mdCATH-shaped files, the XTC members and their catalog (made once; ``catalog.csv`` last)."""
    folder = data_folder(work, n_files, n_members, n_frames)
    if (folder / "catalog.csv").exists():
        return folder
    import warnings

    import MDAnalysis as mda
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile
    from MDAnalysisTests.datafiles import DCD, PSF

    from trajscale.testing.mdcath import pdb_of, write_mdcath

    (folder / "xtc").mkdir(parents=True, exist_ok=True)
    (folder / "h5").mkdir(exist_ok=True)
    warnings.filterwarnings("ignore")
    u = mda.Universe(PSF, DCD)
    frames = u.trajectory.timeseries(order="fac")
    atoms = {name: u.select_atoms(sel) for name, sel in SYSTEMS.items()}
    tops = {}
    for name, ag in atoms.items():
        text = pdb_of(ag)
        (folder / f"{name}.pdb").write_text(text)
        tops[name] = text
    rng = np.random.default_rng(0)
    box = np.eye(3, dtype=np.float32) * BOX_NM
    lines = ["name,topology,trajectory,system,temperature,replica"]
    for i in range(n_files):
        system = "adk" if i % 2 == 0 else "prt"
        ag = atoms[system]
        domain = f"{i:03d}{system}A00"
        coords = {}
        for k in range(n_members):
            t, r = TEMPERATURES[k % 5], str(k // 5)
            start = int(rng.integers(0, len(frames)))
            x = frames[(start + np.arange(n_frames)) % len(frames)][:, ag.indices]
            x = (x + rng.normal(0, 0.05, x.shape)).astype(np.float32)
            coords[(t, r)] = x
            xtc = folder / "xtc" / f"{domain}_{t}_{r}.xtc"
            with XTCFile(str(xtc), "w") as f:
                for j, frame in enumerate(x):
                    f.write(frame / 10.0, box, j, float(j + 1) * 1000.0)
            lines.append(f"{domain}_{t}_{r},{folder / f'{system}.pdb'},{xtc},{system},{t},{r}")
        z = np.array([{"H": 1, "C": 6, "N": 7, "O": 8, "S": 16}.get(n[0], 0) for n in ag.names])
        info = {"resid": ag.resids.astype(np.int64), "resname": ag.resnames.astype("S"),
                "chain": np.full(ag.n_atoms, b"A"), "element": np.array([n[0] for n in ag.names], "S"), "z": z}
        write_mdcath(folder / "h5" / f"mdcath_dataset_{domain}.h5", domain, tops[system], coords, None, info,
                     (BOX_NM,) * 3)
    (folder / "catalog.csv").write_text("\n".join(lines) + "\n")
    return folder


def make_overhead_data(work: Path, n_over: int, n_top: int) -> Path:
    """Members of 2 AdK frames as XTC: ``n_over`` sharing one PDB (and a catalog of one of them), and
    ``n_top`` with a PDB each per analysis (so that every analysis meets topologies it never saw)."""
    import shutil

    from MDAnalysis.lib.formats.libmdaxdr import XTCFile
    from MDAnalysisTests.datafiles import DCD, PSF

    folder = work / f"overhead-{n_over}-{n_top}"
    if (folder / "done").exists():
        return folder
    import warnings

    import MDAnalysis as mda

    from trajscale.testing.mdcath import pdb_of

    warnings.filterwarnings("ignore")
    folder.mkdir(parents=True, exist_ok=True)
    u = mda.Universe(PSF, DCD)
    (folder / "top.pdb").write_text(pdb_of(u.atoms))
    box = np.eye(3, dtype=np.float32) * BOX_NM
    frames = u.trajectory.timeseries(order="fac")
    n = max(n_over, n_top)
    for i in range(n):
        with XTCFile(str(folder / f"m{i:05d}.xtc"), "w") as f:
            for j in range(2):
                f.write(frames[(i + j) % len(frames)] / 10.0, box, j, float(j))

    def catalog(name: str, count: int, top) -> None:
        rows = ["name,topology,trajectory"] + [f"m{i:05d},{top(i)},{folder / f'm{i:05d}.xtc'}" for i in range(count)]
        (folder / name).write_text("\n".join(rows) + "\n")

    shared = folder / "top.pdb"
    catalog("one.csv", 1, lambda i: shared)
    catalog("many.csv", n_over, lambda i: shared)
    catalog("shared.csv", n_top, lambda i: shared)
    for name in OVERHEAD_ANALYSES:
        for i in range(n_top):
            shutil.copyfile(shared, folder / f"top-{name}-{i}.pdb")
        catalog(f"distinct-{name}.csv", n_top, lambda i, name=name: folder / f"top-{name}-{i}.pdb")
    (folder / "done").write_text("")
    return folder


# ----------------------------------------------------------------------------- the sides (one process each)

def checksums(x: np.ndarray) -> list[float]:
    """Three sums of a (frames, features) array: plain, weighted by the column, weighted by the frame."""
    x = np.asarray(x, np.float64)
    return [float(x.sum()), float((x * np.arange(1, x.shape[1] + 1)).sum()),
            float((x * np.arange(1, x.shape[0] + 1)[:, None]).sum()), *x.shape]


def sincos(phi: np.ndarray, psi: np.ndarray) -> np.ndarray:
    """Residue-major [sin φ, cos φ, sin ψ, cos ψ] of (frames, residues) angles in radians."""
    return np.stack([np.sin(phi), np.cos(phi), np.sin(psi), np.cos(psi)], axis=2).reshape(len(phi), -1)


def side_trajscale(source: str, executor: str, workers: int, features: str = "phipsi") -> dict:
    import trajscale as ts

    started()
    analysis = ts.Distances(*PAIRS) if features == "distances" else ts.Ramachandran(select="protein", sincos=True)
    r = ts.run(analysis, source, executor=executor, n_workers=workers)
    assert not r.refused, r.refused
    return {name: checksums(a) for name, a in zip(r.names, r.arrays(), strict=True)}


def side_mdtraj_xtc(catalog: str) -> dict:
    import csv

    import mdtraj as md

    started()
    tops, out = {}, {}
    for row in csv.DictReader(open(catalog)):
        top = tops.get(row["topology"])
        if top is None:
            top = tops[row["topology"]] = md.load_topology(row["topology"])
        t = md.load_xtc(row["trajectory"], top=top)
        # φ of residues 2..N and ψ of 1..N-1: the residues with both, as MDAnalysis's Ramachandran keeps
        phi, psi = md.compute_phi(t)[1][:, :-1], md.compute_psi(t)[1][:, 1:]
        out[row["name"]] = checksums(sincos(phi, psi))
    return out


def side_mdtraj_distances(catalog: str) -> dict:
    import csv

    import mdtraj as md

    started()
    tops, out = {}, {}
    for row in csv.DictReader(open(catalog)):
        got = tops.get(row["topology"])
        if got is None:
            top = md.load_topology(row["topology"])
            got = tops[row["topology"]] = (top, np.stack([top.select(s) for s in PAIRS_MDTRAJ], axis=1))
        top, pairs = got
        t = md.load_xtc(row["trajectory"], top=top)
        out[row["name"]] = checksums(10.0 * md.compute_distances(t, pairs))   # (nm -> Å; minimum image)
    return out


def side_mdtraj_h5(pattern: str) -> dict:
    import glob
    import tempfile

    import h5py
    import mdtraj as md

    started()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted(glob.glob(pattern)):
            with h5py.File(path, "r") as f:
                domain = next(iter(f))
                pdb = os.path.join(tmp, "top.pdb")
                with open(pdb, "wb") as fh:
                    fh.write(f[domain]["pdbProteinAtoms"][()])
                top = md.load_pdb(pdb).topology
                for temp in f[domain]:
                    if not isinstance(f[domain][temp], h5py.Group):
                        continue
                    for rep in f[domain][temp]:
                        xyz = f[domain][temp][rep]["coords"][:] / 10.0   # Å -> nm
                        t = md.Trajectory(xyz, top)
                        phi, psi = md.compute_phi(t)[1][:, :-1], md.compute_psi(t)[1][:, 1:]
                        out[f"{domain}/{temp}/{rep}"] = checksums(sincos(phi, psi))
    return out


def side_mdanalysis_xtc(catalog: str) -> dict:
    import csv
    import warnings

    import MDAnalysis as mda
    from MDAnalysis.analysis.dihedrals import Ramachandran

    warnings.filterwarnings("ignore")
    started()
    out = {}
    for row in csv.DictReader(open(catalog)):
        u = mda.Universe(row["topology"], row["trajectory"])
        a = np.deg2rad(Ramachandran(u.select_atoms("protein")).run().results.angles)
        out[row["name"]] = checksums(sincos(a[:, :, 0], a[:, :, 1]))
    return out


class H5PerSample:
    """Time-lagged pairs as a plain loader reads them: an index of (file, member, t), and for every sample
    ``h5py.File`` opened and the frames t and t + lag read from ``coords``."""

    def __init__(self, files: list[str], lag: int) -> None:
        from mdcath_epoch import member_frames  # (a sibling script: the same per-sample index)

        self.lag = lag
        self.idx = [(path, f"{dom}/{t}/{r}", k) for path, dom, t, r, n in member_frames(files) for k in range(n - lag)]

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, i: int):
        import h5py
        import torch

        path, group, k = self.idx[i]
        with h5py.File(path, "r") as f:
            coords = f[group]["coords"]
            x, y = coords[k], coords[k + self.lag]
        return {"x": torch.from_numpy(x), "y": torch.from_numpy(y)}


def concat_pairs(samples: list[dict]) -> dict:
    import torch

    return {"x": torch.cat([s["x"] for s in samples]), "y": torch.cat([s["y"] for s in samples]),
            "n_atoms": torch.tensor([len(s["x"]) for s in samples])}


def side_epoch(kind: str, pattern: str) -> dict:
    import glob

    import h5py  # noqa: F401
    import torch
    from torch.utils.data import DataLoader, RandomSampler

    if kind == "trajscale":
        from trajscale.ml import LaggedEnsembleDataset, make_loader

    started()
    if kind == "trajscale":

        data = LaggedEnsembleDataset(pattern, LAG, max_open=32)
        loader = make_loader(data, batch_size=32, block=8, seed=0, num_workers=0)
    else:
        data = H5PerSample(sorted(glob.glob(pattern)), LAG)
        loader = DataLoader(data, batch_size=32, sampler=RandomSampler(data, generator=torch.Generator()
                                                                      .manual_seed(0)), collate_fn=concat_pairs)
    sums, n = np.zeros(2), 0
    for b in loader:
        sums += [float(b["x"].double().sum()), float(b["y"].double().sum())]
        n += len(b["n_atoms"])
    return {"samples": n, "sums": sums.tolist()}


#: name -> the analysis as the overhead rows make it (AdK, a box of 8 nm)
OVERHEAD_ANALYSES = {
    "rmsd": "ts.RMSD(select='name CA')",
    "rmsf": "ts.RMSF(select='name CA')",
    "rgyr": "ts.RadiusOfGyration(select='protein')",
    "average": "ts.AverageStructure(select='name CA')",
    "rdf": "ts.RDF('name CA', 'name CA', range=(0.0, 15.0))",
    "contacts": "ts.Contacts(select=('name CA and resid 1-100', 'name CA and resid 101-214'), radius=8.0)",
    "distances": "ts.Distances('name CA and resid 1-10', 'name CA and resid 100-109')",
    "com_distance": "ts.CentreOfMassDistance('resid 1-50', 'resid 150-214')",
    "ramachandran": "ts.Ramachandran(select='protein', sincos=True)",
    "residue_contacts": "ts.ResidueContacts(select='name CA')",
}


def side_overhead(folder: str, n_over: int, n_top: int, repeat: int, phase: str, warm: bool = True) -> dict:
    """Per analysis: the per-member overhead (``phase`` "all") and the preparation per distinct topology, in
    this process (the disk caches as the caller left them); ``warm``: a run of each analysis first, uncounted."""
    import MDAnalysis  # noqa: F401  (a topology new to the process is parsed by it: its import once, not timed)

    import trajscale as ts

    folder_ = Path(folder)

    def best(analysis, catalog: Path, repeat: int = repeat) -> float:
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            r = ts.run(analysis, str(catalog), executor="serial")
            times.append(time.perf_counter() - t0)
            assert not r.refused, r.refused
        return min(times)

    out = {}
    for name, expr in OVERHEAD_ANALYSES.items():
        analysis = eval(expr, {"ts": ts})
        if warm:
            ts.run(analysis, str(folder_ / "one.csv"), executor="serial")   # warm-up: imports, the topology
        o = {}
        if phase == "all":
            t1, tn = best(analysis, folder_ / "one.csv"), best(analysis, folder_ / "many.csv")
            o = {"per_member_ms": 1e3 * (tn - t1) / max(1, n_over - 1), "one_s": t1, "many_s": tn}
        t_distinct = best(analysis, folder_ / f"distinct-{name}.csv", repeat=1)   # each topology new here
        t_shared = best(analysis, folder_ / "shared.csv")
        out[name] = o | {"per_topology_ms": 1e3 * (t_distinct - t_shared) / n_top}
    return out


def side_tica(kind: str, pattern: str) -> dict:
    """The TICA ``kind`` ("stream", "memory", or "both" in this one process) fits: its ``cov_00`` (each's)."""
    from deeptime.decomposition import TICA

    import trajscale as ts

    analysis = ts.Ramachandran(select="protein", sincos=True)
    out = {}
    if kind in ("stream", "both"):
        from trajscale.ml import FeatureStream, stream_fit

        out["stream"] = stream_fit(TICA(lagtime=LAG, dim=2), FeatureStream(analysis, pattern, executor="serial"))
    if kind in ("memory", "both"):
        out["memory"] = TICA(lagtime=LAG, dim=2).fit(ts.run(analysis, pattern, executor="serial").arrays())
    covs = {k: np.asarray(est.fetch_model().cov_00) for k, est in out.items()}
    return {k: {"cov_00": c.ravel()[:4096].tolist(), "n": int(c.shape[0])} for k, c in covs.items()}


_T0 = [0.0]


def started() -> None:
    """The side's imports are done: its work starts here."""
    _T0[0] = time.perf_counter()


def run_side(args) -> dict:
    """The side's output, and ``work_s``: its seconds after its imports (trajscale imports lazily, inside)."""
    t0 = _T0[0] = time.perf_counter()
    out = _run_side(args)
    return {"out": out, "work_s": time.perf_counter() - max(t0, _T0[0])}


def _run_side(args) -> dict:
    a = args.side_args
    if args.side == "trajscale":
        return side_trajscale(a[0], a[1], int(a[2]), *a[3:])
    if args.side == "mdtraj-xtc":
        return side_mdtraj_xtc(a[0])
    if args.side == "mdtraj-distances":
        return side_mdtraj_distances(a[0])
    if args.side == "mdtraj-h5":
        return side_mdtraj_h5(a[0])
    if args.side == "mdanalysis-xtc":
        return side_mdanalysis_xtc(a[0])
    if args.side == "epoch":
        return side_epoch(a[0], a[1])
    if args.side == "overhead":
        return side_overhead(a[0], int(a[1]), int(a[2]), int(a[3]), a[4], a[5] == "1")
    if args.side == "tica":
        return side_tica(a[0], a[1])
    raise SystemExit(f"{PROG}: no side {args.side!r}")


# ----------------------------------------------------------------------------- the runner

def env_for(work: Path, cache: Path | None = None) -> dict:
    """A side's environment: one thread for the numeric libraries, and Python's byte-code cache on, as an
    installed package has it (a shell's ``PYTHONDONTWRITEBYTECODE`` would make trajscale, run from its source
    tree, compile its modules in every process, while its peers' were compiled when they were installed)."""
    env = dict(os.environ, TRAJSCALE_CACHE_DIR=str(cache or work / "cache"), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def side_cmd(side: str, *args) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--side", side, "--side-args", *map(str, args)]


def timed(cmd: list[str], work: Path, env: dict | None = None) -> tuple[float, dict]:
    """A whole process: its wall seconds from just before its start to just after it is reaped, and the JSON
    its last line prints."""
    import subprocess

    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env or env_for(work), cwd=work)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{PROG}: {' '.join(cmd[2:6])} ... exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return wall, json.loads(proc.stdout.strip().splitlines()[-1])


def largest_difference(ref: dict, other: dict) -> float:
    """The largest checksum difference over the members, each checksum divided by the weights it summed
    (so at most the largest difference of one value); inf where members or shapes differ."""
    if sorted(ref) != sorted(other):
        return float("inf")
    worst = 0.0
    for name, (s0, s1, s2, frames, features) in ref.items():
        o = other[name]
        if o[3:] != [frames, features]:
            return float("inf")
        scale = (frames * features, frames * features * (features + 1) / 2, features * frames * (frames + 1) / 2)
        worst = max(worst, *(abs(a - b) / w for a, b, w in zip((s0, s1, s2), o[:3], scale, strict=True)))
    return worst


def rounds(label: str, sides: dict[str, list[str]], work: Path, pairs: int, warmup: int) -> dict:
    """Run every side of a group once per round, in turn, ``warmup + pairs`` rounds; each side's counted
    wall seconds and its last output."""
    times: dict[str, list[float]] = {k: [] for k in sides}
    work_s: dict[str, list[float]] = {k: [] for k in sides}
    outs: dict[str, dict] = {}
    for k in range(warmup + pairs):
        print(f"  {label}: round {k + 1} of {warmup + pairs}", file=sys.stderr, flush=True)
        for key, cmd in sides.items():
            wall, got = timed(cmd, work)
            outs[key] = got["out"]
            if k >= warmup:
                times[key].append(wall)
                work_s[key].append(got["work_s"])
    return {"times": times, "work": work_s, "outs": outs}


def row_of(label: str, group: dict, ours: str, theirs: str, target: float | None, diff: float) -> dict:
    """A row: ``theirs``'s seconds over ``ours``'s, round by round (each round ran both, in turn)."""
    import statistics

    t_ours, t_theirs = group["times"][ours], group["times"][theirs]
    ratios = [b / a for a, b in zip(t_ours, t_theirs, strict=True)]
    w_ours, w_theirs = group["work"][ours], group["work"][theirs]
    return {"row": label, "trajscale_s": statistics.median(t_ours), "other_s": statistics.median(t_theirs),
            "ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios), "target": target,
            "trajscale_work_s": statistics.median(w_ours), "other_work_s": statistics.median(w_theirs),
            "work_ratio": statistics.median(b / a for a, b in zip(w_ours, w_theirs, strict=True)),
            "max_diff": diff, "pairs": len(ratios), "load": os.getloadavg()[0]}


def mark(value: float, target: float | None, higher: bool = True) -> str:
    if target is None:
        return ""
    return "met" if (value >= target if higher else value <= target) else "MISSED"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--side"]:   # one side, in this process: its figures as one JSON line (see the imports)
        from types import SimpleNamespace

        rest = argv[2:]
        print(json.dumps(run_side(SimpleNamespace(side=argv[1], side_args=rest[1:] if rest[:1] == ["--side-args"]
                                                  else rest))))
        return 0
    import argparse
    import glob
    import importlib.metadata
    import shutil

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=list(SIZES), default="small")
    p.add_argument("--workdir", default="features-bench", help="where the data are made (and kept)")
    p.add_argument("--pairs", type=int, help="counted pairs per row (default: the size's)")
    p.add_argument("--warmup", type=int, help="uncounted pairs per row first (default: the size's)")
    p.add_argument("-n", "--n-workers", type=int, default=2)
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of {','.join(ROWS)}")
    p.add_argument("--json", default=None, help="also write the rows here")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --json file")
    args = p.parse_args(argv)
    from _script_output import check_script_output, write_script_json

    if args.json:   # refused before the data are made, not after the measurements
        check_script_output(PROG, args.json, args.overwrite)
    rows = [r for r in args.rows.split(",") if r]
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        raise SystemExit(f"{PROG}: no row {', '.join(unknown)} (rows: {', '.join(ROWS)})")
    n_files, n_members, n_frames, n_over, n_top, pairs, warmup = SIZES[args.size]
    pairs = args.pairs if args.pairs is not None else pairs
    warmup = args.warmup if args.warmup is not None else warmup
    if pairs < 1 or warmup < 0:
        raise SystemExit(f"{PROG}: --pairs must be >= 1 and --warmup >= 0")
    n = args.n_workers
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    data = make_data(work, n_files, n_members, n_frames)
    catalog, h5 = str(data / "catalog.csv"), str(data / "h5" / "mdcath_dataset_*.h5")
    # (asked of the installation: importing MDTraj here would cost this process a second for a version string)
    try:
        no_mdtraj, mdtraj_version = None, importlib.metadata.version("mdtraj")
    except importlib.metadata.PackageNotFoundError:
        no_mdtraj, mdtraj_version = "skipped: MDTraj is not installed (pip install -e .[bench])", None
    members = n_files * n_members
    print(f"{n_files} mdCATH-shaped files x {n_members} members x {n_frames} frames ({members} members: AdK, 214 "
          f"residues, and its residues 1-120), the same as {members} XTC files with 2 PDB topologies; "
          f"{os.cpu_count()} CPUs; load average before {' '.join(f'{x:.2f}' for x in load_before)}; "
          f"median of {pairs} rounds after {warmup} warm-up; MDTraj {mdtraj_version or 'absent'}")
    result: dict = {"size": args.size, "files": n_files, "members": members, "frames": n_frames,
                    "load_before": list(load_before), "rows": [], "overhead": {}, "tica": []}

    table = []

    def add(row: dict) -> None:
        result["rows"].append(row | {"status": "measured"})
        table.append(row_line(row))

    def skipped(label: str, reason: str) -> None:
        result["rows"].append({"row": label, "status": reason})
        table.append(f"{label:<44}{reason}")

    # Each group runs its sides in turn, trajscale serial first, a round at a time: every row's two sides
    # ran next to each other in every round.
    for kind, source in (("xtc", catalog), ("h5", h5)):
        label = {"xtc": "phi/psi XTC", "h5": "phi/psi mdCATH"}[kind]
        peers = {"xtc-mdtraj": ("mdtraj-xtc", f"{label}: serial vs MDTraj loop", 3.0, no_mdtraj),
                 "h5-mdtraj": ("mdtraj-h5", f"{label}: serial vs MDTraj + h5py", 5.0, no_mdtraj),
                 "xtc-mda": ("mdanalysis-xtc", f"{label}: serial vs MDAnalysis loop", 20.0, None)}
        wanted = [k for k in peers if k.startswith(kind) and k in rows]
        sides = {"serial": side_cmd("trajscale", source, "serial", 1)}
        for key in wanted:
            side, row_label, _, skip = peers[key]
            if skip:
                skipped(row_label, skip)
            else:
                sides[key] = side_cmd(side, source)
        if f"{kind}-processes" in rows:
            sides["processes"] = side_cmd("trajscale", source, "processes", n)
        if len(sides) == 1:
            continue
        group = rounds(label, sides, work, pairs, warmup)
        ref = group["outs"]["serial"]
        for key in sides:
            if key == "serial":
                continue
            diff = largest_difference(ref, group["outs"][key])
            if key == "processes":
                add(row_of(f"{label}: processes({n}) vs serial", group, "processes", "serial", 1.3, diff))
            else:
                add(row_of(peers[key][1], group, "serial", key, peers[key][2], diff))
    if "dist-mdtraj" in rows:
        label = "distances XTC: serial vs MDTraj loop"
        if no_mdtraj:
            skipped(label, no_mdtraj)
        else:
            group = rounds("distances XTC", {"serial": side_cmd("trajscale", catalog, "serial", 1, "distances"),
                                             "mdtraj": side_cmd("mdtraj-distances", catalog)}, work, pairs, warmup)
            add(row_of(label, group, "serial", "mdtraj", 3.0,
                       largest_difference(group["outs"]["serial"], group["outs"]["mdtraj"])))
    if "lagged-epoch" in rows:
        group = rounds("lagged epoch", {"trajscale": side_cmd("epoch", "trajscale", h5),
                                        "h5py": side_cmd("epoch", "h5py", h5)}, work, pairs, warmup)
        a, b = group["outs"]["trajscale"], group["outs"]["h5py"]
        same = a["samples"] == b["samples"] and np.allclose(a["sums"], b["sums"], rtol=1e-6)
        add(row_of(f"lagged epoch (lag {LAG}): vs h5py per sample", group, "trajscale", "h5py", 5.0,
                   0.0 if same else float("inf")))
    if table:
        print(f"\n{'row (whole processes)':<44}{'trajscale s':>12}{'other s':>10}{'ratio':>9}{'range':>14}"
              f"{'target':>8}{'':>8}{'work ratio':>12}{'max |diff|':>12}")
        print("\n".join(table))
        print("ratio: the other side's seconds / trajscale's (processes: serial / processes), median of the rounds; "
              "work ratio: the same of the seconds inside each process after its imports (trajscale imports "
              "lazily, inside its work); max |diff|: features against trajscale serial's (epochs: 0 where the "
              "sums agree)")

    if "overhead" in rows:
        folder = make_overhead_data(work, n_over, n_top)
        repeat = 1 if args.size == "smallest" else 3
        warm = "0" if args.size == "smallest" else "1"   # (a warm-up of each analysis: not at the smallest size)
        cache = work / f"cache-overhead-{time.monotonic_ns()}"   # empty: every distinct topology is new
        try:
            over = timed(side_cmd("overhead", folder, n_over, n_top, repeat, "all", warm), work,
                         env_for(work, cache))[1]["out"]
            # a fresh process again, trajscale's disk caches now holding those topologies (a later run's
            # case; not at the smallest size, the test suite's, where the figures mean nothing)
            again = {} if args.size == "smallest" else timed(
                side_cmd("overhead", folder, n_over, n_top, repeat, "topology", warm), work,
                env_for(work, cache))[1]["out"]
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        for name in over:
            over[name]["per_topology_cached_ms"] = again.get(name, {}).get("per_topology_ms")
        result["overhead"] = over
        print(f"\nper member: {n_over} members sharing one topology (AdK, 2 frames each) less one, serial, inside one "
              f"process, best of {repeat}; per topology: {n_top} members each with its own copy of the PDB less "
              "the same sharing one, trajscale's disk caches empty, then (a fresh process) holding them; "
              "MDAnalysis imported before the clock")
        print(f"{'analysis':<18}{'per member ms':>14}{'':>8}{'per topology ms':>17}{'':>8}{'cached ms':>11}"
              f"{'':>8}   targets: <= 5 ms, <= 20 ms")
        for name, o in over.items():
            print(f"{name:<18}{o['per_member_ms']:>14.2f}{mark(o['per_member_ms'], 5.0, False):>8}"
                  f"{o['per_topology_ms']:>17.1f}{mark(o['per_topology_ms'], 20.0, False):>8}"
                  + (f"{o['per_topology_cached_ms']:>11.1f}{mark(o['per_topology_cached_ms'], 20.0, False):>8}"
                     if o["per_topology_cached_ms"] is not None else f"{'n/a':>11}"))

    if "tica" in rows:
        from tests.support.peak_rss import peak_rss

        adk = sorted(glob.glob(str(data / "h5" / "mdcath_dataset_*adkA00.h5")))
        # the smallest size (the test suite's) measures one count: deeptime's import alone takes seconds
        counts = [len(adk)] if args.size == "smallest" else sorted({max(1, len(adk) // 5), len(adk)})
        print(f"\nTICA (lag {LAG}, dim 2) on phi/psi sin/cos of the AdK members, peak RSS of the whole process")
        print(f"{'members':>8}{'streamed MB':>13}{'in memory MB':>14}{'max |cov diff| / max |cov|':>28}")
        for count in counts:
            sub = work / f"tica-{count}"
            shutil.rmtree(sub, ignore_errors=True)
            sub.mkdir()
            for path in adk[:count]:
                (sub / Path(path).name).symlink_to(path)
            pattern = str(sub / "mdcath_dataset_*.h5")
            peaks, covs = {}, {}
            # the smallest size (the test suite's) fits both in one process, deeptime imported once: its
            # covariances are compared, its peak RSS (both fits' together) is not shown
            for kind in ("both",) if args.size == "smallest" else ("stream", "memory"):
                cmd = side_cmd("tica", kind, pattern)
                peak, done = peak_rss(cmd, env=env_for(work))
                if done.returncode != 0:
                    raise SystemExit(f"{PROG}: the {kind} TICA exited {done.returncode}:\n{done.stderr[-3000:]}")
                for k, fit in json.loads(done.stdout.strip().splitlines()[-1])["out"].items():
                    peaks[k] = peak / 2**20 if kind != "both" else None
                    covs[k] = np.asarray(fit["cov_00"])
            rel = float(np.abs(covs["stream"] - covs["memory"]).max() / np.abs(covs["memory"]).max())
            shutil.rmtree(sub, ignore_errors=True)
            result["tica"].append({"members": count * n_members, "stream_mb": peaks["stream"],
                                   "memory_mb": peaks["memory"], "cov_rel_diff": rel})
            shown = [f"{p:.0f}" if p is not None else "n/a" for p in (peaks["stream"], peaks["memory"])]
            print(f"{count * n_members:>8}{shown[0]:>13}{shown[1]:>14}{rel:>28.1e}")
    if len(result["tica"]) > 1:
        t = result["tica"]
        growth = t[-1]["stream_mb"] / t[0]["stream_mb"]
        print(f"streamed peak RSS, {t[-1]['members']} members / {t[0]['members']}: {growth:.2f}x (target <= 1.2: "
              f"{mark(growth, 1.2, False)}); in memory: {t[-1]['memory_mb'] / t[0]['memory_mb']:.2f}x")
    load_after = os.getloadavg()
    result["load_after"] = list(load_after)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in load_after)}")
    if args.json:
        write_script_json(PROG, args.json, result, args.overwrite)
    bad = [r["row"] for r in result["rows"] if r.get("status") == "measured" and not r["max_diff"] <= 1e-3]
    bad += [f"TICA at {t['members']}" for t in result["tica"] if not t["cov_rel_diff"] <= 1e-10]
    if bad:
        print(f"{PROG}: the sides disagree: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


def row_line(row: dict) -> str:
    target = "" if row["target"] is None else f">= {row['target']:g}"
    spread = f"{row['low']:.2f}-{row['high']:.2f}"
    return (f"{row['row']:<44}{row['trajscale_s']:>12.2f}{row['other_s']:>10.2f}{row['ratio']:>8.2f}x"
            f"{spread:>14}{target:>8}{mark(row['ratio'], row['target']):>8}"
            f"{row['work_ratio']:>11.2f}x{row['max_diff']:>12.1e}")


if __name__ == "__main__":
    raise SystemExit(main())
