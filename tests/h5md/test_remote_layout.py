"""The layout for stores read over the network (``--layout remote``): chunks planned for range requests,
HDF5's metadata in the file's first 256 KiB, and a plain H5MD file MDAnalysis reads.

Where the metadata lies is measured, not taken from HDF5's settings: the file is opened by h5py through
a Python file object that records every byte range HDF5 asks for while it walks every object, attribute
and chunk index (what a remote reader fetches before any frame)."""

from __future__ import annotations

import functools
import io
import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest

from tests.conftest import run_cli, run_cli_here
from trajscale.errors import ConfigError
from trajscale.h5md.layout import (
    REMOTE_MAX_CHUNK_BYTES,
    REMOTE_MIN_CHUNK_BYTES,
    Layout,
    plan_remote_frames_per_chunk,
)
from trajscale.storage.bytestore import Validator

MiB = 1024**2
#: The first range request of a remote reader (and the block its HDF5 metadata cache reads by).
HEAD = 256 * 1024


class RecordingFile(io.RawIOBase):
    """A read-only file object that records the byte ranges read from it."""

    def __init__(self, path) -> None:
        super().__init__()
        self._f = open(path, "rb")   # noqa: SIM115 - closed with the object
        self.ranges: list[tuple[int, int]] = []

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def readinto(self, buf) -> int:
        at = self._f.tell()
        n = self._f.readinto(buf)
        self.ranges.append((at, at + n))
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


def metadata_reads(path) -> tuple[list[tuple[int, int]], int, list[h5py.h5d.StoreInfo]]:
    """(the ranges HDF5 reads to open the file and walk all its metadata, the first byte of any dataset's
    data, the position dataset's chunks)."""
    rec = RecordingFile(path)
    try:
        with h5py.File(rec, "r") as f:
            objs = []
            f.visititems(lambda _n, o: objs.append(o))
            starts = []
            for o in objs:
                dict(o.attrs)
                if isinstance(o, h5py.Dataset):
                    if o.chunks is None:
                        if o.id.get_offset() is not None:
                            starts.append(o.id.get_offset())
                    else:
                        starts += [o.id.get_chunk_info(i).byte_offset for i in range(o.id.get_num_chunks())]
            pos = f["particles/all/position/value"]
            chunks = [pos.id.get_chunk_info(i) for i in range(pos.id.get_num_chunks())]
            ranges = list(rec.ranges)
    finally:
        rec.close()
    return ranges, min(starts), chunks


def check_remote_store(path, n_frames: int) -> None:
    ranges, first_data, chunks = metadata_reads(path)
    # every byte of metadata HDF5 read lies in the first range request, before any dataset's data
    assert max(b for _, b in ranges) <= min(HEAD, first_data)
    assert min(c.byte_offset for c in chunks) >= max(b for _, b in ranges)
    with h5py.File(path) as f:
        pos = f["particles/all/position/value"]
        assert pos.chunks[1:] == pos.shape[1:]          # whole frames
        frame = pos.shape[1] * 3 * pos.dtype.itemsize
        sizes = [c.size for c in chunks]
        assert len(sizes) == -(-n_frames // pos.chunks[0])
        assert max(sizes) <= REMOTE_MAX_CHUNK_BYTES
        if n_frames * frame >= REMOTE_MIN_CHUNK_BYTES:
            assert min(sizes) >= REMOTE_MIN_CHUNK_BYTES


@functools.cache
def _topology(top: str):
    """MDAnalysis's parse of a topology, once per process (AdK in water's TPR: a second of CPU each time)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mda.Universe(top)._topology


@functools.cache
def _source_frames(top: str, traj: str) -> tuple[np.ndarray, np.ndarray]:
    """Every frame's positions and box as MDAnalysis reads one trajectory file, once per process (the
    sources here are one XTC given several times over)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(_topology(top), traj)
        frames = [(ts.positions.copy(), ts.dimensions.copy()) for ts in u.trajectory]
    return np.array([f[0] for f in frames]), np.array([f[1] for f in frames])


