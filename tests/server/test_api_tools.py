"""The local API server's tool calls and request fields, over real HTTP with the openai client.

The engine is the scripted double (ScriptedEngineDouble): its text goes through the same ToolCallGate
and vLLM's real hermes parser as EngineHost's, so these tests pin the server's shaping and checks.
The fields' effects on a real model are in test_api_tools_real.py.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from app.core.settings.settings import SamplingConfig
from app.engine.events import AnswerDelta, Finished, ThinkingDelta, ToolCall
from app.engine.reply.tool_calls import ToolCallGate, ToolOffer, calls_from_forced_json
from app.engine.scripted import Script
from tests.support import loopback_http
from tests.support.scripted_api import scripted_api

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _call_script() -> Script:
    return Script(["<think>", "The user wants weather.", "</think>", "Checking. ", CALL[:5], CALL[5:]],
                  tokens_per_second=2000)


def test_a_call_comes_back_in_openai_shape_plain_and_streamed_alike() -> None:
    """Bug caught: calls left as `<tool_call>` markup in content, a finish_reason of "stop" for a call,
    or a stream whose accumulated tool_calls differ from the plain reply's."""
    with scripted_api([_call_script(), _call_script()]) as api:
        client = api.client(max_retries=0)
        messages = [{"role": "user", "content": "Weather in Paris?"}]
        plain = client.chat.completions.create(model="any", messages=messages, tools=[WEATHER])
        choice = plain.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == "Checking. " and "<tool_call>" not in (choice.message.content or "")
        (call,) = choice.message.tool_calls
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
        extra = choice.message.model_extra
        assert extra["reasoning"] == extra["reasoning_content"] == "The user wants weather."

        names, arguments, ids, finish, content, reasoning = [], "", [], None, "", ""
        for chunk in client.chat.completions.create(model="any", messages=messages, tools=[WEATHER], stream=True):
            delta = chunk.choices[0].delta
            content += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning") or ""
            for item in delta.tool_calls or ():
                ids += [item.id] if item.id else []
                names += [item.function.name] if item.function and item.function.name else []
                arguments += item.function.arguments or "" if item.function else ""
            finish = chunk.choices[0].finish_reason or finish
        assert (names, json.loads(arguments), finish) == (["get_weather"], {"city": "Paris"}, "tool_calls")
        assert len(ids) == 1 and content == "Checking. " and reasoning == "The user wants weather."


def test_a_history_with_calls_and_tool_results_reaches_the_engine_in_openai_shape() -> None:
    """Bug caught: `role: tool` answered with HTTP 400 (canitoolcall's probe failed every tool-result
    scenario), or the assistant's tool_calls / the result's tool_call_id dropped before the template."""
    history = [
        {"role": "user", "content": [{"type": "text", "text": "Weather "}, {"type": "text", "text": "in Paris?"}]},
        {"role": "assistant", "content": None, "reasoning": "I should call it.",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 °C, sunny"},
    ]
    with scripted_api([Script(["It is 18 °C."], think_start="closed")]) as api:
        reply = api.client(max_retries=0).chat.completions.create(model="any", messages=history, tools=[WEATHER])
        assert reply.choices[0].message.content == "It is 18 °C." and reply.choices[0].finish_reason == "stop"
        seen = api.engine.requests[-1]
    assert seen[0] == {"role": "user", "content": "Weather in Paris?"}
    assert seen[1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert seen[1]["reasoning_content"] == "I should call it."
    assert seen[2] == {"role": "tool", "content": "18 °C, sunny", "tool_call_id": "call_1"}


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    """Bug caught: parallel_tool_calls accepted but ignored, so a client that runs one call gets two."""
    two = CALL + "\n" + CALL.replace("Paris", "Rome")
    with scripted_api([Script([two], think_start="closed"), Script([two], think_start="closed")]) as api:
        client = api.client(max_retries=0)
        both = client.chat.completions.create(model="any", messages=[{"role": "user", "content": "x"}], tools=[WEATHER])
        one = client.chat.completions.create(model="any", messages=[{"role": "user", "content": "x"}], tools=[WEATHER],
                                             parallel_tool_calls=False)
    assert [json.loads(c.function.arguments)["city"] for c in both.choices[0].message.tool_calls] == ["Paris", "Rome"]
    assert [json.loads(c.function.arguments)["city"] for c in one.choices[0].message.tool_calls] == ["Paris"]


def test_tool_choice_none_leaves_the_text_alone_and_offers_no_tools() -> None:
    """Bug caught: tool_choice "none" still parsing (and eating) markup the user asked to see as text."""
    with scripted_api([Script([CALL], think_start="closed")]) as api:
        reply = api.client(max_retries=0).chat.completions.create(
            model="any", messages=[{"role": "user", "content": "x"}], tools=[WEATHER], tool_choice="none")
        assert api.engine.tool_offers[-1] is None
    assert reply.choices[0].message.content == CALL and not reply.choices[0].message.tool_calls


def test_a_call_written_inside_thinking_is_taken_and_cut_out_of_the_thinking() -> None:
    """Bug caught (canitoolcall x-call-inside-think): a call drafted in a think block that never closes is
    lost, or stays as `<tool_call>` markup in the thinking pane."""
    offer = ToolOffer((WEATHER,))
    from app.engine.reply.tool_calls import vllm_parse

    gate = ToolCallGate(offer, vllm_parse("hermes", object(), offer))
    events = []
    for text in ["Need the weather.\n", CALL[:7], CALL[7:], "\nthen answer"]:
        events += gate.feed(ThinkingDelta("r", text))
    events += gate.feed(Finished("r", "stop", "Need the weather.\n" + CALL + "\nthen answer", ""))
    thinking = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    final = events[-1]
    assert isinstance(final, Finished) and final.reason == "tool_calls"
    assert [c.name for c in final.tool_calls] == ["get_weather"]
    assert "<tool_call>" not in thinking and "Need the weather." in thinking and "then answer" in thinking
    assert "<tool_call>" not in final.thinking_text


def test_text_that_only_looks_like_a_call_is_released_unchanged() -> None:
    """Bug caught: the gate holding back a `<tool` that never became a call, losing the answer's end."""
    offer = ToolOffer((WEATHER,))
    gate = ToolCallGate(offer, lambda text: (text, []))
    events = gate.feed(AnswerDelta("r", "a <tool")) + gate.feed(AnswerDelta("r", "box> b <tool"))
    events += gate.feed(Finished("r", "stop", "", "a <toolbox> b <tool"))
    assert "".join(e.text for e in events if isinstance(e, AnswerDelta)) == "a <toolbox> b <tool"
    final = events[-1]
    assert isinstance(final, Finished) and final.reason == "stop" and final.answer_text == "a <toolbox> b <tool"


def test_forced_json_becomes_calls_and_truncated_json_none() -> None:
    """Bug caught: a forced reply (structured outputs: a named call's arguments, or `required`'s list)
    returned as content instead of calls, or a reply cut by max_tokens turned into a broken call."""
    named = ToolOffer((WEATHER,), {"type": "function", "function": {"name": "get_weather"}})
    required = ToolOffer((WEATHER,), "required")
    assert [(c.name, c.arguments) for c in calls_from_forced_json('{"city": "Oslo"}', named)] == \
        [("get_weather", '{"city": "Oslo"}')]
    calls = calls_from_forced_json('[{"name": "get_weather", "parameters": {"city": "Rome"}}]', required)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Rome"})]
    assert calls_from_forced_json('[{"name": "get_weather", "param', required) == []
    assert isinstance(calls[0], ToolCall) and calls[0].id.startswith("call_")


SUPPORTED: list[tuple[dict[str, Any], Any]] = [
    ({"stop": ["END"]}, lambda s: s.request.stop == ("END",)),
    ({"stop": "END"}, lambda s: s.request.stop == ("END",)),
    ({"seed": 7}, lambda s: s.request.seed == 7),
    ({"presence_penalty": 0.5}, lambda s: s.request.presence_penalty == 0.5),
    ({"frequency_penalty": -0.5}, lambda s: s.request.frequency_penalty == -0.5),
    ({"top_k": 5}, lambda s: s.top_k == 5),
    ({"top_k": -1}, lambda s: s.top_k == 0),
    ({"n": 1}, lambda s: True),
    ({"response_format": {"type": "json_object"}}, lambda s: s.request.json_object),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}},
     lambda s: json.loads(s.request.json_schema) == {"type": "object"}),
    ({"response_format": {"type": "text"}}, lambda s: not s.request.json_object and s.request.json_schema is None),
]


