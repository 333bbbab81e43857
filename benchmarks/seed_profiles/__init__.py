"""The seeds' machines as profiles, and the model's predictions beside their published figures.

    python benchmarks/predict.py --seeds

Each seed's serial run becomes a synthetic serial report (its published per-frame read and compute
times, frames and bytes), each cluster a :class:`~trajscale.report.machine.Machine` (cores per node
as published; storage only where the paper states or implies it).  Each row says which published
numbers went into the inputs: a figure that went in is reproduced, not predicted.
"""

from __future__ import annotations

from trajscale.facts import LayoutFacts
from trajscale.report.machine import DEFAULTED, GIVEN, Machine
from trajscale.report.predict import fit, predict_model
from trajscale.report.runfacts import RunFacts
from trajscale.report.timing import RunReport, TaskTiming, summarize_workers

#: A rank's start on a cluster (interpreter, imports from a shared file system, MPI init): not
#: published by either seed; an assumption, printed as such.
CLUSTER_START_S = 1.0


def synthetic_report(frames: int, nbytes: int, t_io: float, t_compute: float, fixed: float, n_atoms: int):
    """A serial RunReport of one task with the given totals (seconds) and ``fixed`` seconds of topology."""
    task = TaskTiming(task=0, start=0, stop=frames, worker="serial", t_io=t_io, t_compute=t_compute,
                      bytes_read=nbytes, t_init_traj=0.0)
    extras = {"serial": {"t_init_top": fixed, "t_start": 0.0}}
    phases = dict.fromkeys(("imports", "mpi_init", "topology", "prepare", "pool_start", "tasks", "reduce", "write"),
                           0.0)
    phases.update(topology=fixed, tasks=t_io + t_compute)
    return RunReport(analysis="rmsd", executor="serial", n_workers=1, n_frames=frames, n_atoms=n_atoms,
                     source=LayoutFacts(format="h5md", path="seed.h5md", chunks=(1, n_atoms, 3)),
                     t_total=fixed + t_io + t_compute, tasks=[task], workers=summarize_workers([task], extras),
                     meta=RunFacts(n_tasks=1),
                     process={"t_wall": sum(phases.values()), "phases": phases, "origin": "process start"})


def _machine(name: str, nodes: int, cores: int, storage_gbps: float | None = None) -> Machine:
    origin = {"name": GIVEN, "nodes": GIVEN, "cores_per_node": GIVEN, "start_s": DEFAULTED}
    if storage_gbps:
        origin["storage_gbps"] = GIVEN
    return Machine(name=name, nodes=nodes, cores_per_node=cores, storage_gbps=storage_gbps,
                   start_s=(("mpi", CLUSTER_START_S),), origin=tuple(origin.items()))


GIB = 2**30
#: Seed 000 (Jakupovic & Beckstein, SciPy 2021): YiiP, 90,100 frames, 113 GiB, RMSD of the CA atoms on
#: ASU Agave (28 cores/node, BeeGFS).  Serial baseline 4,623 s (auto-chunked file); the re-chunked file's
#: serial I/O "on the order of 10x" faster; 47 s at 112 cores.  Compute per frame is not published: 0.2 ms
#: (RMSD of 214 CA atoms) is assumed.
SEED_000 = {"frames": 90_100, "nbytes": 113 * GIB, "t_io": 4623 / 10, "t_compute": 0.2e-3 * 90_100, "fixed": 1.0,
            "n_atoms": 214, "ns": [1, 28, 56, 112], "nodes": 4, "cores": 28}
#: Seed 001 (Khoshlessan et al. 2020): 2,512,200 frames of 146 CA atoms (30 GB), t_I/O ~ 0.3 ms a frame
#: serially (about 40 MB/s for one process), R_comp/IO = 0.3 for one RMSD (0.09 ms a frame), SDSC Comet
#: (24 cores/node, Lustre), ~300x on 384 cores with MPI-IO HDF5.
SEED_001 = {"frames": 2_512_200, "nbytes": 2_512_200 * 146 * 12, "t_io": 2_512_200 * 0.3e-3,
            "t_compute": 2_512_200 * 0.09e-3, "fixed": 1.0, "n_atoms": 146, "ns": [1, 24, 96, 192, 384],
            "nodes": 16, "cores": 24}


def _table(title: str, p: dict, machine: Machine, published: dict[int, str]) -> list[str]:
    rep = synthetic_report(p["frames"], p["nbytes"], p["t_io"], p["t_compute"], p["fixed"], p["n_atoms"])
    model = fit(rep, "mpi", ran_on=machine)
    preds = predict_model(model, p["ns"], machine)
    out = [title, "", "| N | predicted wall (s) | range (s) | S(N) | E(N) | limit | published |",
           "|---:|---:|---|---:|---:|---|---|"]
    for q in preds:
        out.append(f"| {q.n} | {q.t_wall:.4g} | {q.t_low:.4g}-{q.t_high:.4g} | {q.speedup:.3g} | "
                   f"{q.efficiency:.2f} | {q.limit} | {published.get(q.n, '')} |")
    return [*out, ""]


def seed_tables() -> str:
    out = []
    agave = _machine("ASU Agave (seed 000)", 4, 28)
    out += _table("seed 000, storage not published (no ceiling). Inputs: 4,623 s serial baseline / 10 "
                  "(the re-chunked file's serial I/O, published as ~10x faster), 90,100 frames, 113 GiB; "
                  "compute 0.2 ms/frame assumed; 28 cores/node.", SEED_000, agave,
                  {1: "~462 s (4,623 s / ~10)", 112: "47 s"})
    ceiling = SEED_000["nbytes"] / 1e9 / 47.0
    out += _table(f"seed 000 with a storage ceiling of {ceiling:.3g} GB/s: 113 GiB over the published 47 s, so "
                  "the 112-core row is fitted, not predicted.", SEED_000,
                  _machine("ASU Agave (seed 000)", 4, 28, ceiling), {112: "47 s (went into the ceiling)"})
    comet = _machine("SDSC Comet (seed 001)", 16, 24)
    out += _table("seed 001. Inputs: 2,512,200 frames, 0.3 ms read and 0.09 ms compute a frame serially "
                  "(both published), 24 cores/node; no storage ceiling (none published for MPI-IO HDF5).",
                  SEED_001, comet, {384: "~300x"})
    return "\n".join(out)
