"""``import trajscale`` is cheap, and its lazy namespaces give the same objects the eager imports gave.

Each check runs in a fresh interpreter: what a user's first ``import trajscale`` costs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cli

HEAVY = ["MDAnalysis", "scipy", "dask", "distributed", "torch", "matplotlib", "mpi4py", "numba", "tqdm", "xarray",
         "obstore", "boto3", "botocore", "s3fs", "fsspec"]   # (the remote extra's too)


def _fresh(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _loaded_after(statement: str) -> set[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    return set(_fresh(code))


def test_import_trajscale_imports_no_heavy_library():
    loaded = _loaded_after("import trajscale")
    assert not loaded & set(HEAVY)
    assert not loaded & {"numpy", "h5py"}   # not even these: every name is imported on first use


def test_an_analysis_class_does_not_need_h5py_or_mdanalysis():
    loaded = _loaded_after("import trajscale as ts; ts.RMSD(select='name CA')")
    assert not loaded & {"h5py", *HEAVY}


@pytest.mark.parametrize("package", ["trajscale", "trajscale.analysis", "trajscale.sources", "trajscale.executors",
                                     "trajscale.report", "trajscale.pwrite", "trajscale.ml"])
def test_every_public_name_resolves_and_is_listed(package):
    got = _fresh(f"""
import importlib, json
m = importlib.import_module({package!r})
shown = dir(m)
missing = [n for n in m.__all__ if getattr(m, n, None) is None and n != "__version__"]
print(json.dumps({{"missing": missing, "unlisted": sorted(set(m.__all__) - set(shown)),
                   "machinery": sorted(set(shown) & {{"attach", "TYPE_CHECKING", "__getattr__", "__dir__"}})}}))
""")
    assert got == {"missing": [], "unlisted": [], "machinery": []}


def test_exported_names_survive_their_submodule_loading_later():
    """``trajscale.run`` is the function even when the module ``trajscale.run`` is imported first, as it was
    when the package imported everything eagerly (the same for ``pwrite.repair`` and ``report.diagnose``)."""
    got = _fresh("""
import json
import trajscale.run, trajscale.pwrite.repair, trajscale.report.diagnose
import trajscale
from trajscale.pwrite import repair
from trajscale.report import diagnose
print(json.dumps([type(trajscale.run).__name__, type(repair).__name__, type(diagnose).__name__,
                  trajscale.run.__module__]))
""")
    assert got == ["function", "function", "function", "trajscale.run"]


def test_analysis_registry_and_rebuilding_one_analysis():
    """``ANALYSES`` maps each built-in's ``name`` to its class; rebuilding one from its config imports
    that analysis's module alone."""
    got = _fresh("""
import json, sys
from trajscale.analysis.base import analysis_from_config
a = analysis_from_config({"name": "rgyr", "select": "name CA"})
alone = sorted(m for m in sys.modules if m.startswith("trajscale.analysis."))
from trajscale.analysis import ANALYSES
print(json.dumps({"cls": type(a).__name__, "alone": alone, "names": {k: v.name for k, v in ANALYSES.items()},
                  "classes": sorted(v.__name__ for v in ANALYSES.values())}))
""")
    assert got["cls"] == "RadiusOfGyration"
    assert got["alone"] == ["trajscale.analysis.base", "trajscale.analysis.options", "trajscale.analysis.results",
                            "trajscale.analysis.rgyr"]
    assert all(k == v for k, v in got["names"].items())
    assert got["classes"] == sorted(["RMSD", "RMSF", "RadiusOfGyration", "AverageStructure", "RDF", "Contacts",
                                     "Distances", "CentreOfMassDistance", "Ramachandran", "ResidueContacts", "PerFrame",
                                     "Reduce"])


def test_a_rectangular_box_is_checked_without_box_vectors():
    """Every block of an analysis that needs a box is checked: a rectangular box of positive edges is told to
    have a volume without the compiled kernels' box vectors (made, and their module imported, for any other)."""
    got = _fresh("""
import json, sys
import numpy as np
from trajscale.analysis.base import check_boxes
check_boxes(np.tile(np.float32([80, 80, 80, 90, 90, 90]), (30, 1)), np.arange(30), "a.xtc", "rdf")
rectangular = "trajscale.kernels.geometry" in sys.modules
check_boxes(np.tile(np.float32([80, 80, 80, 60, 60, 90]), (30, 1)), np.arange(30), "a.xtc", "rdf")
print(json.dumps([rectangular, "trajscale.kernels.geometry" in sys.modules]))
""")
    assert got == [False, True]


