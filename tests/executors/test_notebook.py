"""A Jupyter notebook, run headless by a real kernel, with every local executor."""

from __future__ import annotations

from pathlib import Path

import MDAnalysis as mda
import numpy as np
import pytest
from MDAnalysis.analysis import rms

pytestmark = pytest.mark.cli

SRC = Path(__file__).resolve().parents[2] / "src"
EXECUTORS = ["serial", "processes", "dask"]


@pytest.mark.slow
def test_notebook_runs_every_executor(tmp_path, adk_vacuum, adk_vacuum_h5md):
    # here, not at the module's top: every pytest worker would import them at collection
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("distributed")
    cells = [f"import sys; sys.path.insert(0, {str(SRC)!r})\n"
             "import numpy as np\nimport trajscale as ts\nresults = {}"]
    for ex in EXECUTORS:
        cells.append(f"r = ts.run(ts.RMSD(select='name CA'), {adk_vacuum[0]!r}, {adk_vacuum_h5md!r}, "
                     f"executor={ex!r}, n_workers=2)\n"
                     f"results[{ex!r}] = (r.report.executor, r.rmsd)")
    out = tmp_path / "rmsd.npz"
    cells.append(f"np.savez({str(out)!r}, **{{k: v[1] for k, v in results.items()}})\n"
                 "print(sorted((k, v[0]) for k, v in results.items()))")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                            ).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    printed = nb.cells[-1]["outputs"][0]["text"]
    assert printed.strip() == str(sorted((ex, ex) for ex in EXECUTORS))
    ref = rms.RMSD(mda.Universe(*adk_vacuum), select="name CA").run().results.rmsd[:, 2]
    got = np.load(out)
    for ex in EXECUTORS:
        np.testing.assert_allclose(got[ex], ref, atol=1e-4, err_msg=ex)
