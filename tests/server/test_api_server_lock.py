"""The local API server's lock and walls, fast (scripted engine), over real HTTP on 127.0.0.1:
the token, the bound socket, the Host check, connection limits and timeouts, and what reaches the log."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import time
import zlib
from collections.abc import Iterator
from typing import Any

import openai
import psutil
import pytest

from app.core.settings.keystore import new_token
from app.engine.scripted import ScriptedEngineDouble
from app.server.api_connections import ConnectionGuard
from app.server.api_server import LocalApiServer
from tests.support import loopback_http
from tests.support.scripted_api import ScriptedApi, read_until_closed, scripted_api

BODY = {"messages": [{"role": "user", "content": "hi"}]}
ENDPOINTS = (("GET", "/models"), ("POST", "/chat/completions"))


@pytest.fixture
def api() -> Iterator[ScriptedApi]:
    with scripted_api() as served:
        yield served


def same_length_wrong_tokens(token: str) -> list[str]:
    last = "A" if token[-1] != "A" else "B"
    first = "x" if token[6] != "x" else "y"
    return [token[:-1] + last, token[:6] + first + token[7:]]


def test_it_is_bound_to_loopback_only(api: ScriptedApi) -> None:
    """Asked of the socket itself (and of the OS's table of listening sockets), not of the URL string."""
    assert api.server.bound_addresses == [("127.0.0.1", api.server.port)]
    listening = [c for c in psutil.Process().net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == api.server.port]
    assert [c.laddr.ip for c in listening] == ["127.0.0.1"]


def test_the_right_token_opens_both_endpoints(api: ScriptedApi) -> None:
    for method, path in ENDPOINTS:
        response = loopback_http.request(method, api.url + path, headers=api.auth, json=BODY, timeout=30)
        assert response.status_code == 200, response.text
    lower = loopback_http.get(api.url + "/models", headers={"Authorization": f"bearer {api.token}"}, timeout=30)
    assert lower.status_code == 200, "the scheme is case-insensitive"


def test_a_wrong_token_of_the_right_length_is_refused(api: ScriptedApi) -> None:
    """A check that compared lengths, or all but the last character, would let these in."""
    for wrong in same_length_wrong_tokens(api.token):
        assert len(wrong) == len(api.token) and wrong != api.token
        for method, path in ENDPOINTS:
            response = loopback_http.request(method, api.url + path, headers={"Authorization": f"Bearer {wrong}"},
                                             json=BODY, timeout=30)
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "invalid_api_key"
    assert not api.engine.requests, "nothing reached the engine"


@pytest.mark.parametrize("header", [None, "", "Bearer", "Basic abc", "Token {token}", "{token}",
                                    "Bearer {token}x", "Bearer {short}"])
def test_anything_but_the_bearer_token_is_refused(api: ScriptedApi, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header.format(token=api.token, short=api.token[:-1])}
    for method, path in ENDPOINTS:
        response = loopback_http.request(method, api.url + path, headers=headers, json=BODY, timeout=30)
        assert response.status_code == 401 and "bearer token" in response.json()["error"]["message"]


def test_a_non_ascii_byte_in_the_authorization_header_is_a_401(api: ScriptedApi) -> None:
    """It was a plain-text 500: the header decoded with a surrogate, and comparing it raised."""
    header = b"Bearer " + api.token[:-1].encode() + b"\xff"
    response = loopback_http.post(api.url + "/chat/completions", headers={"Authorization": header}, json=BODY,
                                  timeout=30)
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"


def test_the_openai_client_with_a_wrong_key_gets_a_typed_401(api: ScriptedApi) -> None:
    wrong = same_length_wrong_tokens(api.token)[0]
    with pytest.raises(openai.AuthenticationError) as caught:
        api.client(api_key=wrong).chat.completions.create(model="any", messages=BODY["messages"])
    assert caught.value.code == "invalid_api_key"


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.2:{port}", "[::1]:{port}",
                                  "localhost.evil.example"])
