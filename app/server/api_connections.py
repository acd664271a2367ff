"""Connections to the local API server: how many, for how long, and what the log says about them.

aiohttp's own defaults suit a server behind a proxy: an hour of keep-alive, no limit on connections,
no deadline for the request's headers, and a traceback at ERROR (with the first bytes of an
oversized header line, the token included) for every malformed request. Here any local process can
connect, so each connection gets a deadline for its first headers, the number open is capped, and
refusals are logged once per client and kind, without anything the client sent.

Only connections that sent the token count against the cap: a refused request (401, 403) closes its
connection, and connections not yet past the token have a separate, smaller allowance, so clients
without the token can't take the places of those with it. A full allowance never refuses a new
connection: the oldest one not yet past the token is closed to make room (one still sending its first
request before one whose request is being answered), so a client with the token is never refused because
of clients without it, however many they open. Their first bytes also have a short deadline of their own.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from app.server.api_protocol import ApiError

log = logging.getLogger("app.server.api_server")

KEEPALIVE_S = 75.0  # as nginx; the openai client's pool keeps idle connections for 5 s
FIRST_BYTES_S = 2.0  # a new connection must have sent something by then (a client sends its request at once)
HEADER_READ_S = 10.0  # and its first request's headers by then
BODY_READ_S = 30.0  # and a request its whole body, once its headers are in
LINGER_S = 2.0  # and the unread rest of a refused body, before the connection closes
MAX_CONNECTIONS = 128  # authenticated ones: well under a default 1,024-descriptor limit; 50 streams at once fit
MAX_UNAUTHENTICATED = 64  # connections not yet past the token: past it, the oldest is closed to make room
HEADER_END = b"\r\n\r\n"
NO_RETRY = {"x-should-retry": "false"}  # the openai client obeys it: an error is raised, not retried


def error_response(error: ApiError, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(error.payload(), status=error.status, headers={**NO_RETRY, **(headers or {})})


class QuietLog:
    """Logs each kind of refusal once per client address; the rest are only counted."""

    MAX_REMEMBERED = 1_000

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def once(self, peer: str | None, what: str) -> None:
        key = (peer or "?", what)
        if key not in self.counts and len(self.counts) < self.MAX_REMEMBERED:
            log.warning("local API server: %s from %s (further ones from there are not logged)", what, key[0])
        self.counts[key] = self.counts.get(key, 0) + 1


class ConnectionGuard:
    """A server's limits on connections, the ones open, and its quiet log."""

    def __init__(self, *, max_connections: int = MAX_CONNECTIONS, max_unauthenticated: int = MAX_UNAUTHENTICATED,
                 first_bytes_s: float = FIRST_BYTES_S, header_read_s: float = HEADER_READ_S,
                 body_read_s: float = BODY_READ_S, keepalive_s: float = KEEPALIVE_S,
                 linger_s: float = LINGER_S) -> None:
        self.max_connections = max_connections
        self.max_unauthenticated = max(1, max_unauthenticated)
        self.first_bytes_s = first_bytes_s
        self.header_read_s = header_read_s
        self.body_read_s = body_read_s
        self.keepalive_s = keepalive_s
        self.linger_s = linger_s
        self.unauthenticated: dict[GuardedRequestHandler, None] = {}  # open, not yet past the token: oldest first
        self.authenticated = 0  # open connections that sent the token
        self.quiet = QuietLog()

    @property
    def open(self) -> int:
        return len(self.unauthenticated) + self.authenticated

    def admit(self, connection: GuardedRequestHandler, peer: str | None) -> None:
        """A new connection. Only those not yet past the token count against their allowance; when it is full,
        the oldest of them is closed to make room, never the new one refused."""
        while len(self.unauthenticated) >= self.max_unauthenticated:
            waiting = [c for c in self.unauthenticated if not c.request_read]
            oldest = (waiting or list(self.unauthenticated))[0]
            del self.unauthenticated[oldest]
            self.quiet.once(peer, "closed the oldest connection without the token to make room for a new one")
            oldest.force_close()
        self.unauthenticated[connection] = None

    def authenticate(self, connection: GuardedRequestHandler) -> bool:
        """A request with the token: its connection counts against the cap from now on, if there is room."""
        if self.authenticated >= self.max_connections:
            return False
        self.unauthenticated.pop(connection, None)
        self.authenticated += 1
        return True

    def over_cap(self) -> ApiError:
        return ApiError(503, f"The local API server already has {self.max_connections} connections that sent the "
                             "token, its most for them. Close idle ones, or retry shortly.", kind="server_error",
                        code="too_many_connections")


