"""Trajectories behind a URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``, ``hf://``): bytes by range
requests, below the Sources, which read a URL as they read a path.

A :class:`~.bytestore.ByteStore` (:meth:`.location.Location.store`) answers a file's size and identity and reads
byte ranges; every object of one server shares one :class:`~.server.Server`. Options are fsspec's
``storage_options`` plus ``retry_seconds``, ``timeout``, ``max_concurrency`` and ``merge_gap``; credentials never
reach a message, log, report or profile. This module imports no client library: ``import trajscale`` stays free of them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping

from ..errors import ConfigError
from ..util import is_url

#: Options trajscale reads itself (the rest go to the object store's client, in its own names).
OWN_OPTIONS = ("retry_seconds", "timeout", "max_concurrency", "merge_gap", "ca_bundle", "cache_dir")
#: Names whose values are never shown (an option, a URL's query parameter): these words anywhere in the name,
#: or (short words that other names hold) as a word of it: ``sas_token``, ``account_key``, ``X-Amz-Signature``.
#: (Patterns: ``re`` compiles each when first used, and keeps it; a run that redacts nothing never compiles one.)
_SECRET_NAME = (r"(?i)secret|token|passw|credential|"
                r"(?:^|[_.-])(?:key|sas|sig|signature|session|auth|authorization|pwd)(?:$|[_.-])")
#: A URL's password, after its scheme and user (a password holds no ``/`` or ``@`` unescaped, nor a blank).
_USER_INFO = r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@]*):[^/\s@]*@"
#: A query parameter: (what precedes its value, its name, its value).
_QUERY = r"([?&;]([^=&;\s#]+)=)([^&;\s#]*)"

#: The process's options, for the rest of its life (the command line's ``--storage-option``: :func:`set_options`).
_PROCESS: dict = {}


def process_options() -> dict:
    """This process's storage options (:func:`set_options`; empty by default): those a
    :class:`~.location.Location` made here starts from, under its own."""
    return dict(_PROCESS)


def set_options(options: Mapping | None) -> None:
    """Set this process's storage options for the rest of its life (the command line's): every
    :class:`~.location.Location` made afterwards here carries them, under its own."""
    global _PROCESS
    _PROCESS = dict(options or {})


def parse_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` from the command line: booleans, numbers and JSON objects or lists as such, else a string."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--storage-option {text.split('=')[0]!r}: give KEY=VALUE (e.g. anon=true, "
                          "endpoint_url=http://127.0.0.1:9000)")
    low = value.strip().lower()
    if low in ("true", "false"):
        return key, low == "true"
    if value.strip()[:1] in "{[":
        try:
            return key, json.loads(value)
        except ValueError:
            raise ConfigError(f"--storage-option {key}: the value is not valid JSON") from None
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return key, kind(value)
    return key, value


def parse_options(texts: Iterable[str] | None) -> dict:
    """Repeated ``--storage-option KEY=VALUE`` as one dict (a later key wins)."""
    return dict(parse_option(t) for t in texts or ())


def shown(options: Mapping | None) -> str:
    """The options' names for a message (never their values: some are credentials)."""
    return ", ".join(sorted(options or {})) or "none"


def redacted(value):
    """``value`` as it may be shown: in text, every URL's password (``https://user:***@host/...``) and every
    secret query parameter's value; in a mapping (a config, options), every secret option's value; lists,
    tuples and nested mappings alike. The value itself is left as it is: it still reads the bytes."""
    if isinstance(value, str):
        if "@" in value:
            value = re.sub(_USER_INFO, r"\1:***@", value)
        if "=" in value and ("?" in value or "&" in value):
            value = re.sub(_QUERY, lambda m: m.group(1) + (
                "***" if re.search(_SECRET_NAME, m.group(2)) else m.group(3)), value)
        return value
    if isinstance(value, Mapping):
        return {k: "***" if v and isinstance(k, str) and re.search(_SECRET_NAME, k) else redacted(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redacted(v) for v in value)
    return value


def hide_in_logs(handler: logging.Handler | None) -> None:
    """Have ``handler`` print every record as :func:`redacted` shows text: a URL's password reaches no log line."""
    if handler is not None and _redacted_record not in handler.filters:
        handler.addFilter(_redacted_record)


def _redacted_record(record: logging.LogRecord) -> bool:
    record.msg, record.args = redacted(record.getMessage()), None
    if record.exc_info and not record.exc_text:
        record.exc_text = redacted(logging.Formatter().formatException(record.exc_info))
    return True


def endpoint_of(url: str, options: Mapping | None = None) -> str:
    """Where the object is asked for (for messages): the endpoint for ``s3://`` and ``hf://``, the host for http."""
    if url.startswith("hf://"):
        from .hub import endpoint

        return endpoint(dict(options or {}))
    if not url.startswith("s3://"):
        host = url.split("/", 3)[2] if url.count("/") >= 2 else url
        return host.rpartition("@")[2] if url.startswith(("http://", "https://")) else host   # (no user, no password)
    opts = dict(options or {})
    ep = opts.get("endpoint_url") or (opts.get("client_kwargs") or {}).get("endpoint_url") \
        or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return ep or "AWS S3"


def fetched_here() -> dict:
    """This process's requests, bytes, wait and retries so far, every object's together (zeros without a URL)."""
    import sys

    inflight = sys.modules.get(__name__ + ".inflight")
    if inflight is None:
        return {"requests": 0, "bytes": 0, "wait_s": 0.0, "retries": 0}
    with inflight._PROCESS_LOCK:
        return inflight.PROCESS_STATS.as_dict()


def forget_servers() -> None:
    """A run's end: this process lets go of its servers (:mod:`.server`), so the next run's clock starts anew."""
    import sys

    server = sys.modules.get(__name__ + ".server")
    if server is not None:
        server.forget_servers()


def fetched_since(before: dict) -> dict | None:
    """What this process fetched since ``before`` (:func:`fetched_here`); None when it made no request."""
    now = fetched_here()
    d = {k: now[k] - before.get(k, 0) for k in now}
    return d if d["requests"] else None


def resolve(base: str, relative: str) -> str:
    """A segment index's part path ``relative`` to the index at URL ``base`` (an absolute one as it is)."""
    if is_url(relative) or relative.startswith("/"):
        return relative
    head, _, _ = base.rpartition("/")
    parts = []
    for p in f"{head}/{relative}".split("/")[3:]:
        if p == "..":
            if parts:
                parts.pop()
        elif p not in ("", "."):
            parts.append(p)
    root = "/".join(base.split("/")[:3])
    return f"{root}/{'/'.join(parts)}"


__all__ = ["OWN_OPTIONS", "endpoint_of", "fetched_here", "fetched_since", "forget_servers", "hide_in_logs", "is_url",
           "parse_option", "parse_options", "process_options", "redacted", "resolve", "set_options", "shown"]
