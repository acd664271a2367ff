"""Hostile clients of the local API server, fast (scripted engine), over real HTTP on 127.0.0.1: clients
without the token that try to fill its places, and bodies built to exhaust it (huge or deep JSON in any
field, long stop strings, schemas the grammar engine refuses). Every case ends in a clear error or a
bounded result, and nothing hangs."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from app.engine.errors import EngineFailure, FailureKind
from app.engine.scripted import Script
from app.server.api_connections import ConnectionGuard
from app.server.api_protocol import (
    MAX_JSON_DEPTH,
    MAX_SCHEMA_CHARS,
    MAX_STOP_CHARS,
    MAX_STOPS,
    MAX_TOOLS_CHARS,
    MAX_TOTAL_CHARS,
)
from tests.support import loopback_http
from tests.support.scripted_api import ScriptedApi, read_until_closed, scripted_api

TOKENLESS = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.fixture
def api() -> Iterator[ScriptedApi]:
    with scripted_api() as served:
        yield served


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
        response = loopback_http.get(capped.url + "/models", headers=capped.auth, timeout=30)
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
        response = loopback_http.get(capped.url + "/models", headers=capped.auth, timeout=30)
        assert response.status_code == 200, response.text
    finally:
        for sock in silent:
            sock.close()


def test_unauthenticated_connections_have_their_own_bounded_allowance() -> None:
    """Bug caught: with only authenticated connections counted, nothing bounded those not yet past the token
    (each holds a descriptor until its header deadline). Over the allowance the oldest of them is closed
    (tests/hostile/test_api_connection_slots.py: never the new one refused)."""
    with scripted_api(guard=ConnectionGuard(max_connections=4, max_unauthenticated=2)) as api:
        silent = [api.connect() for _ in range(3)]
        try:
            assert read_until_closed(silent[0]) == b"", "the oldest one made room for the third"
            assert len(api.server.guard.unauthenticated) <= 2
        finally:
            for sock in silent:
                sock.close()


# ---- bodies built to exhaust the server or the engine --------------------------------------------------

HUGE = "x" * (MAX_TOTAL_CHARS + 1)


def deep(levels: int) -> Any:
    value: Any = {"type": "string"}
    for _ in range(levels):
        value = {"type": "array", "items": value}
    return value


def call_message(arguments: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}]}


def tool(description: str = "", parameters: Any = None) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "f", "description": description,
                                             "parameters": parameters or {"type": "object"}}}


def schema_format(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}


HI = {"role": "user", "content": "hi"}
HOSTILE_BODIES: dict[str, tuple[dict[str, Any], str | None, str]] = {
    "tool-call arguments": ({"messages": [HI, call_message(HUGE), {"role": "tool", "tool_call_id": "c1",
                                                                   "content": "ok"}]},
                            "messages", "messages_too_long"),
    "reasoning": ({"messages": [HI, {"role": "assistant", "content": "a", "reasoning": HUGE}, HI]},
                  "messages", "messages_too_long"),
    "reasoning_content": ({"messages": [HI, {"role": "assistant", "content": "a", "reasoning_content": HUGE}, HI]},
                          "messages", "messages_too_long"),
    "tool descriptions": ({"messages": [HI], "tools": [tool("d" * (MAX_TOOLS_CHARS + 1))]}, "tools",
                          "tools_too_long"),
    "a schema": ({"messages": [HI], "response_format": schema_format({"enum": ["e" * (MAX_SCHEMA_CHARS + 1)]})},
                 "response_format", "schema_too_long"),
    "many stop strings": ({"messages": [HI], "stop": ["s"] * (MAX_STOPS + 1)}, "stop", "invalid_value"),
    "a long stop string": ({"messages": [HI], "stop": "s" * (MAX_STOP_CHARS + 1)}, "stop", "invalid_value"),
    "stop strings of 4 MB": ({"messages": [HI], "stop": ["s" * 250_000] * 4}, "stop", "invalid_value"),
    "a deep schema": ({"messages": [HI], "response_format": schema_format(deep(MAX_JSON_DEPTH + 5))}, None,
                      "invalid_json"),
    "deep tool parameters": ({"messages": [HI], "tools": [tool(parameters=deep(400))]}, None, "invalid_json"),
    "fields that add up": ({"messages": [{"role": "user", "content": "a" * 400_000},
                                         {"role": "assistant", "content": "b", "reasoning": "r" * 400_000},
                                         {"role": "user", "content": "c" * 300_000}]},
                           "messages", "messages_too_long"),
}


@pytest.mark.parametrize("name", list(HOSTILE_BODIES))
def test_every_field_counts_toward_the_limits(api: ScriptedApi, name: str) -> None:
    """Bug caught: only message content counted toward the size limit, so huge tool-call arguments, thinking,
    tools or schemas, 16 × 4 MB stop strings (looked for after every token) and JSON nested hundreds deep
    went through to the engine."""
    payload, param, code = HOSTILE_BODIES[name]
    response = loopback_http.post(api.url + "/chat/completions", json=payload, headers=api.auth, timeout=60)
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert (error["param"], error["code"]) == (param, code), error
    assert not api.engine.requests, "refused before the engine saw it"


def test_arguments_nested_past_the_parsers_depth_get_a_bounded_reply(api: ScriptedApi) -> None:
    """Bug caught: arguments of "[" * 200000 (a string, under the size limit) hung the request in the engine;
    here the server must at least pass them on and answer, not fail or hang (the engine's side is in
    tests/engine/test_request_failures.py)."""
    payload = {"messages": [HI, call_message("[" * 200_000), {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}
    response = loopback_http.post(api.url + "/chat/completions", json=payload, headers=api.auth, timeout=60)
    assert response.status_code == 200, response.text[:300]


def test_a_schema_the_grammar_engine_refuses_is_a_400_naming_response_format() -> None:
    """Bug caught: the engine's refusal of a response_format schema (xgrammar's) came back as a 500."""
    refusal = EngineFailure(FailureKind.BAD_SCHEMA, "The JSON schema can't be enforced: allOf.", "Simplify it.")
    with scripted_api([Script(["x"], fail_after=0, failure=refusal)]) as api:
        payload = {"messages": [HI], "response_format": schema_format(
            {"allOf": [{"type": "string"}, {"enum": ["yes", "no"]}]})}
        response = loopback_http.post(api.url + "/chat/completions", json=payload, headers=api.auth, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "response_format" and "response_format" in error["message"]
