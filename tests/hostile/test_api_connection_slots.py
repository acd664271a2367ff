"""The local API server's connection places under hostile local clients, over real HTTP on 127.0.0.1 against
the real server object (scripted engine, fast): clients without the token that open and hold connections can
never shut out a client with it, and a refusal names the limit it hit."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from app.server.api_connections import MAX_UNAUTHENTICATED, ConnectionGuard
from tests.support import loopback_http
from tests.support.scripted_api import ScriptedApi, read_until_closed, scripted_api


@pytest.fixture
def api() -> Iterator[ScriptedApi]:
    """The server with its real limits (ConnectionGuard's defaults)."""
    with scripted_api() as served:
        yield served


def with_token(api: ScriptedApi, count: int) -> list[socket.socket]:
    """``count`` keep-alive connections of a client with the token, each past its first request."""
    held = []
    for _ in range(count):
        sock = api.connect()
        sock.sendall(f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {api.token}\r\n\r\n"
                     .encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        held.append(sock)
    return held


def closing(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def test_64_connections_without_the_token_do_not_shut_out_a_client_with_it(api: ScriptedApi) -> None:
    """Bug caught: a local process without the token filled the 64 places of connections not yet past the token
    (silent, or sending headers slowly, reopened before each deadline), and every new client with the token got
    a 503 that named the wrong limit ("128 connections open"). Now the oldest of them makes room."""
    held = [api.connect() for _ in range(MAX_UNAUTHENTICATED)]
    for sock in held[MAX_UNAUTHENTICATED // 2:]:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers begun, never ended
    try:
        response = loopback_http.get(api.url + "/models", headers=api.auth, timeout=30)
        assert response.status_code == 200, response.text
        assert read_until_closed(held[0]) == b"", "the oldest connection without the token made room"
        assert loopback_http.get(api.url + "/models", headers=api.auth, timeout=30).status_code == 200
    finally:
        closing(held)


def test_the_allowance_without_the_token_stays_a_bound(api: ScriptedApi) -> None:
    """Bug caught (of the fix): room made without closing anything, so clients without the token could hold
    any number of connections (a descriptor each, until their deadline)."""
    held = [api.connect() for _ in range(MAX_UNAUTHENTICATED + 8)]
    try:
        for sock in held[:8]:
            assert read_until_closed(sock) == b"", "each new connection over the allowance closed the oldest"
        newest = held[-1]
        newest.sendall(f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {api.token}\r\n\r\n"
                       .encode())
        assert newest.recv(65536).startswith(b"HTTP/1.1 200"), "the newest ones are kept"
    finally:
        closing(held)


def test_64_keep_alive_connections_with_the_token_do_not_shut_out_a_new_one(api: ScriptedApi) -> None:
    """The rule's decision: only connections not yet past the token count against their allowance. Bug caught
    (planted): counting every open connection there, so a client holding 64 authenticated keep-alive
    connections (a pool of the openai client, 50 streams at once) shut out every new one."""
    held = with_token(api, MAX_UNAUTHENTICATED)
    try:
        response = loopback_http.get(api.url + "/models", headers=api.auth, timeout=30)
        assert response.status_code == 200, response.text
    finally:
        closing(held)


def test_the_503_names_the_limit_that_was_hit() -> None:
    """Bug caught: the refusal said "N connections open" whichever limit was hit; clients without the token
    never count against the limit of those with it."""
    with scripted_api(guard=ConnectionGuard(max_connections=4, max_unauthenticated=8)) as api:
        held = with_token(api, 4) + [api.connect() for _ in range(8)]
        try:
            over = loopback_http.get(api.url + "/models", headers=api.auth, timeout=30)
            assert over.status_code == 503 and over.json()["error"]["code"] == "too_many_connections"
            message = over.json()["error"]["message"]
            assert "4 connections that sent the token" in message and "8" not in message, message
        finally:
            closing(held)


def test_a_connection_that_sends_nothing_is_closed_at_its_first_bytes_deadline() -> None:
    """Bug caught: a silent connection held its place until the whole-headers deadline (10 s); a client
    sends its request at once, so the first bytes get a short deadline of their own."""
    with scripted_api(guard=ConnectionGuard(first_bytes_s=0.2, header_read_s=120)) as api:
        with api.connect() as sock:
            assert read_until_closed(sock) == b"", "closed long before the socket's 30 s timeout"
