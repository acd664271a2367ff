"""A stand-in for a vLLM server on 127.0.0.1: the scripted chat server plus vLLM's /tokenize, /detokenize and a
streamed /v1/completions, which a remote profile's pause–edit–resume goes through.

Real HTTP, read by the real httpx and openai clients inside RemoteEngine. Its "tokenizer" makes one token of
each character (the id is the character's code), so a test can read back what was sent. Each answer after the
connect-time probe can be scripted (``on_tokenize``, ``on_detokenize``): one that never comes, a huge one, a
malformed one; and any endpoint can be made to refuse with an error that echoes the request's key (``refuse``).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

from tests.support.sse_server import ScriptedSseServer, scripted_sse_server

Answer = Callable[[web.Request, dict[str, Any]], Awaitable[web.StreamResponse]]
PROBE_PROMPT = "ok"  # what RemoteEngine's connect-time probe tokenizes


class VllmStandIn(ScriptedSseServer):
    def __init__(self, max_model_len: int = 4096) -> None:
        super().__init__()
        self.max_model_len = max_model_len
        self.on_tokenize: Answer | None = None  # the answer to /tokenize after the probe; None: the char tokenizer
        self.on_detokenize: Answer | None = None  # None: the char tokenizer's text
        self.refuse: dict[str, int] = {}  # path → the status it answers, echoing the request's key
        self.completion_text: list[str] = ["so 3 m."]
        self.tokenize_asked = threading.Event()  # a /tokenize after the probe arrived
        self.completions: list[dict[str, Any]] = []
        self.bytes_sent = 0  # by ``huge_token_list``
        self._closing: asyncio.Event | None = None

    def add_routes(self, app: web.Application) -> None:
        self._closing = asyncio.Event()
        app.middlewares.append(self._refusing)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/detokenize", self._detokenize)
        app.router.add_post("/v1/completions", self._completions)

    async def stop(self) -> None:
        if self._closing is not None:
            self._closing.set()  # answers that hang end, so the server can stop
        await super().stop()

    @web.middleware
    async def _refusing(self, request: web.Request, handler: Any) -> web.StreamResponse:
        status = self.refuse.get(request.path)
        if status is None:
            return await handler(request)
        echoed = request.headers.get("Authorization", "")
        return web.json_response({"error": {"message": f"Bad request: header {echoed!r} is not valid here",
                                            "type": "invalid_request_error", "code": status}}, status=status)

    # ---- endpoints ---------------------------------------------------------------------------

    async def _tokenize(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("prompt") == PROBE_PROMPT and "messages" not in body:
            return self._token_answer([1])
        self.tokenize_asked.set()
        if self.on_tokenize is not None:
            return await self.on_tokenize(request, body)
        text = body.get("prompt") or "".join(f"{m['role']}: {m.get('content') or ''}\n" for m in body["messages"])
        return self._token_answer([ord(char) for char in text])

    def _token_answer(self, tokens: list[int]) -> web.Response:
        return web.json_response({"count": len(tokens), "max_model_len": self.max_model_len, "tokens": tokens,
                                  "token_strs": None})

    async def _detokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        if self.on_detokenize is not None:
            return await self.on_detokenize(request, body)
        return web.json_response({"prompt": "".join(chr(token) for token in body["tokens"])})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.completions.append(body)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for text, finish in [*((text, None) for text in self.completion_text), ("", "stop")]:
            chunk = {"id": "cmpl-standin", "object": "text_completion", "created": 0, "model": body.get("model", ""),
                     "choices": [{"index": 0, "text": text, "finish_reason": finish}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    # ---- scripted answers (for ``on_tokenize``) ----------------------------------------------

    async def never_answer(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        """The request is read and never answered (until the server stops)."""
        assert self._closing is not None
        await self._closing.wait()
        return web.Response(status=503)

    def answer_with(self, raw: bytes, status: int = 200) -> Answer:
        async def answer(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
            return web.Response(body=raw, status=status, content_type="application/json")
        return answer

    def huge_token_list(self, count: int) -> Answer:
        """A well-formed answer of ``count`` tokens, written as fast as the client reads it."""
        async def answer(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            piece = b"151643, " * 10_000
            try:
                await self._write(response, b'{"count": %d, "max_model_len": %d, "tokens": [' % (
                    count, self.max_model_len))
                for _ in range(count // 10_000):
                    await self._write(response, piece)
                await self._write(response, b"1]}")
                await response.write_eof()
            except ConnectionResetError:
                pass  # the client stopped reading: what it took is in bytes_sent
            return response
        return answer

    async def _write(self, response: web.StreamResponse, data: bytes) -> None:
        await response.write(data)
        self.bytes_sent += len(data)


@contextmanager
def vllm_standin(max_model_len: int = 4096) -> Iterator[VllmStandIn]:
    with scripted_sse_server(VllmStandIn(max_model_len)) as server:
        assert isinstance(server, VllmStandIn)
        yield server
