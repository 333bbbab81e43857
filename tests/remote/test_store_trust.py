"""HTTPS trust against Debian's nginx with certificates made by openssl: the CA bundles users already set
are honoured in the documented order, an untrusted or unfit certificate is said in one line at once (not
retried for ``retry_seconds`` and called "did not answer"), and ``allow_invalid_certificates`` works."""

from __future__ import annotations

import time

import pytest

from trajscale.errors import ConfigError, InputFileError

pytestmark = pytest.mark.remote

#: Every variable that names a CA bundle, and the ones that must be unset for a test to mean what it says.
TRUST = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE", "CURL_CA_BUNDLE")


@pytest.fixture
def published(nginx):
    """A file on the nginx server: (its https URL, its bytes)."""
    data = bytes(range(256)) * 2000
    (nginx.root / "trust.bin").write_bytes(data)
    return nginx.url("trust.bin", https=True), data


@pytest.fixture
def clean_trust(monkeypatch):
    from trajscale.storage.objects import forget_heads

    for var in TRUST:
        monkeypatch.delenv(var, raising=False)
    forget_heads()
    return monkeypatch


def _open(url, **options):
    from trajscale.storage.objects import RemoteObject

    return RemoteObject.open(url, {"retry_seconds": 5, **options})


@pytest.mark.parametrize("variable", ["REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"])
def test_the_ca_bundle_a_user_already_set_is_trusted(nginx, published, clean_trust, variable):
    url, data = published
    clean_trust.setenv(variable, str(nginx.ca))
    store = _open(url)
    assert bytes(store.read_ranges([(1000, 3000)])[0]) == data[1000:3000]


def test_the_ca_bundle_option_is_trusted(nginx, published, clean_trust):
    url, data = published
    store = _open(url, ca_bundle=str(nginx.ca))
    assert bytes(store.read_ranges([(0, 10)])[0]) == data[:10]


def test_the_first_bundle_named_is_the_one_used(nginx, published, clean_trust, tmp_path):
    """The option first, then REQUESTS_CA_BUNDLE, AWS_CA_BUNDLE, CURL_CA_BUNDLE: a later one is not read."""
    url, _ = published
    clean_trust.setenv("REQUESTS_CA_BUNDLE", str(nginx.ca))
    clean_trust.setenv("AWS_CA_BUNDLE", str(tmp_path / "nowhere.pem"))   # never looked at
    assert _open(url).size == 512_000
    clean_trust.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "nowhere.pem"))
    with pytest.raises(ConfigError, match=r"^REQUESTS_CA_BUNDLE=.*nowhere.pem: no such CA bundle$"):
        _open(url)
    assert _open(url, ca_bundle=str(nginx.ca)).size == 512_000   # the option before the variables


def test_an_untrusted_certificate_is_one_line_at_once(published, clean_trust):
    url, _ = published
    t0 = time.monotonic()
    with pytest.raises(InputFileError) as err:
        _open(url)
    took = time.monotonic() - t0
    text = str(err.value)
    assert text.startswith(f"{url}: certificate not trusted: ") and "\n" not in text, text
    assert "SSL_CERT_FILE" in text and "REQUESTS_CA_BUNDLE" in text
    assert took < 4, f"a certificate refused is not retried (took {took:.1f} s of retry_seconds=5)"


def test_a_ca_true_self_signed_certificate_is_said_with_the_recipe(nginx, clean_trust):
    """The common ``openssl req -x509 ... -addext subjectAltName=IP:127.0.0.1`` certificate (CA:TRUE), trusted:
    rustls refuses a CA's certificate as a server's own; the line says so and what to make instead."""
    (nginx.root / "self.bin").write_bytes(b"x" * 1000)
    url = nginx.url("self.bin", https=True, port=nginx.https_self)
    clean_trust.setenv("SSL_CERT_FILE", str(nginx.ca.parent / "selfca.crt"))
    with pytest.raises(InputFileError) as err:
        _open(url)
    text = str(err.value)
    assert "CA:TRUE" in text and "basicConstraints=critical,CA:FALSE" in text and "\n" not in text, text


def test_allow_invalid_certificates_works(published, clean_trust):
    url, data = published
    store = _open(url, allow_invalid_certificates=True)
    assert bytes(store.read_ranges([(5, 50)])[0]) == data[5:50]


@pytest.mark.parametrize("value", ["yes", 1])
def test_allow_invalid_certificates_takes_only_a_boolean(published, clean_trust, value):
    url, _ = published
    with pytest.raises(ConfigError, match="^storage option allow_invalid_certificates: give true or false"):
        _open(url, allow_invalid_certificates=value)


def test_a_bundle_without_a_certificate_is_one_line(published, clean_trust, tmp_path):
    url, _ = published
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    clean_trust.setenv("CURL_CA_BUNDLE", str(junk))
    with pytest.raises(ConfigError, match=r"^CURL_CA_BUNDLE=.*junk.pem: holds no PEM certificate"):
        _open(url)
