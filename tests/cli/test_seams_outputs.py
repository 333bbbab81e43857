"""Every command refuses an output given as a URL, in one line, before it writes anything: ``split -o
s3://bucket/run2/`` was taken for the local folder ``s3:/bucket/run2`` (and wrote into it when a folder
``s3:`` existed), ``demo --workdir s3://...`` likewise.  The commands run in one interpreter (``main``
called with each command line), from a folder that holds ``s3:/bucket`` and ``http:/host``: nothing
may appear there."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from trajscale.cli.main import build_parser
from trajscale.cli.options import OUTPUT_DESTS

pytestmark = [pytest.mark.cli, pytest.mark.slow(seconds=5)]

URL = "s3://bucket/run2/out"


def _cases(psf: str, dcd: str, h5md: str, report: str, npz: str, folder: str) -> dict[tuple[str, str], list]:
    """(command, output dest) -> a command line whose only fault is that output, a URL."""
    run = ["run", "rmsd", psf, h5md, "--select", "name CA"]
    return {
        ("convert", "output"): ["convert", psf, dcd, "-o", f"{URL}.h5md"],
        ("rechunk", "output"): ["rechunk", h5md, "-o", f"{URL}.h5md"],
        ("split", "output"): ["split", h5md, "-o", "s3://bucket/run2/", "--parts", "2"],
        ("pack", "output"): ["pack", npz, "-o", f"{URL}.h5"],
        ("index", "output"): ["index", h5md, "-o", "http://host/run2/index.json"],
        ("run", "out"): [*run, "--out", f"{URL}.csv"],
        ("run", "report"): [*run, "--report", f"{URL}.json"],
        ("run", "tee"): ["run", "rmsd", psf, "imd://127.0.0.1:9", "--tee", f"{URL}.h5md"],
        ("report", "plot"): ["report", report, "--plot", f"{URL}.png"],
        ("report", "trace"): ["report", report, "--trace", f"{URL}.json"],
        ("report", "json"): ["report", report, "--json", f"{URL}.json"],
        ("probe", "out"): ["probe", folder, "--out", f"{URL}.json"],
        ("demo", "workdir"): ["demo", "--workdir", "s3://bucket/demo", "--frames", "10"],
    }


def _output_options() -> set[tuple[str, str]]:
    """(command, dest) of every option of every command whose dest names an output."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    found = set()
    todo = [(name, p) for name, p in sub.choices.items()]
    while todo:
        name, p = todo.pop()
        for a in p._actions:
            if a.choices and isinstance(a.choices, dict):   # run's analyses
                todo += [(name, child) for child in a.choices.values()]
            elif a.dest in OUTPUT_DESTS and a.option_strings and a.nargs != 0:   # (inspect --json: a flag)
                found.add((name, a.dest))
    return found


def test_every_command_refuses_a_url_output_in_one_line(tmp_path, adk_vacuum, adk_vacuum_h5md):
    import trajscale as ts

    psf, dcd = adk_vacuum
    r = ts.run(ts.RMSD(select="name CA"), psf, adk_vacuum_h5md)
    report = str(tmp_path / "r.json")
    r.report.write(report)
    np.savez(tmp_path / "s.npz", x=np.zeros(3))
    cases = _cases(psf, dcd, adk_vacuum_h5md, report, str(tmp_path / "s.npz"), str(tmp_path))
    missing = _output_options() - set(cases)
    assert not missing, f"an output option with no case here: {sorted(missing)}"
    work = tmp_path / "cwd"
    (work / "s3:" / "bucket").mkdir(parents=True)   # a URL taken for a path would land here
    (work / "http:" / "host").mkdir(parents=True)
    script = ("import contextlib, io, json, sys\n"
              "from trajscale.cli.main import main\n"
              "out = {}\n"
              "for key, argv in json.loads(sys.argv[1]):\n"
              "    err = io.StringIO()\n"
              "    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):\n"
              "        try:\n"
              "            code = main(argv)\n"
              "        except SystemExit as exc:\n"
              "            code = exc.code\n"
              "    out[key] = [code, err.getvalue()]\n"
              "print(json.dumps(out))\n")
    argvs = [[f"{c} {d}", argv] for (c, d), argv in cases.items()]
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(argvs)], capture_output=True, text=True,
                          cwd=work, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    for key, (code, err) in got.items():
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code != 0 and len(lines) == 1, f"{key}: exit {code}, {err!r}"
        assert "://" in lines[0] and "outputs are written to local paths" in lines[0], f"{key}: {lines[0]}"
    assert sorted(str(p.relative_to(work)) for p in work.rglob("*")) == ["http:", "http:/host", "s3:", "s3:/bucket"]
