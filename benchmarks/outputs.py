"""Peak memory of an ensemble's ``--out`` files and of a streamed fit as the members grow: whole processes.

    python benchmarks/outputs.py [--size smallest|small|full] [--workdir DIR] [--keep]
    python benchmarks/outputs.py --size smallest --workdir /tmp/bench      # what the test suite runs

Outputs: ``trajscale run distances --ensemble catalog.csv --select1 "index 0 1" --select2 "index 1 2"
--no-pbc --executor serial --results R --out x.EXT`` (a long table of 4 rows a member) for EXT csv, parquet and nc, over
``N`` tiny members (3 atoms x 2 frames, XTC: ``make_tiny`` of benchmarks/ensemble.py), serial, each a
whole process with a fresh results folder, at a small and a large ``N``; and at the small ``N`` the same
analysis and output from Python (``ts.run`` then ``save``) with one member renamed with 64 KiB, against
the same without.  The peak RSS of each (the
kernel's, as :mod:`tests.support.peak_rss`).
Targets: the large ``N``'s peak within 1.2x of the small's; the long name adds under 10 MB.

Fit: TICA (lag 1, dim 2) on 1,620 pair distances a frame (36 x 45 atoms of an 81-atom system, one XTC
member of ``frames`` frames each, a random walk), streamed (``stream_fit(TICA(...), FeatureStream(
Distances(...), catalog))``) and deeptime's fit in memory (``TICA(...).fit(ts.run(...).arrays())``), each
a whole process, at a small and a large member count; the two models' covariances compared.  Targets: the
streamed peak at the large count within 1.2x of the small's, and below the in-memory fit's.

Sizes (tiny members; fit members; frames a fit member; atoms a side of the fit's distances): ``smallest``
(the test suite's: each kind of run once, its figures mean nothing) 20; 2; 10; 4 x 5. ``small`` 20 and 80;
2 and 4; 10; 36 x 45. ``full`` 1,000 and 10,000; 20 and 200; 200; 36 x 45.  A first ``--out`` run over
each catalog, not shown, fills trajscale's topology cache (a later run reads the topology from it, as a
user's later runs do; not at the smallest size).  At the smallest size each format's ``--out`` runs at one
``N`` and its Python save only with the long name (no ratio, no "+MB"), and the two fits run in one
process, deeptime imported once: their covariances are compared, their peak RSS (both fits' together) is
not shown.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests.support (peak_rss), beside the benchmarks
from ensemble import env_for, finish, load_average, made_once, make_tiny  # noqa: E402

SIZES = {"smallest": ((20,), (2,), 10, (4, 5)), "small": ((20, 80), (2, 4), 10, (36, 45)),
         "full": ((1000, 10000), (20, 200), 200, (36, 45))}
LONG = 65536

#: The long name given from Python: the same members, one renamed, and nothing else changed.
NAMED = r'''
import sys
import trajscale as ts
from trajscale.ensemble import Ensemble, Member
catalog, long, results, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
members = list(Ensemble.from_catalog(catalog))
m = members[len(members) // 2]
if long:
    members[len(members) // 2] = Member("x" * long, m.trajectory, m.topology, dict(m.labels))
r = ts.run(ts.Distances(select1="index 0 1", select2="index 1 2", pbc=False), Ensemble(members, origin=catalog),
           executor="serial", results=results)
r.save(out)
'''

FIT = r'''
import json, sys
import numpy as np
from deeptime.decomposition import TICA
import trajscale as ts
kind, catalog, a, b = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
analysis = ts.Distances(select1=f"index 0:{a - 1}", select2=f"index {a}:{a + b - 1}", pairs=False, pbc=False)
covs = {}
if kind in ("stream", "both"):
    from trajscale.ml import FeatureStream, stream_fit
    tica = stream_fit(TICA(lagtime=1, dim=2), FeatureStream(analysis, catalog, executor="serial"))
    covs["stream"] = np.asarray(tica.fetch_model().cov_00).ravel()[:4096].tolist()
if kind in ("memory", "both"):
    tica = TICA(lagtime=1, dim=2).fit(ts.run(analysis, catalog, executor="serial").arrays())
    covs["memory"] = np.asarray(tica.fetch_model().cov_00).ravel()[:4096].tolist()
print(json.dumps(covs))
'''


def peak(cmd: list[str], work: Path) -> tuple[float, str]:
    """The peak RSS (MB) of ``cmd``'s largest process, and its stdout (exit when it fails)."""
    from tests.support.peak_rss import peak_rss

    rss, done = peak_rss(cmd, env=env_for(work))
    if done.returncode != 0:
        sys.exit(f"outputs.py: {' '.join(cmd[1:5])} ... exited {done.returncode}:\n{done.stderr[-3000:]}")
    return rss / 2**20, done.stdout


def out_peak(work: Path, catalog: Path, ext: str) -> float:
    tag = f"{catalog.parent.name}-{catalog.stem}{ext}"
    results, out = work / f"res-{tag}", work / f"out-{tag}"
    shutil.rmtree(results, ignore_errors=True)
    out.unlink(missing_ok=True)
    mb, _ = peak([sys.executable, "-m", "trajscale.cli.main", "run", "distances", "--ensemble", str(catalog),
                  "--select1", "index 0 1", "--select2", "index 1 2", "--no-pbc", "--executor", "serial",
                  "--results", str(results),
                  "--out", str(out), "-q"], work)
    shutil.rmtree(results, ignore_errors=True)
    out.unlink()
    return mb