def assert_mdanalysis_reads_as_source(top: str, store: str, trajs: list[str]) -> None:
    """MDAnalysis's own H5MDReader reads the store's positions as MDAnalysis reads the source (its files'
    frames one after another)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = mda.Universe(_topology(top), store)
    ref = [frame for t in trajs for frame in zip(*_source_frames(top, t), strict=True)]
    assert type(ours.trajectory).__name__ == "H5MDReader"
    assert ours.trajectory.n_frames == len(ref)
    for a, (pos, box) in zip(ours.trajectory, ref, strict=True):
        np.testing.assert_array_equal(a.positions, pos)
        np.testing.assert_allclose(a.dimensions, box, rtol=1e-6)


@pytest.mark.parametrize("n_atoms", [1, 214, 3341, 47681, 1_000_000, 2_000_000])
def test_remote_chunks_hold_whole_frames_of_1_to_16_mib(n_atoms):
    frames = plan_remote_frames_per_chunk(n_atoms)
    assert Layout("auto", remote=True).chunk_shape(n_atoms) == (frames, n_atoms, 3)
    nbytes = frames * n_atoms * 12
    assert nbytes <= REMOTE_MAX_CHUNK_BYTES or frames == 1     # one frame alone may be bigger
    assert nbytes >= REMOTE_MIN_CHUNK_BYTES or n_atoms * 12 * (frames + 1) > REMOTE_MAX_CHUNK_BYTES


def test_remote_chunks_split_a_short_trajectory_evenly():
    # 30 frames of 572 kB: three chunks of 10 frames, not 14 + 14 + a last chunk of 2 frames in 14's space
    assert Layout("auto", remote=True).chunk_shape(47681, 4, 30) == (10, 47681, 3)
    assert Layout("auto", remote=True).chunk_shape(47681, 4, 5) == (5, 47681, 3)
    assert Layout(7, remote=True).chunk_shape(47681, 4, 30) == (7, 47681, 3)   # a given count is kept
    assert Layout("auto").chunk_shape(47681, 4, 30) == (3, 47681, 3)           # the disk layout is unchanged


def test_parse_remote_target():
    lay = Layout.parse("auto", "none", target="remote")
    assert lay.remote and lay.file_kwargs() == {"meta_block_size": 252 * 1024}
    assert Layout.parse("auto").file_kwargs() == {}
    assert "layout=remote" in lay.describe()
    for bad in [dict(chunks="h5py", target="remote"), dict(target="cloud")]:
        with pytest.raises(ConfigError):
            Layout.parse(**bad)


@pytest.mark.slow
def test_convert_layout_remote(tmp_path, adk_water):
    trajs = [adk_water["xtc"]] * 6   # 60 frames, 34 MB of positions
    out = tmp_path / "remote.h5md"
    r = run_cli_here("convert", adk_water["tpr"], *trajs, "-o", str(out), "--layout", "remote")
    assert r.returncode == 0, r.stderr
    check_remote_store(out, 60)
    # the disk layout for comparison: its chunk index lies past the data (what the remote layout fixes)
    disk = tmp_path / "disk.h5md"
    assert run_cli_here("convert", adk_water["tpr"], *trajs, "-o", str(disk)).returncode == 0
    ranges, _, _ = metadata_reads(disk)
    assert max(b for _, b in ranges) > 10 * MiB
    assert_mdanalysis_reads_as_source(adk_water["tpr"], str(out), trajs)


@pytest.mark.cli
@pytest.mark.slow
def test_convert_layout_remote_on_processes(tmp_path, adk_water):
    """Two worker processes write segments that are joined into the output: it gets the metadata block too."""
    trajs = [adk_water["xtc"]] * 4
    out = tmp_path / "remote.h5md"
    r = run_cli("convert", adk_water["tpr"], *trajs, "-o", str(out), "--layout", "remote",
                "--executor", "processes", "-n", "2")
    assert r.returncode == 0, r.stderr
    check_remote_store(out, 40)
    assert_mdanalysis_reads_as_source(adk_water["tpr"], str(out), trajs)


@pytest.mark.slow
def test_rechunk_layout_remote_serial_and_processes(tmp_path, adk_water, stores):
    trajs = [adk_water["xtc"]] * 3
    src = stores["frame"]   # the disk layout with frame chunks, 30 frames (read only)
    for extra in ([], ["--executor", "processes", "-n", "2"]):
        out = tmp_path / f"remote{len(extra)}.h5md"
        r = run_cli_here("rechunk", str(src), "-o", str(out), "--layout", "remote", *extra)
        assert r.returncode == 0, r.stderr
        check_remote_store(out, 30)
        assert_mdanalysis_reads_as_source(adk_water["tpr"], str(out), trajs)


def test_convert_python_remote_layout_with_compression(tmp_path, adk_water):
    """The Python spelling, on a compressed store: the same metadata at the start, every chunk stored
    within the 16 MiB bound, and positions equal to the source's."""
    from trajscale.convert.convert import convert

    trajs = [adk_water["xtc"]] * 2
    out = tmp_path / "remote.h5md"
    convert(adk_water["tpr"], trajs, str(out), layout=Layout.parse("auto", "gzip:1", target="remote"))
    ranges, first_data, chunks = metadata_reads(out)
    assert max(b for _, b in ranges) <= min(HEAD, first_data)
    assert all(c.size <= REMOTE_MAX_CHUNK_BYTES for c in chunks)
    assert_mdanalysis_reads_as_source(adk_water["tpr"], str(out), trajs)
    r = run_cli_here("convert", adk_water["tpr"], adk_water["xtc"], "-o", str(tmp_path / "x.h5md"),
                     "--layout", "remote", "--chunks", "h5py")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "--layout remote" in r.stderr