def test_a_request_for_another_host_name_is_refused_before_the_token(api: ScriptedApi, host: str) -> None:
    """A page on another name that resolves to 127.0.0.1 (DNS rebinding) gets nothing, token or not."""
    for headers in ({}, api.auth):
        response = loopback_http.post(api.url + "/chat/completions", json=BODY, timeout=30,
                                      headers={**headers, "Host": host.format(port=api.server.port)})
        assert response.status_code == 403 and response.json()["error"]["code"] == "host_not_allowed"
    assert not api.engine.requests
    for allowed in ("localhost", f"localhost:{api.server.port}", f"127.0.0.1:{api.server.port}", "LocalHost"):
        allowed_host = {**api.auth, "Host": allowed}
        assert loopback_http.get(api.url + "/models", headers=allowed_host, timeout=30).status_code == 200


def test_the_openai_client_sees_the_host_refusal_as_a_typed_error(api: ScriptedApi) -> None:
    with pytest.raises(openai.PermissionDeniedError):
        api.client(default_headers={"Host": "evil.example"}).models.list()


def gzip_bomb(megabytes: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
    zeros = b"\0" * (1 << 20)
    return b"".join([packer.compress(zeros) for _ in range(megabytes)] + [packer.flush()])


def test_a_compressed_body_is_never_inflated(api: ScriptedApi) -> None:
    """A 128 KB gzip body that inflates to 128 MB and has no token: aiohttp unpacked it while it arrived,
    holding the loop (2 s for 1 GB). Counted in CPU time spent by this process (server and client), not in
    wall time, against what inflating this very bomb costs this machine's CPU (measured here, in this
    thread's CPU time): unpacked, the server spends at least that; refused unread, a few ms. Half of it
    leaves room for the process's other threads on a loaded machine."""
    bomb = gzip_bomb(128)
    started = time.thread_time()
    inflater = zlib.decompressobj(31)
    inflated = sum(len(inflater.decompress(bomb[at:at + 65536])) for at in range(0, len(bomb), 65536))
    inflate_cost = time.thread_time() - started
    assert inflated == 128 << 20
    process = psutil.Process()
    before = sum(process.cpu_times()[:2])
    with api.connect() as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Encoding: gzip\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(bomb) + bomb)
        reply = read_until_closed(sock)
    spent = sum(process.cpu_times()[:2]) - before
    assert reply.startswith(b"HTTP/1.1 401")
    assert spent < inflate_cost / 2, f"{spent:.2f} s of CPU (inflating: {inflate_cost:.2f} s): the body was inflated"
    packed = loopback_http.post(api.url + "/chat/completions", content=gzip.compress(b'{"messages": []}'), timeout=60,
                                headers={"Content-Encoding": "gzip", "Content-Type": "application/json", **api.auth})
    assert packed.status_code == 400 and packed.json()["error"]["code"] == "unsupported_content_encoding"


# ---- connections: how many, and for how long ------------------------------------------------------

def test_an_idle_connection_is_closed_after_the_keep_alive() -> None:
    with scripted_api(guard=ConnectionGuard(keepalive_s=1.0)) as api:
        sock = api.connect()
        sock.sendall(f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {api.token}\r\n\r\n"
                     .encode())
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        assert read_until_closed(sock) == b"", "closed by the server, within the socket's 30 s timeout"
        sock.close()