def test_a_file_matched_early_imports_no_other_reader(tmp_path):
    """The registry imports each Source's module as it reaches it: an H5MD file (matched second) starts no
    XTC, NumPy, MDAnalysis-part or IMD module, and scans no installed package for plugins."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    import trajscale as ts

    h5 = tmp_path / "adk.h5md"
    u = mda.Universe(PSF, DCD)
    with ts.ParallelWriter(h5, u.atoms.n_atoms) as w:
        w.write(step=0, time=0.0, ids=u.atoms.indices, positions=u.atoms.positions)
    code = ("import json, sys\nfrom trajscale.sources import open_source, reader_modules\n"
            f"reader_modules({str(h5)!r}); open_source({str(h5)!r}).close()\n"
            "prefixes = ('trajscale.sources.', 'trajscale.h5md.', 'trajscale.imd', 'importlib.metadata')\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(prefixes))))")
    loaded = set(_fresh(code))
    assert "trajscale.h5md.source" in loaded
    assert not loaded & {"trajscale.npy.source",
                         "trajscale.mdareaders.part", "trajscale.imd", "importlib.metadata"}, loaded


def test_a_run_command_line_builds_the_named_analysis_alone():
    """``trajscale run rgyr ...`` builds the rgyr parser alone and imports no other analysis's module, and
    parses the line as the parser of every command and analysis does; help still gets every analysis."""
    got = _fresh("""
import json, sys
from trajscale.cli.main import build_parser, parse_args
line = ["-q", "run", "rgyr", "top.gro", "a.h5md", "--select", "name CA", "--executor", "serial", "--out", "r.csv"]
narrow = parse_args(line)
modules = sorted(m for m in sys.modules if m.startswith("trajscale.analysis."))

def analyses(parser):
    run = parser._subparsers._group_actions[0].choices["run"]
    return sorted(run._subparsers._group_actions[0].choices)

whole = build_parser().parse_args(line)   # every command's and every analysis's parser
print(json.dumps({"modules": modules, "built": analyses(build_parser("run", line)),
                  "help": analyses(build_parser("run", ["run", "rgyr", "--help"])),
                  "differ": sorted(k for k, v in vars(narrow).items() if k not in ("verbose", "quiet")
                                   and getattr(whole, k, None) != v)}))