@pytest.mark.parametrize("fields,reached", SUPPORTED, ids=[json.dumps(f)[:60] for f, _ in SUPPORTED])
def test_each_supported_field_reaches_the_engine(fields: dict[str, Any], reached: Any) -> None:
    """Bug caught: the server silently ignoring a field a client relies on (stop, JSON mode, seed…):
    each must arrive in the request's sampling. test_api_tools_real checks each one's effect on the model."""
    seen: list[SamplingConfig] = []
    with scripted_api([Script(["ok"], think_start="closed")]) as api:
        original = api.engine.generate

        def recording(messages: Any, sampling: SamplingConfig, *args: Any, **kwargs: Any) -> Any:
            seen.append(sampling)
            return original(messages, sampling, *args, **kwargs)

        api.engine.generate = recording  # type: ignore[method-assign]
        body = {"model": "any", "messages": [{"role": "user", "content": "hi"}], **fields}
        response = loopback_http.post(api.url + "/chat/completions", json=body, headers=api.auth, timeout=30)
    assert response.status_code == 200, response.text
    assert len(seen) == 1 and reached(seen[0])


REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"n": 2}, "n"),
    ({"logprobs": True}, "logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logit_bias": {"1": 5}}, "logit_bias"),
    ({"user": "me"}, "user"),
    ({"functions": [WEATHER["function"]]}, "functions"),
    ({"modalities": ["audio"]}, "modalities"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": [WEATHER]}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"response_format": {"type": "json_schema"}}, "response_format"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content"),
    ({"messages": [{"role": "tool", "content": "18 °C"}]}, "messages[0]"),
    ({"seed": -1}, "seed"),
    ({"presence_penalty": 3}, "presence_penalty"),
]


@pytest.mark.parametrize("fields,param", REFUSED, ids=[json.dumps(f)[:60] for f, _ in REFUSED])
def test_each_refused_field_is_a_400_naming_it(fields: dict[str, Any], param: str) -> None:
    """Bug caught: an unsupported field (n=2, logprobs…) quietly ignored, so the client believes it applied."""
    with scripted_api() as api:
        body = {"model": "any", "messages": [{"role": "user", "content": "hi"}], **fields}
        with pytest.raises(openai.BadRequestError) as caught:
            api.client(max_retries=0).chat.completions.create(**body)
        assert api.engine.requests == [], "refused before the engine"
    error = caught.value.body
    assert error["param"].startswith(param), error
    assert param.split("[")[0].split(".")[0] in error["message"] or error["param"] == param
