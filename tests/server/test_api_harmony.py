"""The local API server in front of a gpt-oss (Harmony) reply, over real HTTP with the openai client.

The scripted engine plays gpt-oss's token ids through the family's splitter and tool gate (vLLM's
HarmonyParser), as EngineHost would; this pins what the server makes of them: vLLM's shape, where the
analysis channel is ``reasoning`` (and ``reasoning_content``) and a commentary call is a ``tool_calls`` entry.
"""

from __future__ import annotations

import json

import pytest

from tests.support.harmony_tokenizer import ANSWER_42, CALL_ADD, harmony_script
from tests.support.scripted_api import scripted_api

pytest.importorskip("openai_harmony")

ADD = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
MESSAGES = [{"role": "user", "content": "What is 20+22?"}]


def test_a_harmony_call_comes_back_in_vllms_shape_plain_and_streamed() -> None:
    """Bug caught: gpt-oss's channels returned as raw Harmony markup in content, its analysis missing from
    reasoning / reasoning_content, or its commentary call not a tool_calls entry (finish_reason "stop")."""
    with scripted_api([harmony_script(CALL_ADD, tokens_per_second=2000),
                       harmony_script(CALL_ADD, tokens_per_second=2000)]) as api:
        client = api.client(max_retries=0)
        choice = client.chat.completions.create(model="any", messages=MESSAGES, tools=[ADD]).choices[0]
        assert choice.finish_reason == "tool_calls" and not choice.message.content
        (call,) = choice.message.tool_calls
        assert call.function.name == "add" and json.loads(call.function.arguments) == {"a": 20, "b": 22}
        extra = choice.message.model_extra
        assert extra["reasoning"] == extra["reasoning_content"] == "They want 20+22. I will use add."

        names, arguments, finish, content, reasoning = [], "", None, "", ""
        for chunk in client.chat.completions.create(model="any", messages=MESSAGES, tools=[ADD], stream=True):
            delta = chunk.choices[0].delta
            content += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning") or ""
            for item in delta.tool_calls or ():
                names += [item.function.name] if item.function and item.function.name else []
                arguments += item.function.arguments or "" if item.function else ""
            finish = chunk.choices[0].finish_reason or finish
        assert (names, json.loads(arguments), finish) == (["add"], {"a": 20, "b": 22}, "tool_calls")
        assert content == "" and reasoning == "They want 20+22. I will use add."


def test_a_harmony_final_answer_is_content_and_its_analysis_reasoning() -> None:
    """Bug caught: the final channel's text kept inside Harmony markup, or the analysis leaking into content."""
    with scripted_api([harmony_script(ANSWER_42, tokens_per_second=2000)]) as api:
        message = api.client(max_retries=0).chat.completions.create(model="any", messages=MESSAGES).choices[0].message
        assert message.content == "The sum is **42**."
        assert message.model_extra["reasoning_content"] == "The tool says 42."
