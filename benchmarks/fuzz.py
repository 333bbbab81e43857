"""Coverage-guided fuzzing of trajscale's file decoders (atheris, libFuzzer).

    python benchmarks/fuzz.py --minutes 30                  # every target, 30 minutes each
    python benchmarks/fuzz.py --target xtc --seconds 20     # one target

For each target it prints the executions, the coverage libFuzzer reached (``cov``:
edges, ``ft``: features) and the findings: inputs that crashed the process, raised an
exception the target does not expect, ran past the per-input timeout or past the
memory limit. Each finding is saved under ``--findings`` (default
``benchmarks/fuzz-findings/TARGET/``) beside the corpus the campaign grew, so that a
later campaign starts where this one stopped.

Targets
-------
Every module ``benchmarks/fuzz_targets/*.py`` defines::

    TARGETS = {"name": (seed_files, test_one_input), ...}

``seed_files()`` returns paths of files whose bytes start the corpus (small ones:
libFuzzer's inputs are at most as long as the longest seed). ``test_one_input(data:
bytes)`` feeds one input to the code under test and returns; it catches the
exceptions that code raises for a bad file (its documented error classes), so that
anything else escaping it, a signal, a hang or a memory blow-up is a finding. Names
are unique across modules.

Coverage of compiled code: with clang installed, the XTC/TRR decoder extension is
rebuilt once for fuzzing with ``-fsanitize=fuzzer-no-link`` (``TRAJSCALE_FUZZ_BUILD=1``
in ``setup.py``, into ``--findings``'s ``build/``), so libFuzzer counts the C's edges
as well as the Python edges atheris instruments. Without clang (or with
``--no-native``) only Python edges guide the search.

Each target runs in a child process that is restarted after a finding until its time
is up; the executions and findings of all its children are added up.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: Where target modules are found (``TRAJSCALE_FUZZ_TARGETS`` names another folder, for tests).
TARGET_DIR = Path(os.environ.get("TRAJSCALE_FUZZ_TARGETS") or HERE / "fuzz_targets")
#: libFuzzer's own limits per input: a hang or a blow-up is a finding, not a stuck campaign.
INPUT_TIMEOUT_S = 20
RSS_LIMIT_MB = 3072
STATS = re.compile(r"^#(\d+)\s+\S+\s+cov: (\d+) ft: (\d+)(?: corp: (\d+)/)?", re.M)
EXECUTED = re.compile(r"stat::number_of_executed_units: (\d+)")
FINDING_PREFIXES = ("crash-", "timeout-", "oom-", "leak-", "slow-unit-")


def discover(target_dir: Path = TARGET_DIR) -> dict:
    """``{name: (seed_files, test_one_input, module_path)}`` of every target module."""
    found = {}
    for path in sorted(target_dir.glob("*.py")):
        if path.name.startswith("_"):
            continue
        spec = importlib.util.spec_from_file_location(f"fuzz_targets.{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, (seeds, one) in getattr(module, "TARGETS", {}).items():
            if name in found:
                raise SystemExit(f"fuzz.py: target {name!r} is defined twice ({found[name][2]}, {path})")
            found[name] = (seeds, one, path)
    return found


# ---------------------------------------------------------------------------------------------
# the instrumented build of the compiled decoders

def native_build(build_dir: Path) -> Path | None:
    """The XTC/TRR decoder extension built with libFuzzer's coverage counters (clang), or None
    without clang; built once per change of the sources' contents into ``build_dir``."""
    if shutil.which("clang") is None:
        return None
    pyx = ROOT / "src/trajscale/xdr/_xdr.pyx"
    sources = [pyx, *sorted((ROOT / "src/trajscale/xdr/csrc").glob("*.[ch]"))]
    script = (
        "import sys, numpy as np\n"
        "from setuptools import Extension, setup\n"
        "from Cython.Build import cythonize\n"
        "flags = ['-O1', '-g0', '-ffp-contract=off', '-fsanitize=fuzzer-no-link']\n"
        "ext = Extension('trajscale.xdr._xdr', ['src/trajscale/xdr/_xdr.pyx'],\n"
        "                include_dirs=[np.get_include()], extra_compile_args=flags, extra_link_args=flags)\n"
        f"setup(script_args=['build_ext', '--build-lib', {str(build_dir)!r}, '--build-temp',\n"
        f"                   {str(build_dir / 'tmp')!r}],\n"
        "      ext_modules=cythonize([ext], language_level=3, build_dir=" + repr(str(build_dir / "c")) + ",\n"
        "                            compiler_directives={'boundscheck': False, 'wraparound': False}))\n")
    # (the sources' contents, not their times: a fresh clone of the same sources reuses the build)
    stamp = hashlib.sha256(b"".join(p.read_bytes() for p in sources) + script.encode()).hexdigest()
    marker = build_dir / "stamp"
    built = sorted(build_dir.glob("trajscale/xdr/_xdr*.so"))
    if built and marker.exists() and marker.read_text() == stamp:
        return built[0]
    build_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CC="clang", LDSHARED="clang -shared", TRAJSCALE_FUZZ_BUILD="1")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    built = sorted(build_dir.glob("trajscale/xdr/_xdr*.so"))
    if proc.returncode or not built:
        print(f"fuzz.py: the instrumented decoder did not build; Python edges only:\n{proc.stderr[-2000:]}",
              file=sys.stderr)
        return None
    marker.write_text(stamp)
    return built[0]


