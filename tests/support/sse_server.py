"""A scripted OpenAI-compatible chat server on 127.0.0.1: it streams exactly the deltas a test gives it.

A real HTTP server and real SSE, read by the real ``openai`` client inside RemoteEngine; only what
the "model" says is scripted. A request's last user message names the script to play, so one server
serves many replays. It lists no models unless a test sets ``models``, so a client may ask for any model name.
A script may be endless (``itertools.repeat``): the server then writes until the client goes away.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

from app.core.loop_thread import LoopThread

Delta = dict[str, Any]  # e.g. {"content": "…"}, {"reasoning_content": "…"} or {"tool_calls": […]}
# The deltas go out in writes of this many events (the first alone, at once), as a busy server's land in one
# read: the client's SSE reader still takes them one event at a time. An endless script still streams.
EVENTS_PER_WRITE = 32


class ScriptedSseServer:
    def __init__(self) -> None:
        self.scripts: dict[str, Iterable[Delta]] = {}
        self.requests: list[dict[str, Any]] = []
        self.models: list[dict[str, Any]] = []  # /v1/models' "data"
        self.base_url = ""
        self.tls: ssl.SSLContext | None = None  # set before start: the server speaks HTTPS with this context
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self.add_routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.tls)
        await site.start()
        scheme = "https" if self.tls else "http"
        self.base_url = f"{scheme}://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        return self.base_url

    def add_routes(self, app: web.Application) -> None:
        """More endpoints, for a server that stands in for more than the chat API."""

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": self.models})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        deltas = self.scripts[body["messages"][-1]["content"]]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        pending: list[str] = []  # events not yet written: a write per event cost a syscall and a wakeup each

        async def send(delta: dict[str, Any], finish: str | None = None, flush: bool = False) -> None:
            chunk = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0,
                     "model": body.get("model", ""), "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            pending.append(f"data: {json.dumps(chunk)}\n\n")
            if flush or len(pending) >= EVENTS_PER_WRITE:
                await response.write("".join(pending).encode())
                pending.clear()

        try:
            await send({"role": "assistant", "content": ""}, flush=True)
            for delta in deltas:
                await send(delta)
            await send({}, "stop")
            pending.append("data: [DONE]\n\n")
            await response.write("".join(pending).encode())
        except ConnectionResetError:
            pass  # the client went away (an endless script ends there)
        return response


@contextmanager
def scripted_sse_server(server: ScriptedSseServer | None = None) -> Iterator[ScriptedSseServer]:
    """The server (a plain one unless given) on a loop thread of its own, stopped (and the thread ended) on exit."""
    thread = LoopThread("scripted-sse")
    server = server or ScriptedSseServer()
    try:
        thread.submit(server.start()).result(10)
        yield server
    finally:
        thread.submit(server.stop()).result(10)
        thread.stop()