def named_peak(work: Path, catalog: Path, ext: str, long: int) -> float:
    """The peak RSS (MB) of :data:`NAMED` writing ``ext`` over ``catalog``'s members, the middle one renamed
    with ``long`` characters (0: not renamed)."""
    results, out = work / f"res-named{long}{ext}", work / f"out-named{long}{ext}"
    shutil.rmtree(results, ignore_errors=True)
    out.unlink(missing_ok=True)
    mb, _ = peak([sys.executable, "-c", NAMED, str(catalog), str(long), str(results), str(out)], work)
    shutil.rmtree(results, ignore_errors=True)
    out.unlink()
    return mb


def make_wide(work: Path, n: int, frames: int) -> Path:
    """``n`` members of an 81-atom system (one residue an atom), ``frames`` frames each, and their catalog."""
    def rows(folder: Path) -> Iterator[str]:
        import warnings

        import MDAnalysis as mda

        (folder / "top.pdb").write_text("".join(
            f"ATOM  {i + 1:5d}  CA  ALA A{i + 1:4d}    {i % 9 * 3.8:8.3f}{i // 9 * 3.8:8.3f}{0:8.3f}  1.00  0.00"
            "           C\n" for i in range(81)) + "END\n")
        rng = np.random.default_rng(n)
        start = np.array([[i % 9 * 3.8, i // 9 * 3.8, 0.0] for i in range(81)], np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            u = mda.Universe(str(folder / "top.pdb"))
            for k in range(n):
                walk = start + np.cumsum(rng.normal(0, 0.3, (frames, 81, 3)), axis=0).astype(np.float32)
                with mda.Writer(str(folder / f"w{k:04d}.xtc"), 81) as w:
                    for x in walk:
                        u.atoms.positions = x
                        w.write(u.atoms)
                yield f"w{k:04d},top.pdb,w{k:04d}.xtc"

    return made_once(work / f"wide{n}x{frames}", "name,topology,trajectory", rows)


def mark(ok: bool) -> str:
    return "met" if ok else "MISSED"


def outputs(work: Path, ns: tuple[int, ...]) -> None:
    """The ``--out`` table over ``ns`` tiny members: with two, the ratio and what the long name adds."""
    catalogs = {n: make_tiny(work, n) for n in ns}
    both = len(ns) > 1
    for n in ns if both else ():   # the topology cache filled (each catalog has its own topology file)
        out_peak(work, catalogs[n], ".csv")
    print("\n--out of tiny members (3 atoms x 2 frames, 4 rows each), a whole process each: peak RSS MB")
    print(f"{'format':<8}" + "".join(f"{f'N={n}':>10}" for n in ns)
          + (f"{'ratio':>8}{'<= 1.2':>8}" if both else "") + f"{'64 KiB name':>13}"
          + (f"{'+MB':>7}{'< 10':>8}" if both else ""))
    for ext in (".csv", ".parquet", ".nc"):
        peaks = [out_peak(work, catalogs[n], ext) for n in ns]
        named = named_peak(work, catalogs[ns[0]], ext, LONG)
        line = f"{ext[1:]:<8}" + "".join(f"{mb:>10.0f}" for mb in peaks)
        if both:
            ratio, added = peaks[1] / peaks[0], named - named_peak(work, catalogs[ns[0]], ext, 0)
            line += (f"{ratio:>7.2f}x{mark(ratio <= 1.2):>8}{named:>13.0f}{added:>7.1f}"
                     f"{mark(added < 10):>8}")
        else:
            line += f"{named:>13.0f}"
        print(line)


def fit(work: Path, counts: tuple[int, ...], frames: int, sides: tuple[int, int]) -> bool:
    """The fits' table; whether the two fits' covariances agree at each count (one count: both fits in one
    process, their peak RSS not shown)."""
    print(f"\nTICA (lag 1, dim 2) on {sides[0] * sides[1]:,} distances a frame, {frames} frames a member: peak RSS "
          "MB of the whole process")
    print(f"{'members':>8}{'streamed MB':>13}{'in memory MB':>14}{'max |cov diff| / max |cov|':>28}")
    fits = {}
    (work / "fit.py").write_text(FIT)
    for n in counts:
        catalog = make_wide(work, n, frames)
        mbs, covs = {}, {}
        for kind in ("stream", "memory") if len(counts) > 1 else ("both",):
            mb, out = peak([sys.executable, str(work / "fit.py"), kind, str(catalog), *map(str, sides)], work)
            for k, cov in json.loads(out.strip().splitlines()[-1]).items():
                mbs[k], covs[k] = (mb if kind != "both" else None), np.asarray(cov)
        rel = float(np.abs(covs["stream"] - covs["memory"]).max() / np.abs(covs["memory"]).max())
        fits[n] = (mbs["stream"], mbs["memory"], rel)
        shown = [f"{mb:.0f}" if mb is not None else "n/a" for mb in fits[n][:2]]
        print(f"{n:>8}{shown[0]:>13}{shown[1]:>14}{rel:>28.1e}")
    if len(counts) > 1:
        small, large = counts
        growth = fits[large][0] / fits[small][0]
        print(f"streamed peak, {large} members / {small}: {growth:.2f}x (<= 1.2: {mark(growth <= 1.2)}); "
              f"below the in-memory fit at {large}: {mark(fits[large][0] < fits[large][1])}")
    return all(r <= 1e-10 for _, _, r in fits.values())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=list(SIZES), default="small")
    p.add_argument("--workdir", default="demo-output/outputs")
    p.add_argument("--keep", action="store_true", help="keep the trajectories made in the work folder")
    p.add_argument("--only", choices=("outputs", "fit"), help="measure one of the two (default: both)")
    args = p.parse_args()
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    ns, counts, frames, sides = SIZES[args.size]
    print(f"load average before: {load_average()}")

    if args.only != "fit":
        outputs(work, ns)
    ok = args.only == "outputs" or fit(work, counts, frames, sides)
    finish(work, args.keep, ok, ("tiny*", "wide*"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