@pytest.mark.parametrize("sent", [b"", b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n"])
def test_a_connection_that_sends_no_whole_request_is_closed(sent: bytes) -> None:
    """Silent, or headers begun and never ended: without a header deadline they stayed for an hour."""
    with scripted_api(guard=ConnectionGuard(header_read_s=0.5)) as api:
        sock = api.connect()
        sock.sendall(sent)
        assert read_until_closed(sock) == b""
        sock.close()
        assert loopback_http.get(api.url + "/models", headers=api.auth, timeout=30).status_code == 200


def test_a_body_that_stops_half_way_gets_a_408() -> None:
    """A client with the token that sends half its body held its handler forever. (The connection then closes
    once the rest of the body has been drained for linger_s: 2 s by default, not this test's subject.)"""
    with scripted_api(guard=ConnectionGuard(body_read_s=0.5, linger_s=0.2)) as api:
        sock = api.connect()
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {api.token}"
                     f"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"messages\": ".encode())
        reply = read_until_closed(sock)
        sock.close()
        assert reply.startswith(b"HTTP/1.1 408") and b'"code": "body_timeout"' in reply


class LeavingRequest:
    """The body of a client whose connection closes just as its last bytes arrive: aiohttp then cancels the
    handler (handler_cancellation) while the read is ending."""

    headers: dict[str, str] = {}
    charset = None

    def __init__(self) -> None:
        self.handler: asyncio.Task[Any] | None = None

    async def read(self) -> bytes:
        assert self.handler is not None
        self.handler.cancel()
        return json.dumps(BODY).encode()


def test_a_client_that_leaves_as_its_body_arrives_still_ends_the_handler() -> None:
    """Bug caught: the body was read under asyncio.wait_for, which on Python 3.11 returns a read that ended as
    the handler was cancelled and drops the cancel: the reply went on for nobody until its first write (a
    slow first token held the server's stop that long)."""
    engine = ScriptedEngineDouble()
    server = LocalApiServer(engine, new_token(), port=0)
    request = LeavingRequest()

    async def handler() -> Any:
        body = await server._read_json(request)  # type: ignore[arg-type]  # noqa: SLF001
        await asyncio.sleep(0)  # the handler's next wait, where the cancel must land
        return body

    async def run() -> None:
        request.handler = asyncio.create_task(handler())
        with pytest.raises(asyncio.CancelledError):
            await request.handler

    try:
        engine.loop_thread.submit(run()).result(10)  # the server's own loop, as aiohttp's handlers run on it
    finally:
        engine.close()


def test_connections_over_the_cap_get_a_json_503_and_the_rest_still_work() -> None:
    with scripted_api(guard=ConnectionGuard(max_connections=4)) as api:
        held = [api.connect() for _ in range(4)]
        with loopback_http.Client(timeout=30) as http:
            for sock in held:  # four clients with the token, each keeping its connection
                sock.sendall(f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {api.token}"
                             "\r\n\r\n".encode())
                assert sock.recv(65536).startswith(b"HTTP/1.1 200"), "the first four are served"
            over = http.get(api.url + "/models", headers=api.auth)
            assert over.status_code == 503 and over.json()["error"]["code"] == "too_many_connections"
            for sock in held:
                sock.close()
            ok = http.get(api.url + "/models", headers=api.auth)
            assert ok.status_code == 200, "closed connections free their places"


# ---- the log ------------------------------------------------------------------------------------------

def test_an_oversized_authorization_header_keeps_the_token_out_of_the_log(api: ScriptedApi, caplog) -> None:
    """aiohttp logged the first 100 bytes of a header line over 8,190 bytes, at ERROR: the token."""
    caplog.set_level(logging.DEBUG)
    header = f"Bearer {api.token}" + "x" * 9_000
    response = loopback_http.post(api.url + "/chat/completions", headers={"Authorization": header}, json=BODY,
                                  timeout=30)
    assert response.status_code == 400 and response.json()["error"]["code"] == "malformed_request"
    assert api.token not in caplog.text and api.token[6:20] not in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_unauthenticated_noise_is_logged_once_per_client(api: ScriptedApi, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    with loopback_http.Client(timeout=30) as client:  # one client for all 60 requests
        for _ in range(20):
            client.post(api.url + "/chat/completions", json=BODY)
            client.post(api.url + "/chat/completions", headers={"Authorization": "Bearer " + "y" * 9_000})
            client.post(api.url + "/chat/completions", headers={"Host": "evil.example"})
            with api.connect() as sock:
                sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                read_until_closed(sock)
    records = [r for r in caplog.records if r.name.startswith(("app", "aiohttp"))]
    assert not [r for r in records if r.levelno >= logging.ERROR or r.exc_info]
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == len(set(warnings)) <= 4, warnings
