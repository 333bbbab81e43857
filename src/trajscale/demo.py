"""The demo: a benchmark trajectory from a real system, converted and analysed in parallel.

Builds, from MDAnalysisTests' AdK-in-water system (TPR/XTC, 47,681 atoms, 10
frames), a trajectory of a few thousand frames the way the seed paper built
its 90,100-frame file - by concatenating copies - after making the protein
whole with the TPR's bonds (in that XTC the protein is split across the
periodic box, which would make the CA RMSD a meaningless 0-21 A).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

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
    """Return (topology, h5md) of a ``n_frames``-frame AdK trajectory, building it if needed.

    ``source`` = (tpr, xtc) replaces MDAnalysisTests' AdK files (a machine without that package).
    """
    from .convert.convert import convert
    from .sources import H5MDSource
    from .store.layout import Layout

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    tpr, xtc = source or adk_files()
    h5 = workdir / f"adk_{n_frames}.h5md"
    if h5.exists():
        try:
            with H5MDSource(str(h5)) as s:
                if s.n_frames == n_frames:
                    return tpr, str(h5)
        except Exception:
            pass
    if n_frames > BASE_FRAMES:
        # Copies of a base H5MD file convert ~10x faster than copies of the XTC (no decompression).
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
    """Build the data, run the CA RMSD through MDAnalysis, trajscale serial and in parallel.

    Prints the three times side by side (``compare``), then writes the parallel
    run's CSV, report and plots.
    """
    import time

    from .analysis import RMSD
    from .cli.run import summary
    from .run import run

    tpr, h5 = build_demo_file(workdir, n_frames, progress=progress)
    select = "protein and name CA"
    rows = []
    if compare:
        import MDAnalysis as mda
        from MDAnalysis.analysis import rms

        log.info("the same CA RMSD through MDAnalysis serial (whole frames through its H5MD reader) ...")
        t0 = time.perf_counter()
        mda_rmsd = rms.RMSD(mda.Universe(tpr, h5), select=select).run().results.rmsd[:, 2]
        rows.append(("MDAnalysis serial", time.perf_counter() - t0, mda_rmsd))
        t0 = time.perf_counter()
        serial = run(RMSD(select=select), tpr, h5, executor="serial")
        rows.append(("trajscale serial", time.perf_counter() - t0, serial.rmsd))
    t0 = time.perf_counter()
    result = run(RMSD(select=select), tpr, h5, executor=executor, n_workers=n_workers)
    rows.append((f"trajscale {result.report.executor} x{result.report.n_workers}", time.perf_counter() - t0,
                 result.rmsd))
    if compare:
        print(compare_table(rows, n_frames))
    out = Path(workdir)
    result.to_csv(out / "rmsd.csv")
    result.report.write(out / "report.json")
    plots = _plots(result, out)
    print(summary(result.report, str(out / "rmsd.csv"), str(out / "report.json")))
    print(f"  CA RMSD range: {result.rmsd.min():.2f} - {result.rmsd.max():.2f} A")
    for p in plots:
        print(f"  plot:    {p}")
    return 0


def compare_table(rows: list[tuple[str, float, object]], n_frames: int) -> str:
    """Whole-call times of the same RMSD side by side, as ratios to the first row."""
    import numpy as np

    base_t, base = rows[0][1], rows[0][2]
    lines = [f"The same CA RMSD on the same file ({n_frames} frames), whole calls (topology read included):"]
    for name, t, values in rows:
        diff = float(np.abs(np.asarray(values) - base).max())
        lines.append(f"  {name:<26}{t:>8.2f} s {n_frames / t:>10,.0f} frames/s {base_t / t:>7.1f}x"
                     f"   max |diff| {diff:.1e} A")
    return "\n".join(lines)


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