""")
    assert got["built"] == ["rgyr"]
    assert "trajscale.analysis.rgyr" in got["modules"]
    others = {"rmsd", "rmsf", "average", "rdf", "contacts", "distances", "comdist", "dihedrals", "group"}
    assert not {m.rsplit(".", 1)[1] for m in got["modules"]} & others
    assert {"rmsd", "rmsf", "rgyr", "rdf", "ramachandran", "plan"} <= set(got["help"])
    assert got["differ"] == []


def _second_run_loads(argv: list[str], caches, names: tuple[str, ...]) -> tuple[int, list[str]]:
    """``trajscale.cli.main.main(argv)`` in a fresh interpreter with caches of its own, twice: the first run
    parses the topology (MDAnalysis imports what it imports, numpy.ma among them), as after an install; the
    second, the run a user repeats, is measured: its exit status and the modules among ``names`` (a name, or
    a prefix ending in '.') it loaded."""
    code = ("import json, os, sys\n"
            f"os.environ['TRAJSCALE_CACHE_DIR'] = {str(caches)!r}\n"
            "from trajscale.cli.main import main\n"
            f"code = main({argv!r})\nnames = {names!r}\n"
            "prefixes = tuple(n for n in names if n.endswith('.'))\n"
            "print(json.dumps([code, sorted(m for m in sys.modules if m in names or m.startswith(prefixes))]))")
    assert _fresh(code)[0] == 0
    code_, loaded = _fresh(code)
    return code_, loaded


#: What the registry imports of H5MD for a file of another format: its declared traits, no reader.
H5MD_TRAITS = {"trajscale.h5md", "trajscale.h5md.traits"}


def test_a_quiet_xtc_run_imports_neither_the_summary_nor_hdf5(tmp_path):
    """``trajscale -q run`` of a chain of XTC parts: no summary is made for nobody to read (the advice,
    diagnosis and metrics modules stay unimported), neither the registry (which asks a file only of the
    Sources whose first bytes it has) nor the run's costing of its reads imports H5MD's modules or h5py, and
    no record is made that only a pool, a followed run or executor=auto use; the results are written."""
    import shutil

    from MDAnalysisTests.datafiles import GRO, XTC

    parts = [str(shutil.copyfile(XTC, tmp_path / f"part{i}.xtc")) for i in range(2)]
    out = tmp_path / "r.csv"
    names = ("trajscale.report.", "trajscale.h5md", "h5py", "numpy.ma", "trajscale.executors.claims",
             "trajscale.endings", "trajscale.storage.")
    code, loaded = _second_run_loads(["-q", "run", "rmsd", GRO, *parts, "--executor", "serial", "--out", str(out),
                                      "--overwrite"], tmp_path / "caches", names)
    assert code == 0 and out.stat().st_size > 0
    assert not {m for m in loaded if m.rsplit(".", 1)[-1] in {"advice", "diagnose", "metrics", "stragglers"}}, loaded
    assert "trajscale.report.kinds" not in loaded   # (what auto chose, a followed run's end, a pass's analyses)
    assert "trajscale.executors.claims" not in loaded   # (a pool's)
    assert "trajscale.endings" not in loaded   # (a followed run's options and endings)
    # (H5MD's declared traits, a record the registry reads of every format, are no part of its reader)
    assert not {m for m in loaded if m.startswith(("h5py", "trajscale.h5md"))} - H5MD_TRAITS, loaded
    assert "numpy.ma" not in loaded   # (np.unique's first call imports it: 5 % of a short run's start)
    # (files at hand: no object store's client, requests, retries or cache of remote scans)
    assert not {m for m in loaded if m.rsplit(".", 1)[-1] in {"objects", "clients", "retry", "inflight", "cache"}}, \
        loaded


def test_a_quiet_ensemble_run_builds_its_analysis_alone_and_no_summary(tmp_path):
    """``trajscale -q run ramachandran --ensemble CATALOG``: the command line builds the named analysis's parser
    alone (no other analysis's module, nor the superposition kernels), and no summary is made for nobody to
    read (the advice and diagnosis modules stay unimported); each trajectory's results and the table are written."""
    from MDAnalysisTests.datafiles import GRO, XTC

    catalog, out = tmp_path / "members.csv", tmp_path / "r.csv"
    catalog.write_text(f"name,topology,trajectory\na,{GRO},{XTC}\nb,{GRO},{XTC}\n")
    names = ("trajscale.analysis.", "trajscale.kernels.superpose", "trajscale.report.")
    code, loaded = _second_run_loads(["-q", "run", "ramachandran", "--ensemble", str(catalog), "--executor", "serial",
                                      "--out", str(out), "--results", str(tmp_path / "res"), "--overwrite"],
                                     tmp_path / "caches", names)
    assert code == 0 and len(out.read_text().splitlines()) > 20 and len(list((tmp_path / "res").iterdir())) >= 2
    others = {"rmsd", "rmsf", "rgyr", "average", "rdf", "contacts", "distances", "comdist"}
    assert not {m.rsplit(".", 1)[1] for m in loaded if m.startswith("trajscale.analysis.")} & others, loaded
    assert "trajscale.kernels.superpose" not in loaded
    assert not {m for m in loaded if m.rsplit(".", 1)[-1] in {"advice", "diagnose", "metrics", "stragglers"}}, loaded


def test_a_quiet_serial_h5md_run_creates_no_record_it_does_not_use(tmp_path):
    """``trajscale -q run rmsd TOP FILE.h5md --executor serial``, the shortest common run: no ``numpy.ma``
    (``np.unique``'s first call imports it), no pool's claims, no followed run's options, no record of what
    ``auto`` chose, no summary; none of the standard library's modules it has no use for (``socket`` for the
    host's name, ``statistics`` for one median, ``glob`` for no pattern: 4 ms of its start), nor the topology
    text's readers for a selection the cache answers, nor a fit's or a segment index's modules; its results are
    MDAnalysis's RMSD."""
    import MDAnalysis as mda
    import numpy as np
    from MDAnalysis.analysis import rms
    from MDAnalysisTests.datafiles import DCD, PSF

    import trajscale as ts

    h5, out = tmp_path / "adk.h5md", tmp_path / "r.csv"
    u = mda.Universe(PSF, DCD)
    with ts.ParallelWriter(h5, u.atoms.n_atoms) as w:
        for i, _ in enumerate(u.trajectory[:4]):
            w.write(step=i, time=float(i), ids=u.atoms.indices, positions=u.atoms.positions, box=u.dimensions)
    names = ("numpy.ma", "trajscale.executors.claims", "trajscale.endings", "trajscale.report.kinds",
             "trajscale.report.advice", "trajscale.analysis.group", "socket", "statistics", "glob",
             "trajscale.topology.columns", "trajscale.topology.labelled",
             # (a fit's sums, and the segment index's reader, for an output check that has no index to read)
             "trajscale.analysis.fitting", "trajscale.kernels.sums", "trajscale.sources.segments")
    code, loaded = _second_run_loads(["-q", "run", "rmsd", PSF, str(h5), "--select", "name CA", "--executor", "serial",
                                      "--out", str(out), "--overwrite"], tmp_path / "caches", names)
    assert code == 0 and loaded == []
    ref = rms.RMSD(mda.Universe(PSF, DCD), select="name CA").run(stop=4).results.rmsd[:, 2]
    np.testing.assert_allclose(np.loadtxt(out, delimiter=",", skiprows=1)[:, -1], ref, atol=1e-4)


def test_a_features_run_imports_no_kernel_it_does_not_use(tmp_path):
    """``ts.run(ts.Ramachandran(sincos=True), ...)`` on the serial executor imports the dihedral kernels alone:
    not the superposition kernels (RMSD's and fitting's, imported by their own modules), neither in a run nor
    for a run's tasks (its features against MDAnalysis's: tests/analysis/test_dihedrals.py)."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    import trajscale as ts

    h5 = tmp_path / "adk.h5md"
    u = mda.Universe(PSF, DCD)
    with ts.ParallelWriter(h5, u.atoms.n_atoms) as w:
        for i, _ in enumerate(u.trajectory[:3]):
            w.write(step=i, time=float(i), ids=u.atoms.indices, positions=u.atoms.positions)
    code = ("import json, sys\nimport trajscale as ts\n"
            f"r = ts.run(ts.Ramachandran(sincos=True), {PSF!r}, {str(h5)!r}, executor='serial')\n"
            "print(json.dumps({'shape': r.sincos.shape, 'loaded': sorted(m for m in sys.modules "
            "if m.startswith('trajscale.kernels.'))}))")
    got = _fresh(code)
    assert got["shape"] == [3, 212, 4]
    assert "trajscale.kernels.superpose" not in got["loaded"] and "trajscale.kernels.geometry" in got["loaded"]


def test_an_xtc_ensemble_run_imports_no_hdf5_nor_what_it_does_not_use(tmp_path):
    """``ts.run`` over a catalog of XTC members, serial, run again as a user repeats it (the topology cached):
    neither h5py nor H5MD's reader (the NetCDF output's and the HDF5 formats'), nor the padded dataset's
    module, a thread pool to prepare rounds ahead, the standard library's file-tree and UUID modules
    (together a quarter of a short features run's start), nor, for a topology at hand, the node cache of
    objects' copies with the object stores' clients and retries behind it."""
    from MDAnalysisTests.datafiles import GRO, XTC

    catalog = tmp_path / "members.csv"
    catalog.write_text(f"name,topology,trajectory\na,{GRO},{XTC}\nb,{GRO},{XTC}\nc,{GRO},{XTC}\n")
    code = ("import json, os, sys\n"
            f"os.environ['TRAJSCALE_CACHE_DIR'] = {str(tmp_path / 'caches')!r}\n"
            "import trajscale as ts\n"
            f"r = ts.run(ts.Ramachandran(sincos=True), {str(catalog)!r}, executor='serial', round_size=2)\n"
            "names = ('h5py', 'trajscale.h5md.source', 'trajscale.hdf5', 'trajscale.ensemble.padded', 'shutil', "
            "'uuid', 'concurrent.futures.thread', 'trajscale.storage.nodecache', 'trajscale.storage.objects', "
            "'trajscale.storage.clients', 'trajscale.storage.retry')\n"
            "print(json.dumps({'shapes': [a.shape for a in r.arrays()], "
            "'loaded': sorted(m for m in sys.modules if m.startswith(names))}))")
    _fresh(code)   # (the first run parses the topology: MDAnalysis imports what it imports)
    got = _fresh(code)
    assert [s[0] for s in got["shapes"]] == [10, 10, 10] and got["loaded"] == []


def test_an_mdcath_run_repeated_opens_no_hdf5_library(tmp_path):
    """A glob of mdCATH files run again, as a user repeats a run: each file's layout and atoms come from
    trajscale's cache, so the run imports neither h5py nor MDAnalysis (their import is most of a short run's
    start), and gives the first run's features."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    from trajscale.testing.mdcath import from_universe

    u = mda.Universe(PSF, DCD)
    for name in ("1adkA00", "2adkA00"):
        from_universe(tmp_path / f"mdcath_dataset_{name}.h5", u, members=(("320", "0"), ("348", "0")), n_frames=3)
    code = ("import json, os, sys\n"
            f"os.environ['TRAJSCALE_CACHE_DIR'] = {str(tmp_path / 'caches')!r}\n"
            "import trajscale as ts\n"
            f"r = ts.run(ts.Ramachandran(sincos=True), {str(tmp_path / 'mdcath_dataset_*.h5')!r}, executor='serial')\n"
            "print(json.dumps({'sums': [float(a.sum()) for a in r.arrays()], "
            "'loaded': sorted(m for m in sys.modules if m.startswith(('h5py', 'MDAnalysis')))}))")
    first, again = _fresh(code), _fresh(code)
    assert len(again["sums"]) == 4 and again["sums"] == first["sums"]
    assert again["loaded"] == []
