"""The local API server in front of the real engine, used through the `openai` client over real HTTP."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI

from app.core.keystore import new_token
from app.core.settings import EndpointProfile, EngineConfig, SamplingConfig
from app.engine.api_server import LocalApiServer
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import EngineEvent, ThinkingDelta
from app.engine.remote import RemoteEngine

pytestmark = pytest.mark.real_engine


@pytest.fixture(scope="module")
def api_server(real_engine) -> Iterator[LocalApiServer]:
    server = LocalApiServer(real_engine, new_token(), port=0, sampling=SamplingConfig(think_budget=48, max_tokens=48))
    real_engine.loop_thread.submit(server.start()).result(30)
    yield server
    real_engine.loop_thread.submit(server.stop()).result(30)


def client(server: LocalApiServer, token: str | None = None) -> OpenAI:
    return OpenAI(base_url=server.url, api_key=token or server._token, max_retries=0, timeout=120)


def test_it_listens_on_loopback_only(api_server: LocalApiServer) -> None:
    assert api_server.url.startswith("http://127.0.0.1:")


def test_the_openai_client_streams_reasoning_and_answer_separately(api_server: LocalApiServer) -> None:
    api = client(api_server)
    models = api.models.list().data
    assert [m.id for m in models] == [api_server.engine.ready.model]
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


@pytest.mark.parametrize("header", [None, "Bearer wrong-token", "Basic abc"])
def test_a_request_without_the_token_is_refused(api_server: LocalApiServer, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    for method, path in (("GET", "/models"), ("POST", "/chat/completions")):
        response = httpx.request(method, api_server.url + path, headers=headers, timeout=10,
                                 json={"messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == 401
        assert "bearer token" in response.json()["error"]["message"]


def test_the_openai_client_with_a_wrong_key_gets_401(api_server: LocalApiServer) -> None:
    with pytest.raises(openai.AuthenticationError):
        client(api_server, token="nalar-not-the-token").models.list()


def test_bad_requests_get_a_400_that_says_why(api_server: LocalApiServer) -> None:
    response = httpx.post(api_server.url + "/chat/completions", json={"messages": []}, timeout=10,
                          headers={"Authorization": f"Bearer {api_server._token}"})
    assert response.status_code == 400 and "non-empty list" in response.json()["error"]["message"]


def test_nalar_as_the_remote_of_another_nalar(api_server: LocalApiServer) -> None:
    """RemoteEngine against this server: the reasoning it sends lands in the thinking pane; a wrong
    key is named with its profile."""
    good = RemoteEngine(EndpointProfile(name="desk", base_url=api_server.url), api_server._token)
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
    caplog.set_level(logging.INFO, logger="app.engine.api_server")
    monkeypatch.setenv("NALAR_IGNORE_EOS", "1")  # the reply is still running when the client leaves
    engine = api_server.engine
    body = {"messages": [{"role": "user", "content": "Write a long story."}], "stream": True, "max_tokens": 400}
    with httpx.stream("POST", api_server.url + "/chat/completions", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {api_server._token}"}) as response:
        lines = response.iter_lines()
        while "reasoning_content" not in next(lines):
            pass
        assert engine._live, "the request is running in the engine"
    # The connection is closed: the server notices at its next write and aborts the request.
    qtbot.waitUntil(lambda: not engine._live, timeout=30_000)
    assert "API client left during api-" in caplog.text, "ended by the abort, not by running to its end"
