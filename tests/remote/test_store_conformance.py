"""Every byte store passes the store conformance suite (tests.remote.stores) against a real server:
a local file, moto's S3, nginx over http and over https (a CA and a server certificate made by openssl),
fake-gcs-server (Google Cloud Storage) and Azurite (Azure Blob)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from trajscale.errors import InputFileError

from .conftest import BUCKET
from .stores import Backend, StoreConformance, TcpProxy


class LocalBackend(Backend):
    no_connection = "a local file has no connection to cut or freeze"
    no_denial = "root reads every local file" if os.geteuid() == 0 else None
    no_paging = "a folder is listed by the file system, in no pages"

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def location(self, name: str) -> str:
        return str(self.folder / name)

    def put(self, name: str, data: bytes) -> str:
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)   # a new file under the name, as a publisher renames one
        return self.location(name)

    def denied(self, name: str, data: bytes) -> tuple[str, dict]:
        where = self.put(name, data)
        os.chmod(where, 0)
        return where, {}


class TestLocalFile(StoreConformance):
    @pytest.fixture
    def backend(self, tmp_path):
        return LocalBackend(tmp_path)

    def test_a_file_rewritten_in_place_is_refused(self, tmp_path, data):
        """Rewritten under the same inode (``cp`` over it), same size: the modification time says it."""
        backend = LocalBackend(tmp_path)
        store = backend.open(backend.put("inplace.bin", data))
        with open(tmp_path / "inplace.bin", "r+b") as fh:
            fh.write(b"\0" * 100)
        os.utime(tmp_path / "inplace.bin", ns=(1, store.identity[4] + 1))
        with pytest.raises(Exception, match="replaced or rewritten"):
            store.read_ranges([(0, 10)])


class S3Backend(Backend):
    """moto's S3 server (the session's, in this process)."""

    no_denial = None
    #: keys in a page of moto's ListObjectsV2 (S3's own default)
    page = 1000

    def __init__(self, server, prefix: str) -> None:
        self.server, self.prefix = server, prefix
        self.client = server.client()
        with contextlib.suppress(Exception):
            self.client.create_bucket(Bucket=BUCKET)
        self.forget()

    def location(self, name: str) -> str:
        return f"s3://{BUCKET}/{self.prefix}/{name}"

    def put(self, name: str, data: bytes) -> str:
        self.client.put_object(Bucket=BUCKET, Key=f"{self.prefix}/{name}", Body=data)
        return self.location(name)

    def put_many(self, names: list[str], data: bytes = b"") -> None:
        """Straight into the server's own store (it runs in this process): a thousand PUTs over HTTP take
        seconds, and the listing of them is what is tested, through the server."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        store = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        for name in names:
            store.put_object(BUCKET, f"{self.prefix}/{name}", data)

    @contextlib.contextmanager
    def proxied(self, name: str):
        port = int(self.server.endpoint.rsplit(":", 1)[1])
        proxy = TcpProxy("127.0.0.1", port)
        try:
            yield self.location(name), {"endpoint_url": f"http://{proxy.address}"}, proxy
        finally:
            proxy.close()

    def denied(self, name: str, data: bytes) -> tuple[str, dict]:
        """A private object asked for without signing (``anon=true``): moto answers 403 AccessDenied."""
        return self.put(name, data), {"anon": True}


@pytest.mark.remote
class TestS3(StoreConformance):
    @pytest.fixture
    def backend(self, s3_env, request):
        return S3Backend(s3_env, request.node.name.replace("[", "_").replace("]", ""))


@pytest.mark.remote
def test_a_pinned_version_gone_is_a_replacement(s3_env):
    """Reads pinned to the version a run began with (a versioned bucket's; GCS pins every read to the object's
    generation): that version removed, a read answers "no such object", which is said as the object replaced
    during the run, as the validator table promises, not as a missing key."""
    from trajscale.storage.location import Location

    from .stores import payload

    client = s3_env.client()
    client.create_bucket(Bucket="pinned")
    client.put_bucket_versioning(Bucket="pinned", VersioningConfiguration={"Status": "Enabled"})
    first = client.put_object(Bucket="pinned", Key="gone.bin", Body=payload())["VersionId"]
    store = Location("s3://pinned/gone.bin", {"retry_seconds": 2}).store()
    assert store.object_identity.version == first
    client.put_object(Bucket="pinned", Key="gone.bin", Body=payload(seed=5))
    client.delete_object(Bucket="pinned", Key="gone.bin", VersionId=first)   # as GCS drops a replaced generation
    with pytest.raises(InputFileError, match="replaced") as err:
        store.read_ranges([(300_000, 400_000)])
    assert "no such object" not in str(err.value)


