"""LocalApiServer: the loaded engine as an OpenAI-compatible endpoint on 127.0.0.1, for other apps.

Opt-in. It runs in the window's process, on the loop thread of the engine object it serves (aiohttp),
and calls that object's ``generate``: for the local engine, EngineProcess, whose replies come over the pipe
from the engine process. It requires a bearer token. Reasoning stays separate: thinking goes out as
``reasoning`` (vLLM's name) and ``reasoning_content`` (DeepSeek's), the answer as ``content``, calls as
``tool_calls``.

A plain reply is what a stream of the same request sends, joined: under the loop guard both keep
the text sent up to the moment the guard fired, and both mark the loop (``loop_guard``,
``loop_guard_kept_chars``: where the guard would cut).

Every refusal is an ``ApiError`` (app/server/api_protocol.py) answered in OpenAI's error shape; a
reply that fails part-way ends as an error in both modes, never as a finished answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import uuid
from typing import Any

from aiohttp import web
from aiohttp.web_exceptions import HTTPException

from app.core.settings.settings import SamplingConfig
from app.engine.base import EngineBase
from app.server.api_connections import (
    ConnectionGuard,
    GuardedRequestHandler,
    error_response,
)
from app.server.api_protocol import (
    MAX_BODY_BYTES,
    SERVER_ERROR,
    ApiError,
    parse_chat_request,
    parse_json,
    public_model_id,
)
from app.server.api_replies import complete_reply, first_call_only, stream_reply

log = logging.getLogger(__name__)

HOST = "127.0.0.1"  # never another interface: the token is the only lock on it
ALLOWED_HOSTS = ("127.0.0.1", "localhost")  # a browser page on another name (DNS rebinding) is refused

def _host_name(header: str) -> str:
    """'localhost:8765' → 'localhost'; '[::1]:8765' → '[::1]'."""
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class LocalApiServer:
    """Start and stop on the engine loop (``engine.loop_thread``)."""

    def __init__(self, engine: EngineBase, token: str, port: int, sampling: SamplingConfig | None = None,
                 guard: ConnectionGuard | None = None) -> None:
        self.engine = engine
        self._token = token.encode()
        self.port = port
        self.sampling = sampling or SamplingConfig()
        self.guard = guard or ConnectionGuard()
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    @property
    def bound_addresses(self) -> list[tuple[str, int]]:
        """What the listening sockets are really bound to (the tests check these, not ``url``)."""
        sockets = self._listener.sockets if self._listener is not None else ()
        return [tuple(sock.getsockname()[:2]) for sock in sockets]  # type: ignore[misc]

    async def start(self) -> str:
        """Bind 127.0.0.1:port (0 picks a free one); returns the base URL."""
        app = web.Application(middlewares=[self._check_host, self._errors_as_json, self._auth],
                              client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        # handler_cancellation: a client that leaves cancels its handler, and with it the generation.
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        server = runner.server
        assert server is not None
        options: dict[str, Any] = {
            "loop": asyncio.get_running_loop(), "keepalive_timeout": self.guard.keepalive_s,
            "auto_decompress": False,  # a small gzip body must not inflate before the token is checked
            "access_log": None,  # request lines stay out of the logs
            # After a refusal, the rest of an unread body is drained this long before the connection closes
            # (aiohttp's default, 10 s, kept a stalled client's place under the connection cap that long).
            "lingering_time": self.guard.linger_s,
        }
        try:
            self._listener = await asyncio.get_running_loop().create_server(
                lambda: GuardedRequestHandler(server, guard=self.guard, **options), HOST, self.port)
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = self.bound_addresses[0][1]  # the real one when 0 asked for any free port
        log.info("local API server listening on %s", self.url)
        return self.url

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        runner, self._runner = self._runner, None
        if listener is not None:
            listener.close()
        if runner is not None:
            await runner.cleanup()  # closes the open connections, ending their handlers

    # ---- middlewares, outermost first --------------------------------------------------------------

    @web.middleware
    async def _check_host(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Before anything else: a page a browser loaded from another name must not reach us."""
        host = request.headers.get("Host")
        if host is not None and _host_name(host).lower() not in ALLOWED_HOSTS:
            self.guard.quiet.once(request.remote, "refused a request for another host name")
            return _closing(error_response(ApiError(403, "This server answers only requests addressed to 127.0.0.1 "
                                                         "or localhost.", code="host_not_allowed")))
        response: web.StreamResponse = await handler(request)
        return response

    @web.middleware
    async def _errors_as_json(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except ApiError as error:
            # A body cut off half way leaves the rest of it where the next request would start: end the connection.
            return _closing(error_response(error)) if error.status == 408 else error_response(error)
        except HTTPException as exc:
            return _http_error(request, exc)
        except Exception:  # a bug of ours: the client still gets JSON, the log gets the traceback
            log.exception("local API request %s %s failed", request.method, request.path)
            return error_response(ApiError(500, "The local API server failed on this request; see nalar.log.",
                                           kind=SERVER_ERROR, code="internal_error"))

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        # Bytes, not str: a header with a non-ASCII byte is just a wrong token.
        scheme, _, token = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape").partition(b" ")
        if scheme.lower() != b"bearer" or not secrets.compare_digest(token.strip(), self._token):
            self.guard.quiet.once(request.remote, "refused a request without the right token")
            return _closing(error_response(ApiError(401, "A valid bearer token is required (Settings → Local API "
                                                         "server shows it).", code="invalid_api_key")))
        connection = request.protocol
        if isinstance(connection, GuardedRequestHandler) and not connection.admit_authenticated():
            self.guard.quiet.once(request.remote, "refused a request over the connection cap")
            return _closing(error_response(self.guard.over_cap()))
        response: web.StreamResponse = await handler(request)
        return response

    # ---- handlers ----------------------------------------------------------------------------------

    def _model_id(self) -> str:
        ready = self.engine.ready
        return public_model_id(ready.model) if ready else "nalar"

    async def _models(self, request: web.Request) -> web.Response:
        ready = self.engine.ready
        data = [] if ready is None else [{"id": self._model_id(), "object": "model", "created": int(time.time()),
                                          "owned_by": "nalar", "max_model_len": ready.max_model_len}]
        return web.json_response({"object": "list", "data": data})

    async def _read_json(self, request: web.Request) -> Any:
        if request.headers.get("Content-Encoding", "identity").lower() != "identity":
            raise ApiError(400, "Compressed request bodies are not accepted: send the JSON uncompressed.",
                           code="unsupported_content_encoding")
        # asyncio.timeout, not wait_for: on Python 3.11, wait_for returns a read that ends just as the client leaves
        # and drops the handler's cancel, so the reply was generated on for nobody until its first write.
        try:
            async with asyncio.timeout(self.guard.body_read_s):
                raw = await request.read()
        except TimeoutError:
            raise ApiError(408, f"The request body did not arrive within {self.guard.body_read_s:g} s.",
                           code="body_timeout") from None
        return parse_json(raw, request.charset)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        chat = parse_chat_request(await self._read_json(request))
        sampling = chat.sampling(self.sampling)
        if self.engine.ready is None or self.engine.engine_died():
            raise ApiError(503, "Nalar's engine is not running.", kind=SERVER_ERROR, code="engine_unavailable")
        chat.check_images(self.engine.ready.reads_images, self.engine.ready.model)
        rid = "api-" + uuid.uuid4().hex[:12]
        # Closing the generator (client gone, or done) aborts the request in the engine.
        replies = self.engine.generate(chat.chat_messages(), sampling, rid, tools=chat.tool_list(),
                                       tool_choice=chat.tool_choice_value())
        if chat.parallel_tool_calls is False:
            replies = first_call_only(replies)
        async with contextlib.aclosing(replies) as events:
            try:
                if chat.stream:
                    return await stream_reply(request, events, rid, chat, self._model_id())
                return await complete_reply(request, events, rid, self._model_id())
            except asyncio.CancelledError:
                log.info("API client left during %s; aborted", rid)
                raise


def _closing(response: web.Response) -> web.Response:
    """A refusal that also ends its connection: a client without the token keeps no place open."""
    response.force_close()
    return response


def _http_error(request: web.Request, exc: HTTPException) -> web.Response:
    """aiohttp's own refusals (404, 405, 413) in OpenAI's shape, keeping headers such as Allow."""
    what = f"{request.method} {request.path[:200]}"
    known = {404: (f"Unknown URL: {what}. This server has GET /v1/models and POST /v1/chat/completions.",
                   "unknown_url"),
             405: (f"Method not allowed: {what}.", "method_not_allowed"),
             413: (f"The request body is over {MAX_BODY_BYTES // 2**20} MiB, this server's limit.",
                   "request_too_large")}
    message, code = known.get(exc.status, (f"{exc.reason} (HTTP {exc.status}).", None))
    kept = {name: value for name, value in exc.headers.items() if name.lower() in ("allow", "retry-after")}
    return error_response(ApiError(exc.status, message, code=code), kept)
