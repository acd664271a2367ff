"""LocalApiServer: the loaded engine as an OpenAI-compatible endpoint on 127.0.0.1, for other apps.

Opt-in. It runs on the engine's own loop thread (aiohttp), calls ``engine.generate`` directly,
and requires a bearer token. Streaming keeps reasoning separate: thinking arrives as
``reasoning_content`` deltas, the answer as ``content``, as DeepSeek's API does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import time
import uuid
from typing import Any

from aiohttp import web

from app.core.settings import SamplingConfig
from app.engine.base import EngineBase, Message
from app.engine.events import AnswerDelta, EngineErrorEvent, Finished, LoopDetected, ThinkingDelta

log = logging.getLogger(__name__)

HOST = "127.0.0.1"  # never another interface: the token is the only lock on it


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


def _messages(raw: Any) -> list[Message]:
    """OpenAI messages to ours; content given as a list of parts keeps its text parts."""
    if not isinstance(raw, list) or not raw:
        raise ValueError("'messages' must be a non-empty list")
    messages: list[Message] = []
    for item in raw:
        if not isinstance(item, dict) or item.get("role") not in ("system", "user", "assistant"):
            raise ValueError("each message needs a role of system, user or assistant")
        content = item.get("content") or ""
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        messages.append({"role": str(item["role"]), "content": str(content)})
    return messages


class LocalApiServer:
    """Start and stop on the engine loop (``engine.loop_thread``)."""

    def __init__(self, engine: EngineBase, token: str, port: int, sampling: SamplingConfig | None = None) -> None:
        self.engine = engine
        self._token = token
        self.port = port
        self.sampling = sampling or SamplingConfig()
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    async def start(self) -> str:
        """Bind 127.0.0.1:port (0 picks a free one); returns the base URL."""
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        runner = web.AppRunner(app, access_log=None)  # request lines stay out of the logs
        await runner.setup()
        site = web.TCPSite(runner, HOST, self.port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])  # the real one when 0 asked for any free port
        log.info("local API server listening on %s", self.url)
        return self.url

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        given = request.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode(), self._token.encode()):
            return _error(401, "A valid bearer token is required (Settings → Local API server shows it).",
                          "invalid_request_error")
        response: web.StreamResponse = await handler(request)
        return response

    def _model_id(self) -> str:
        ready = self.engine.ready
        return ready.model if ready else "nalar"

    async def _models(self, request: web.Request) -> web.Response:
        ready = self.engine.ready
        data = [] if ready is None else [{"id": ready.model, "object": "model", "created": int(time.time()),
                                          "owned_by": "nalar", "max_model_len": ready.max_model_len}]
        return web.json_response({"object": "list", "data": data})

    def _sampling(self, body: dict[str, Any]) -> SamplingConfig:
        update: dict[str, Any] = {}
        for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p")):
            if body.get(theirs) is not None:
                update[ours] = float(body[theirs])
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        if limit is not None:
            # Their limit covers thinking and answer together: split it the way our budget does.
            limit = int(limit)
            think = min(self.sampling.think_budget, limit // 2)
            update["think_budget"], update["max_tokens"] = think, max(1, limit - think)
        return SamplingConfig.model_validate({**self.sampling.model_dump(), **update})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
            messages = _messages(body.get("messages"))
            sampling = self._sampling(body)
        except (ValueError, TypeError, AttributeError) as exc:  # pydantic's ValidationError is a ValueError
            return _error(400, f"Bad request: {str(exc).splitlines()[0]}", "invalid_request_error")
        if self.engine.ready is None or self.engine.engine_died():
            return _error(503, "Nalar's engine is not running.", "server_error")
        rid = "api-" + uuid.uuid4().hex[:12]
        created = int(time.time())
        if body.get("stream"):
            return await self._stream(request, rid, created, messages, sampling,
                                      bool((body.get("stream_options") or {}).get("include_usage")))
        return await self._complete(rid, created, messages, sampling)

    def _chunk(self, rid: str, created: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
        payload = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": self._model_id(),
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(payload)}\n\n".encode()

    async def _stream(self, request: web.Request, rid: str, created: int, messages: list[Message],
                      sampling: SamplingConfig, include_usage: bool) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        await response.write(self._chunk(rid, created, {"role": "assistant", "content": ""}))
        # Closing the generator (client gone, or done) aborts the request in the engine.
        async with contextlib.aclosing(self.engine.generate(messages, sampling, rid)) as events:
            try:
                async for event in events:
                    if isinstance(event, ThinkingDelta):
                        await response.write(self._chunk(rid, created, {"reasoning_content": event.text}))
                    elif isinstance(event, AnswerDelta):
                        await response.write(self._chunk(rid, created, {"content": event.text}))
                    elif isinstance(event, LoopDetected):  # text already sent past the cut is to be dropped
                        await response.write(self._chunk(rid, created, {"loop_guard": event.summary(),
                                                                        "loop_guard_kept_chars": event.kept_char}))
                    elif isinstance(event, EngineErrorEvent):
                        error = {"error": {"message": event.failure.message, "type": "server_error"}}
                        await response.write(f"data: {json.dumps(error)}\n\n".encode())
                    elif isinstance(event, Finished):
                        finish = "length" if event.reason == "length" else "stop"
                        await response.write(self._chunk(rid, created, {}, finish))
                        if include_usage:
                            await response.write(self._usage_chunk(rid, created, event))
                        break
                await response.write(b"data: [DONE]\n\n")
            except ConnectionResetError:
                log.info("API client left during %s; aborted", rid)
        return response

    def _usage(self, finished: Finished) -> dict[str, int]:
        m = finished.metrics
        prompt = m.prompt_tokens if m else 0
        completion = (m.thinking_tokens + m.answer_tokens) if m else 0
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _usage_chunk(self, rid: str, created: int, finished: Finished) -> bytes:
        payload = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": self._model_id(),
                   "choices": [], "usage": self._usage(finished)}
        return f"data: {json.dumps(payload)}\n\n".encode()

    async def _complete(self, rid: str, created: int, messages: list[Message],
                        sampling: SamplingConfig) -> web.Response:
        finished: Finished | None = None
        failure: str | None = None
        async with contextlib.aclosing(self.engine.generate(messages, sampling, rid)) as events:
            async for event in events:
                if isinstance(event, EngineErrorEvent):
                    failure = event.failure.message
                elif isinstance(event, Finished):
                    finished = event
                    break
        if finished is None or (failure and not finished.answer_text):
            return _error(500, failure or "The engine ended the request without a reply.", "server_error")
        message = {"role": "assistant", "content": finished.answer_text,
                   "reasoning_content": finished.thinking_text or None}
        if finished.loops:  # the loop guard cut or concluded this reply: say so
            message["loop_guard"] = "\n".join(loop.summary() for loop in finished.loops)
        return web.json_response({
            "id": rid, "object": "chat.completion", "created": created, "model": self._model_id(),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "length" if finished.reason == "length" else "stop"}],
            "usage": self._usage(finished)})