class NginxBackend(Backend):
    """Debian's nginx serving a folder, over http or https (the CA that signed its certificate trusted
    through the ``ca_bundle`` option)."""

    no_listing = "a web server has no listing: a glob over http(s) is refused (tests/sources/test_locations.py)"

    def __init__(self, nginx, https: bool, folder: str) -> None:
        self.nginx, self.https, self.folder = nginx, https, folder
        (nginx.root / folder).mkdir(parents=True, exist_ok=True)
        self.trust = {"ca_bundle": str(nginx.ca)} if https else {}

    def location(self, name: str, port: int | None = None) -> str:
        return self.nginx.url(f"{self.folder}/{name}", self.https, port)

    def put(self, name: str, data: bytes) -> str:
        path = self.nginx.root / self.folder / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return self.location(name)

    def open(self, location: str, options: dict | None = None):
        return super().open(location, {**self.trust, **(options or {})})

    @contextlib.contextmanager
    def proxied(self, name: str):
        proxy = TcpProxy("127.0.0.1", self.nginx.https if self.https else self.nginx.http)
        try:
            yield self.location(name, proxy.port), {}, proxy
        finally:
            proxy.close()

    def denied(self, name: str, data: bytes) -> tuple[str, dict]:
        path = self.nginx.root / "denied" / name
        path.write_bytes(data)
        return self.nginx.url(f"denied/{name}", self.https), {}


@pytest.mark.remote
class TestNginxHttp(StoreConformance):
    @pytest.fixture
    def backend(self, nginx, request):
        return NginxBackend(nginx, False, request.node.name.replace("[", "_").replace("]", ""))


@pytest.mark.remote
class TestNginxHttps(StoreConformance):
    @pytest.fixture
    def backend(self, nginx, request):
        return NginxBackend(nginx, True, request.node.name.replace("[", "_").replace("]", ""))


@pytest.fixture(scope="module")
def azurite():
    from .emulators import Azurite, azurite_missing

    why = azurite_missing()
    if why:
        pytest.skip(why)
    server = Azurite()
    try:
        yield server
    finally:
        server.stop()


class AzureBackend(Backend):
    """Azurite (npm), reached as a user reaches Azure: ``az://CONTAINER/KEY`` with an account, its key and an
    endpoint; objects put through obstore (Azure's own protocol)."""

    no_denial = None
    no_paging = "Azurite pages at 5,000 blobs, and 5,001 uploads to it take longer than a test of this suite may"

    def __init__(self, azurite, container: str) -> None:
        import obstore
        from obstore.store import AzureStore

        self.azurite, self.container = azurite, container
        azurite.create_container(container)
        options = azurite.options
        self._put = lambda key, data: obstore.put(AzureStore(
            container, config={"account_name": options["account_name"], "account_key": options["account_key"],
                               "endpoint": options["endpoint_url"]}, client_options={"allow_http": True}), key, data)
        self.forget()

    def location(self, name: str) -> str:
        return f"az://{self.container}/{name}"

    def put(self, name: str, data: bytes) -> str:
        self._put(name, data)
        return self.location(name)

    def open(self, location: str, options: dict | None = None):
        return super().open(location, {**self.azurite.options, **(options or {})})

    def listing_options(self) -> dict:
        return dict(self.azurite.options)

    @contextlib.contextmanager
    def proxied(self, name: str):
        proxy = TcpProxy("127.0.0.1", self.azurite.port)
        try:
            account = self.azurite.options["account_name"]
            yield self.location(name), {"endpoint_url": f"http://{proxy.address}/{account}"}, proxy
        finally:
            proxy.close()

    def denied(self, name: str, data: bytes) -> tuple[str, dict]:
        """The account's key replaced by another: Azurite refuses the signature (403)."""
        import base64

        return self.put(name, data), {"account_key": base64.b64encode(b"not the key" * 4).decode()}


@pytest.mark.remote
class TestAzure(StoreConformance):
    @pytest.fixture
    def backend(self, azurite, request):
        name = "".join(c for c in request.node.name.lower() if c.isalnum())[:40] or "c"
        return AzureBackend(azurite, name)


