"""The HTTP/1.1 wire (backends/http11.py, over httptools): what the property campaign of
tests/properties/test_http.py checks only loosely (its results are checked for
Content-Length answers): chunked answers read right and their connection kept, interim
answers skipped, an answer without a length read to the end of its connection, a request
written as one piece, and no header smuggled into a request.
"""

from __future__ import annotations

import json

import pytest

from agentpool.backends import http11, httpclient
from agentpool.backends.cpu_http import RAPL_ACTION, post_control, read_package_power
from agentpool.errors import HttpBackendError, HttpProtocolError
from agentpool.resources.routing import HttpEndpoint
from agentpool.results import Result
from tests.backends.scripted import OK_S
from tests.support.rawhttp import Answer, RawServer

BODY = json.dumps({"packagePowerWatts": 42.5}).encode()


def chunked(body: bytes, cut: int) -> bytes:
    """``body`` in two chunks (the first with an extension), then a trailer."""
    first, second = body[:cut], body[cut:]
    return (f"{len(first):x};ext=1\r\n".encode() + first + b"\r\n"
            + f"{len(second):X}\r\n".encode() + second + b"\r\n"
            + b"0\r\nX-Trailer: yes\r\n\r\n")


def test_a_chunked_answer_is_read_whole_and_its_connection_kept() -> None:
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(BODY, 7)
    httpclient.close_connections()
    with RawServer(Answer(data, pieces=5)) as server:
        endpoint = HttpEndpoint(server.url, OK_S)
        assert [read_package_power(endpoint, "n") for _ in range(3)] == [42.5] * 3
        assert server.connections == 1


def test_interim_answers_are_skipped() -> None:
    data = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\nX: 1\r\n\r\n"
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
    with RawServer(Answer(data)) as server:
        assert read_package_power(HttpEndpoint(server.url, OK_S), "n") == 42.5


def test_an_http_1_0_answer_without_a_length_ends_with_its_connection() -> None:
    httpclient.close_connections()
    # The server keeps the connection open after the body: not the end, so it times out.
    with RawServer(Answer(b"HTTP/1.0 200 OK\r\n\r\n" + BODY)) as server, \
            pytest.raises(HttpBackendError, match="timed out"):
        read_package_power(HttpEndpoint(server.url, 0.3), "n")
    closing = Answer(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + BODY)
    with RawServer(closing) as server:
        endpoint = HttpEndpoint(server.url, OK_S)
        assert read_package_power(endpoint, "n") == 42.5  # its end is the connection's
        assert read_package_power(endpoint, "n") == 42.5
        assert server.connections == 2  # not reused: the server said it closes


def test_a_chunked_answer_larger_than_the_bound_is_an_error() -> None:
    big = b'{"packagePowerWatts": 1, "pad": "' + b"x" * httpclient.MAX_BODY_BYTES + b'"}'
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(big, 1000)
    with RawServer(Answer(data)) as server, pytest.raises(HttpBackendError, match="larger than"):
        read_package_power(HttpEndpoint(server.url, OK_S), "n")


def test_a_request_is_written_whole_headers_and_body_as_one_piece() -> None:
    answer = b'{"result": "applied"}'
    data = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer)
    with RawServer(Answer(data)) as server:
        got = post_control(HttpEndpoint(server.url, OK_S), "n", RAPL_ACTION, 120.0, -1)
        assert got.result is Result.APPLIED
        head, _, body = server.requests[-1].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /endpoint/n HTTP/1.1"
    assert f"Content-Length: {len(body)}" in lines
    assert json.loads(body)["capWatts"] == 120.0
    wire = http11.request_bytes("POST", "/c", "h:1", {"A": "b"}, b"{}")
    assert wire == b"POST /c HTTP/1.1\r\nHost: h:1\r\nAccept-Encoding: identity\r\nA: b\r\n" \
        b"Content-Length: 2\r\n\r\n{}"


@pytest.mark.parametrize(
    ("target", "headers"),
    [
        ("/c", {"User-Agent": "agentpool\r\nX-Evil: 1"}),
        ("/c", {"X-A\r\nB": "1"}),
        ("/c", {"Bad:Name": "1"}),
        ("/c HTTP/1.1\r\nX-Evil: 1\r\n", {}),
        ("/c d", {}),
    ],
)
def test_a_header_or_target_that_would_smuggle_a_line_is_refused(
    target: str, headers: dict[str, str]
) -> None:
    with pytest.raises(HttpProtocolError):
        http11.request_bytes("GET", target, "h:1", headers, None)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"HTTP/2 200 OK\r\n\r\n", "Expected dot"),
        (b"HTTP/1.1 20 OK\r\n\r\n", "Invalid status code"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n{}}", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n{}", "Transfer-Encoding"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n{}", "Invalid header token"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}}\r\n0\r\n\r\n",
         "Expected LF after chunk data"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\n{}\r\n0\r\n\r\n",
         "Invalid character in chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+2\r\n{}\r\n0\r\n\r\n",
         "Invalid character in chunk size"),
    ],
)
def test_what_is_not_http_1_x_is_a_request_failure(data: bytes, problem: str) -> None:
    with RawServer(Answer(data)) as server, \
            pytest.raises(HttpBackendError, match=f"request failed: .*{problem}"):
        read_package_power(HttpEndpoint(server.url, OK_S), "n")


def test_headers_that_never_end_are_cut_off_at_their_bound_not_at_the_deadline() -> None:
    endless = b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * (http11.MAX_HEAD + 1)
    with RawServer(Answer(endless, hold=True)) as server, \
            pytest.raises(HttpBackendError, match="bytes before the body"):
        read_package_power(HttpEndpoint(server.url, 60.0), "n")
