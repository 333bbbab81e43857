"""phi/psi of mdCATH's members on the Hugging Face Hub: trajscale reading ``hf://`` in place against what users do
today, ``hf_hub_download`` of the whole files, then h5py and MDTraj.

    python benchmarks/hub.py [--size smallest|small|default] [--delay 0.02] [--repeat 3] [--workdir hub-bench]

Data: the size's files in mdCATH's layout (``benchmarks/mdcath_epoch.py``'s: domains of 60 to 214 residues cut
from AdK, each with its members' frames), published on the suite's Hub server (``tests/remote/hub_server.py``,
on 127.0.0.1) as ``bench/mdcath``, every answer of the Hub and its storage held back ``--delay`` seconds (a
round trip to the Hub). Each side is a whole process, as a user runs it:

* ``trajscale``: ``trajscale run ramachandran --ensemble "hf://datasets/bench/mdcath@main/data/*.h5" --sincos``
  (serial): the repository listed, each file's resolve URL asked once, the backbone's bytes fetched by range
  requests;
* ``download``: ``hf_hub_download`` of each file (into an empty cache: a first run), then each member's
  coordinates read with h5py and its phi/psi computed by MDTraj (``md.compute_phi``/``compute_psi``; by
  MDAnalysis's ``Ramachandran`` where MDTraj is not installed, said in the row's name).

The table gives each side's wall time (median of ``--repeat``), the bytes its process moved from the Hub's
storage (counted at the server), its requests to the Hub and its storage, and for trajscale the bytes its
analysis read (the report's) and the bytes moved over those.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests.remote.hub_server, beside the benchmarks

#: --size -> (files, members per file, frames per member)
SIZES = {"smallest": (2, 2, 10), "small": (4, 5, 100), "default": (8, 5, 450)}
REPO = "bench/mdcath"

DOWNLOAD = r"""
import io, json, os, sys, tempfile
import h5py, numpy as np
from huggingface_hub import HfApi, hf_hub_download
repo, cache = sys.argv[1], sys.argv[2]
try:
    import mdtraj as md
except ImportError:
    md = None
    import warnings
    import MDAnalysis as mda
    from MDAnalysis.analysis.dihedrals import Ramachandran
    warnings.simplefilter("ignore")
files = [f.path for f in HfApi().list_repo_tree(repo, repo_type="dataset", recursive=True, path_in_repo="data")
         if f.path.endswith(".h5")]
angles = 0
for name in files:
    local = hf_hub_download(repo, name, repo_type="dataset", cache_dir=cache)
    with h5py.File(local, "r") as f:
        domain = next(iter(f))
        pdb = f[domain]["pdbProteinAtoms"][()].decode()
        members = [(t, r) for t in f[domain] if t.isdigit() for r in f[domain][t]]
        with tempfile.NamedTemporaryFile("w", suffix=".pdb", delete=False) as fh:
            fh.write(pdb)
        for t, r in members:
            xyz = f[domain][t][r]["coords"][()]
            if md is not None:
                traj = md.Trajectory(xyz / 10.0, md.load_pdb(fh.name).topology)
                angles += md.compute_phi(traj)[1].size + md.compute_psi(traj)[1].size
            else:
                u = mda.Universe(fh.name)
                u.load_new(xyz, format=mda.coordinates.memory.MemoryReader)
                angles += Ramachandran(u.select_atoms("protein")).run().results.angles.size
        os.unlink(fh.name)
print(json.dumps({"angles": int(angles), "peer": "MDTraj" if md is not None else "MDAnalysis"}))
"""


def side(name: str, hub, workdir: Path) -> dict:
    """One side as a whole process: wall seconds, bytes from the storage, requests, and what it says."""
    env = {**os.environ, **hub.env(), "OMP_NUM_THREADS": "1", "TRAJSCALE_CACHE_DIR": tempfile.mkdtemp(dir=workdir)}
    moved, asked = hub.storage_bytes, hub.requests
    run = tempfile.mkdtemp(dir=workdir)
    if name == "trajscale":
        cmd = [sys.executable, "-m", "trajscale.cli.main", "-q", "run", "ramachandran", "--ensemble",
               f"hf://datasets/{REPO}@main/data/mdcath_dataset_*.h5", "--sincos", "--out", f"{run}/rama.parquet",
               "--report", f"{run}/report.json", "--results", f"{run}/results"]
    else:
        cmd = [sys.executable, "-c", DOWNLOAD, REPO, f"{run}/hf-cache"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=run)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
    out = {"wall_s": wall, "moved": hub.storage_bytes - moved, "requests": hub.requests - asked}
    if name == "trajscale":
        out["read"] = json.loads(Path(f"{run}/report.json").read_text())["ensemble"]["bytes_read"]
    else:
        out.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=SIZES, default="default")
    p.add_argument("--delay", type=float, default=0.02, help="seconds the Hub and its storage hold each answer")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", default="hub-bench")
    args = p.parse_args(argv)
    from mdcath_epoch import make_files

    from tests.remote.hub_server import HubServer

    n_files, n_members, n_frames = SIZES[args.size]
    workdir = Path(args.workdir).resolve()
    files = make_files(workdir, n_files, n_members, n_frames)
    size = sum(os.path.getsize(f) for f in files)
    with HubServer(delay=args.delay) as hub:
        hub.commit(REPO, {f"data/{Path(f).name}": f for f in files})
        print(f"{n_files} files x {n_members} members x {n_frames} frames, {size / 1e6:.1f} MB on the Hub; "
              f"{args.delay * 1e3:.0f} ms a request; load average {os.getloadavg()[0]:.2f}")
        print(f"{'side':<38}{'wall s':>8}{'range':>13}{'MB moved':>10}{'requests':>10}{'MB analysed':>13}"
              f"{'moved/analysed':>16}")
        for name in ("trajscale", "download"):
            runs = [side(name, hub, workdir) for _ in range(args.repeat)]
            wall = statistics.median(r["wall_s"] for r in runs)
            lo, hi = min(r["wall_s"] for r in runs), max(r["wall_s"] for r in runs)
            first = runs[0]
            label = ("trajscale hf:// (in place)" if name == "trajscale"
                     else f"hf_hub_download + h5py + {first['peer']}")
            read = f"{first['read'] / 1e6:>13.2f}{first['moved'] / first['read']:>15.2f}x" if "read" in first \
                else f"{'-':>13}{'-':>16}"
            print(f"{label:<38}{wall:>8.2f}{f'{lo:.2f}-{hi:.2f}':>13}{first['moved'] / 1e6:>10.2f}"
                  f"{first['requests']:>10}{read}")


if __name__ == "__main__":
    main()
