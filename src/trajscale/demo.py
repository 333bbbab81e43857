"""The demo: a benchmark trajectory from a real system, converted and analysed in parallel.

Built from MDAnalysisTests' AdK-in-water system (47,681 atoms, 10 frames) by concatenating copies,
as the seed paper built its file, after making the protein whole with the TPR's bonds (split across
the box, it would make the CA RMSD a meaningless 0-21 A)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .executor_registry import executor_traits

log = logging.getLogger(__name__)

BASE_FRAMES = 2000   # larger demo files are built from copies of this one


def adk_files() -> tuple[str, str]:
    """Paths of the AdK-in-water TPR and XTC shipped in MDAnalysisTests."""
    try:
        from MDAnalysisTests.datafiles import TPR, XTC
    except ImportError:
        from .errors import ConfigError

        raise ConfigError("the demo needs MDAnalysisTests (pip install MDAnalysisTests)") from None
    return TPR, XTC


def make_whole_xtc(out: str | os.PathLike, source: tuple[str, str] | None = None) -> str:
    """Write the AdK XTC (or ``source`` = (tpr, xtc)) with the protein made whole (bonds from the TPR)."""
    import MDAnalysis as mda
    from MDAnalysis import transformations

    tpr, xtc = source or adk_files()
    u = mda.Universe(tpr, xtc)
    protein = u.select_atoms("protein")
    u.trajectory.add_transformations(transformations.unwrap(protein))
    tmp = Path(out).with_name(Path(out).name + ".part.xtc")
    with mda.Writer(str(tmp), u.atoms.n_atoms) as w:
        for _ in u.trajectory:
            w.write(u.atoms)
    os.replace(tmp, out)
    return str(out)


def add_demo_file_arguments(parser, frames: int = 2000) -> None:
    """``--frames``, ``--workdir`` and ``--source``: the demo trajectory a benchmark builds or reuses."""
    parser.add_argument("--frames", type=int, default=frames, help="frames of the demo file")
    parser.add_argument("--workdir", default="demo-output", help="where the demo files are built")
    parser.add_argument("--source", nargs=2, metavar=("TPR", "XTC"), default=None,
                        help="build the demo file from these instead of MDAnalysisTests' AdK files")


def build_demo_file(workdir: str | os.PathLike, n_frames: int = 2000, chunks: str = "auto",
                    progress: bool = True, source: tuple[str, str] | None = None) -> tuple[str, str]:
    """(topology, h5md) of a ``n_frames``-frame AdK trajectory, built if needed (``source``: other tpr, xtc)."""
    from .convert.convert import convert
    from .h5md.layout import Layout
    from .sources import H5MDSource

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    tpr, xtc = source or adk_files()
    h5 = workdir / f"adk_{n_frames}.h5md"
    if h5.exists():
        try:
            with H5MDSource(str(h5)) as s:
                if s.n_frames == n_frames:
                    return tpr, str(h5)
        except Exception:   # noqa: BLE001 - a leftover file that cannot be read is built again
            pass
    if n_frames > BASE_FRAMES:
        # Copies of a base H5MD file convert far faster than copies of the XTC (no decompression).
        _, base = build_demo_file(workdir, BASE_FRAMES, chunks, progress, source)
        inputs = [base] * -(-n_frames // BASE_FRAMES)
    else:
        whole = workdir / "adk_whole.xtc"
        if not whole.exists():
            log.info("making the protein whole in %s -> %s", xtc, whole)
            make_whole_xtc(whole, (tpr, xtc))
        inputs = [str(whole)] * -(-n_frames // 10)
    log.info("converting %d copies of %s into %s (%s chunks)", len(inputs), inputs[0], h5, chunks)
    convert(tpr, inputs, str(h5), layout=Layout.parse(chunks), stop=n_frames,
            overwrite=True, progress=progress)
    return tpr, str(h5)


def run_demo(workdir: str = "demo-output", n_frames: int = 2000, n_workers: int = 2,
             executor: str = "processes", compare: bool = True, progress: bool = True) -> int:
    """Build the data, compare whole processes (``compare``), then a warm parallel run's CSV, report and plots."""
    from .analysis import RMSD
    from .report.summary import run_summary
    from .run import run
    from .timeline import runs_start_at_call

    tpr, h5 = build_demo_file(workdir, n_frames, progress=progress)
    select = "protein and name CA"
    if compare:
        table, diff = compare_whole_processes(workdir, tpr, h5, select, n_workers, executor)
        print(table)
        if not diff <= 1e-4:
            log.error("the RMSDs of trajscale and MDAnalysis differ by %.2e A", diff)
            return 1
    runs_start_at_call()   # the data and the whole-process comparison above are not this run's start-up
    result = run(RMSD(select=select), tpr, h5, executor=executor, n_workers=n_workers)
    out = Path(workdir)
    result.to_csv(out / "rmsd.csv")
    result.report.write(out / "report.json")
    plots = _plots(result, out)
    print("\nThe run whose results, report and plots follow ran inside this process, after the demo's own "
          "start-up: its time is a warm figure, not a whole process.")
    print(run_summary(result.report, str(out / "rmsd.csv"), str(out / "report.json")))
    print(f"  CA RMSD range: {result.rmsd.min():.2f} - {result.rmsd.max():.2f} A")
    for p in plots:
        print(f"  plot:    {p}")
    return 0


def compare_whole_processes(workdir: str | os.PathLike, topology: str, trajectory: str, select: str,
                            n_workers: int = 2, executor: str = "processes", pairs: int = 1) -> tuple[str, float]:
    """The headline: the ``trajscale`` CLI against an MDAnalysis script, whole processes, cold on both sides
    (:mod:`trajscale.whole_runs`): a first run after an install, serial, and ``executor`` with
    ``n_workers`` against MDAnalysis's multiprocessing backend.  Returns the table and the largest
    |RMSD difference| (A)."""
    from .whole_runs import Pairs

    with Pairs(workdir, topology, trajectory, select) as p:
        p.add("trajscale serial, first run after install (empty caches)", p.trajscale(fresh_caches=True),
              p.mdanalysis())
        p.add("trajscale serial", p.trajscale(), p.mdanalysis())
        if executor_traits(executor).workers != "one":   # a parallel row beside the serial one
            p.add(f"trajscale {executor}({n_workers}) vs multiprocessing({n_workers})",
                  p.trajscale(executor, n_workers=n_workers), p.mdanalysis(n_workers))
        log.info("timing whole processes: the trajscale CLI and the same RMSD as an MDAnalysis script ...")
        p.run(pairs, warmup=0)
        diff = p.max_difference()
        head = (f"The same CA RMSD on the same file ({trajectory}), whole processes timed from outside, cold on "
                f"both sides\n(each run a new process: interpreter, imports, topology, analysis, results "
                f"written); ratio = MDAnalysis s / trajscale s:")
        return f"{head}\n{p.table()}\nmax |RMSD difference| {diff:.1e} A", diff


def _plots(result, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .util import atomic_output

    paths = []
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(result.times, result.rmsd, lw=0.8)
    ax.set_xlabel("time (ps)")
    ax.set_ylabel("CA RMSD (Å)")
    ax.set_title("AdK in water: CA RMSD to frame 0")
    fig.tight_layout()
    with atomic_output(out / "rmsd.png") as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    paths.append(str(out / "rmsd.png"))
    try:
        from .report.plots import plot_report
    except ImportError:
        return paths
    plot_report([result.report], out / "report.png")
    paths.append(str(out / "report.png"))
    return paths
