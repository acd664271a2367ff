"""Hostile clients of the local API server, fast (scripted engine), over real HTTP on 127.0.0.1: clients
without the token that try to fill its places, and bodies built to exhaust it (huge or deep JSON in any
field, long stop strings, schemas the grammar engine refuses). Every case ends in a clear error or a
bounded result, and nothing hangs."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from app.server.api_connections import ConnectionGuard
from tests.support.scripted_api import ScriptedApi, read_until_closed, scripted_api

TOKENLESS = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.fixture
def capped() -> Iterator[ScriptedApi]:
    with scripted_api(guard=ConnectionGuard(max_connections=4, max_unauthenticated=8)) as served:
        yield served


def tokenless_clients(api: ScriptedApi, count: int) -> list[socket.socket]:
    """Clients without the token that each send one request, read the refusal, and stay connected."""
    held = []
    for _ in range(count):
        sock = api.connect()
        sock.sendall(TOKENLESS)
        assert sock.recv(65536).startswith(b"HTTP/1.1 401")
        held.append(sock)
    return held


def test_refused_clients_without_the_token_cannot_fill_the_places(capped: ScriptedApi) -> None:
    """Bug caught: a 401 kept its connection for the 75 s keep-alive, so with the cap at 4 four clients
    without the token, each idle after one request, made the server refuse the client with the token (503)."""
    held = tokenless_clients(capped, 4)
    try:
        response = httpx.get(capped.url + "/models", headers=capped.auth, timeout=30)
        assert response.status_code == 200, response.text
    finally:
        for sock in held:
            sock.close()


def test_a_refusal_closes_its_connection(capped: ScriptedApi) -> None:
    """Bug caught: after a 401 or a 403 (another host name) the server kept the connection open."""
    for request in (TOKENLESS, b"GET /v1/models HTTP/1.1\r\nHost: evil.example\r\n\r\n"):
        with capped.connect() as sock:
            sock.sendall(request)
            reply = read_until_closed(sock)  # returns only once the server closed it (30 s socket timeout)
        assert reply.startswith((b"HTTP/1.1 401", b"HTTP/1.1 403")) and b"Connection: close" in reply


def test_silent_connections_without_the_token_leave_the_cap_to_clients_with_it(capped: ScriptedApi) -> None:
    """Bug caught: connections that sent nothing yet (slowloris without the token) counted against the cap,
    so four of them locked out the client with the token until their header deadline."""
    silent = [capped.connect() for _ in range(4)]
    try:
        response = httpx.get(capped.url + "/models", headers=capped.auth, timeout=30)
        assert response.status_code == 200, response.text
    finally:
        for sock in silent:
            sock.close()


def test_unauthenticated_connections_have_their_own_bounded_allowance() -> None:
    """Bug caught: with only authenticated connections counted, nothing bounded those not yet past the token
    (each holds a descriptor until its header deadline)."""
    with scripted_api(guard=ConnectionGuard(max_connections=4, max_unauthenticated=2)) as api:
        silent = [api.connect() for _ in range(2)]
        try:
            with api.connect() as extra:
                reply = read_until_closed(extra)
            assert reply.startswith(b"HTTP/1.1 503") and b'"code": "too_many_connections"' in reply
        finally:
            for sock in silent:
                sock.close()
