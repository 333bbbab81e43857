"""The rest of the remote matrix: every kind of remote trajectory on every executor, the CSV of
``trajscale run rmsd`` from the URL equal to the local file's, byte for byte.

The kinds: H5MD plain, gzip-compressed and lossy deltas (``adk_stores``), a segment index of two H5MD parts
(``trajscale split``) and a chain of two XTC parts with the offsets ``trajscale index`` wrote, each uploaded
beside its index. The executors: threads, Dask in the run's own process (a ``LocalCluster``), an external Dask
cluster (``dask scheduler`` and two ``dask worker`` processes, started once for the module, without any AWS
setting: the endpoint and credentials reach the workers with the job) and MPI (``mpiexec -n 2``). The cells
other files cover (serial everywhere, processes for plain, gzip, the segment index and XTC, Dask for plain,
MPI and an external cluster for gzip) are not repeated here. Each local reference is the serial run of the
local file, made once per kind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import run_cli, run_cli_here, run_mpi
from tests.dask_cluster import external_dask

from .conftest import BUCKET, CREDENTIALS, TPR, XTC, upload_segments

pytestmark = [pytest.mark.remote, pytest.mark.cli]

ROOT = Path(__file__).resolve().parents[2]
RUN = ["run", "rmsd", TPR]
SELECT = ["--select", "name CA"]

#: The cells this file fills: (kind, executor).
CELLS = [("plain", "threads"), ("plain", "dask-external"), ("plain", "mpi"),
         ("gzip", "dask"),
         ("lossy", "processes"), ("lossy", "threads"), ("lossy", "dask"), ("lossy", "dask-external"),
         ("lossy", "mpi"),
         ("segments", "threads"), ("segments", "dask"), ("segments", "dask-external"), ("segments", "mpi"),
         ("xtc-parts", "threads"), ("xtc-parts", "dask"), ("xtc-parts", "dask-external"), ("xtc-parts", "mpi")]


def _no_aws_env(cache: Path) -> dict:
    """This process's environment without any AWS setting (what reaches the server comes with the job)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**env, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "XDG_CACHE_HOME": str(cache),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


def _storage_options(server) -> list[str]:
    options = {"endpoint_url": server.endpoint, "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
               "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"], "region_name": "us-east-1"}
    return [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]


def _xtc_parts(server, folder: Path) -> str:
    """AdK's XTC in two parts (split at frame 5, where MDAnalysis's reader finds it) with the index
    ``trajscale index`` writes beside them, uploaded together: the index's URL."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile

    with XTCFile(XTC) as f:
        cut = int(f.offsets[5])
    data = Path(XTC).read_bytes()
    folder.mkdir()
    (folder / "part_0.xtc").write_bytes(data[:cut])
    (folder / "part_1.xtc").write_bytes(data[cut:])
    proc = run_cli("index", str(folder / "part_0.xtc"), str(folder / "part_1.xtc"), "-o", str(folder / "index.json"))
    assert proc.returncode == 0, proc.stderr
    client = server.client()
    for name in ("part_0.xtc", "part_1.xtc", "index.json"):
        client.upload_file(str(folder / name), BUCKET, f"matrix/xtc/{name}")
    return f"s3://{BUCKET}/matrix/xtc/index.json"


@pytest.fixture(scope="module")
def matrix(s3_server, adk_stores, tmp_path_factory):
    """``{kind: (the local file, the URL)}``, and the folder the runs write in. The segment index's local
    file is the whole plain store it was split from; the XTC parts', the whole XTC."""
    root = tmp_path_factory.mktemp("remote-matrix")
    plain = adk_stores["plain"][0]
    kinds = {name: adk_stores[name][:2] for name in ("plain", "gzip", "lossy")}
    kinds["segments"] = (plain, upload_segments(s3_server, plain, root / "segments", "matrix/segments"))
    kinds["xtc-parts"] = (XTC, _xtc_parts(s3_server, root / "xtc"))
    return kinds, root


@pytest.fixture(scope="module")
def local_csv(s3_server, matrix):
    """The CSV of a serial run of a local file, made once per file."""
    _, root = matrix
    made: dict[str, bytes] = {}

    def get(local: str) -> bytes:
        if local not in made:
            out = root / f"local-{len(made)}.csv"
            # in this process: a local file read serially, the reference, not a process under test
            proc = run_cli_here(*RUN, local, "--out", str(out), *SELECT, "--executor", "serial",
                                env=_no_aws_env(root / "cache"))
            assert proc.returncode == 0, proc.stderr
            made[local] = out.read_bytes()
        return made[local]

    return get


@pytest.fixture(scope="module")
def dask_scheduler(matrix):
    """An external Dask cluster for the module: a scheduler and two one-thread workers that know no endpoint
    and no credentials of their own; every process ended after."""
    pytest.importorskip("distributed")
    import distributed

    _, root = matrix
    folder = root / "dask"
    folder.mkdir()
    with external_dask(folder, 2, env=_no_aws_env(root / "cache")) as address:
        with distributed.Client(address, timeout=120) as client:
            client.wait_for_workers(2, timeout=120)
        yield address, folder


@pytest.mark.slow(seconds=2)   # each case a whole run (a Dask cluster, mpiexec) or two
@pytest.mark.parametrize("kind, executor", [pytest.param(*cell, marks=[pytest.mark.mpi] * (cell[1] == "mpi"),
                                                         id="-".join(cell)) for cell in CELLS])
def test_a_url_on_every_executor_gives_the_local_files_csv(s3_server, matrix, local_csv, request, kind, executor):
    kinds, root = matrix
    local, url = kinds[kind]
    out = root / f"{kind}-{executor}.csv"
    args = [*RUN, url, "--out", str(out), *SELECT, "--overwrite"]
    env = {**s3_server.subprocess_env(), "XDG_CACHE_HOME": str(root / "cache"), "OMP_NUM_THREADS": "1"}
    logs = ""
    if executor == "mpi":
        proc = run_mpi(2, ["-m", "trajscale.cli.main", *args, "--executor", "mpi", "--tasks", "4"], timeout=300,
                       env=env)
    elif executor == "dask-external":
        address, folder = request.getfixturevalue("dask_scheduler")
        proc = run_cli(*args, "--executor", "dask", "--scheduler", address, "--tasks", "4",
                       *_storage_options(s3_server), env=_no_aws_env(root / "cache"), timeout=300)
        logs = "".join(p.read_text()[-2000:] for p in sorted(folder.glob("worker*.log")))
    else:
        proc = run_cli(*args, "--executor", executor, "-n", "2", "--tasks", "4", env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr + logs
    assert out.read_bytes() == local_csv(local)
