"""The client of an object behind a URL: its scheme's obstore store, built once per process, every storage
option checked against what that store takes (:func:`check_options`), and the certificates it trusts: the
system's plus the first PEM bundle of ``ca_bundle``, ``REQUESTS_CA_BUNDLE``, ``AWS_CA_BUNDLE``,
``CURL_CA_BUNDLE`` (:func:`trusted_bundle`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from ..errors import ConfigError
from ..util import SCHEME_PREFIXES, scheme_of
from . import OWN_OPTIONS, redacted
from .credentials import aws_profile, require

#: obstore's HTTP client options that a storage option may set, for every scheme (bool or str).
CLIENT_OPTIONS = {"allow_invalid_certificates": bool, "allow_http": bool, "http1_only": bool, "http2_only": bool,
                  "proxy_url": str, "proxy_ca_certificate": str, "proxy_excludes": str, "user_agent": str}
#: Variables naming a CA bundle, in the order they are looked at (after the ``ca_bundle`` option).
TRUST_VARIABLES = ("REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE", "CURL_CA_BUNDLE")


@dataclass(frozen=True)
class Scheme:
    """One URL scheme: its obstore store class, and the fsspec-style options it takes (name -> obstore's
    configuration key, or None for those handled here: ``anon``, ``client_kwargs``, ``profile``)."""

    prefixes: tuple[str, ...]
    store: str
    names: dict = field(default_factory=dict)
    #: the word a message uses for the store's container
    container: str = "bucket"


S3 = Scheme(SCHEME_PREFIXES["s3"], "S3Store",
            {"anon": None, "key": "access_key_id", "secret": "secret_access_key", "token": "session_token",
             "endpoint_url": "endpoint", "region_name": "region", "client_kwargs": None, "profile": None})
GCS = Scheme(SCHEME_PREFIXES["gs"], "GCSStore", {"anon": None, "endpoint_url": "base_url", "token": None})
AZURE = Scheme(SCHEME_PREFIXES["az"], "AzureStore",
               {"anon": None, "account_name": "account_name", "account_key": "account_key",
                "sas_token": "sas_key", "endpoint_url": "endpoint"}, container="container")
HTTP = Scheme(SCHEME_PREFIXES["http"], "HTTPStore")
#: The Hugging Face Hub (:mod:`.hub`): its files are read from the http store its resolve URLs redirect to.
HF = Scheme(SCHEME_PREFIXES["hf"], "HTTPStore", {"token": None, "endpoint_url": None}, container="repository")
#: Every scheme trajscale reads, by name; a new one is a row here and its prefixes in ``util.SCHEME_PREFIXES``.
STORE_SCHEMES = {"s3": S3, "gs": GCS, "az": AZURE, "http": HTTP, "hf": HF}


def split_url(url: str) -> tuple[str, str, str]:
    """(scheme name, the store's root: a bucket or container, or an http URL's folder, the object's key)."""
    name = scheme_of(url)
    if name is None:
        known = ", ".join(p for s in STORE_SCHEMES.values() for p in s.prefixes)
        raise ConfigError(f"{url}: not a URL trajscale reads ({known})")
    if name == "http":
        folder, _, key = url.rpartition("/")
        return name, folder, key
    if name == "hf":   # hf://[KIND/]ORG/NAME[@REVISION]/PATH (.hub): the repository at its revision, the path
        parts = url[len("hf://"):].split("/")
        n = 3 if parts[0] in ("datasets", "spaces", "models") else 2
        return name, "/".join(parts[:n]), "/".join(parts[n:])
    rest = url.split("://", 1)[1]
    root, _, key = rest.partition("/")
    root = root.split("@", 1)[0]   # abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/KEY
    return name, root, key


def _number(name: str, value, *, least: float, more_than: bool = False, integer: bool = False) -> float:
    ok = not isinstance(value, bool) and isinstance(value, int | float)
    ok = ok and (value > least if more_than else value >= least) and (not integer or value == int(value))
    if not ok:
        what = "a number of bytes" if name == "merge_gap" else "a whole number" if integer else "a number of seconds"
        bound = f"more than {least:g}" if more_than else f"{least:g} or more"
        raise ConfigError(f"storage option {name}: give {what}, {bound} (got {value!r})")
    return int(value) if integer else float(value)


def check_options(url: str, options: dict | None) -> tuple[dict, dict, dict]:
    """``options`` checked against ``url``'s scheme: (trajscale's own, the client's, the store's), or refused."""
    name = scheme_of(url)
    opts = dict(options or {})
    own = {k: opts.pop(k) for k in OWN_OPTIONS if k in opts}
    client = {k: opts.pop(k) for k in CLIENT_OPTIONS if k in opts}
    for k, v in own.items():
        if k in ("ca_bundle", "cache_dir"):
            if not isinstance(v, str) or not v:
                what = "a PEM file" if k == "ca_bundle" else "a folder"
                raise ConfigError(f"storage option {k}: give the path of {what} (got {v!r})")
        elif k == "timeout":
            own[k] = _number(k, v, least=0, more_than=True)
        elif k == "retry_seconds":
            own[k] = _number(k, v, least=0)
        else:
            own[k] = _number(k, v, least=1 if k == "max_concurrency" else 0, integer=True)
    for k, v in client.items():
        if not isinstance(v, CLIENT_OPTIONS[k]):
            kind = "true or false" if CLIENT_OPTIONS[k] is bool else "a text"
            raise ConfigError(f"storage option {k}: give {kind} (got {v!r})")
    if name in ("http", "hf") and set(opts) - set(STORE_SCHEMES[name].names):
        taken = sorted((*OWN_OPTIONS, *CLIENT_OPTIONS, *STORE_SCHEMES[name].names))
        raise ConfigError(f"{url.split('?')[0].split('#')[0]}: storage option "
                          f"{', '.join(sorted(set(opts) - set(taken)))} is not one "
                          f"{'hf' if name == 'hf' else 'http(s)'} URLs take (they take {', '.join(taken)})")
    for k in ("token", "endpoint_url") if name == "hf" else ():
        if k in opts and not isinstance(opts[k], str):
            raise ConfigError(f"storage option {k}: give a text (got a {type(opts[k]).__name__})")
    if "anon" in opts and not isinstance(opts["anon"], bool):
        raise ConfigError(f"storage option anon: give true or false (got {opts['anon']!r})")
    extra = opts.get("client_kwargs")
    if extra is not None and (not isinstance(extra, dict) or set(extra) - {"endpoint_url", "region_name"}):
        raise ConfigError("storage option client_kwargs: give a mapping of endpoint_url and/or region_name "
                          f"(got {', '.join(sorted(extra)) if isinstance(extra, dict) else repr(extra)})")
    return own, client, opts


def trusted_bundle(own: dict) -> tuple[str, str] | None:
    """(where it was named, its PEM text) of the CA bundle trusted besides the system's; None if none is named."""
    where, path = None, None
    if own.get("ca_bundle"):
        where, path = "storage option ca_bundle", own["ca_bundle"]
    else:
        for var in TRUST_VARIABLES:
            if os.environ.get(var):
                where, path = var, os.environ[var]
                break
    if path is None:
        return None
    if not os.path.exists(path):
        raise ConfigError(f"{where}={path}: no such CA bundle")
    files = [path]
    if os.path.isdir(path):   # requests takes a folder of certificates too
        files = sorted(os.path.join(path, f) for f in os.listdir(path))
    try:
        text = "".join(open(f, encoding="ascii", errors="replace").read() for f in files if os.path.isfile(f))
    except OSError as exc:
        raise ConfigError(f"{where}={path}: the CA bundle cannot be read ({exc.strerror})") from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ConfigError(f"{where}={path}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    return where, text


#: The environment a store is built from (rustls reads the first two itself; the rest say where and who).
ENVIRONMENT = ("SSL_CERT_FILE", "SSL_CERT_DIR", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE",
               "AWS_DEFAULT_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_ACCESS_KEY_ID",
               "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION", "HOME", "STORAGE_EMULATOR_HOST")
_STORES: dict[tuple, object] = {}
_STORES_LOCK = threading.Lock()


def _freeze(value):
    """``value`` as a cache key; a scalar with its type (``1 == True``, but an option given 1 is refused)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return type(value).__name__, value


def store_config(name: str, fs_options: dict) -> tuple[dict, str | None]:
    """(obstore's configuration for scheme ``name`` from fsspec-style ``fs_options``, the AWS profile named)."""
    scheme = STORE_SCHEMES[name]
    opts = dict(fs_options)
    client = dict(opts.pop("client_kwargs", None) or {})
    for k in ("endpoint_url", "region_name"):
        if k in client:
            opts.setdefault(k, client[k])
    config = {}
    if opts.pop("anon", False) or (name == "gs" and opts.get("token") == "anon"):
        config["skip_signature"] = True
    if name == "gs" and opts.get("token") == "anon":
        opts.pop("token")
    profile = opts.pop("profile", None)
    for k, v in opts.items():
        key = scheme.names.get(k, k)
        config[key if key is not None else k] = v
    if name == "gs" and "base_url" not in config and os.environ.get("STORAGE_EMULATOR_HOST"):
        host = os.environ["STORAGE_EMULATOR_HOST"]   # what Google's own clients read for an emulator
        config["base_url"] = host if "://" in host else f"http://{host}"
    return config, profile


def object_store(url: str, own: dict, client_options: dict, fs_options: dict, timeout: float):
    """The obstore store of ``url`` (one per process, root, options and timeout), obstore's own retries off."""
    name, root, _ = split_url(url)
    trust = trusted_bundle(own)
    digest = hashlib.sha1(trust[1].encode()).hexdigest() if trust else None
    # a store made under other settings is another (a digest: no credential is kept in the key)
    env = hashlib.sha1(repr([os.environ.get(v) for v in ENVIRONMENT]).encode()).hexdigest()
    key = (name, root, os.getpid(), _freeze(fs_options), _freeze(client_options), timeout, digest, env)
    with _STORES_LOCK:
        store = _STORES.get(key)
        if store is not None:
            return store
        store = _build(name, root, fs_options, _client(url, client_options, timeout, trust), timeout)
        _STORES[key] = store
        return store


def _client(url: str, client_options: dict, timeout: float, trust: tuple[str, str] | None) -> dict:
    client = {"timeout": f"{timeout:g}s", "connect_timeout": f"{min(timeout, 10.0):g}s", **client_options}
    if url.startswith("http://"):
        client["allow_http"] = True
    if trust is not None:
        client["root_certificate"] = trust[1]
    return client


def _basic_auth(root: str) -> tuple[str, str | None]:
    """An http(s) URL's ``user:pass@`` as a basic ``Authorization`` header (obstore sends none), and the URL left."""
    parts = urlsplit(root)
    if parts.username is None:
        return root, None
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    return bare, "Basic " + base64.b64encode(pair).decode()


def _build(name: str, root: str, fs_options: dict, client: dict, timeout: float):
    obstore_store = require("obstore.store")
    from datetime import timedelta

    retry = {"max_retries": 0, "retry_timeout": timedelta(seconds=timeout)}
    shown = redacted(f"{STORE_SCHEMES[name].prefixes[0]}{root}")
    try:
        if name == "http":
            root, authorization = _basic_auth(root)
            headers = client.get("default_headers") or {}
            if authorization and not any(k.lower() == "authorization" for k in headers):   # (a caller's wins)
                client["default_headers"] = {**headers, "authorization": authorization}
            return obstore_store.HTTPStore.from_url(root, client_options=client, retry_config=retry)
        config, profile = store_config(name, fs_options)
        provider = aws_profile(config, profile) if name == "s3" else None
        if str(config.get("endpoint", config.get("base_url", ""))).startswith("http://"):
            client["allow_http"] = True
        cls = getattr(obstore_store, STORE_SCHEMES[name].store)
        kw = {"credential_provider": provider} if provider is not None else {}
        return cls(root, config=config, client_options=client, retry_config=retry, **kw)
    except ConfigError:
        raise
    except Exception as exc:   # noqa: BLE001 - obstore's configuration errors, said in one line
        text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        if "root_certificate" in text or ("certificate" in text.lower() and "root_certificate" in client):
            raise ConfigError(f"{shown}: the CA bundle is not usable ({text})") from None
        raise ConfigError(f"{shown}: storage options not accepted ({text}); given: "
                          f"{', '.join(sorted(fs_options)) or 'none'}") from None
