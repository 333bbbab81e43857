"""The pieces of trajscale.storage that need no server: option parsing, URL resolution, range merging."""

from __future__ import annotations

import pytest

from trajscale.errors import ConfigError
from trajscale.storage import endpoint_of, parse_options, resolve, shown
from trajscale.storage.bytestore import LocalFile
from trajscale.storage.clients import store_config
from trajscale.storage.ranges import coalesce, read_coalesced

pytestmark = pytest.mark.remote


def test_command_line_options_take_their_types():
    got = parse_options(["anon=true", "retry_seconds=2.5", "max_concurrency=8", "endpoint_url=http://h:9000",
                         'client_kwargs={"region_name": "eu-west-1"}'])
    assert got == {"anon": True, "retry_seconds": 2.5, "max_concurrency": 8, "endpoint_url": "http://h:9000",
                   "client_kwargs": {"region_name": "eu-west-1"}}
    with pytest.raises(ConfigError, match="give KEY=VALUE"):
        parse_options(["anon"])


def test_messages_show_option_names_never_values():
    assert shown({"secret": "s3cr3t", "key": "AKIA"}) == "key, secret"
    assert endpoint_of("s3://b/k", {"endpoint_url": "http://h:1"}) == "http://h:1"
    assert endpoint_of("https://example.org/x/y.h5md") == "example.org"


def test_fsspec_names_become_obstores():
    cfg, _ = store_config("s3", {"anon": True, "key": "K", "secret": "S",
                                 "client_kwargs": {"endpoint_url": "http://h:1", "region_name": "r"}})
    assert cfg == {"skip_signature": True, "access_key_id": "K", "secret_access_key": "S",
                   "endpoint": "http://h:1", "region": "r"}


def test_parts_resolve_against_the_index_url():
    assert resolve("s3://b/run/index.json", "part_000.h5md") == "s3://b/run/part_000.h5md"
    assert resolve("https://h/a/b/index.json", "../c/p.h5md") == "https://h/a/c/p.h5md"
    assert resolve("s3://b/run/index.json", "s3://other/p.h5md") == "s3://other/p.h5md"


def test_ranges_merge_within_the_gap_and_the_request_size(tmp_path):
    merged, where = coalesce([(100, 200), (0, 50), (230, 300), (10_000, 10_100)], gap=40)
    assert merged == [(0, 50), (100, 300), (10_000, 10_100)]
    assert where == [(1, 0), (0, 0), (1, 130), (2, 0)]
    assert coalesce([(0, 100), (100, 200)], gap=0, max_request=150)[0] == [(0, 100), (100, 200)]
    data = bytes(range(256)) * 64
    path = tmp_path / "f"
    path.write_bytes(data)
    ranges = [(5, 17), (3000, 9000), (100, 4100), (16_000, 16_384)]
    got = read_coalesced(LocalFile(str(path)), ranges, gap=1000, max_request=1024)
    assert [bytes(g) for g in got] == [data[a:b] for a, b in ranges]


def test_a_presigned_url_is_refused_without_echoing_its_query():
    from trajscale.errors import InputFileError
    from trajscale.storage.objects import RemoteObject

    with pytest.raises(InputFileError) as caught:
        RemoteObject.open("https://h.example/b/k.h5md?X-Amz-Signature=SECRETSIG&X-Amz-Credential=AKIA")
    assert "SECRETSIG" not in str(caught.value) and "AKIA" not in str(caught.value)
    assert str(caught.value).startswith("https://h.example/b/k.h5md?...: URLs with a query string")


def test_merge_gap_is_trajscales_own_option_in_bytes():
    """``merge_gap`` is read by trajscale (never passed to the client), 64 KiB by default; a value that is
    no byte count is refused in one line naming the option."""
    from trajscale.storage.clients import check_options
    from trajscale.storage.ranges import MERGE_GAP, merge_gap_of

    own, client, fs = check_options("s3://b/k", {"merge_gap": 4096, "anon": True})
    assert own == {"merge_gap": 4096} and client == {} and fs == {"anon": True}
    assert MERGE_GAP == 64 * 1024 and merge_gap_of({}) == MERGE_GAP and merge_gap_of(own) == 4096
    assert merge_gap_of(dict([parse_options(["merge_gap=1048576"]).popitem()])) == 1024**2
    for bad in (-1, "64KiB", 1.5, True):
        with pytest.raises(ConfigError, match="merge_gap"):
            merge_gap_of({"merge_gap": bad})


def test_a_jobs_and_an_openers_repr_never_show_a_credential():
    """A task's repr reaches logs (Dask's "Compute Failed" lines): the storage options' secrets are hidden
    there, while the config that travels keeps them (the workers need them)."""
    from trajscale.arrays.reads import SourceOpener
    from trajscale.executors.base import Job

    config = {"path": "s3://b/k.h5md", "storage_options": {"key": "AKIDEXAMPLE", "secret": "s3cr3t-v4lue",
                                                           "client_kwargs": {"session_token": "t0k3n"},
                                                           "endpoint_url": "http://127.0.0.1:9"}}
    for obj in (Job({"name": "rmsd"}, config, None), SourceOpener.of(config)):
        text = repr(obj)
        assert "127.0.0.1:9" in text and "k.h5md" in text
        for secret in ("AKIDEXAMPLE", "s3cr3t-v4lue", "t0k3n"):
            assert secret not in text
    assert SourceOpener.of(config).config["storage_options"]["secret"] == "s3cr3t-v4lue"