class GuardedRequestHandler(web.RequestHandler):
    """aiohttp's connection handler with a cap, deadlines for the first bytes and headers, and errors in
    OpenAI's shape."""

    def __init__(self, manager: web.Server, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._admitted = False
        self.authenticated = False
        self.request_read = False  # its first request's headers are in: it is being answered
        self._first_bytes = False
        self._deadline: asyncio.TimerHandle | None = None  # for the first bytes, then for the whole headers
        self._started = 0.0
        self._seen_tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        guard, loop = self._guard, asyncio.get_running_loop()
        peer = _peer(transport)
        guard.admit(self, peer)
        self._admitted = True
        self._started = loop.time()
        first = min(guard.first_bytes_s, guard.header_read_s)
        self._deadline = loop.call_later(first, self._late, peer, f"sent nothing within {first:g} s")
        super().connection_made(transport)

    def admit_authenticated(self) -> bool:
        """A request with the token: the connection now counts against the cap, if there is room."""
        if not self.authenticated:
            if not self._guard.authenticate(self):
                return False
            self.authenticated = True
        return True

    def _late(self, peer: str | None, what: str) -> None:
        self._deadline = None
        self._guard.quiet.once(peer, f"closed a connection that {what}")
        self.force_close()

    def data_received(self, data: bytes) -> None:
        if not self._admitted:
            return
        if not self.request_read and data:
            if not self._first_bytes:  # from now on the deadline is the whole headers', counted from the start
                self._first_bytes = True
                self._set_deadline(self._started + self._guard.header_read_s,
                                   f"sent no whole request within {self._guard.header_read_s:g} s")
            seen = self._seen_tail + data
            if HEADER_END in seen:
                self.request_read = True
                self._set_deadline(None)
            self._seen_tail = seen[-3:]
        super().data_received(data)

    def _set_deadline(self, when: float | None, what: str = "") -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None if when is None else asyncio.get_running_loop().call_at(when, self._late, None, what)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._admitted:
            return
        self._admitted = False
        self._guard.unauthenticated.pop(self, None)  # already gone if it was closed to make room
        if self.authenticated:
            self.authenticated = False
            self._guard.authenticated -= 1
        self._set_deadline(None)
        super().connection_lost(exc)

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """A request aiohttp could not parse (or a handler's escaped error): JSON, and no client bytes logged."""
        kind = type(exc).__name__ if exc is not None else f"HTTP {status}"
        self._guard.quiet.once(request.remote, f"refused a malformed request ({kind})")
        if request.writer.output_size > 0:
            raise ConnectionError("the response had begun; the connection is closed instead")
        if status >= 500:
            error = ApiError(status, "The local API server failed on this request.", kind="server_error",
                             code="internal_error")
        else:
            error = ApiError(status, f"The HTTP request is malformed ({kind}): check its request line and "
                                     "headers (each under 8 KB).", code="malformed_request")
        response = error_response(error)
        response.force_close()
        return response

    def log_exception(self, *args: Any, **kwargs: Any) -> None:
        """aiohttp's other error reports: one line per kind, without the exception's text."""
        exc = kwargs.get("exc_info")
        what = str(args[0]).split(" from ")[0] if args else "error"
        self._guard.quiet.once(None, f"{what} ({type(exc).__name__ if exc else 'no detail'})")


def _peer(transport: asyncio.BaseTransport) -> str | None:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if peer else None
