"""A remote server's /v1/models with figures and entries of the wrong type: a start that names the endpoint and
the field, never a bare ValueError. A real HTTP stand-in on 127.0.0.1; no engine.

The decision for a ``max_model_len`` that is no token count: the context is taken as unknown (0, as from a
server that gives none) and the start goes on, since the server can still answer; the ready line and the log
say which endpoint gave what. A model list Nalar can't read at all fails the start as the server's fault."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.core.settings.settings import EndpointProfile, EngineConfig
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import EngineEvent, EngineReady, StatusChanged
from app.engine.remote.answers import MAX_CONTEXT_TOKENS
from app.engine.remote.remote import RemoteEngine
from tests.support.sse_server import ScriptedSseServer, scripted_sse_server

HANG_GUARD_S = 60


@pytest.fixture
def server() -> Iterator[ScriptedSseServer]:
    with scripted_sse_server() as served:
        yield served


def start(server: ScriptedSseServer, models: Any, model: str = "m") -> tuple[EngineReady, list[str]]:
    """The start's result and its status lines."""
    server.models = models
    statuses: list[EngineEvent] = []
    engine = RemoteEngine(EndpointProfile(name="box", base_url=server.base_url, model=model), "sk-unused",
                          first_token_timeout_s=HANG_GUARD_S)
    engine.set_status_sink(statuses.append)
    try:
        ready = engine.loop_thread.submit(engine.start(EngineConfig())).result(HANG_GUARD_S)
    finally:
        engine.close()
    return ready, [s.message for s in statuses if isinstance(s, StatusChanged) and s.state == "ready"]


@pytest.mark.parametrize("value", ["lots", -4096, 0, 10**30, MAX_CONTEXT_TOKENS + 1, 4096.5, 4096.0, True, [4096]],
                         ids=["a-word", "negative", "zero", "10^30", "past-2^24", "a-fraction", "a-float", "a-bool",
                              "a-list"])
def test_a_max_model_len_that_is_no_token_count_is_taken_as_unknown_and_named(server: ScriptedSseServer,
                                                                               value: object) -> None:
    """Hostile input: /v1/models gives max_model_len "lots", a negative, a huge number, a float, a bool, a list.
    Bug caught: int(value) at start, a bare ValueError ("invalid literal for int()") or TypeError for some, and
    for the others a context of -4096, 10^30 or 1 token taken as the model's."""
    ready, lines = start(server, [{"id": "m", "object": "model", "max_model_len": value}])
    assert ready.max_model_len == 0
    assert len(lines) == 1 and f"{server.base_url}/models" in lines[0] and "max_model_len" in lines[0], lines
    assert "unknown" in lines[0]


def test_a_sound_max_model_len_is_the_context(server: ScriptedSseServer) -> None:
    """The case the rule must keep: vLLM's own figure is taken, with no note."""
    ready, lines = start(server, [{"id": "m", "object": "model", "max_model_len": 32768}])
    assert ready.max_model_len == 32768 and "max_model_len" not in lines[0], lines


@pytest.mark.parametrize("models", [[{"id": 5}, {"id": "m"}], [{"object": "model"}], ["m"], "m"],
                         ids=["a-number-id", "no-id", "a-bare-name", "not-a-list"])
@pytest.mark.parametrize("model", ["m", ""], ids=["named", "first-served"])
def test_a_model_list_of_the_wrong_shape_fails_the_start_as_the_servers_fault(server: ScriptedSseServer,
                                                                              models: Any, model: str) -> None:
    """Hostile input: /v1/models entries that are not named models. Bug caught: AttributeError ('str' object
    has no attribute 'id') or TypeError at start, or a profile that took the model named 5 or None."""
    with pytest.raises(EngineFailure) as raised:
        start(server, models, model)
    failure = raised.value
    assert failure.kind is FailureKind.BAD_SERVER_ANSWER and f"{server.base_url}/models" in failure.message, failure
    assert "restart" not in failure.fix.lower()
