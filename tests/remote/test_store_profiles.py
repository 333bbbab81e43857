"""AWS profiles are read as the AWS CLI reads them, ``endpoint_url`` included: ``AWS_PROFILE=lab`` with an
``endpoint_url`` in ``[profile lab]`` (or in a ``services`` section it names) goes to that endpoint (moto's
server here), not to AWS; an endpoint given as an option or in ``AWS_ENDPOINT_URL`` still comes first."""

from __future__ import annotations

import contextlib

import pytest

from .conftest import BUCKET, CREDENTIALS

pytestmark = pytest.mark.remote


@pytest.fixture
def aws_home(s3_server, tmp_path, monkeypatch):
    """A HOME of the test's own with ``~/.aws/config`` and ``~/.aws/credentials``, no AWS setting in the
    environment, and an object on the session's server: (the object's URL, its bytes, the config file)."""
    from trajscale.storage.objects import forget_heads

    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONFIG_FILE",
                "AWS_SHARED_CREDENTIALS_FILE", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    aws = tmp_path / ".aws"
    aws.mkdir()
    (aws / "credentials").write_text(f"[lab]\naws_access_key_id = {CREDENTIALS['AWS_ACCESS_KEY_ID']}\n"
                                     f"aws_secret_access_key = {CREDENTIALS['AWS_SECRET_ACCESS_KEY']}\n")
    client = s3_server.client()
    with contextlib.suppress(Exception):
        client.create_bucket(Bucket=BUCKET)
    data = bytes(range(256)) * 64
    client.put_object(Bucket=BUCKET, Key="profiles/obj.bin", Body=data)
    forget_heads()
    return f"s3://{BUCKET}/profiles/obj.bin", data, aws / "config"


def _read(url, **options):
    from trajscale.storage.objects import RemoteObject

    store = RemoteObject.open(url, {"retry_seconds": 1, **options})
    return bytes(store.read_ranges([(100, 1100)])[0])


def test_a_profiles_endpoint_url_is_used(s3_server, aws_home, monkeypatch):
    url, data, config = aws_home
    config.write_text(f"[profile lab]\nregion = us-east-1\nendpoint_url = {s3_server.endpoint}\n")
    monkeypatch.setenv("AWS_PROFILE", "lab")
    assert _read(url) == data[100:1100]


def test_a_services_sections_endpoint_url_is_used(s3_server, aws_home, monkeypatch):
    url, data, config = aws_home
    config.write_text(f"[profile lab]\nregion = us-east-1\nservices = lab-services\n\n"
                      f"[services lab-services]\ns3 =\n  endpoint_url = {s3_server.endpoint}\n")
    assert _read(url, profile="lab") == data[100:1100]


def test_an_endpoint_option_comes_before_the_profiles(s3_server, aws_home, monkeypatch):
    """The profile names an endpoint where nothing answers; the option's is the one asked."""
    url, data, config = aws_home
    config.write_text("[profile lab]\nregion = us-east-1\nendpoint_url = http://127.0.0.1:9\n")
    monkeypatch.setenv("AWS_PROFILE", "lab")
    assert _read(url, endpoint_url=s3_server.endpoint) == data[100:1100]