class CountingStore:
    """A local file as the remote reader's byte store, counting its requests and bytes."""

    def __init__(self, path) -> None:
        from trajscale.storage.bytestore import LocalFile

        self._local = LocalFile(str(path))
        self.url = str(path)
        self.head = b""
        self.requests = self.bytes = 0

    @property
    def size(self) -> int:
        return self._local.size

    #: (as an object's: ranges this close are one request, and no local descriptor to gather from)
    merge_gap = 64 * 1024
    #: (as a replacement it would not see: its file object's blocks are its own, each store counts from none)
    validator = Validator("size", False, "a test's store")

    def descriptor(self) -> None:
        return None

    def read_ranges(self, ranges):
        self.requests += len(ranges)
        self.bytes += sum(b - a for a, b in ranges)
        return self._local.read_ranges(ranges)


@pytest.fixture(scope="module")
def stores(tmp_path_factory, adk_water):
    """AdK in water (30 frames): the disk layout with frame chunks, the remote layout, and gzip chunks."""
    from trajscale.convert.convert import convert

    d = tmp_path_factory.mktemp("costs")
    trajs = [adk_water["xtc"]] * 3
    out = {}
    for name, layout in (("frame", Layout.parse("frame")), ("remote", Layout.parse("auto", target="remote")),
                         ("gzip", Layout.parse("4", "gzip:1"))):
        out[name] = str(d / f"{name}.h5md")
        convert(adk_water["tpr"], trajs, out[name], layout=layout)
    return out


@pytest.mark.parametrize("name", ["frame", "remote", "gzip"])
def test_costs_are_what_the_remote_reader_fetches(stores, name):
    """inspect's cost model against trajscale's remote reader itself (its chunk reads and its caching file
    object, over a local byte store that counts what they fetch)."""
    from trajscale.h5md.inspect import file_remote_costs, time_facts
    from trajscale.h5md.schema import describe
    from trajscale.hdf5.chunks import MAX_REQUEST, MERGE_GAP, ChunkIndex, ChunkReads
    from trajscale.hdf5.runs import plan_atom_reads
    from trajscale.storage.fileobj import BLOCK_BYTES, CachingFile

    path = stores[name]
    ca = np.arange(0, 3341, 15)
    costs = file_remote_costs(path, atoms={"CA": ca}, block_bytes=BLOCK_BYTES, merge_gap=MERGE_GAP,
                              max_request=MAX_REQUEST)
    # opening: HDF5 reads its metadata (and then the times) through the reader's caching file object
    store = CountingStore(path)
    with h5py.File(CachingFile(store), "r") as f:
        info = describe(f)
        index = ChunkIndex.of(f[info.dataset()])
        assert (store.requests, store.bytes) == (costs["opening"]["metadata"]["requests"],
                                                costs["opening"]["metadata"]["bytes"])
        time_facts(f, info)
        assert store.requests == costs["opening"]["metadata"]["requests"] + costs["opening"]["times"]["requests"]
        dcpl = f[info.dataset()].id.get_create_plist()
    if name == "remote":
        assert costs["opening"]["metadata"]["requests"] == 1
    # each access pattern: the requests and bytes the reader's chunk reads fetch for the first frames
    from trajscale.hdf5.chunks import ChunkDecoder

    for label, (k, atoms) in {"one frame": (1, None), "all 30 frames": (30, None),
                              "150-atom subset, all 30 frames": (30, np.arange(150)),
                              "CA, all 30 frames": (30, ca)}.items():
        store = CountingStore(path)
        reads = ChunkReads(store, index, lambda: ChunkDecoder(dcpl, index.chunks, index.dtype))
        runs = plan_atom_reads(atoms, 47681).runs
        out = np.empty((k, int((runs[:, 1] - runs[:, 0]).sum()), 3), np.float32)
        assert reads.read_runs(runs, out, 0, 1)
        reads.close()
        got = costs["patterns"][label]
        assert (store.requests, store.bytes) == (got["requests"], got["bytes"]), label


