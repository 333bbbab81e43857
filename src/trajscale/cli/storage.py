"""``--storage-option KEY=VALUE``: options for trajectories behind a URL, on every command that reads one."""

from __future__ import annotations


def add_storage_option(p) -> None:
    """``--storage-option KEY=VALUE`` (repeatable; dest ``storage_option``)."""
    if any("--storage-option" in a.option_strings for a in p._actions):
        return
    p.add_argument("--storage-option", action="append", default=None, metavar="KEY=VALUE",
                   help="an option for a trajectory behind a URL (s3://, http(s)://), as fsspec's "
                        "storage_options: anon=true for a public bucket, endpoint_url=URL for another S3 "
                        "endpoint, profile=NAME, retry_seconds=S; repeatable (credentials are better "
                        "left to the AWS environment or profiles)")


def use_storage_options(args) -> None:
    """Make the command line's storage options this process's (its sources and workers take them)."""
    given = getattr(args, "storage_option", None)
    if not given:
        return
    from ..storage import parse_options, set_options

    set_options(parse_options(given))
