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
import dataclasses
import json
import logging
import secrets
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from aiohttp import web
from aiohttp.web_exceptions import HTTPException

from app.core.settings.settings import SamplingConfig
from app.engine.base import EngineBase
from app.engine.events import (
    AnswerDelta,
    EngineErrorEvent,
    EngineEvent,
    Finished,
    LoopDetected,
    ThinkingDelta,
    ToolCallDelta,
)
from app.server.api_connections import (
    ConnectionGuard,
    GuardedRequestHandler,
    error_response,
)
from app.server.api_protocol import (
    MAX_BODY_BYTES,
    SERVER_ERROR,
    ApiError,
    ChatRequest,
    engine_error,
    parse_chat_request,
    parse_json,
    public_model_id,
)

log = logging.getLogger(__name__)

HOST = "127.0.0.1"  # never another interface: the token is the only lock on it
ALLOWED_HOSTS = ("127.0.0.1", "localhost")  # a browser page on another name (DNS rebinding) is refused

Events = AsyncGenerator[EngineEvent, None]


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
            return error_response(error)
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
        try:
            raw = await asyncio.wait_for(request.read(), self.guard.body_read_s)
        except asyncio.TimeoutError:
            raise ApiError(408, f"The request body did not arrive within {self.guard.body_read_s:g} s.",
                           code="body_timeout") from None
        return parse_json(raw, request.charset)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        chat = parse_chat_request(await self._read_json(request))
        sampling = chat.sampling(self.sampling)
        if self.engine.ready is None or self.engine.engine_died():
            raise ApiError(503, "Nalar's engine is not running.", kind=SERVER_ERROR, code="engine_unavailable")
        rid = "api-" + uuid.uuid4().hex[:12]
        # Closing the generator (client gone, or done) aborts the request in the engine.
        replies = self.engine.generate(chat.chat_messages(), sampling, rid, tools=chat.tool_list(),
                                       tool_choice=chat.tool_choice_value())
        if chat.parallel_tool_calls is False:
            replies = _first_call_only(replies)
        async with contextlib.aclosing(replies) as events:
            try:
                if chat.stream:
                    return await self._stream(request, events, rid, chat)
                return await self._complete(request, events, rid)
            except asyncio.CancelledError:
                log.info("API client left during %s; aborted", rid)
                raise

    async def _complete(self, request: web.Request, events: Events, rid: str) -> web.Response:
        thinking: list[str] = []
        answer: list[str] = []
        loops: list[LoopDetected] = []
        async for event in events:
            if isinstance(event, EngineErrorEvent):
                raise engine_error(event.failure)  # even after part of an answer: it is not the answer
            if isinstance(event, ThinkingDelta):
                thinking.append(event.text)
            elif isinstance(event, AnswerDelta):
                answer.append(event.text)
            elif isinstance(event, LoopDetected):
                loops.append(event)
            elif isinstance(event, Finished):
                self._check_finished(request, event, rid)
                # The texts a stream would have sent, not Finished's (cut at the loop): the two agree.
                reasoning = "".join(thinking) or None
                message: dict[str, Any] = {"role": "assistant", "content": "".join(answer) or None,
                                           "reasoning": reasoning, "reasoning_content": reasoning}
                if not event.tool_calls and message["content"] is None:
                    message["content"] = ""
                if event.tool_calls:
                    message["tool_calls"] = [call.as_openai() for call in event.tool_calls]
                if loops:  # the loop guard cut or concluded this reply: say so, and where it cut
                    message["loop_guard"] = "\n".join(loop.summary() for loop in loops)
                    message["loop_guard_kept_chars"] = loops[-1].kept_char
                return web.json_response({
                    "id": rid, "object": "chat.completion", "created": int(time.time()), "model": self._model_id(),
                    "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(event)}],
                    "usage": _usage(event)})
        raise ApiError(500, "The engine ended the request without a reply.", kind=SERVER_ERROR, code="engine_error")

    def _check_finished(self, request: web.Request, finished: Finished, rid: str) -> None:
        if finished.reason in ("stop", "length", "loop", "tool_calls"):
            return
        if request.transport is None or request.transport.is_closing():
            log.info("API client left during %s; aborted", rid)
        raise ApiError(503, "The request was stopped before the reply finished.", kind=SERVER_ERROR,
                       code="request_aborted")

    async def _stream(self, request: web.Request, events: Events, rid: str, chat: ChatRequest) -> web.StreamResponse:
        created = int(time.time())
        response: web.StreamResponse | None = None
        try:
            async for event in events:
                if isinstance(event, EngineErrorEvent):
                    if response is None:
                        raise engine_error(event.failure)  # nothing sent yet: a plain HTTP error
                    await _write_error(response, engine_error(event.failure))
                    return response
                if not isinstance(event, (ThinkingDelta, AnswerDelta, ToolCallDelta, LoopDetected, Finished)):
                    continue
                if isinstance(event, Finished):
                    self._check_finished(request, event, rid)
                if response is None:  # the first text (or the end) commits to a 200
                    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                           "Cache-Control": "no-cache"})
                    await response.prepare(request)
                    await response.write(self._chunk(rid, created, {"role": "assistant", "content": ""}))
                if isinstance(event, ThinkingDelta):
                    await response.write(self._chunk(rid, created, {"reasoning": event.text,
                                                                    "reasoning_content": event.text}))
                elif isinstance(event, ToolCallDelta):
                    await response.write(self._chunk(rid, created, {"tool_calls": [_call_delta(event)]}))
                elif isinstance(event, AnswerDelta):
                    await response.write(self._chunk(rid, created, {"content": event.text}))
                elif isinstance(event, LoopDetected):  # text already sent past the kept length is to be dropped
                    await response.write(self._chunk(rid, created, {"loop_guard": event.summary(),
                                                                    "loop_guard_kept_chars": event.kept_char}))
                else:
                    await response.write(self._chunk(rid, created, {}, _finish_reason(event)))
                    if chat.stream_options is not None and chat.stream_options.include_usage:
                        await response.write(_sse({"id": rid, "object": "chat.completion.chunk", "created": created,
                                                   "model": self._model_id(), "choices": [],
                                                   "usage": _usage(event)}))
                    await response.write(b"data: [DONE]\n\n")
                    return response
            raise ApiError(500, "The engine ended the request without a reply.", kind=SERVER_ERROR,
                           code="engine_error")
        except ConnectionResetError:
            log.info("API client left during %s; aborted", rid)
            if response is None:
                raise
            return response
        except Exception as exc:
            if response is None:
                raise  # the error middleware answers it
            if not isinstance(exc, ApiError):
                log.exception("local API stream %s failed", rid)
                exc = ApiError(500, "The local API server failed during this reply; see nalar.log.",
                               kind=SERVER_ERROR, code="internal_error")
            with contextlib.suppress(ConnectionResetError):
                await _write_error(response, exc)
            return response

    def _chunk(self, rid: str, created: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": self._model_id(),
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


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


def _sse(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


async def _write_error(response: web.StreamResponse, error: ApiError) -> None:
    """The stream's last event: the openai client raises it as an APIError. No finish reason, no [DONE]."""
    await response.write(_sse(error.payload()))


def _finish_reason(finished: Finished) -> str:
    if finished.tool_calls:
        return "tool_calls"
    return "length" if finished.reason == "length" else "stop"


def _call_delta(delta: ToolCallDelta) -> dict[str, Any]:
    """A tool_calls delta item in OpenAI's streaming shape: id, type and name come with a call's first."""
    item: dict[str, Any] = {"index": delta.index, "function": {"arguments": delta.arguments_delta}}
    if delta.id is not None:
        item["id"], item["type"] = delta.id, "function"
    if delta.name is not None:
        item["function"]["name"] = delta.name
    return item


async def _first_call_only(events: Events) -> Events:
    """parallel_tool_calls false: the reply's first call only."""
    async with contextlib.aclosing(events):
        async for event in events:
            if isinstance(event, ToolCallDelta) and event.index > 0:
                continue
            if isinstance(event, Finished) and len(event.tool_calls) > 1:
                event = dataclasses.replace(event, tool_calls=event.tool_calls[:1])
            yield event


def _usage(finished: Finished) -> dict[str, int]:
    m = finished.metrics
    prompt = m.prompt_tokens if m else 0
    completion = (m.thinking_tokens + m.answer_tokens) if m else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
