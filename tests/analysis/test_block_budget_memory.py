"""Every built-in analysis keeps its memory within the block budget (``--max-block-mb``), the fitted ones too.

Each analysis runs serially in a fresh Python (a subprocess) over 200 frames of AdK in water (47,681 atoms,
572 kB a frame, 117 MB) with a 16 MB budget. The kernel's high-water mark of the process (``VmHWM``) is
reset when the tasks start (``/proc/self/clear_refs``), so what is measured is the tasks' own growth over the
resident memory they start from (imports, topology, the analysis's preparation excluded): the blocks read,
what ``map`` makes of them, and the partials the tasks return.

The bound, ``C x budget`` with ``C = 4``: the block itself (1x), a fit's working copies (4 MB of float64 at a
time, a few copies), and one partial per task until the round is reduced (an all-atom RMSF's partial is
4.6 MB of integer sums, and 16 MB tasks make 8 of them here). Before the fit was done a few MB at a time, a
fitted RMSF held 9x the budget (four float64 copies of the block); Contacts, whose pair distances were not
counted in the budget, held 200x.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import shared_demo_file

pytestmark = [pytest.mark.cli, pytest.mark.slow]   # a subprocess per analysis; the module fixture writes 117 MB

MB = 1024**2
BUDGET_MB = 16
#: The stated bound: tasks grow the process by at most C x the block budget.
C = 4

SCRIPT = r"""
import json, sys

import trajscale as ts
from trajscale.executors.serial import SerialExecutor


def status(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key))


top, traj, budget, name, kw = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], json.loads(sys.argv[5])
growth = []
run_tasks = SerialExecutor.map_tasks


def measured(self, *args, **kwargs):
    with open("/proc/self/clear_refs", "w") as fh:   # the high-water mark from here: the tasks' own
        fh.write("5")
    base = status("VmRSS:")
    got = run_tasks(self, *args, **kwargs)
    growth.append(status("VmHWM:") - base)
    return got


SerialExecutor.map_tasks = measured
result = ts.run(getattr(ts, name)(**kw), top, traj, executor="serial", max_block_bytes=budget, progress=False)
print(json.dumps({"growth": max(growth), "frames": result.report.n_frames}))
"""

CA = "protein and name CA"
ANALYSES = {
    "rmsd-all": ("RMSD", {"select": "all"}),
    "rmsf-all": ("RMSF", {"select": "all"}),
    "rmsf-all-fitted": ("RMSF", {"select": "all", "fit_select": CA}),
    "average-all": ("AverageStructure", {"select": "all"}),
    "average-all-fitted": ("AverageStructure", {"select": "all", "fit_select": CA}),
    "rgyr-all": ("RadiusOfGyration", {"select": "all"}),
    "rdf-ca": ("RDF", {"select1": CA, "select2": CA}),
    "contacts-protein": ("Contacts", {}),
    "distances-ca": ("Distances", {"select1": CA, "select2": CA}),
    "com-distance": ("CentreOfMassDistance", {"select1": "protein", "select2": "resname SOL"}),
    "ramachandran-protein": ("Ramachandran", {}),
    "residue-contacts-ca": ("ResidueContacts", {"select": CA + " and resid 1-60"}),   # (its output is F x pairs)
}


@pytest.fixture(scope="module")
def adk_200(tmp_path_factory):
    return shared_demo_file(tmp_path_factory, 200)


def test_every_analysis_is_measured():
    from trajscale.analysis import BUILTIN

    measured = {name for name, _ in ANALYSES.values()}
    # the user-function analyses run what the user writes: their memory is the function's
    assert {cls for cls, _ in BUILTIN.values()} - {"PerFrame", "Reduce"} == measured


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux's")
@pytest.mark.parametrize("case", sorted(ANALYSES))
def test_peak_memory_within_the_block_budget(adk_200, case):
    name, kw = ANALYSES[case]
    top, traj = adk_200
    proc = subprocess.run([sys.executable, "-c", SCRIPT, top, traj, str(BUDGET_MB * MB), name, json.dumps(kw)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["frames"] == 200
    assert got["growth"] <= C * BUDGET_MB * MB, (case, got["growth"] / MB)
