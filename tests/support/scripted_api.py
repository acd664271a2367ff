"""The local API server in front of the scripted engine, on a real 127.0.0.1 socket, for the fast tests."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncGenerator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from openai import OpenAI

from app.core.settings.keystore import new_token
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.events import EngineEvent, Finished
from app.engine.requests import Resume
from app.engine.scripted import Script, ScriptedEngineDouble
from app.server.api_connections import ConnectionGuard
from app.server.api_server import LocalApiServer
from tests.support import loopback_http


class WatchedEngine(ScriptedEngineDouble):
    """The scripted engine, noting which requests ended and whether they played to their end."""

    def __init__(self, scripts: Sequence[Script] = (), *, reads_images: bool = False) -> None:
        super().__init__(scripts, reads_images=reads_images)
        self.ended: dict[str, bool] = {}  # request id → it reached Finished

    async def generate(self, messages: Any, sampling: SamplingConfig, request_id: str | None = None, *,
                       ignore_eos: bool = False, resume: Resume | None = None, tools: Any = None,
                       tool_choice: Any = None) -> AsyncGenerator[EngineEvent, None]:
        finished = False
        try:
            async for event in super().generate(messages, sampling, request_id, ignore_eos=ignore_eos, resume=resume,
                                                tools=tools, tool_choice=tool_choice):
                finished = finished or isinstance(event, Finished)
                yield event
        finally:
            self.ended[request_id or "?"] = finished


@dataclass
class ScriptedApi:
    server: LocalApiServer
    engine: WatchedEngine
    token: str
    clients: list[OpenAI] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, **options: Any) -> OpenAI:
        """The official client with its defaults (two retries) unless told otherwise; closed before the server
        stops (a connection still open after a refusal held the stop for the server's whole linger, 2 s)."""
        client = loopback_http.openai_client(base_url=self.url, api_key=options.pop("api_key", self.token), timeout=30,
                                             **options)
        self.clients.append(client)
        return client

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.server.port), timeout=30)


@contextlib.contextmanager
def scripted_api(scripts: Sequence[Script] = (), guard: ConnectionGuard | None = None, *,
                 reads_images: bool = False) -> Iterator[ScriptedApi]:
    """``reads_images``: the engine plays one of vLLM's multimodal models."""
    engine = WatchedEngine(scripts, reads_images=reads_images)
    token = new_token()
    try:
        engine.loop_thread.submit(engine.start(EngineConfig(max_model_len=2048))).result(30)
        server = LocalApiServer(engine, token, port=0, sampling=SamplingConfig(think_budget=64, max_tokens=64),
                                guard=guard)
        engine.loop_thread.submit(server.start()).result(30)
        api = ScriptedApi(server, engine, token)
        try:
            yield api
        finally:
            for client in api.clients:
                client.close()
            engine.loop_thread.submit(server.stop()).result(30)
    finally:
        engine.close()


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the socket's timeout bounds the wait)."""
    chunks = []
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def slow_script(deltas: int = 2_000, rate: float = 20.0, **options: Any) -> Script:
    """A reply long enough (100 s at 20 deltas/s) that a test ends it long before it could finish."""
    return Script(["<think>", *[f"t{i} " for i in range(deltas)]], tokens_per_second=rate, **options)
