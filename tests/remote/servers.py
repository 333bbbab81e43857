"""Real servers for the store tests, started by the tests on free ports of 127.0.0.1: nginx from Debian (http
and https, with certificates made here by openssl), and the certificates themselves.

nginx runs as a foreground master with one worker, its configuration, logs, pid and temporary folders in a
temporary directory; its root is a folder the tests write into. ``/denied/`` answers 403; ``/private/`` asks for
HTTP basic authentication (:data:`PRIVATE`'s user and password).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from .stores import free_port, wait_for_port

NGINX_MISSING = "nginx is not installed (scripts/setup-env.sh installs Debian's: apt-get install nginx)"
OPENSSL_MISSING = "openssl is not installed (Debian's openssl makes the test certificates)"
#: The user and password nginx's ``/private/`` folder asks for (a recognisable secret, grepped for in what runs print).
PRIVATE = ("reader", "S3CR3Tpl4nt3d")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Certificates:
    """A small CA and a server certificate it signs for IP 127.0.0.1 (CA:FALSE, serverAuth: the recipe that
    works), and a self-signed CA:TRUE certificate from the common one-line recipe (which rustls refuses as a
    server's own)."""

    def __init__(self, folder: Path) -> None:
        if shutil.which("openssl") is None:
            pytest.skip(OPENSSL_MISSING)
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
                 "-subj", "/CN=trajscale test CA", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
                 "-subj", "/CN=127.0.0.1", cwd=folder)
        (folder / "server.ext").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
                                           "keyUsage=critical,digitalSignature,keyEncipherment\n"
                                           "extendedKeyUsage=serverAuth\n")
        _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", "server.crt", "-days", "2", "-extfile", "server.ext", cwd=folder)
        # the common recipe: self-signed, and (OpenSSL 3's default for req -x509) CA:TRUE
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "selfca.key", "-out", "selfca.crt",
                 "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", cwd=folder)
        self.ca = folder / "ca.crt"
        self.server = (folder / "server.crt", folder / "server.key")
        self.self_ca = (folder / "selfca.crt", folder / "selfca.key")


class Nginx:
    """nginx on free ports: ``http`` (plain), ``https`` (the CA-signed certificate), ``https_self`` (the
    self-signed CA:TRUE one); files under :attr:`root`."""

    def __init__(self, folder: Path, certs: Certificates) -> None:
        if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
            pytest.skip(NGINX_MISSING)
        self.folder = folder
        self.ca = certs.ca
        self.root = folder / "root"
        (self.root / "denied").mkdir(parents=True, exist_ok=True)
        (self.root / "private").mkdir(exist_ok=True)
        hashed = subprocess.run(["openssl", "passwd", "-apr1", PRIVATE[1]], check=True, capture_output=True,
                                text=True).stdout.strip()
        (folder / "htpasswd").write_text(f"{PRIVATE[0]}:{hashed}\n")
        for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (folder / sub).mkdir(exist_ok=True)
        self.http, self.https, self.https_self = free_port(), free_port(), free_port()
        site = (f"root {self.root}; location /denied/ {{ deny all; }} "
                f"location /private/ {{ auth_basic private; auth_basic_user_file {folder / 'htpasswd'}; }}")
        user = "user root root;" if os.geteuid() == 0 else ""   # the workers read the test's private folders
        temp = " ".join(f"{k}_temp_path {folder / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        temp = temp.replace(str(folder / "client_body"), str(folder / "body"))
        conf = f"""
{user}
daemon off; master_process on; worker_processes 1;
pid {folder}/nginx.pid; error_log {folder}/error.log warn;
events {{ worker_connections 512; }}
http {{
  access_log off; {temp}
  keepalive_requests 100000;
  server {{ listen 127.0.0.1:{self.http}; {site} }}
  server {{ listen 127.0.0.1:{self.https} ssl; ssl_certificate {certs.server[0]};
           ssl_certificate_key {certs.server[1]}; {site} }}
  server {{ listen 127.0.0.1:{self.https_self} ssl; ssl_certificate {certs.self_ca[0]};
           ssl_certificate_key {certs.self_ca[1]}; {site} }}
}}
"""
        (folder / "nginx.conf").write_text(conf)
        exe = shutil.which("nginx") or "/usr/sbin/nginx"
        self.proc = subprocess.Popen([exe, "-p", str(folder), "-c", str(folder / "nginx.conf"), "-e",
                                      str(folder / "error.log")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            for port in (self.http, self.https, self.https_self):
                wait_for_port(port, 20)
        except RuntimeError:
            self.stop()
            raise RuntimeError(f"nginx did not start: {(folder / 'error.log').read_text()[-2000:]}") from None

    def url(self, name: str, https: bool = False, port: int | None = None) -> str:
        scheme = "https" if https else "http"
        return f"{scheme}://127.0.0.1:{port or (self.https if https else self.http)}/{name}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