def libfuzzer_preload(build_dir: Path) -> Path | None:
    """clang's libFuzzer as a shared library, preloaded into a child that loads the instrumented
    extension: its coverage counters then resolve to the libFuzzer that drives the campaign
    (atheris uses a libFuzzer it finds in the process instead of its own)."""
    out = build_dir / "libfuzzer.so"
    if out.exists():
        return out
    resource = subprocess.run(["clang", "-print-resource-dir"], capture_output=True, text=True).stdout.strip()
    archive = Path(resource) / "lib/linux/libclang_rt.fuzzer_no_main-x86_64.a"
    if not archive.exists() or shutil.which("clang++") is None:
        return None
    proc = subprocess.run(["clang++", "-shared", "-o", str(out), "-Wl,--whole-archive", str(archive),
                           "-Wl,--no-whole-archive", "-lpthread"], capture_output=True, text=True)
    return out if proc.returncode == 0 and out.exists() else None


def _load_native(so: Path) -> None:
    """Make the instrumented extension the one ``trajscale.xdr._xdr`` imports."""
    spec = importlib.util.spec_from_file_location("trajscale.xdr._xdr", so)
    module = importlib.util.module_from_spec(spec)
    sys.modules["trajscale.xdr._xdr"] = module
    spec.loader.exec_module(module)


# ---------------------------------------------------------------------------------------------
# one child: libFuzzer on one target

def child(name: str, seconds: float, corpus: Path, artifacts: Path, native: str | None) -> None:
    import atheris

    if native:
        _load_native(Path(native))
    with atheris.instrument_imports(include=["trajscale"]):
        targets = discover()
        import trajscale.xdr.source  # noqa: F401 - instrumented with the rest of trajscale
    _, one, _ = targets[name]
    args = [sys.argv[0], f"-max_total_time={max(1, int(seconds))}", f"-artifact_prefix={artifacts}/",
            f"-timeout={INPUT_TIMEOUT_S}", f"-rss_limit_mb={RSS_LIMIT_MB}", "-print_final_stats=1",
            str(corpus)]
    atheris.Setup(args, one)
    atheris.Fuzz()


def _seed(corpus: Path, seeds) -> None:
    if corpus.exists() and any(corpus.iterdir()):
        return
    corpus.mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(seeds()):
        shutil.copyfile(path, corpus / f"seed-{i}-{Path(path).name}")


def _findings(artifacts: Path) -> list[Path]:
    return sorted(p for p in artifacts.glob("*") if p.name.startswith(FINDING_PREFIXES))


