"""HTTP endpoints behind TLS and authentication: CA bundle, bearer token file, client cert.

Against a real https server on 127.0.0.1 with a throwaway CA (tests/support/tls.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentpool.backends import cpu_http, httpclient
from agentpool.backends.httpauth import HttpAuth
from agentpool.config.settings import HttpAuthSettings, load_settings
from agentpool.errors import ConfigError, HttpBackendError
from agentpool.resources.routing import HttpEndpoint
from agentpool.results import Result
from tests.support.tls import Pki, https_gateway, make_pki

TOKEN = "s3cr3t-token-0123456789"
NODE = "worker-0"
POOL = {"AGENT_MODE": "pool"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture(autouse=True)
def no_credentials_afterwards() -> Iterator[None]:
    yield
    httpclient.configure(HttpAuthSettings())


def post(gateway_control: str) -> httpclient.ControlAnswer:
    endpoint = HttpEndpoint(gateway_control, 5)
    return cpu_http.post_control(endpoint, NODE, cpu_http.RAPL_ACTION, 150, -1)


def test_ca_bundle_and_token_reach_the_gateway(pki: Pki, token_file: Path) -> None:
    httpclient.configure(HttpAuthSettings(ca_bundle=str(pki.ca), token_file=str(token_file)))
    with https_gateway(pki, TOKEN) as gw:
        answer = post(gw.control)
        assert (answer.result, answer.message) == (Result.APPLIED, "gateway applied the cap")
        assert cpu_http.read_package_power(HttpEndpoint(gw.telemetry, 5), NODE) == 180.0
        assert [s["auth"] for s in gw.seen] == [f"Bearer {TOKEN}"] * 2


def test_a_rotated_token_file_is_used_at_the_next_request(pki: Pki, token_file: Path) -> None:
    httpclient.configure(HttpAuthSettings(ca_bundle=str(pki.ca), token_file=str(token_file)))
    with https_gateway(pki, TOKEN) as gw:
        assert post(gw.control).result is Result.APPLIED
        # Rotate as a mounted Secret does: a new file swapped in under the same path.
        fresh = token_file.with_name("token.new")
        fresh.write_text("rotated-token\n")
        os.replace(fresh, token_file)
        gw.token = "rotated-token"
        assert post(gw.control).result is Result.APPLIED
        assert gw.seen[-1]["auth"] == "Bearer rotated-token"


@pytest.mark.parametrize(("token", "code"), [(None, 401), ("wrong", 403)])
def test_refusal_is_an_error_naming_the_endpoint_without_the_token(
    pki: Pki, tmp_path: Path, token: str | None, code: int
) -> None:
    settings = HttpAuthSettings(ca_bundle=str(pki.ca))
    if token is not None:
        (tmp_path / "t").write_text(token)
        settings = HttpAuthSettings(ca_bundle=str(pki.ca), token_file=str(tmp_path / "t"))
    httpclient.configure(settings)
    with https_gateway(pki, TOKEN) as gw, pytest.raises(HttpBackendError) as caught:
        post(gw.control)
    message = str(caught.value)
    assert message.startswith(f"{gw.url}/control/{NODE}: HTTP {code} ")
    assert "refused the agent's credentials" in message
    assert caught.value.status == code
    assert TOKEN not in message
    assert "wrong" not in message


def test_an_unknown_ca_fails_verification(pki: Pki, token_file: Path) -> None:
    httpclient.configure(HttpAuthSettings(ca_bundle=str(pki.other_ca), token_file=str(token_file)))
    with https_gateway(pki, TOKEN) as gw, pytest.raises(HttpBackendError) as caught:
        post(gw.control)
    assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value)
    assert gw.seen == []  # nothing, the token least of all, went to an unverified server


def test_client_certificate_when_the_gateway_requires_one(pki: Pki, token_file: Path) -> None:
    with https_gateway(pki, TOKEN, client_cert=True) as gw:
        httpclient.configure(HttpAuthSettings(ca_bundle=str(pki.ca), token_file=str(token_file)))
        with pytest.raises(HttpBackendError):
            post(gw.control)
        httpclient.configure(
            HttpAuthSettings(
                ca_bundle=str(pki.ca),
                token_file=str(token_file),
                client_cert=str(pki.client_cert),
                client_key=str(pki.client_key),
            )
        )
        assert post(gw.control).result is Result.APPLIED
        subject = dict(x[0] for x in gw.seen[-1]["peer"]["subject"])
        assert subject["commonName"] == "agentpool"


def test_the_token_is_not_sent_over_plain_http(token_file: Path) -> None:
    auth = HttpAuth(HttpAuthSettings(token_file=str(token_file)))
    assert auth.headers("http://sim:18080/control/a") == {}
    assert auth.headers("https://bmc/control/a") == {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    ("raw", "variable"),
    [
        ({"HTTP_TOKEN_FILE": "/nonexistent/token"}, "HTTP_TOKEN_FILE"),
        ({"HTTP_CA_BUNDLE": "/nonexistent/ca.crt"}, "HTTP_CA_BUNDLE"),
        ({"HTTP_CLIENT_CERT": "/x.crt"}, "HTTP_CLIENT_KEY"),
        ({"HTTP_CLIENT_KEY": "/x.key"}, "HTTP_CLIENT_CERT"),
    ],
)
def test_bad_credential_settings_name_the_variable(raw: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({**POOL, **raw})
    assert caught.value.variable == variable


def test_a_ca_bundle_that_is_not_pem_is_refused(tmp_path: Path, token_file: Path) -> None:
    (tmp_path / "ca.crt").write_text("not a certificate")
    with pytest.raises(ConfigError) as caught:
        load_settings({**POOL, "HTTP_CA_BUNDLE": str(tmp_path / "ca.crt")})
    assert caught.value.variable == "HTTP_CA_BUNDLE"
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ConfigError) as caught:
        load_settings({**POOL, "HTTP_TOKEN_FILE": str(empty)})
    assert caught.value.variable == "HTTP_TOKEN_FILE"
    assert load_settings({**POOL, "HTTP_TOKEN_FILE": str(token_file)}).http_auth.token_file
