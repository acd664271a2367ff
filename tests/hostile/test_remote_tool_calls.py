"""A remote server that streams tool calls without end, or of the wrong types: the reply ends with a message that
names the cap (or the endpoint), no call is run, and nothing hangs. A real SSE stand-in on 127.0.0.1, whose
endless scripts write until the client goes away; no engine."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from app.core.settings.settings import EndpointProfile, EngineConfig, SamplingConfig
from app.engine.errors import FailureKind
from app.engine.events import EngineErrorEvent, EngineEvent, Finished, ToolCallDelta
from app.engine.remote.answers import MAX_CALL_CHARS, MAX_CALLS
from app.engine.remote.remote import RemoteEngine
from tests.support.sse_server import ScriptedSseServer, scripted_sse_server

HANG_GUARD_S = 60
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


@pytest.fixture
def server() -> Iterator[ScriptedSseServer]:
    with scripted_sse_server() as served:
        yield served


@pytest.fixture
def engine(server: ScriptedSseServer) -> Iterator[RemoteEngine]:
    remote = RemoteEngine(EndpointProfile(name="box", base_url=server.base_url, model="m"), "sk-unused",
                          first_token_timeout_s=HANG_GUARD_S)
    try:
        remote.loop_thread.submit(remote.start(EngineConfig())).result(HANG_GUARD_S)
        yield remote
    finally:
        remote.close()


def call_delta(index: int, *, call_id: Any = None, name: Any = None, arguments: Any = None) -> dict[str, Any]:
    function = {key: value for key, value in (("name", name), ("arguments", arguments)) if value is not None}
    call: dict[str, Any] = {"index": index, "type": "function", "function": function}
    if call_id is not None:
        call["id"] = call_id
    return {"tool_calls": [call]}


def reply(server: ScriptedSseServer, engine: RemoteEngine, script: Iterable[dict[str, Any]]) -> list[EngineEvent]:
    server.scripts["call it"] = script
    events: list[EngineEvent] = []
    engine.loop_thread.submit(engine.stream_to(events.append, [{"role": "user", "content": "call it"}],
                                               SamplingConfig(), "r1", tools=TOOLS)).result(HANG_GUARD_S)
    return events


def failure_and_end(events: list[EngineEvent]) -> tuple[EngineErrorEvent, Finished]:
    errors = [event for event in events if isinstance(event, EngineErrorEvent)]
    final = events[-1]
    assert len(errors) == 1 and isinstance(final, Finished), events[-3:]
    assert final.reason == "error" and final.tool_calls == (), "a call cut at the cap is never run"
    return errors[0], final


def test_a_sound_call_is_taken_whole(server: ScriptedSseServer, engine: RemoteEngine) -> None:
    """The case the caps must keep: one call in three deltas ends the reply in that call."""
    events = reply(server, engine, [call_delta(0, call_id="c1", name="lookup", arguments='{"q": '),
                                    call_delta(0, arguments='"Oslo"'), call_delta(0, arguments="}")])
    final = events[-1]
    assert isinstance(final, Finished) and final.reason == "tool_calls", events[-3:]
    assert [(c.id, c.name, c.arguments) for c in final.tool_calls] == [("c1", "lookup", '{"q": "Oslo"}')]


def test_endless_call_arguments_end_the_reply_at_the_cap(server: ScriptedSseServer, engine: RemoteEngine) -> None:
    """Hostile input: a call whose arguments never end (1 KiB a chunk, for ever). Bug caught: nothing capped a
    call's arguments (the loop guard watches text, not calls, and no token budget counts them), so the reply
    never ended and the arguments grew until memory ran out."""
    endless = itertools.chain([call_delta(0, call_id="c1", name="lookup", arguments='{"q": "')],
                              itertools.repeat(call_delta(0, arguments="a" * 1024)))
    events = reply(server, engine, endless)
    error, _ = failure_and_end(events)
    assert f"{MAX_CALL_CHARS:,} characters" in error.failure.message and "'lookup'" in error.failure.message
    assert f"{server.base_url}/chat/completions" in error.failure.message, error.failure.message
    streamed = sum(len(e.arguments_delta) for e in events if isinstance(e, ToolCallDelta))
    assert streamed <= MAX_CALL_CHARS


def test_endless_calls_end_the_reply_at_the_cap(server: ScriptedSseServer, engine: RemoteEngine) -> None:
    """Hostile input: a new call in every chunk, for ever. Bug caught: no cap on the calls in one reply."""
    endless = (call_delta(index, call_id=f"c{index}", name="lookup", arguments="{}") for index in itertools.count())
    events = reply(server, engine, endless)
    error, _ = failure_and_end(events)
    assert f"more than {MAX_CALLS} tool calls" in error.failure.message, error.failure.message
    assert len({e.index for e in events if isinstance(e, ToolCallDelta)}) == MAX_CALLS


@pytest.mark.parametrize("delta", [
    call_delta(0, call_id="c1", name="lookup", arguments={"q": "Oslo"}),
    call_delta(0, call_id="c1", name=5, arguments="{}"),
    call_delta(0, call_id=7, name="lookup", arguments="{}"),
    {"tool_calls": [{"index": "x", "id": "c1", "type": "function", "function": {"name": "lookup"}}]},
    {"tool_calls": [{"index": -1, "id": "c1", "type": "function", "function": {"name": "lookup"}}]},
], ids=["arguments-an-object", "a-number-name", "a-number-id", "a-word-index", "a-negative-index"])
def test_a_call_of_the_wrong_types_is_the_servers_fault(server: ScriptedSseServer, engine: RemoteEngine,
                                                        delta: dict[str, Any]) -> None:
    """Hostile input: tool-call deltas of the wrong types. Bug caught: int("x") or str + dict raised out of the
    reply, shown as "The engine failed… Restart the engine"; a negative index was taken as a call."""
    error, _ = failure_and_end(reply(server, engine, [delta]))
    assert error.failure.kind is FailureKind.BAD_SERVER_ANSWER, error.failure
    assert f"{server.base_url}/chat/completions" in error.failure.message
