"""The cloud emulators the store tests run against, where they can be had: Azurite (npm; Azure Blob) and
gcp-storage-emulator (PyPI; Google Cloud Storage). Each is found or said missing in one line.

Azurite is looked for on PATH and where scripts/setup-env.sh installs it (``npm install --prefix
~/.cache/trajscale/npm azurite``); it runs in memory, its telemetry off (nothing leaves the machine), on
a free port, with its well-known development account.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import shutil
import subprocess
import urllib.request
from email.utils import formatdate
from pathlib import Path

from trajscale.testing.stores import free_port, wait_for_port

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


def gcs_emulator_missing() -> str | None:
    """Why the GCS emulator cannot serve obstore's reads here (None: it can): tried, and the client's
    refusal said, so a later emulator that answers as GCS does runs the suite."""
    try:
        from gcp_storage_emulator.server import create_server
    except ImportError:
        return ("gcp-storage-emulator is not installed (pip install gcp-storage-emulator); its 2026.7.19 answers "
                "GET without Last-Modified, which obstore's GCS client refuses")
    import obstore
    from obstore.store import GCSStore

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="probe")
    server.start()
    try:
        wait_for_port(port, 30)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/upload/storage/v1/b/probe/o?uploadType=media"
                                         "&name=probe.bin", data=b"probe", method="POST",
                                         headers={"Content-Type": "application/octet-stream"})
        urllib.request.urlopen(request, timeout=30).read()
        store = GCSStore("probe", config={"base_url": f"http://127.0.0.1:{port}", "skip_signature": True},
                         client_options={"allow_http": True, "timeout": "10s"}, retry_config={"max_retries": 0})
        try:
            obstore.get(store, "probe.bin", options={"range": (0, 5)}).bytes()
        except Exception as exc:   # noqa: BLE001 - the reason said
            return f"gcp-storage-emulator cannot serve obstore's GCS reads: {str(exc).splitlines()[0][:160]}"
        return None
    finally:
        server.stop()
