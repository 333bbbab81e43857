"""What every benchmark's smoke run is: its arguments at its smallest size, the lines its output must match,
what its ``--json`` file holds, and how the test modules beside this one run it.

Every script in benchmarks/ runs at its smallest size and prints its table: benchmarks that cannot rot.
One subprocess per script, as a user runs it, in a work folder per test module (the 20-frame demo files
are built once for the whole run, :func:`tests.benchmarks.conftest.demo`). The figures at this size mean
nothing; what is checked is the exit status, the table's header and rows, and, where a script compares
results, that they agree. Optional peers (MDTraj, freud) may be absent: their rows are then replaced by a
line saying so.

The scripts are split between the ``test_smoke_*`` modules (``MODULES``) so that each module, which one
xdist worker runs from start to end, takes about as long as the others.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import ROOT

BENCH = ROOT / "benchmarks"
F = "20"   # frames of every demo file here
NUM = r"[-\d.,e+]+"

#: codecs.py's rows at its smallest size: today's encoding, and the uint16-delta study's two
CODEC_ROWS = ("today) + blosc-lz4 byte", "u16 deltas + blosc-lz4 byte", "u16 deltas permuted + blosc-lz4 byte")

#: script -> (arguments at its smallest size, patterns its output must match, line by line).
SMOKE: dict[str, tuple[list[str], list[str]]] = {
    "analyses.py": (["--frames", F, "--workdir", "{work}", "--only", "rgyr"],
                    [r"^analysis\s+MDA serial\s+MDA mp\(2\)\s+ts serial", rf"^rgyr\s+{NUM}\s+{NUM}\s+{NUM}"]),
    "arrays.py": (["--quick", "--workdir", "{work}/arrays"],
                  [r"^side\s+H5MD s\s+XTC chain s\s+MDA AFF / side$",
                   rf"^lazy mean \(isel, compute\)\s+{NUM}\s+{NUM}\s+{NUM}x\s+{NUM}x$",
                   rf"^MDAnalysis timeseries\(\)\s+{NUM}\s+{NUM}\s+{NUM}x\s+{NUM}x$",
                   rf"^lazy mean\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}$",
                   r"^protein\s+lazy isel\s+200\s+1\.00$", r"^protein\s+select=, chunks=\{\}\s+200\s+1\.00$",
                   r"^peak memory, all-atom mean in chunks of \d+ frames"]),
    "boxes.py": (["--boxes", "100"], [r"^\s+boxes\s+seconds$", rf"^\s+100\s+{NUM}$"]),
    "chains.py": (["--frames", F, "--parts", "2", "--cache", "{work}/chains", "--sides",
                   "mdanalysis,serial,processes2,mdtraj", "--whole", "1", "--warmup", "0"],
                  [rf"^MDAnalysis.*\s{NUM} s\s+{NUM} frames/s", rf"^trajscale processes\(2\)\s+{NUM} s",
                   r"^MDTraj .*(MDTraj not installed|frames/s)",
                   rf"^trajscale serial / MDAnalysis serial \(speed-up\)\s+{NUM}x$",
                   rf"^serial\s+{NUM}\s+{NUM}\s+{NUM}x\s+{NUM}-{NUM}\s+{NUM}x$",
                   rf"^processes\(2\) vs multiprocessing\(2\)\s+{NUM}\s+{NUM}\s+{NUM}x",
                   r"^max \|RMSD difference\| [0-9.]+e-0[5-9] A$|^max \|RMSD difference\| 0.0e\+00 A$"]),
    # with the uint16-delta study's rows, which test_codec_study_u16_rows_run_without_numba reads from this run
    "codecs.py": (["--repeat", "1", "--copies", "1", "--only", ",".join(CODEC_ROWS)],
                  [r"^option\s+\| AdK water XTC size", rf"^deltas \(u16 refs, today\) \+ blosc-lz4 byte\s+{NUM}"]),
    "cold.py": (["--smoke", "--workdir", "{work}"], []),   # checked in test_cold_pairs_whole_processes
    "compiled_kernels.py": (["--frames", "20", "--repeat", "1"],
                            [rf"^rdf 276x276 .* {NUM} ms", r"Mvalues/s", r"GB/s of frames",
                             rf"^fixed_sums float64 squares=True .* {NUM} ns/value"]),
    "mda_reader.py": (["--smoke", "--workdir", "{work}"],
                      [r"^loop\s+H5MDReader\s+TRAJSCALE", rf"^iterate\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}x",
                       rf"^rmsd\s+{NUM}\s+{NUM}", r"largest RMSD difference between the two readers: 0"]),
    "convert.py": (["--frames", F, "-n", "2", "--workdir", "{work}/convert", "--repeat", "1"],
                   [r"^\| convert XTC -> H5MD \(whole run\) \| frames/s", r"^\| cp \| \d+ \| 1\.00x",
                    rf"^\| trajscale rechunk, .* \| {NUM} \| {NUM}x"]),
    "ensemble.py": (["--size", "smallest", "--workdir", "{work}/ensemble"],
                    [r"^side\s+N\s+wall s\s+traj/s\s+MDA / side$",
                     rf"^MDAnalysis loop \(serial\)\s+12\s+{NUM}\s+{NUM}\s+1\.00x$",
                     rf"^trajscale serial\s+12\s+{NUM}\s+{NUM}\s+{NUM}x$",
                     rf"^trajscale processes\(2\)\s+12\s+{NUM}\s+{NUM}\s+{NUM}x$",
                     rf"^serial / processes\(2\): {NUM}x; same sums \(RMSD, Rg\): True$",
                     rf"^per-trajectory overhead \(open, plan, result; 12 tiny trajectories, serial\): {NUM} ms",
                     rf"^serial\s+48\s+{NUM}\s+\d+$", rf"^processes\(2\)\s+48\s+{NUM}\s+\d+$",
                     r"benchmarks/mdcath_epoch\.py$"]),
    "features.py": (["--size", "smallest", "--workdir", "{work}/features", "--json", "{work}/features.json",
                     "--overwrite"],
                    [r"^row \(whole processes\)\s+trajscale s\s+other s\s+ratio\s+range\s+target\s+work ratio\s+"
                     r"max \|diff\|$",
                     *(rf"^{re.escape(row)}\s+({NUM}\s+{NUM}\s+{NUM}x\s+{NUM}-{NUM}\s+>= {target}\s+(met|MISSED)\s+"
                       rf"{NUM}x\s+{NUM}|skipped: MDTraj is not installed.*)$"
                       for row, target in (("phi/psi XTC: serial vs MDTraj loop", 3),
                                           ("phi/psi mdCATH: serial vs MDTraj + h5py", 5),
                                           ("distances XTC: serial vs MDTraj loop", 3))),
                     *(rf"^{re.escape(row)}\s+{NUM}\s+{NUM}\s+{NUM}x\s+{NUM}-{NUM}\s+>= {target}\s+(met|MISSED)\s+"
                       rf"{NUM}x\s+{NUM}$"
                       for row, target in (("phi/psi XTC: serial vs MDAnalysis loop", 20),
                                           ("phi/psi XTC: processes(2) vs serial", 1.3),
                                           ("phi/psi mdCATH: processes(2) vs serial", 1.3),
                                           ("lagged epoch (lag 2): vs h5py per sample", 5))),
                     rf"^ramachandran\s+{NUM}\s+(met|MISSED)\s+{NUM}\s+(met|MISSED)\s+n/a$",
                     r"^ members\s+streamed MB\s+in memory MB\s+max \|cov diff\| / max \|cov\|$",
                     rf"^\s+4\s+n/a\s+n/a\s+{NUM}$", r"^load average after: "]),
    # the campaign itself runs in tests/test_fuzz.py; here: every target is found
    "fuzz.py": (["--list"], [r"^xtc$", r"^trr$", r"^h5md_open$", r"^mda_reader$"]),
    "held_out_user.py": ([], [rf"^spread of 98 frames: largest {NUM} A$"]),
    "insitu.py": (["--quick"],
                  [r"^follower\s+frames\s+written/s\s+frames/s\s+lag median s\s+lag p99 s$",
                   rf"^serial\s+10(\s+{NUM}){{4}}$", rf"^processes\(2\)\s+10(\s+{NUM}){{4}}$",
                   rf"^MDAnalysis polling\s+10(\s+{NUM}){{4}}$",
                   rf"^serial, a frame every 1 s\s+3(\s+{NUM}){{4}}$"]),
    "hub.py": (["--size", "smallest", "--repeat", "1", "--delay", "0.02", "--workdir", "{work}/hub"],
               [r"^side\s+wall s\s+range\s+MB moved\s+requests\s+MB analysed\s+moved/analysed$",
                rf"^trajscale hf:// \(in place\)\s+{NUM}\s+{NUM}-{NUM}\s+{NUM}\s+\d+\s+{NUM}\s+{NUM}x$",
                rf"^hf_hub_download \+ h5py \+ (MDTraj|MDAnalysis)\s+{NUM}\s+{NUM}-{NUM}\s+{NUM}\s+\d+\s+-\s+-$"]),
    "kernels.py": (["--sizes", "100,3341", "--frames", F, "--repeat", "1"],
                   [r"^\s+atoms\s+frames\s+map us\s+kernel us\s+vs SVD A", rf"^\s+3341\s+{F}\s+{NUM}\s+{NUM}\s+{NUM}"]),
    "layouts.py": (["--frames", F, "--workdir", "{work}", "--no-rmsd", "--only", "4 segments"],
                   [r"^layout\s+size\s+/XTC\s+slab GB/s", rf"^4 segments\s+{NUM}", r"^XTC via MDAnalysis\s+"]),
    "lossy_read.py": (["--frames", F, "--repeat", "1", "--workdir", "{work}", "--only", "(default)"],
                      [r"^file\s+size/XTC\s+warm GB/s", rf"^deltas \+ blosc-lz4 \(default\)\s+{NUM}",
                       r"^XTC via MDAnalysis\s+1\.000"]),
    "mda_mpi_baseline.py": ([], []),   # an MPI job's rank script: test_mda_mpi_baseline
    "mdcath_epoch.py": (["--size", "smallest", "--repeat", "1", "--workers", "0", "--workdir", "{work}/mdcath"],
                        [r"^side\s+workers\s+whole s\s+range\s+epoch s\s+samples/s$",
                         rf"^torchmd-net\s+0\s+{NUM}\s+{NUM}-{NUM}\s+{NUM}\s+{NUM}$",
                         rf"^trajscale\s+0\s+{NUM}\s+{NUM}-{NUM}\s+{NUM}\s+{NUM}$",
                         rf"^workers 0: torchmd-net-style / trajscale \(whole processes\) {NUM}x; "
                         r"same samples: True$"]),
    "memory.py": (["--frames", F, "--workdir", "{work}", "--executors", "serial"],
                  [r"^\s*frames\s+file GB\s+executor\s+peak RSS MB\s+seconds$",
                   rf"^\s+{F}\s+{NUM}\s+serial\s+\d+"]),
    # its workdir the module's: the demo file is there (made in a folder of its own, the protein made whole again)
    "ml_loading.py": (["--files", "2", "--per-file", "50", "--width", "100", "--workers", "0", "--repeat", "1",
                       "--slow-samples", "8", "--batch", "16", "--frames", F, "--workdir", "{work}",
                       "--cache-dir", "{work}"],
                      [r"^\| method \| workers \| samples/s \| GB/s", r"^\| frames: FrameDataset"]),
    "one_pass.py": (["--frames", F, "--workdir", "{work}", "--cases", "warm"],
                    [r"^side\s+warm s\s+/ one pass$", rf"^trajscale one pass \(--plan\)\s+{NUM}\s+1\.00x$",
                     rf"^three separate runs \(sum\)\s+{NUM}\s+{NUM}x$",
                     rf"^MDAnalysis, 3 runs, 1 Universe\s+{NUM}\s+{NUM}x$",
                     r"^cpptraj(: not on PATH| )",
                     r"one pass equal to the single runs: True$"]),
    # each format's --out and its Python save with the long name, once; both fits in one process, their
    # covariances the same (the script exits non-zero when they differ)
    "outputs.py": (["--size", "smallest", "--workdir", "{work}/outputs"],
                   [r"^format\s+N=20\s+64 KiB name$",
                    *(rf"^{ext}\s+{NUM}\s+{NUM}$" for ext in ("csv", "parquet", "nc")),
                    r"^ members\s+streamed MB\s+in memory MB\s+max \|cov diff\| / max \|cov\|$",
                    rf"^\s+2\s+n/a\s+n/a\s+{NUM}$", r"^load average after: "]),
    "predict.py": (["--quick", "--keep", "{work}", "--json", "{work}/predict.json", "--overwrite"],
                   [r"^\s*work\s+executor\s+N\s+serial s\s+predicted\s+range\s+measured\s+error\s+limit",
                    rf"^\s*rmsd\s+processes\s+2\s+{NUM}\s+{NUM}\s+{NUM}-{NUM}\s+{NUM}\s+[+-]{NUM}%",
                    r"^cells 1: median \|error\|", r"^load average before:"]),
    "read_layouts.py": (["--frames", F, "--workdir", "{work}", "--repeat", "1", "--layouts", "frame",
                         "--mda-frames", "10", "--block", "10"],
                        [r"^layout\s+chunks\s+GB\s+slab GB/s", rf"^frame\s+\(1, 47681, 3\)\s+{NUM}"]),
    # OLD and NEW both this checkout: the harness at work (every side, the comparison of the outputs), not a timing
    "regress.py": ([str(ROOT), str(ROOT), "--size", "smallest", "--workdir", "{work}/regress", "--rows",
                    "h5md/rmsd/default/serial,s3/rmsd/default/serial,convert/*",
                    "--json", "{work}/regress.json", "--overwrite"],
                   [r"^OLD: .+\nNEW: .+\n", r"^row\s+OLD s\s+NEW s\s+NEW/OLD\s+range\s+cpu\s+slower\s+output\s+load$",
                    rf"^h5md/rmsd/default/serial\s+{NUM}\s+{NUM}\s+{NUM}x\s+{NUM}-{NUM}\s+{NUM}x\s+[01]/[01]\s+"
                    rf"(same|equal)\s+{NUM}$",
                    r"^s3/rmsd/default/serial\s+(\S.*\s(same|equal)\s+\S+|skipped: moto is not installed.*)$",
                    r"^convert/xtc-h5md/all/serial\s+.*\s(same|equal)\s+\S+$"]),
    "remote_clients.py": (["1", "50"], [rf"^fsspec/s3fs cat_ranges\s+{NUM} s wall",
                                        rf"^obstore get_ranges.*{NUM} s wall"]),
    "remote.py": (["--smoke", "--workdir", "{work}/remote"],
                  [r"^workload\s+executor\s+layout\s+side\s+wall s\s+MB read\s+MB fetched\s+requests\s+x read\s+"
                   r"efficiency$", rf"^rmsd\s+serial\s+default\s+local\s+{NUM}\s+{NUM}\s+-",
                   rf"^rmsd\s+serial\s+default\s+url\s+{NUM}\s+-\s+{NUM}\s+\d+\s+{NUM}\s+{NUM}$",
                   rf"^rmsf\s+serial\s+default\s+download\s+{NUM}\s+-\s+{NUM}\s+\d+\s"]),
    "rmsd.py": (["--frames", F, "--workdir", "{work}", "--repeat", "1"],
                [r"frames/s\s+max \|RMSD - MDAnalysis serial\| \(A\)$",
                 rf"^trajscale serial / MDAnalysis serial \(whole runs\)\s+{NUM}x"]),
    "scaling.py": (["--frames", F, "--workdir", "{work}", "--max-n", "2", "--repeat", "1", "--executors", "mpi",
                    "--json", "{work}/scaling.json", "--overwrite"],
                   [r"^executor\s+N\s+t_total s\s+frames/s", rf"^mpi \(\w+\)\s+2\s+{NUM}",
                    rf"^trajscale mpi\(2\) / MDAnalysis-MPI\(2\), whole run: .* = {NUM}x$"]),
    "scale.py": (["--size", "smallest", "--workdir", "{work}/scale"],
                 [r"^executor\s+N\s+wall s\s+ms/traj\s+peak RSS MB\s+open files\s+results files\s+saved$",
                  rf"^serial\s+200\s+{NUM}\s+{NUM}\s+{NUM}\s+\d+\s+\d+\s+200$",
                  rf"^processes\(2\)\s+200\s+{NUM}\s+{NUM}\s+{NUM}\s+\d+\s+\d+\s+200$",
                  r"^every trajectory's result saved \(folder and Parquet\): True$",
                  rf"^serial 200 / 100: per trajectory {NUM}x, peak RSS {NUM}x"]),
    "short_runs.py": (["--frames", F, "--workdir", "{work}", "--repeat", "1", "--cold", "1"],
                      [r"^whole call\s+trajscale s\s+MDAnalysis s\s+ratio$", rf"^cold\s+{NUM}\s+{NUM}\s+{NUM}x$"]),
    "write.py": (["--replicas", "1", "--frames", "1", "--ranks", "2", "--visibility-atoms", "2000",
                  "--visibility-frames", "2", "--visibility-repeat", "1"],
                 [r"^writer\s+s\s+MB/s\s+file MB$", rf"^trajscale collective, 2 rank\(s\)\s+{NUM}",
                  rf"^2 ranks, publish=True \(default\)(\s+{NUM}){{2}}\s+[+-]{NUM}%\s+{NUM}\s+[+-]{NUM}%$"]),
    "bare_machine.sh": ([], []),   # test_bare_machine
}

#: test module -> the scripts whose smoke run it holds (each script in one module; tests in that module
#: that run a script another way are named in the comments)
MODULES = {
    "test_smoke_arrays": ["arrays.py", "boxes.py", "codecs.py", "fuzz.py", "held_out_user.py", "insitu.py",
                          "mdcath_epoch.py", "ml_loading.py"],   # + test_codec_study_u16_rows_run_without_numba
    "test_smoke_features": ["compiled_kernels.py", "ensemble.py", "features.py", "kernels.py", "outputs.py",
                            "scale.py"],
    "test_smoke_demo": ["analyses.py", "chains.py", "one_pass.py", "rmsd.py", "short_runs.py"],
    "test_smoke_io": ["convert.py", "layouts.py", "lossy_read.py", "mda_reader.py", "memory.py", "read_layouts.py",
                      "remote_clients.py", "scaling.py", "write.py"],
    # + mda_mpi_baseline.py, bare_machine.sh, cold.py (test_cold_pairs_whole_processes)
    "test_smoke_predict": ["hub.py", "predict.py", "regress.py", "remote.py"],
}


def bench_env(work: Path) -> dict:
    # trajscale's topology cache in the test's folder, not the user's
    return dict(os.environ, TRAJSCALE_CACHE_DIR=str(work / "cache"), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def run_script(work: Path, script: str, args: list[str], timeout: float = 300) -> str:
    args = [a.replace("{work}", str(work)) for a in args]
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], check=False, capture_output=True, text=True,
                          timeout=timeout, env=bench_env(work), cwd=work)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{out[-4000:]}"
    return proc.stdout


def _builtin_analyses() -> list[str]:
    from trajscale.analysis import BUILTIN

    return list(BUILTIN)


#: what the ``--json`` file of a smoke run above holds (it replaces a file there before, with --overwrite)
JSON_ROWS = {
    # every row measured (MDTraj's skipped where it is absent), each side's features as trajscale serial's,
    # every registered analysis's overhead, the streamed TICA's covariances as deeptime's in-memory fit's
    "features.py": lambda d: [r["row"] for r in d["rows"]] == [
        "phi/psi XTC: serial vs MDTraj loop", "phi/psi XTC: serial vs MDAnalysis loop",
        "phi/psi XTC: processes(2) vs serial", "phi/psi mdCATH: serial vs MDTraj + h5py",
        "phi/psi mdCATH: processes(2) vs serial", "distances XTC: serial vs MDTraj loop",
        "lagged epoch (lag 2): vs h5py per sample"]
    and all((r["status"] == "measured" and r["max_diff"] <= 1e-3 and r["pairs"] == 1
             and min(r["trajscale_s"], r["other_s"]) > 0)
            or ("MDTraj" in r["row"] and r["status"].startswith("skipped")) for r in d["rows"])
    and sorted(d["overhead"]) == sorted(set(_builtin_analyses()) - {"per_frame", "user_reduce"})
    and [(t["members"], t["cov_rel_diff"] <= 1e-10) for t in d["tica"]] == [(4, True)],
    "predict.py": lambda rows: len(rows) == 1 and rows[0]["measured"] > 0 and rows[0]["predicted"] > 0
    and rows[0]["low"] <= rows[0]["predicted"] <= rows[0]["high"],
    # every row asked for (a local, a URL and a convert row: the harness's three kinds), each side run,
    # their outputs the same (one tree against itself), one pair
    "regress.py": lambda d: [r["row"] for r in d["rows"]] == [
        "h5md/rmsd/default/serial", "s3/rmsd/default/serial", "convert/xtc-h5md/all/serial"]
    and all((r["status"] == "measured" and r["output"] in ("same", "equal") and r["pairs"] == 1
             and min(r["old_wall"] + r["new_wall"] + r["old_cpu"] + r["new_cpu"]) > 0 and r["mark"] == "")
            or (r["row"].startswith("s3/") and r["status"].startswith("skipped")) for r in d["rows"]),
    "scaling.py": lambda rows: [(r["executor"].split()[0], r["n"], r["n_frames"]) for r in rows]
    == [("mpi", 1, int(F)), ("mpi", 2, int(F)), ("MDAnalysis-MPI", 2, int(F))],
}



def smoke_test(module_file: str):
    """The ``test_smoke`` of the module ``module_file``: a smoke run of each of its scripts (``MODULES``)."""

    @pytest.mark.slow
    @pytest.mark.cli
    @pytest.mark.parametrize("script", MODULES[Path(module_file).stem])
    def test_smoke(script, work):
        smoke(script, work)

    return test_smoke


#: (script, work folder) -> the output of its smoke run there (a module's other tests read it, not a second run)
_OUTPUTS: dict[tuple[str, Path], str] = {}


def smoke_output(script: str, work: Path) -> str:
    """The output of ``script``'s smoke run in ``work``: the one this process ran (:func:`smoke`), or a run now."""
    if (script, work) not in _OUTPUTS:
        smoke(script, work)
    return _OUTPUTS[script, work]