class GcsBackend(Backend):
    """fake-gcs-server, reached as a user reaches a GCS emulator: ``gs://BUCKET/KEY`` with ``endpoint_url`` and
    ``anon``; objects uploaded through GCS's JSON API (each upload a new generation, with a new ETag)."""

    no_denial = "fake-gcs-server grants every request: it checks no credentials"
    no_paging = "fake-gcs-server answers a listing in one page, however long (no continuation token)"

    def __init__(self, server, bucket: str) -> None:
        self.server, self.bucket = server, bucket
        server.create_bucket(bucket)
        self.forget()

    def location(self, name: str) -> str:
        return f"gs://{self.bucket}/{name}"

    def put(self, name: str, data: bytes) -> str:
        self.server.put(self.bucket, name, data)
        return self.location(name)

    def open(self, location: str, options: dict | None = None):
        return super().open(location, {**self.server.options, **(options or {})})

    def listing_options(self) -> dict:
        return dict(self.server.options)

    @contextlib.contextmanager
    def proxied(self, name: str):
        proxy = TcpProxy("127.0.0.1", self.server.port)
        try:
            yield self.location(name), {"endpoint_url": f"http://{proxy.address}"}, proxy
        finally:
            proxy.close()


@pytest.mark.remote
class TestGoogleCloudStorage(StoreConformance):
    @pytest.fixture
    def backend(self, gcs_server, request):
        # (a bucket per test: GCS's names are 3 to 63 lower-case letters, digits and dashes)
        name = "".join(c for c in request.node.name.lower() if c.isalnum())[:50] or "bucket"
        return GcsBackend(gcs_server, f"t-{name}")


class HubBackend(Backend):
    """The suite's Hub server (tests.remote.hub_server): a file put is a commit on ``main``, named at that commit;
    ranges are read from the storage server its resolve URL redirects to. A proxy is put in front of the
    storage for reads, in front of the Hub for listings."""

    no_denial = None
    no_replacement = ("a commit's files never change: a file replaced is a new commit, which a run pinned to its "
                      "commit never reads (tests/remote/test_hub.py: a branch moved)")

    def __init__(self, hub, repo: str) -> None:
        self.hub, self.repo, self.page = hub, repo, hub.page
        hub.commit(repo, {"README.md": b"conformance\n"})

    def location(self, name: str) -> str:
        return f"hf://datasets/{self.repo}@{self.hub.repos[('datasets', self.repo)].refs['main']}/{name}"

    def put(self, name: str, data: bytes) -> str:
        self.hub.commit(self.repo, {name: data})
        return self.location(name)

    def put_many(self, names: list[str], data: bytes = b"") -> None:
        self.hub.commit(self.repo, dict.fromkeys(names, data))

    def open(self, location: str, options: dict | None = None):
        return super().open(location, {**self.listing_options(), **(options or {})})

    def listing_options(self) -> dict:
        return {"endpoint_url": self.hub.endpoint}

    @contextlib.contextmanager
    def proxied(self, name: str):
        listing = name.startswith(("glob/", "paged/"))
        upstream = self.hub.endpoint if listing else self.hub.storage
        proxy = TcpProxy("127.0.0.1", int(upstream.rsplit(":", 1)[1]))
        if not listing:
            self.hub.storage_via = f"http://{proxy.address}"
        try:
            yield self.location(name), {"endpoint_url": f"http://{proxy.address}"} if listing else {}, proxy
        finally:
            self.hub.storage_via = None
            proxy.close()

    def denied(self, name: str, data: bytes) -> tuple[str, dict]:
        """A gated repository's file, asked for without a token: the Hub answers 401."""
        gated = f"{self.repo}-gated"
        self.hub.commit(gated, {name: data}, gated=True)
        return f"hf://datasets/{gated}/{name}", {}


@pytest.fixture(scope="module")
def hub_server():
    from .hub_server import HubServer

    with HubServer() as server:
        yield server


@pytest.mark.remote
class TestHuggingFaceHub(StoreConformance):
    @pytest.fixture
    def backend(self, hub_server, request, monkeypatch, tmp_path):
        for var in ("HF_TOKEN", "HF_TOKEN_PATH"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        name = "".join(c for c in request.node.name if c.isalnum() or c in "-_")[:80]
        return HubBackend(hub_server, f"conformance/{name}")