class _CountingFile(LocalFile):
    """A local file standing in for an object: its URL, no head, and every range it is asked for."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.url, self.head, self.asked = path, b"", []

    def read_ranges(self, ranges):
        self.asked += ranges
        return super().read_ranges(ranges)


def test_hdf5_opens_from_the_metadata_another_file_object_read(tmp_path, monkeypatch):
    """A worker's file object given the bytes HDF5 read through the root's opens the file and reads its
    small datasets' attributes without asking its store for a byte; what they lack is fetched."""
    import h5py
    import numpy as np

    from trajscale.storage import fileobj
    from trajscale.storage.fileobj import CachingFile
    from trajscale.util import LRU

    path = str(tmp_path / "f.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("big", data=np.arange(3_000_000, dtype=np.float32))
        f.create_dataset("small", data=np.arange(10.0)).attrs["unit"] = "ps"
    root_store = _CountingFile(path)
    root = CachingFile(root_store, block_bytes=4096)
    with h5py.File(root, "r") as f:
        assert f["small"].attrs["unit"] == "ps" and f["big"].shape == (3_000_000,)
    shipped = root.metadata()
    assert root_store.asked and 0 < sum(len(b) for _, b in shipped) < 64 * 1024   # the metadata, not the data

    # (a worker is another process: none of the root's blocks)
    monkeypatch.setattr(fileobj, "_BLOCKS", LRU(max_bytes=fileobj.CACHE_BYTES))
    worker_store = _CountingFile(path)
    worker = CachingFile(worker_store, block_bytes=4096, known=shipped)
    with h5py.File(worker, "r") as f:
        assert f["small"].attrs["unit"] == "ps" and f["big"].shape == (3_000_000,)
        assert worker_store.asked == []   # opened from the shipped bytes
        assert np.array_equal(f["big"][-5:], np.arange(2_999_995, 3_000_000, dtype=np.float32))
    assert worker_store.asked   # the data it lacked came from the store
    assert root.metadata(max_bytes=0) == []


def test_a_cache_folder_keeps_the_entries_used_most_recently(tmp_path, monkeypatch):
    """Entries are written whole and the user's only; past the folder's budget the ones used least recently
    go, and reading an entry counts as a use."""
    import os

    from trajscale.storage import cache

    monkeypatch.setattr(cache, "MAX_FOLDER_BYTES", 2500)
    folder = tmp_path / "entries"
    paths = [folder / f"{i}.json" for i in range(3)]
    for i, path in enumerate(paths[:2]):
        cache.write(path, lambda fh: fh.write(b"x" * 1000), "test entry")
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    assert cache.read(paths[0]) == b"x" * 1000   # read now: used after the second
    cache.write(paths[2], lambda fh: fh.write(b"x" * 1000), "test entry")
    assert sorted(p.name for p in folder.iterdir()) == ["0.json", "2.json"]
    assert {p.stat().st_mode & 0o777 for p in folder.iterdir()} == {0o600}
    assert folder.stat().st_mode & 0o777 == 0o700
    os.chmod(paths[2], 0o620)
    assert cache.read(paths[2]) is None   # others may write it


def test_a_cache_entry_is_never_read_through_a_link_or_from_an_open_folder(tmp_path):
    """A link planted under an entry's name is not followed, even to a file of the user's; an entry in a
    folder that others may write is not read."""
    import os

    from trajscale.storage import cache

    folder = tmp_path / "entries"
    cache.write(folder / "real.json", lambda fh: fh.write(b"{}"), "test entry")
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(b"{}")
    os.chmod(elsewhere, 0o600)
    (folder / "planted.json").symlink_to(elsewhere)
    assert cache.read(folder / "real.json") == b"{}"
    assert cache.read(folder / "planted.json") is None
    os.chmod(folder, 0o777)
    assert cache.read(folder / "real.json") is None


def test_a_files_first_bytes_are_read_as_it_is_now_its_ranges_as_first_seen(tmp_path):
    """A file rewritten in place at the same size (a writer flushing HDF5's metadata) after it was looked at:
    its first bytes (what a format is told from) are the file's now; a read of its frames is refused."""
    import os

    from trajscale.storage.retry import Replaced

    path = tmp_path / "growing.bin"
    path.write_bytes(b"A" * 64)
    store = LocalFile(str(path))
    with open(path, "r+b") as fh:
        fh.write(b"B" * 8)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))   # (a later second, as a flush)
    assert store.first_bytes(4) == b"BBBB"
    with pytest.raises(Replaced, match="replaced or rewritten"):
        store.read_ranges([(0, 4)])
