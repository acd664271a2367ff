"""Bad input, failed replies and clients that leave, fast (scripted engine), over real HTTP on 127.0.0.1.
Every refusal is JSON in OpenAI's shape, and the official client raises it, typed, without retrying."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import httpx
import openai
import pytest

from app.engine.events import EngineEvent
from app.engine.scripted import Script
from app.server.api_protocol import MAX_MESSAGES, MAX_TOTAL_CHARS
from tests.support import loopback_http
from tests.support.scripted_api import ScriptedApi, WatchedEngine, scripted_api, slow_script

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def api() -> Iterator[ScriptedApi]:
    with scripted_api() as served:
        yield served


def assert_openai_error(response: httpx.Response, status: int, param: str | None, code: str | None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["x-should-retry"] == "false"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["param"], error["code"]) == (param, code), error
    assert error["type"] == ("invalid_request_error" if status < 500 else "server_error")
    assert error["message"].strip()
    return error


def body(**fields: Any) -> bytes:
    return json.dumps({"messages": HI, **fields}).encode()


BAD_BODIES = {
    "lone surrogate": (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "messages[0].content",
                       "invalid_value"),
    "lone surrogate in a part": (b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "a\\udfff"}]}]}',
                                 "messages[0].content", "invalid_value"),
    "max_tokens 1e400": (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1e400}', "max_tokens",
                         "invalid_type"),
    "max_tokens huge": (body(max_tokens=10**30), "max_tokens", "invalid_value"),
    "max_tokens 0": (body(max_tokens=0), "max_tokens", "invalid_value"),
    "nested 10,000 deep": (b'{"messages": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", None, "invalid_json"),
    "stream_options yes": (body(stream_options="yes"), "stream_options", "invalid_type"),
    "include_usage yes": (body(stream_options={"include_usage": "yes"}), "stream_options.include_usage",
                          "invalid_type"),
    "stream as a string": (body(stream="false"), "stream", "invalid_type"),
    "temperature NaN": (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', "temperature",
                        "invalid_value"),
    "temperature 5": (body(temperature=5), "temperature", "invalid_value"),
    "top_p 0": (body(top_p=0), "top_p", "invalid_value"),
    "no messages": (b'{"model": "x"}', "messages", "missing_required_parameter"),
    "empty messages": (b'{"messages": []}', "messages", "invalid_value"),
    "messages not a list": (b'{"messages": "hi"}', "messages", "invalid_type"),
    "unknown role": (b'{"messages": [{"role": "robot", "content": "hi"}]}', "messages[0].role", "invalid_type"),
    "content a number": (b'{"messages": [{"role": "user", "content": 5}]}', "messages[0].content", "invalid_value"),
    "not JSON": (b"{messages", None, "invalid_json"),
    "not UTF-8": (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', None, "invalid_json"),
    "a list, not an object": (b"[]", None, "invalid_json"),
    "too many messages": (body(messages=[{"role": "user", "content": "a"}] * (MAX_MESSAGES + 1)), "messages",
                          "too_many_messages"),
    "too many characters": (body(messages=[{"role": "user", "content": "a" * (MAX_TOTAL_CHARS + 1)}]), "messages",
                            "messages_too_long"),
}


@pytest.mark.parametrize("name", list(BAD_BODIES))
@pytest.mark.parametrize("stream", [False, True])
def test_bad_input_gets_a_400_that_names_the_field(api: ScriptedApi, name: str, stream: bool) -> None:
    raw, param, code = BAD_BODIES[name]
    if stream and raw.startswith(b'{"messages"'):
        raw = b'{"stream": true, ' + raw[1:]
    response = loopback_http.post(api.url + "/chat/completions", content=raw, timeout=30,
                                  headers={**api.auth, "Content-Type": "application/json"})
    error = assert_openai_error(response, 400, param, code)
    if param:
        assert param.split(".")[-1].split("[")[0] in error["message"], "the message names the field"
    assert not api.engine.requests


def test_the_limits_are_named_in_the_message(api: ScriptedApi) -> None:
    for name, limit in (("too many messages", MAX_MESSAGES), ("too many characters", MAX_TOTAL_CHARS)):
        response = loopback_http.post(api.url + "/chat/completions", content=BAD_BODIES[name][0], headers=api.auth,
                                      timeout=30)
        assert f"{limit:,}" in response.json()["error"]["message"]


def test_an_unknown_charset_is_a_400(api: ScriptedApi) -> None:
    response = loopback_http.post(api.url + "/chat/completions", content=body(), timeout=30,
                                  headers={**api.auth, "Content-Type": "application/json; charset=klingon-9"})
    assert_openai_error(response, 400, None, "unsupported_charset")


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("GET", "/v1/nothing-here", 404, "unknown_url"), ("GET", "/", 404, "unknown_url"),
    ("GET", "/v1/chat/completions", 405, "method_not_allowed"), ("DELETE", "/v1/models", 405, "method_not_allowed")])
def test_unknown_paths_and_methods_answer_in_json(api: ScriptedApi, method: str, path: str, status: int,
                                                  code: str) -> None:
    response = loopback_http.request(method, f"http://127.0.0.1:{api.server.port}{path}", headers=api.auth, timeout=30)
    assert_openai_error(response, status, None, code)


def test_a_body_over_the_limit_is_a_json_413(api: ScriptedApi) -> None:
    huge = body(messages=[{"role": "user", "content": "a" * (5 << 20)}])
    response = loopback_http.post(api.url + "/chat/completions", content=huge, headers=api.auth, timeout=60)
    assert_openai_error(response, 413, None, "request_too_large")


def test_a_stopped_engine_is_a_503(api: ScriptedApi) -> None:
    api.engine.loop_thread.submit(api.engine.shutdown()).result(30)
    response = loopback_http.post(api.url + "/chat/completions", content=body(), headers=api.auth, timeout=30)
    assert_openai_error(response, 503, None, "engine_unavailable")


# ---- the official client: a typed error, raised once -------------------------------------------------

OPENAI_CASES = {
    "a bad field": ({"messages": HI, "temperature": 7}, openai.BadRequestError, 0),
    "a string for stream": ({"messages": HI, "extra_body": {"stream": "false"}}, openai.BadRequestError, 0),
    "stream_options yes": ({"messages": HI, "extra_body": {"stream_options": "yes"}}, openai.BadRequestError, 0),
    "max_tokens a float": ({"messages": HI, "extra_body": {"max_tokens": 1.5e300}}, openai.BadRequestError, 0),
    "too many messages": ({"messages": HI * (MAX_MESSAGES + 1)}, openai.BadRequestError, 0),
    "a body over the limit": ({"messages": [{"role": "user", "content": "a" * (5 << 20)}]}, openai.APIStatusError,
                              0),
    "an engine failure": ({"messages": HI, "script": Script(["a", "b"], fail_after=0)}, openai.InternalServerError,
                          1),
    "a failure mid-answer": ({"messages": HI, "script": Script(["<think>x</think>", "a", "b", "c"], fail_after=2)},
                             openai.InternalServerError, 1),
}


@pytest.mark.parametrize("name", list(OPENAI_CASES))
def test_the_openai_client_raises_each_error_typed_and_does_not_retry(name: str) -> None:
    options, error_type, engine_calls = OPENAI_CASES[name]
    options = dict(options)
    script = options.pop("script", None)
    with scripted_api([script] if script else []) as api:
        with pytest.raises(error_type) as caught:
            api.client().chat.completions.create(model="any", **options)  # default client: two retries
        assert isinstance(caught.value.body, dict) and caught.value.body.get("message")
        assert len(api.engine.requests) == engine_calls, "not retried"


# ---- replies that fail part-way ----------------------------------------------------------------------

FAILING = Script(["<think>step one ", "step two</think>", "The answer ", "is ", "forty", "-two."], fail_after=4)


def test_a_failure_mid_answer_is_an_error_not_a_short_answer() -> None:
    """It was 200 with the partial text and finish_reason 'stop'."""
    with scripted_api([FAILING]) as api:
        response = loopback_http.post(api.url + "/chat/completions", content=body(), headers=api.auth, timeout=30)
        error = assert_openai_error(response, 503, None, "engine_unavailable")
        assert "stopped unexpectedly" in error["message"]


def test_a_stream_that_fails_ends_with_the_error_and_no_finish() -> None:
    """It was the error chunk, then finish_reason 'stop' and [DONE]: a client took it for a whole answer."""
    with scripted_api([FAILING]) as api:
        with loopback_http.stream("POST", api.url + "/chat/completions", content=body(stream=True), headers=api.auth,
                                  timeout=30) as response:
            events = [line.removeprefix("data: ") for line in response.iter_lines() if line]
        assert response.status_code == 200
        assert "[DONE]" not in events
        chunks = [json.loads(e) for e in events]
        assert "error" in chunks[-1] and set(chunks[-1]["error"]) == {"message", "type", "param", "code"}
        assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
        assert text == "The answer is ", "what arrived before the failure was sent"


def test_the_openai_client_raises_when_a_stream_fails() -> None:
    with scripted_api([FAILING]) as api:
        stream = api.client().chat.completions.create(model="any", messages=HI, stream=True)
        received = []
        with pytest.raises(openai.APIError) as caught:
            for chunk in stream:
                received.append(chunk.choices[0].delta.content or "")
        assert "stopped unexpectedly" in caught.value.message
        assert "".join(received) == "The answer is "


class BrokenEngine(WatchedEngine):
    """Raises what is not an EngineFailure (the tokenizer's TypeError did), after ``after`` events."""

    after = 0

    async def generate(self, *args: Any, **kwargs: Any) -> AsyncGenerator[EngineEvent, None]:
        count = 0
        async for event in super().generate(*args, **kwargs):
            if count >= self.after:
                raise TypeError("TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence, ...]]")
            count += 1
            yield event


@pytest.mark.parametrize("after", [0, 3])
@pytest.mark.parametrize("stream", [False, True])
def test_an_unexpected_engine_exception_is_a_json_error(after: int, stream: bool, caplog) -> None:
    """It was a plain-text 500, or a stream cut after the role chunk."""
    with scripted_api([FAILING]) as api:
        broken = BrokenEngine()
        broken.after = after
        api.engine.generate = broken.generate  # type: ignore[method-assign]
        broken.ready = api.engine.ready
        response = loopback_http.post(api.url + "/chat/completions", content=body(stream=stream), headers=api.auth,
                                      timeout=30)
        if stream and after:
            last = [line for line in response.text.splitlines() if line][-1]
            assert json.loads(last.removeprefix("data: "))["error"]["code"] == "internal_error"
            assert "[DONE]" not in response.text
        else:
            assert_openai_error(response, 500, None, "internal_error")
        assert "TextEncodeInput" in caplog.text, "the traceback goes to the log"


# ---- clients that leave --------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_ends_its_generation(qtbot, stream: bool) -> None:
    """Without streaming, the generation ran to its end after the client had gone."""
    with scripted_api([slow_script()]) as api:
        if stream:
            with loopback_http.stream("POST", api.url + "/chat/completions", content=body(stream=True),
                                      headers=api.auth, timeout=30) as response:
                next(line for line in response.iter_lines() if "reasoning_content" in line)
        else:
            with pytest.raises(httpx.ReadTimeout):
                loopback_http.post(api.url + "/chat/completions", content=body(), headers=api.auth,
                                   timeout=httpx.Timeout(30, read=1.0))
        qtbot.waitUntil(lambda: len(api.engine.ended) == 1, timeout=15_000)
        assert list(api.engine.ended.values()) == [False], "ended by the client leaving, not by running out"


# ---- what still works ------------------------------------------------------------------------------------

def test_fifty_streams_at_once_all_finish() -> None:
    scripts = [Script(["<think>", *[f"w{i} " for i in range(100)], "</think>", "done"], tokens_per_second=100.0)
               for _ in range(50)]
    with scripted_api(scripts) as api:
        client = api.client(max_retries=0)

        def one(index: int) -> tuple[str, str | None]:
            text, finish = [], None
            for chunk in client.chat.completions.create(model="any", messages=HI, stream=True):
                text.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
            return "".join(text), finish

        with concurrent.futures.ThreadPoolExecutor(50) as pool:
            results = list(pool.map(one, range(50)))
        assert results == [("done", "stop")] * 50


def test_the_model_id_is_the_models_name_not_its_path(api: ScriptedApi) -> None:
    api.engine.ready = dataclasses.replace(api.engine.ready, model="/home/someone/models/Tiny-Reasoner-1B")
    client = api.client()
    assert [m.id for m in client.models.list().data] == ["Tiny-Reasoner-1B"]
    assert client.chat.completions.create(model="any", messages=HI).model == "Tiny-Reasoner-1B"
