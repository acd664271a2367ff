"""A remote server whose /v1/models body or one streamed event never ends: the start fails, or the reply ends,
with the server's bad answer naming the endpoint and the 1 MiB cap, long before the memory fills. A real aiohttp
stand-in on 127.0.0.1 that writes until the client goes away; no engine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aiohttp import web

from app.core.settings.settings import EndpointProfile, EngineConfig, SamplingConfig
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import EngineErrorEvent, EngineEvent, Finished
from app.engine.remote.capped import MAX_EVENT_BYTES, MAX_MODELS_BYTES
from app.engine.remote.remote import RemoteEngine
from tests.support.sse_server import ScriptedSseServer, scripted_sse_server

HANG_GUARD_S = 60
CHUNK = b"x" * 65536


class EndlessServer(ScriptedSseServer):
    """/v1/models: a model list whose JSON never closes; a chat reply: one ``data:`` line without end (when
    ``endless_event``), else the scripted deltas."""

    endless_models = False
    endless_event = False
    written = 0  # bytes of the endless answer written before the client went away

    async def _endless(self, request: web.Request, head: bytes, content_type: str) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        try:
            await response.write(head)
            while self.written < 64 * MAX_EVENT_BYTES:  # a bound for the test itself: far past the cap
                await response.write(CHUNK)
                self.written += len(CHUNK)
        except ConnectionResetError:
            pass
        return response

    async def _models(self, request: web.Request) -> web.Response:
        if not self.endless_models:
            return await super()._models(request)
        return await self._endless(request, b'{"object": "list", "data": [{"id": "m", "pad": "',  # type: ignore[return-value]
                                   "application/json")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if not self.endless_event:
            return await super()._chat(request)
        await request.read()
        return await self._endless(request, b'data: {"choices": [{"index": 0, "delta": {"content": "',
                                   "text/event-stream")


@pytest.fixture
def server() -> Iterator[EndlessServer]:
    with scripted_sse_server(EndlessServer()) as served:
        yield served  # type: ignore[misc]


def engine_for(server: EndlessServer) -> RemoteEngine:
    return RemoteEngine(EndpointProfile(name="box", base_url=server.base_url, model="m"), "sk-unused",
                        first_token_timeout_s=HANG_GUARD_S)


def test_an_endless_model_list_fails_the_start_naming_the_endpoint_and_the_cap(server: EndlessServer) -> None:
    """Hostile input: /v1/models answers a body that never ends. Bug caught: the openai client read it whole,
    without a limit, until the memory ran out (or the start's timeout, with a message blaming the network)."""
    server.endless_models = True
    engine = engine_for(server)
    try:
        with pytest.raises(EngineFailure) as raised:
            engine.loop_thread.submit(engine.start(EngineConfig())).result(HANG_GUARD_S)
    finally:
        engine.close()
    failure = raised.value
    assert failure.kind is FailureKind.BAD_SERVER_ANSWER, failure
    assert f"{server.base_url}/models" in failure.message and "1 MiB" in failure.message, failure.message
    assert server.written < 8 * MAX_MODELS_BYTES, f"{server.written:,} bytes were read: the cap did not stop it"


def test_a_streamed_event_without_end_ends_the_reply_naming_the_endpoint_and_the_cap(server: EndlessServer) -> None:
    """Hostile input: a chat reply whose one ``data:`` line never ends. Bug caught: the openai client's SSE
    decoder buffered it until its blank line, which never came: the memory grew without a bound and the reply
    never ended. The first 1 MiB is no reply; the message names the endpoint and the cap."""
    engine = engine_for(server)
    try:
        engine.loop_thread.submit(engine.start(EngineConfig())).result(HANG_GUARD_S)
        server.endless_event = True
        events: list[EngineEvent] = []
        engine.loop_thread.submit(engine.stream_to(events.append, [{"role": "user", "content": "hi"}],
                                                   SamplingConfig(), "r1")).result(HANG_GUARD_S)
    finally:
        engine.close()
    errors = [event for event in events if isinstance(event, EngineErrorEvent)]
    assert len(errors) == 1 and isinstance(events[-1], Finished), events[-3:]
    message = errors[0].failure.message
    assert f"{server.base_url}/chat/completions" in message and "1 MiB" in message, message
    assert server.written < 8 * MAX_EVENT_BYTES, f"{server.written:,} bytes were read: the cap did not stop it"


def test_a_sound_reply_and_model_list_pass_the_caps(server: EndlessServer) -> None:
    """The case the caps must keep: a plain stream of many events (more than 1 MiB in all) is no bad answer."""
    engine = engine_for(server)
    server.scripts["hi"] = [{"content": "y" * 20_000}] * 80  # 1.6 MB in all, 20 KB an event
    try:
        engine.loop_thread.submit(engine.start(EngineConfig())).result(HANG_GUARD_S)
        events: list[EngineEvent] = []
        engine.loop_thread.submit(engine.stream_to(events.append, [{"role": "user", "content": "hi"}],
                                                   SamplingConfig(), "r1")).result(HANG_GUARD_S)
    finally:
        engine.close()
    assert not [event for event in events if isinstance(event, EngineErrorEvent)], events[-3:]
    assert isinstance(events[-1], Finished) and events[-1].reason == "stop", events[-1]