def smoke(script: str, work: Path) -> None:
    """Run ``script`` at its smallest size in ``work`` and check its output (and its --json file) line by line."""
    args, patterns = SMOKE[script]
    json_out = Path(args[args.index("--json") + 1].replace("{work}", str(work))) if "--json" in args else None
    if json_out:
        json_out.write_text("a file from before\n")
    out = run_script(work, script, args)
    for pattern in patterns:
        assert re.search(pattern, out, re.MULTILINE), f"{script}: no line matches {pattern!r}:\n{out[-4000:]}"
    if json_out:
        assert JSON_ROWS[script](json.loads(json_out.read_text())), json_out.read_text()
        assert not list(work.glob(f".{json_out.name}.tmp-*")), "temporary file left behind"
    _OUTPUTS[script, work] = out


#: script -> (arguments at its smallest size, the option naming its JSON output)
JSON_OUTPUTS = {
    "analyses.py": (SMOKE["analyses.py"][0], "--json"),
    "layouts.py": (SMOKE["layouts.py"][0], "--json"),
    "features.py": (SMOKE["features.py"][0][:-3], "--json"),
    "predict.py": (["--quick"], "--json"),
    "scaling.py": (SMOKE["scaling.py"][0][:-3], "--json"),
    "write.py": (SMOKE["write.py"][0], "--json"),
    "mda_mpi_baseline.py": (["top.tpr", "traj.h5md"], "--out"),
    "regress.py": (SMOKE["regress.py"][0][:-3], "--json"),
}

