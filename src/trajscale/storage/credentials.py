"""AWS profiles as the AWS CLI reads them: credentials, region and endpoint.

obstore alone reads the environment's keys and a machine's role, not ``~/.aws/credentials`` or ``~/.aws/config``.
A profile is read through boto3/botocore as the AWS tools read it (SSO, assumed roles, ``credential_process``),
and so is its endpoint (botocore's rule), so ``AWS_PROFILE=lab`` goes where ``aws --profile lab s3 ls`` goes.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable

from ..errors import ConfigError


def require(module: str):
    """``module``, or a one-line error saying how to install the ``remote`` extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"reading a URL needs {module.split('.')[0]}: pip install 'trajscale[remote]'") from None


def _named(profile: str | None) -> str | None:
    return profile or os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE") or None


def _shared_files() -> bool:
    shared = os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.expanduser("~/.aws/credentials")
    config = os.environ.get("AWS_CONFIG_FILE") or os.path.expanduser("~/.aws/config")
    return os.path.exists(shared) or os.path.exists(config)


def _session(named: str | None):
    """A boto3 session of the profile ``named`` (or the default); None with nothing to read or no boto3."""
    if not named and not _shared_files():
        return None
    if named:
        boto3 = require("boto3")
    else:
        try:
            import boto3
        except ImportError:   # the shared files need boto3; without it, obstore's chain
            return None
    try:
        return boto3.Session(profile_name=named)
    except Exception as exc:   # noqa: BLE001 - botocore's profile errors, said in one line
        raise ConfigError(f"AWS profile {named or 'default'!r}: {str(exc).splitlines()[0][:200]}") from None


def configured_endpoint(session) -> str | None:
    """The S3 endpoint the AWS CLI would use with this session (environment and shared files), or None."""
    try:
        from botocore.configprovider import ConfiguredEndpointProvider
    except ImportError:   # botocore before configured endpoints (1.31): the environment only
        return None
    core = session._session
    try:
        return ConfiguredEndpointProvider(full_config=core.full_config, scoped_config=core.get_scoped_config(),
                                          client_name="s3").provide()
    except Exception as exc:   # noqa: BLE001 - a malformed services section, said in one line
        raise ConfigError(f"AWS config: the endpoint_url of profile {session.profile_name!r} cannot be read "
                          f"({str(exc).splitlines()[0][:160]})") from None


def aws_profile(config: dict, profile: str | None) -> Callable[[], dict] | None:
    """Fill ``config`` (obstore's S3 keys) with endpoint and region as the AWS CLI would; return the profile's
    credentials as an obstore credential provider (None: obstore's own chain). A bad named profile is refused."""
    named = _named(profile)
    session = _session(named)
    if "endpoint" not in config:
        env = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        endpoint = env or (configured_endpoint(session) if session is not None else None)
        if endpoint:
            config["endpoint"] = endpoint
    if session is None:
        return None
    if "region" not in config and session.region_name and not (
            os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
        config["region"] = session.region_name
    if not named and (config.get("skip_signature") or "access_key_id" in config
                      or os.environ.get("AWS_ACCESS_KEY_ID")):
        return None
    try:
        creds = session.get_credentials()
    except Exception as exc:   # noqa: BLE001 - botocore's credential errors, said in one line
        raise ConfigError(f"AWS profile {named or 'default'!r}: {str(exc).splitlines()[0][:200]}") from None
    if creds is None:
        if named:
            raise ConfigError(f"AWS profile {named!r} has no credentials")
        return None

    def provide() -> dict:
        frozen = creds.get_frozen_credentials()
        return {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key,
                "token": frozen.token, "expires_at": None}

    return provide
