"""A PyTorch epoch over mdCATH-shaped files: trajscale's EnsembleDataset against a torchmd-net-style loader.

    python benchmarks/mdcath_epoch.py [--size smallest|small|default] [--files N] [--workers 0 2]
                                      [--repeat 3] [--max-open 32] [--workdir mdcath-bench]

Data: ``--files`` files in mdCATH's layout (``trajscale.testing.mdcath.write_mdcath``, as the builder writes
them: contiguous float32 ``coords`` and ``forces``, ``z``, ``numFrames``), each a domain cut from AdK
(MDAnalysisTests' PSF/DCD) to a different run of 60 to 214 residues (so atom counts differ, about 900 to
3,300 atoms, 2,140 on average as mdCATH's domains have about 2,160), each with the size's
temperature/replica members of its frames (the DCD's 98 frames in turn, moved by a seeded noise). The
default size is one of mdCATH's files several times over: 25 members (5 temperatures x 5 replicas) of 450
frames (mdCATH keeps one frame per ns of simulations up to 500 ns; its 3.3 TB over 5,398 files is about
610 MB a file), 11,250 samples a file. Made once into ``--workdir``.

Sides, each a whole process (``python this.py --side ...``: imports, dataset construction and the epoch, as
a training job pays them), page cache warm, batch ``--batch``, shuffled, forces and atomic numbers read with
the positions, every batch's tensors summed (the same sums on both sides are checked):

* ``trajscale``: ``EnsembleDataset`` over the glob with ``make_loader`` (``BlockBatchSampler``, blocks of
  ``--block`` frames): one read per run of a member's consecutive frames, at most ``--max-open`` files kept
  open (LRU; a file's members share it). mdCATH's 5,398 files are far more than any ``max_open``: there
  nearly every block opens its file again, as ``--max-open 1`` has it here;
* ``torchmd-net``: the loader of torchmd-net's ``MDCATH`` dataset: an index of (file, domain, temperature,
  replica, frame) built from the files' ``numFrames``, and for every sample ``h5py.File`` opened, ``z`` read,
  one frame of ``coords`` and ``forces`` read with ``read_direct``; torch's ``RandomSampler`` and a collation
  that concatenates the samples' atoms (as PyTorch Geometric batches them). Its files are local, as
  torchmd-net reads them once downloaded whole.

The table gives each side's whole-process seconds (median of ``--repeat``), the epoch alone, samples/s, and
the torchmd-net-style time over trajscale's.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: --size -> (files, members per file, frames per member)
SIZES = {"smallest": (3, 2, 8), "small": (50, 5, 40), "default": (4, 25, 450)}
TEMPERATURES = ("320", "348", "379", "413", "450")


def make_files(workdir: Path, n_files: int, n_members: int, n_frames: int) -> list[str]:
    """``n_files`` mdCATH-shaped files in ``workdir`` (kept: made once per size)."""
    import warnings

    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    from trajscale.testing.mdcath import pdb_of, write_mdcath

    workdir.mkdir(parents=True, exist_ok=True)
    paths = [workdir / f"mdcath_dataset_{i:03d}{n_members}x{n_frames}A00.h5" for i in range(n_files)]
    if all(p.exists() for p in paths):
        return [str(p) for p in paths]
    warnings.filterwarnings("ignore")
    u = mda.Universe(PSF, DCD)
    frames = u.trajectory.timeseries(order="fac")
    rng, cuts = np.random.default_rng(0), np.random.default_rng(1)
    for i, path in enumerate(paths):
        length = int(cuts.integers(60, 215))
        first = int(cuts.integers(1, 216 - length))
        atoms = u.select_atoms(f"resid {first}-{first + length - 1}")
        members = [(TEMPERATURES[k % 5], str(k // 5)) for k in range(n_members)]
        coords, forces = {}, {}
        for key in members:
            start = int(rng.integers(0, len(frames)))
            x = frames[(start + np.arange(n_frames)) % len(frames)][:, atoms.indices]
            coords[key] = (x + rng.normal(0, 0.05, x.shape)).astype(np.float32)
            forces[key] = rng.normal(0, 10, x.shape).astype(np.float32)
        info = {"z": np.array([{"H": 1, "C": 6, "N": 7, "O": 8, "S": 16}.get(n[0], 0) for n in atoms.names]),
                "resid": atoms.resids}
        write_mdcath(path, f"{i:03d}{n_members}x{n_frames}A00", pdb_of(atoms), coords, forces, info)
    return [str(p) for p in paths]


# ----------------------------------------------------------------------------- the torchmd-net-style side

def member_frames(files: list[str]) -> list[tuple[str, str, str, str, int]]:
    """``(file, domain, temperature, replica, numFrames)`` of every member of the mdCATH-shaped ``files``, as a
    plain h5py loader indexes them (its groups in h5py's order; benchmarks/features.py's per-sample loader too)."""
    import h5py

    out = []
    for path in files:
        with h5py.File(path, "r") as f:
            dom = next(iter(f))
            for t in f[dom]:
                if not isinstance(f[dom][t], h5py.Group):
                    continue
                out += [(path, dom, t, r, int(f[dom][t][r].attrs["numFrames"])) for r in f[dom][t]]
    return out


class TorchmdNetStyle:
    """torchmd-net's MDCATH access pattern: an index of every frame, and per sample a fresh ``h5py.File``,
    ``z`` and one frame of coords and forces by ``read_direct``."""

    def __init__(self, files: list[str]) -> None:
        self.idx = [(path, dom, t, r, k) for path, dom, t, r, n in member_frames(files) for k in range(n)]

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, i: int):
        import h5py
        import torch

        path, dom, t, r, k = self.idx[i]
        with h5py.File(path, "r") as f:
            z = f[dom]["z"][:]
            coords = np.zeros((z.shape[0], 3), np.float32)
            forces = np.zeros((z.shape[0], 3), np.float32)
            group = f[f"{dom}/{t}/{r}"]
            group["coords"].read_direct(coords, np.s_[k:k + 1])
            group["forces"].read_direct(forces, np.s_[k:k + 1])
        return {"z": torch.tensor(z, dtype=torch.long), "pos": torch.from_numpy(coords),
                "neg_dy": torch.from_numpy(forces)}


def concat_samples(samples: list[dict]) -> dict:
    """PyTorch Geometric's batching of graphs: the samples' atoms one after another, and their counts."""
    import torch

    return {"z": torch.cat([s["z"] for s in samples]), "pos": torch.cat([s["pos"] for s in samples]),
            "neg_dy": torch.cat([s["neg_dy"] for s in samples]),
            "n_atoms": torch.tensor([len(s["z"]) for s in samples])}


# ----------------------------------------------------------------------------- one side, in this process

def run_side(side: str, files_glob: str, workers: int, args, seed: int) -> dict:
    import torch
    from torch.utils.data import DataLoader, RandomSampler

    t0 = time.perf_counter()
    if side == "trajscale":
        from trajscale.ml import EnsembleDataset, make_loader

        data = EnsembleDataset(files_glob, fields=("position", "force"), atomic_numbers=True,
                               max_open=args.max_open)
        loader = make_loader(data, batch_size=args.batch, block=args.block, seed=seed, num_workers=workers,
                             multiprocessing_context="fork" if workers else None)
        keys = ("position", "force", "z")
    else:
        data = TorchmdNetStyle(sorted(glob.glob(files_glob)))
        loader = DataLoader(data, batch_size=args.batch, sampler=RandomSampler(data, generator=torch.Generator()
                                                                          .manual_seed(seed)),
                            num_workers=workers, collate_fn=concat_samples,
                            multiprocessing_context="fork" if workers else None)
        keys = ("pos", "neg_dy", "z")
    t1 = time.perf_counter()
    sums, samples = np.zeros(3), 0
    for b in loader:
        for i, k in enumerate(keys):
            sums[i] += float(b[k].double().sum())
        samples += len(b["n_atoms"])
    t2 = time.perf_counter()
    out = {"side": side, "workers": workers, "setup_s": t1 - t0, "epoch_s": t2 - t1, "samples": samples,
           "sums": sums.tolist()}
    if side == "trajscale" and not workers:
        out["opens"] = data.opens
    return out


def whole_process(side: str, files_glob: str, workers: int, args) -> dict:
    """One side as a whole process: its wall time from start to exit, and what it measured inside."""
    cmd = [sys.executable, __file__, "--side", side, "--glob", files_glob, "--workers", str(workers),
           "--batch", str(args.batch), "--block", str(args.block), "--max-open", str(args.max_open)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{side} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall_s"] = wall
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=SIZES, default="default")
    p.add_argument("--files", type=int, help="files (default: the size's)")
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--block", type=int, default=8)
    p.add_argument("--max-open", type=int, default=32, help="files trajscale keeps open (default 32)")
    p.add_argument("--workdir", default="mdcath-bench")
    p.add_argument("--side", help=argparse.SUPPRESS)
    p.add_argument("--glob", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.side:   # one side, in this process: its numbers as one JSON line
        print(json.dumps(run_side(args.side, args.glob, args.workers[0], args, seed=0)))
        return
    n_files, n_members, n_frames = SIZES[args.size]
    n_files = args.files or n_files
    files = make_files(Path(args.workdir), n_files, n_members, n_frames)
    files_glob = str(Path(args.workdir) / f"mdcath_dataset_*{n_members}x{n_frames}A00.h5")
    size = sum(os.path.getsize(f) for f in files)
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)   # page cache warm
    print(f"{n_files} files x {n_members} members x {n_frames} frames, {size / 1e6:.0f} MB; batch {args.batch}, "
          f"block {args.block}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'side':<12}{'workers':>8}{'whole s':>10}{'range':>14}{'epoch s':>10}{'samples/s':>11}")
    medians = {}
    for workers in args.workers:
        for side in ("torchmd-net", "trajscale"):
            runs = [whole_process(side, files_glob, workers, args) for _ in range(args.repeat)]
            wall = statistics.median(r["wall_s"] for r in runs)
            epoch = statistics.median(r["epoch_s"] for r in runs)
            medians[(side, workers)] = (wall, runs[0]["sums"], runs[0]["samples"])
            lo, hi = min(r["wall_s"] for r in runs), max(r["wall_s"] for r in runs)
            print(f"{side:<12}{workers:>8}{wall:>10.2f}{f'{lo:.2f}-{hi:.2f}':>14}{epoch:>10.2f}"
                  f"{runs[0]['samples'] / epoch:>11.0f}")
    for workers in args.workers:
        base, ours = medians[("torchmd-net", workers)], medians[("trajscale", workers)]
        # forces: torchmd-net's stay in kcal/mol/A, trajscale's come in kJ/(mol A)
        same = base[2] == ours[2] and np.allclose([base[1][0], base[1][1] * 4.184, base[1][2]], ours[1], rtol=1e-6)
        print(f"workers {workers}: torchmd-net-style / trajscale (whole processes) {base[0] / ours[0]:.2f}x; "
              f"same samples: {same}")


if __name__ == "__main__":
    main()
