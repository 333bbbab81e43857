"""Training-data loading (seed 003): NPZ per sample vs memory-mapped NPZ vs the packed HDF5 store.

    python benchmarks/ml_loading.py [--files 8] [--per-file 800] [--width 8691] [--full]
                                    [--workers 0 2] [--repeat 3] [--workdir ml-bench]

The seed's MuMMI dataset is 600 NPZ files x 8,000 samples x 8,691 float64; the
issue's scaled-down copy is 60 x 800 (3.3 GB, ``--full``). The default here is
8 x 800 (445 MB), small enough for a shared 2-core machine. Random float64
samples (key ``x``) are generated once into ``--workdir``, packed with
``trajscale.ml.pack`` (contiguous), and read for one epoch, batch 256, page
cache warm, by a torch DataLoader with 0 and 2 workers:

* ``npz-per-sample``: ``np.load(file)["x"][j]`` per sample (what a naive
  map-style Dataset does; timed on ``--slow-samples`` random samples only);
* ``npz-mmap``: the arrays inside the uncompressed NPZ files memory-mapped
  once per worker, ``arr[j]`` per sample (the best a user can do without us);
* ``h5-random``: ``H5Dataset`` under torch's own ``RandomSampler`` (uniformly
  shuffled samples, torch's collation);
* ``h5-block``: ``H5Dataset`` with ``BlockBatchSampler`` through
  ``make_loader`` (whole batches of 4 blocks of 64 samples, read in one gather);
* ``h5-block-cache``: the same, the store first copied to a node-local cache
  (``--cache-dir``, default /dev/shm) from ``--workdir``; the first epoch
  (with the copy) and the second are shown;
* ``frames``: ``FrameDataset`` over the demo trajectory (``--frames`` frames,
  all 47,681 atoms) with ``BlockBatchSampler`` against the raw slab-read rate
  of ``H5MDSource.read`` over the same file.

Rates are samples/s and GB/s; ``/cat`` is the GB/s over ``cat`` of the same
bytes (the NPZ files, or the store). On a shared, overloaded machine wall-clock
rates measure the load, so rows read in one process (0 workers, ``cat``) also
show GB per CPU second of that process, and the same ratio to ``cat``'s. Medians of ``--repeat`` epochs after a
warm-up epoch, workers persistent (as in training: their start-up is paid
once per run, not per epoch); the cache rows are single epochs of fresh loaders.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np


def make_npz(workdir: Path, n_files: int, per_file: int, width: int) -> list[str]:
    workdir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n_files):
        p = workdir / f"samples_{i:03d}_{per_file}x{width}.npz"
        if not p.exists():
            np.savez(p, x=rng.standard_normal((per_file, width)))
        paths.append(str(p))
    return paths


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cat_seconds(paths: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``cat paths > /dev/null``."""
    t0, c0 = time.perf_counter(), _children_cpu()
    subprocess.run(["cat", *paths], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0, _children_cpu() - c0


class NpzPerSample:
    """What a naive map-style Dataset does: open the file and load the array for each sample."""

    def __init__(self, paths, per_file):
        self.paths, self.per_file = paths, per_file

    def __len__(self):
        return len(self.paths) * self.per_file

    def __getitem__(self, i):
        f, j = divmod(i, self.per_file)
        with np.load(self.paths[f]) as z:
            return z["x"][j]


def _npz_member_offset(path: str, member: str = "x.npy") -> tuple[int, tuple, np.dtype]:
    """Byte offset, shape and dtype of an uncompressed NPZ member's array data."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
        assert info.compress_type == zipfile.ZIP_STORED
    with open(path, "rb") as fh:
        fh.seek(info.header_offset + 26)
        name_len, extra_len = np.frombuffer(fh.read(4), "<u2")
        fh.seek(info.header_offset + 30 + int(name_len) + int(extra_len))
        fmt = np.lib.format
        read = fmt.read_array_header_1_0 if fmt.read_magic(fh) == (1, 0) else fmt.read_array_header_2_0
        shape, _, dtype = read(fh)
        return fh.tell(), shape, dtype


class NpzMmap:
    """The arrays inside uncompressed NPZ files, memory-mapped once per process."""

    def __init__(self, paths, per_file):
        self.paths, self.per_file = paths, per_file
        self._maps, self._pid = None, None

    def __len__(self):
        return len(self.paths) * self.per_file

    def __getitem__(self, i):
        if self._pid != os.getpid():
            self._maps = []
            for p in self.paths:
                off, shape, dtype = _npz_member_offset(p)
                self._maps.append(np.memmap(p, dtype=dtype, mode="r", offset=off, shape=shape))
            self._pid = os.getpid()
        f, j = divmod(i, self.per_file)
        return np.array(self._maps[f][j])

    def __getstate__(self):
        return {**self.__dict__, "_maps": None, "_pid": None}


def epoch_seconds(loader) -> tuple[float, int, float]:
    """(wall seconds, samples, CPU seconds of this process) of one epoch."""
    n = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for batch in loader:
        x = next(iter(batch.values())) if isinstance(batch, dict) else batch
        n += x.shape[0]
    return time.perf_counter() - t0, n, time.process_time() - c0


def median_rate(make_loader_fn, repeat: int, warm_up: bool = True) -> tuple[float, float]:
    """Median samples/s and samples per CPU second over ``repeat`` epochs after a warm-up epoch.

    Workers persist, as in training. The CPU rate counts this process only, so
    it is the loader's cost with 0 workers (shown only then).
    """
    loader = make_loader_fn()
    if warm_up:
        epoch_seconds(loader)
    rates, cpu_rates = [], []
    for _ in range(repeat):
        dt, n, cpu = epoch_seconds(loader)
        rates.append(n / dt)
        cpu_rates.append(n / max(cpu, 1e-9))
    return statistics.median(rates), statistics.median(cpu_rates)


def frames_rows(args, repeat: int) -> list[tuple]:
    from trajscale.demo import build_demo_file
    from trajscale.ml import FrameDataset, make_loader
    from trajscale.sources import H5MDSource

    tpr, h5 = build_demo_file(args.workdir, args.frames, progress=False)
    subprocess.run(["cat", h5], stdout=subprocess.DEVNULL, check=True)
    fbytes = 0
    rows = []
    for reuse in (True, False):
        with H5MDSource(h5) as src:
            src.reuse_buffers = reuse
            n, na = src.n_frames, src.n_atoms
            block = 16
            fbytes = na * 12
            times, cpus = [], []
            for _ in range(repeat):
                t0, c0 = time.perf_counter(), time.process_time()
                for a in range(0, n, block):
                    src.read(a, min(n, a + block))
                times.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
        rate, cpu = n / statistics.median(times), n / statistics.median(cpus)
        if reuse:
            raw_rate, raw_cpu = rate, cpu
        rows.append((f"frames: H5MDSource.read slabs of 16, {'one reused buffer' if reuse else 'fresh arrays'}",
                     0, rate, rate * fbytes / 1e9, rate / raw_rate, cpu * fbytes / 1e9, cpu / raw_cpu))
    ds = FrameDataset(tpr, h5, select="all")
    for w in args.workers:
        loader = functools.partial(make_loader, ds, batch_size=block, block=block, seed=1, num_workers=w,
                                   persistent_workers=w > 0, multiprocessing_context="fork" if w else None)
        rate, cpu_rate = median_rate(loader, repeat)
        rows.append(("frames: FrameDataset + BlockBatchSampler (batch = block = 16)", w, rate, rate * fbytes / 1e9,
                     rate / raw_rate, cpu_rate * fbytes / 1e9 if w == 0 else None,
                     cpu_rate / raw_cpu if w == 0 else None))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--files", type=int, default=8, help="NPZ files (default 8)")
    ap.add_argument("--per-file", type=int, default=800, help="samples per file (default 800)")
    ap.add_argument("--width", type=int, default=8691, help="float64 values per sample (default 8691)")
    ap.add_argument("--full", action="store_true", help="the issue's size: 60 files x 800 samples (3.3 GB)")
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="DataLoader workers (default 0 2)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--slow-samples", type=int, default=64, help="samples read by npz-per-sample (default 64)")
    ap.add_argument("--workdir", default="ml-bench", help="where the NPZ files and the store are made")
    ap.add_argument("--cache-dir", default="/dev/shm", help="node-local cache folder for h5-block-cache")
    ap.add_argument("--frames", type=int, default=200, help="frames of the demo trajectory (0: skip)")
    ap.add_argument("--only-frames", action="store_true", help="only the FrameDataset rows")
    args = ap.parse_args(argv)
    if args.full:
        args.files = 60

    import torch
    from torch.utils.data import DataLoader, Subset

    torch.set_num_threads(1)
    if args.only_frames:
        for row in frames_rows(args, args.repeat):
            print(row)
        return 0

    from trajscale.ml import H5Dataset, make_loader
    from trajscale.ml.pack import pack

    work = Path(args.workdir)
    paths = make_npz(work, args.files, args.per_file, args.width)
    store = work / f"store_{args.files}x{args.per_file}x{args.width}.h5"
    if not store.exists():
        t0 = time.perf_counter()
        pack(paths, store)
        print(f"packed {len(paths)} files into {store} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    sample_bytes = args.width * 8
    n = args.files * args.per_file
    def cat_rates(files):
        runs = [cat_seconds(files) for _ in range(args.repeat)]
        nbytes = sum(os.path.getsize(f) for f in files)
        return (nbytes / statistics.median(r[0] for r in runs) / 1e9,
                nbytes / statistics.median(r[1] for r in runs) / 1e9)

    cat_npz_gbs, cat_npz_cpu = cat_rates(paths)
    cat_h5_gbs, cat_h5_cpu = cat_rates([str(store)])
    rows = [("cat NPZ files", "-", cat_npz_gbs * 1e9 / sample_bytes, cat_npz_gbs, 1.0, cat_npz_cpu, 1.0),
            ("cat store", "-", cat_h5_gbs * 1e9 / sample_bytes, cat_h5_gbs, 1.0, cat_h5_cpu, 1.0)]
    b = args.batch
    ctx = lambda w: "fork" if w else None   # noqa: E731
    persist = lambda w: {"num_workers": w, "multiprocessing_context": ctx(w), "persistent_workers": w > 0}  # noqa: E731
    cases = {
        # ~50 samples/s: an epoch would take minutes, so a random subset of --slow-samples, batch 32.
        "npz-per-sample": lambda w: DataLoader(
            Subset(NpzPerSample(paths, args.per_file), np.random.default_rng(0).choice(n, args.slow_samples)),
            batch_size=32, **persist(w)),
        "npz-mmap": lambda w: DataLoader(NpzMmap(paths, args.per_file), batch_size=b, shuffle=True, **persist(w)),
        "h5-random": lambda w: DataLoader(H5Dataset(store, keys=["x"]), batch_size=b, shuffle=True, **persist(w)),
        "h5-block": lambda w: make_loader(H5Dataset(store, keys=["x"]), batch_size=b, **persist(w)),
    }
    rates: dict[tuple[str, int], float] = {}
    cpu_rates: dict[tuple[str, int], float] = {}
    for name, make in cases.items():
        for w in args.workers:
            slow = name == "npz-per-sample"
            rate, cpu_rate = median_rate(functools.partial(make, w), 1 if slow else args.repeat, warm_up=not slow)
            rates[name, w] = rate
            cpu_rates[name, w] = cpu_rate
            cat, cat_cpu = (cat_npz_gbs, cat_npz_cpu) if name.startswith("npz") else (cat_h5_gbs, cat_h5_cpu)
            gb, cgb = rate * sample_bytes / 1e9, cpu_rate * sample_bytes / 1e9
            rows.append((name, w, rate, gb, gb / cat, cgb if w == 0 else None, cgb / cat_cpu if w == 0 else None))
            print(f"{name:16s} workers={w}: {rate:10.0f} samples/s", file=sys.stderr)
    # Node-local cache: first epoch copies the store, the second reads the copy.
    cache_dir = Path(tempfile.mkdtemp(prefix="trajscale-ml-bench-", dir=args.cache_dir))
    try:
        for w in args.workers:
            for label in ("first epoch (copy)", "second epoch"):
                ds = H5Dataset(store, keys=["x"], cache_dir=cache_dir)
                dt, got, _ = epoch_seconds(make_loader(ds, batch_size=b, num_workers=w,
                                                       multiprocessing_context=ctx(w)))
                rate = got / dt
                rows.append((f"h5-block-cache, {label}", w, rate, rate * sample_bytes / 1e9,
                             rate * sample_bytes / 1e9 / cat_h5_gbs, None, None))
            shutil.rmtree(cache_dir)
            cache_dir.mkdir()
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    if args.frames:
        rows += frames_rows(args, args.repeat)

    print(f"\n{args.files} NPZ x {args.per_file} samples x {args.width} float64 "
          f"({n * sample_bytes / 1e9:.2f} GB), batch {b}, torch {torch.__version__}\n")
    print("| method | workers | samples/s | GB/s | /cat | GB per CPU-s | /cat (CPU) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    fmt = lambda v: "-" if v is None else f"{v:.2f}"   # noqa: E731
    for name, w, rate, gbs, frac, cgb, cfrac in rows:
        print(f"| {name} | {w} | {rate:,.0f} | {gbs:.2f} | {frac:.2f} | {fmt(cgb)} | {fmt(cfrac)} |")
    print()
    for w in args.workers:
        blk, mm, rnd = rates["h5-block", w], rates["npz-mmap", w], rates["h5-random", w]
        print(f"workers={w}: h5-block / cat store = {blk * sample_bytes / 1e9 / cat_h5_gbs:.2f} (target >= 0.8); "
              f"h5-block / npz-mmap = {blk / mm:.2f} (>= 1.5); h5-random / npz-mmap = {rnd / mm:.2f} (>= 1)")
    c = cpu_rates
    print(f"CPU, workers=0: h5-block / cat store = {c['h5-block', 0] * sample_bytes / 1e9 / cat_h5_cpu:.2f}; "
          f"h5-block / npz-mmap = {c['h5-block', 0] / c['npz-mmap', 0]:.2f}; "
          f"h5-random / npz-mmap = {c['h5-random', 0] / c['npz-mmap', 0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
