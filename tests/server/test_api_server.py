"""The local API server in front of the real engine, used through the `openai` client over real HTTP."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from app.core.settings.keystore import new_token
from app.core.settings.settings import EndpointProfile, EngineConfig, SamplingConfig
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import EngineEvent, ThinkingDelta
from app.engine.remote.remote import RemoteEngine
from app.server.api_server import LocalApiServer
from tests.support import loopback_http

pytestmark = pytest.mark.real_engine


TOKEN = new_token()


@pytest.fixture(scope="module")
def api_server(real_engine) -> Iterator[LocalApiServer]:
    server = LocalApiServer(real_engine, TOKEN, port=0, sampling=SamplingConfig(think_budget=48, max_tokens=48))
    real_engine.loop_thread.submit(server.start()).result(30)
    yield server
    real_engine.loop_thread.submit(server.stop()).result(30)


def client(server: LocalApiServer, token: str | None = None) -> OpenAI:
    return OpenAI(base_url=server.url, api_key=token or TOKEN, max_retries=0, timeout=120)


def test_the_openai_client_streams_reasoning_and_answer_separately(api_server: LocalApiServer) -> None:
    api = client(api_server)
    models = api.models.list().data
    assert [m.id for m in models] == [Path(api_server.engine.ready.model).name], "its name, not its path"
    stream = api.chat.completions.create(model=models[0].id, messages=[{"role": "user", "content": "What is 2+2?"}],
                                         stream=True, max_tokens=96, stream_options={"include_usage": True})
    reasoning, content, finish, usage = [], [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        reasoning.append((delta.model_extra or {}).get("reasoning_content") or "")
        content.append(delta.content or "")
        finish = chunk.choices[0].finish_reason or finish
    assert "".join(reasoning).strip(), "the engine's thinking arrives as reasoning_content"
    assert "<think>" not in "".join(content) and "</think>" not in "".join(content)
    assert finish in ("stop", "length")
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0


def test_a_plain_completion_carries_both_texts(api_server: LocalApiServer) -> None:
    reply = client(api_server).chat.completions.create(
        model="any", messages=[{"role": "user", "content": "Name a colour."}], max_tokens=96)
    message = reply.choices[0].message
    assert message.content and (message.model_extra or {}).get("reasoning_content")
    assert reply.usage is not None and reply.usage.completion_tokens > 0


def test_nalar_as_the_remote_of_another_nalar(api_server: LocalApiServer) -> None:
    """RemoteEngine against this server: the reasoning it sends lands in the thinking pane; a wrong
    key is named with its profile."""
    good = RemoteEngine(EndpointProfile(name="desk", base_url=api_server.url), TOKEN)
    bad = RemoteEngine(EndpointProfile(name="desk", base_url=api_server.url), "nalar-wrong")
    try:
        good.loop_thread.submit(good.start(EngineConfig())).result(30)
        events: list[EngineEvent] = []
        finished = good.loop_thread.submit(good.stream_to(
            events.append, [{"role": "user", "content": "What is 3+3?"}], SamplingConfig(max_tokens=48), "r")
        ).result(120)
        assert finished is not None and finished.answer_text
        assert any(isinstance(e, ThinkingDelta) for e in events)
        with pytest.raises(EngineFailure) as caught:
            bad.loop_thread.submit(bad.start(EngineConfig())).result(30)
        assert caught.value.kind is FailureKind.UNAUTHORIZED
        assert "refused the API key of profile “desk” (401)" in caught.value.message
        assert "Check the key of profile “desk”" in caught.value.fix
    finally:
        good.close()
        bad.close()


def test_a_client_that_leaves_mid_stream_ends_its_request_in_the_engine(api_server: LocalApiServer, qtbot,
                                                                       caplog, monkeypatch) -> None:
    caplog.set_level(logging.INFO, logger="app.server.api_server")
    monkeypatch.setenv("NALAR_IGNORE_EOS", "1")  # the reply is still running when the client leaves
    engine = api_server.engine
    body = {"messages": [{"role": "user", "content": "Write a long story."}], "stream": True, "max_tokens": 400}
    with loopback_http.stream("POST", api_server.url + "/chat/completions", json=body, timeout=60,
                              headers={"Authorization": f"Bearer {TOKEN}"}) as response:
        lines = response.iter_lines()
        while "reasoning_content" not in next(lines):
            pass
        assert engine._live, "the request is running in the engine"
    # The connection is closed: the server notices at its next write and aborts the request.
    qtbot.waitUntil(lambda: not engine._live, timeout=30_000)
    assert "API client left during api-" in caplog.text, "ended by the abort, not by running to its end"


def test_a_client_that_stops_waiting_for_a_plain_completion_ends_its_request(api_server: LocalApiServer, qtbot,
                                                                             caplog, monkeypatch) -> None:
    """It ran to its end after the client had gone (and the openai client retries twice by default)."""
    caplog.set_level(logging.INFO, logger="app.server.api_server")
    monkeypatch.setenv("NALAR_IGNORE_EOS", "1")  # the reply is still running when the client leaves
    engine = api_server.engine
    body = {"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 400}
    with pytest.raises(httpx.ReadTimeout):
        loopback_http.post(api_server.url + "/chat/completions", json=body,
                           headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx.Timeout(60, read=0.5))
    qtbot.waitUntil(lambda: "API client left during api-" in caplog.text, timeout=30_000)
    qtbot.waitUntil(lambda: not engine._live, timeout=30_000)


def test_a_thousand_message_history_is_trimmed_to_the_context(api_server: LocalApiServer) -> None:
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"Message {i}: " + "words " * 40}
               for i in range(1_000)]
    reply = client(api_server).chat.completions.create(
        model="any", messages=[*history, {"role": "user", "content": "Say hi."}], max_tokens=16)
    assert reply.usage is not None
    assert 0 < reply.usage.prompt_tokens <= api_server.engine.ready.max_model_len


def test_thinking_token_budget_and_reasoning_effort_hold_streamed_and_not(api_server: LocalApiServer) -> None:
    """Bug caught (issue 35): vLLM's thinking_token_budget or OpenAI's reasoning_effort accepted but not applied,
    so thinking ran to the server's default budget; or the reasoning tokens missing from usage. The unlimited
    run shows that this model thinks past the small budget by itself, so the budget is what cut it."""
    api = client(api_server)
    ask = {"model": "any", "messages": [{"role": "user", "content": "Explain why the sky is blue."}],
           "temperature": 0, "max_tokens": 32}

    def reasoning_tokens(**extra: object) -> int:
        reply = api.chat.completions.create(**ask, extra_body=extra)  # type: ignore[call-overload]
        assert reply.usage is not None and reply.usage.completion_tokens_details is not None
        return int(reply.usage.completion_tokens_details.reasoning_tokens or 0)

    def streamed_reasoning_tokens(**extra: object) -> int:
        usage = None
        for chunk in api.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True},
                                                 extra_body=extra):  # type: ignore[call-overload]
            usage = chunk.usage or usage
        assert usage is not None and usage.completion_tokens_details is not None
        return int(usage.completion_tokens_details.reasoning_tokens or 0)

    free = reasoning_tokens(thinking_token_budget=-1)
    assert free > 8, f"the model thought only {free} tokens unbounded: the budget test below would prove nothing"
    assert 0 < reasoning_tokens(thinking_token_budget=6) <= 6 + 1, "the budget, plus the closing tag"
    assert 0 < streamed_reasoning_tokens(thinking_token_budget=6) <= 6 + 1
    assert reasoning_tokens(reasoning_effort="none") == 0 == streamed_reasoning_tokens(reasoning_effort="none")