def test_inspect_remote_costs(stores, adk_water, tmp_path):
    import json
    import shutil

    r = run_cli_here("inspect", stores["frame"], "--remote-costs", "--pattern", "atoms:name CA",
                     "--topology", adk_water["tpr"])
    assert r.returncode == 0, r.stderr
    assert "over the network" in r.stdout and "atoms:name CA (214 atoms), all 30 frames" in r.stdout
    # a default-layout store keeps its structure before its frames (its per-atom datasets are created last)
    for name in ("remote", "frame"):
        facts = json.loads(run_cli_here("inspect", stores[name], "--remote-costs", "--json").stdout)
        assert facts["remote_costs"]["opening"]["metadata"]["requests"] == 1, name
        assert facts["remote_costs"]["patterns"]["one frame"]["requests"] == 1, name
    # a header grown after the frames were written (an attribute a user added) lies past them
    spread = tmp_path / "spread.h5md"
    shutil.copy(stores["frame"], spread)
    with h5py.File(spread, "a") as f:
        f["particles/all/position/value"].attrs["note"] = "x" * 60_000
    r = run_cli_here("inspect", str(spread), "--remote-costs")
    assert "--layout remote` gathers it" in r.stdout, r.stdout


@pytest.mark.mpi
def test_rechunk_layout_remote_under_mpiexec(tmp_path, adk_water, stores):
    """Two ranks writing the one output collectively: the chunks' index still lies in the metadata block."""
    from tests.conftest import run_mpi

    trajs = [adk_water["xtc"]] * 3
    src = stores["frame"]   # the disk layout with frame chunks, 30 frames (read only)
    out = tmp_path / "remote.h5md"
    r = run_mpi(2, ["-m", "trajscale.cli.main", "rechunk", str(src), "-o", str(out), "--layout", "remote"])
    assert r.returncode == 0, r.stdout + r.stderr
    check_remote_store(out, 30)
    assert_mdanalysis_reads_as_source(adk_water["tpr"], str(out), trajs)


@pytest.mark.slow
def test_inspect_url_costs_equal_the_local_files(stores, tmp_path):
    """``inspect s3://...`` (a moto server on 127.0.0.1) gives the costs ``--remote-costs`` gives for the
    same file on local disk: a function of the layout, the metadata measured through the reader's own
    caching file object."""
    import json
    import os
    import socket

    import boto3
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        s3.create_bucket(Bucket="layouts")
        env = {**os.environ, **creds, "AWS_ENDPOINT_URL": endpoint}
        for name in ("frame", "remote"):
            s3.upload_file(stores[name], "layouts", f"{name}.h5md")
            r = run_cli_here("inspect", f"s3://layouts/{name}.h5md", "--json", env=env)
            assert r.returncode == 0, r.stderr
            remote = json.loads(r.stdout)["remote_costs"]
            local = json.loads(run_cli_here("inspect", stores[name], "--remote-costs", "--json").stdout)["remote_costs"]
            assert remote == local
        assert remote["opening"]["metadata"]["requests"] == 1   # the remote layout: one request
    finally:
        server.stop()


def _headers_and_frames(path) -> tuple[dict[str, int], int]:
    """Every object's header address (h5py's object number), and the byte where the positions' storage
    begins."""
    with h5py.File(path, "r") as f:
        headers = {}

        def visit(name, obj):
            headers[name] = h5py.h5g.get_objinfo(obj.id).objno[0]
        f.visititems(visit)
        return headers, f["particles/all/position/value"].id.get_chunk_info(0).byte_offset


def test_a_default_layout_store_keeps_its_structure_before_its_frames(adk_water, tmp_path):
    """convert (the writer) and rechunk (the copy) create the per-atom datasets after every other object,
    so no object header lies beyond the frames' storage (allocated as the datasets are created)."""
    trajs = [adk_water["xtc"]] * 3
    written = tmp_path / "written.h5md"
    assert run_cli_here("convert", adk_water["tpr"], *trajs, "-o", str(written), "-q").returncode == 0
    copied = tmp_path / "copied.h5md"
    assert run_cli_here("rechunk", str(written), "-o", str(copied), "--chunks", "2", "-q").returncode == 0
    for path in (written, copied):
        headers, frames = _headers_and_frames(path)
        assert {"particles/all/mass", "particles/all/segid", "particles/all/box/edges/time"} <= set(headers)
        late = {name: at for name, at in headers.items() if at > frames and name != "particles/all/position/value"}
        assert not late, (path.name, frames, late)
        assert max(headers.values()) < HEAD, (path.name, headers)   # all of them in a reader's first request