def campaign(name: str, seeds, seconds: float, findings_dir: Path, native: Path | None) -> dict:
    """Run one target for ``seconds``, restarting its child after each finding; its totals."""
    corpus, artifacts = findings_dir / name / "corpus", findings_dir / name
    _seed(corpus, seeds)
    artifacts.mkdir(parents=True, exist_ok=True)
    before = set(_findings(artifacts))
    executions, cov, ft, runs, end = 0, 0, 0, 0, time.monotonic() + seconds
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    if native is not None:
        env["LD_PRELOAD"] = str(native.parents[2] / "libfuzzer.so")
    # libFuzzer ends a child without Python's exit handlers: what its targets write goes under a temporary
    # folder of the campaign's, removed when the campaign ends
    memory = "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None   # (the inputs' files: in memory)
    with tempfile.TemporaryDirectory(prefix=f"trajscale-fuzz-{name}-", dir=memory) as scratch:
        env["TMPDIR"] = scratch
        while True:
            left = end - time.monotonic()
            if left < 1 and runs:
                break
            runs += 1
            cmd = [sys.executable, __file__, "--child", name, "--seconds", f"{max(left, 1):.0f}",
                   "--corpus", str(corpus), "--artifacts", str(artifacts), "--native", str(native or "")]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
            log = proc.stderr
            (artifacts / "last-run.log").write_text(log[-200_000:])
            stats = STATS.findall(log)
            done = EXECUTED.findall(log)
            if stats:
                cov, ft = max(cov, int(stats[-1][1])), max(ft, int(stats[-1][2]))
            executions += int(done[-1]) if done else (int(stats[-1][0]) if stats else 0)
            if proc.returncode and not (set(_findings(artifacts)) - before) and not stats:
                raise SystemExit(f"fuzz.py: target {name} failed to start (exit {proc.returncode}):\n{log[-3000:]}")
            if proc.returncode == 0:
                break
    new = sorted(set(_findings(artifacts)) - before)
    return {"target": name, "seconds": round(seconds), "executions": executions, "cov": cov, "ft": ft,
            "corpus": len(list(corpus.iterdir())), "native_coverage": native is not None,
            "findings": [str(p) for p in new]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=1.0, help="minutes per target")
    p.add_argument("--seconds", type=float, help="seconds per target (instead of --minutes)")
    p.add_argument("--target", action="append", help="run only this target (repeatable)")
    p.add_argument("--findings", type=Path, default=HERE / "fuzz-findings", help="corpus and findings directory")
    p.add_argument("--no-native", action="store_true", help="do not build the instrumented decoder")
    p.add_argument("--build-dir", type=Path, help="where the instrumented decoder is built (default: FINDINGS/build)")
    p.add_argument("--json-lines", action="store_true", help="one JSON line per target")
    p.add_argument("--list", action="store_true", help="list the targets and exit")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--artifacts", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--native", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child, args.seconds, args.corpus, args.artifacts, args.native or None)
        return 0
    targets = discover()
    if args.list:
        print("\n".join(targets))
        return 0
    names = args.target or list(targets)
    unknown = [n for n in names if n not in targets]
    if unknown:
        p.error(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(targets)}")
    seconds = args.seconds if args.seconds is not None else args.minutes * 60
    build_dir = args.build_dir or args.findings / "build"
    native = None if args.no_native else native_build(build_dir)
    if native is not None and libfuzzer_preload(build_dir) is None:
        print("fuzz.py: clang's libFuzzer runtime is missing; Python edges only", file=sys.stderr)
        native = None
    total_findings = 0
    for name in names:
        result = campaign(name, targets[name][0], seconds, args.findings, native)
        total_findings += len(result["findings"])
        if args.json_lines:
            print(json.dumps(result), flush=True)
        else:
            print(f"{name}: {result['executions']} executions in {result['seconds']} s, cov {result['cov']}, "
                  f"ft {result['ft']}, corpus {result['corpus']}, "
                  f"{'C and Python' if result['native_coverage'] else 'Python'} edges; "
                  f"findings: {len(result['findings'])}", flush=True)
            for path in result["findings"]:
                print(f"  {path}")
    return 1 if total_findings else 0


if __name__ == "__main__":
    sys.exit(main())
