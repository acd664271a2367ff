"""gpt-oss (Harmony): the prompt as vLLM's server renders it, and a reply's channels in the panes.

Everything here runs on the real o200k encoding that openai_harmony embeds (no download), and the
token-level tests on gpt-oss's tokenizer rebuilt from it (tests/support/harmony_tokenizer.py).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from app.core.models.model_families import model_family
from app.engine.events import Finished, ToolCallDelta
from app.engine.reply import trimming
from app.engine.reply.harmony import FORCED_FINAL, HarmonyTemplate, harmony_prompt_ids
from app.engine.reply.reasoning import HarmonySplitter, ReplyTexts, make_splitter
from app.engine.reply.tool_calls import ToolOffer, gate_for

pytest.importorskip("openai_harmony")

ADD = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


def vllm_server_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                       effort: str = "medium") -> list[int]:
    """The prompt ids vLLM's OpenAI server renders for this chat request (its Harmony branch)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.renderers.online_renderer import OnlineRenderer

    fields: dict[str, Any] = {"model": "openai/gpt-oss-20b", "messages": messages, "reasoning_effort": effort}
    if tools:
        fields.update(tools=tools, tool_choice="auto")
    request = ChatCompletionRequest.model_validate(fields)
    server = SimpleNamespace(supports_browsing=False, supports_code_interpreter=False, renderer=None)
    _, (engine_input,) = OnlineRenderer._make_request_with_harmony(server, request, request.tools is not None)
    return [int(i) for i in engine_input["prompt_token_ids"]]


def decoded(ids: list[int]) -> str:
    return HarmonyTemplate(None).decode(ids)


CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 20, "b": 22}'}}


@pytest.mark.parametrize("effort", ["low", "high"])
def test_the_prompt_is_vllm_servers_own(effort: str) -> None:
    """Bug caught: gpt-oss prompted through a Jinja template or our own rendering, unlike vLLM's server
    (a different system/developer preamble, tools missing from it, the reasoning effort not written)."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 20+22?"}]
    ours = harmony_prompt_ids(messages, [ADD], effort)  # type: ignore[arg-type]
    assert ours == vllm_server_prompt(messages, [ADD], effort)
    text = decoded(ours)
    assert f"Reasoning: {effort}" in text and "add" in text and text.endswith("<|start|>assistant")


def test_earlier_thinking_is_dropped_between_user_turns_and_kept_between_tool_calls() -> None:
    """Bug caught: a finished turn's analysis sent back to gpt-oss (the Harmony format says to drop it), or the
    analysis that led to a call dropped before the model has answered (it then reasons from scratch)."""
    finished_turn = [{"role": "user", "content": "hi"},
                     {"role": "assistant", "content": "Hello!", "reasoning": "OLD-THOUGHT greeting"},
                     {"role": "user", "content": "What is 20+22?"}]
    text = decoded(harmony_prompt_ids(finished_turn))
    assert "OLD-THOUGHT" not in text and "Hello!" in text
    mid_call = [{"role": "user", "content": "What is 20+22?"},
                {"role": "assistant", "content": "", "reasoning": "CALL-THOUGHT use add", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "42"}]
    ids = harmony_prompt_ids(mid_call, [ADD])  # type: ignore[arg-type]
    assert ids == vllm_server_prompt(mid_call, [ADD])
    assert "CALL-THOUGHT" in decoded(ids) and "functions.add" in decoded(ids)


def test_trimming_fits_a_harmony_prompt_with_object_arguments() -> None:
    """Bug caught: the context trimmer rendering gpt-oss through the HF template path, or a call's arguments
    as an object (what Jinja templates get) reaching Harmony, which writes them as the message's text."""
    messages = [{"role": "user", "content": "What is 20+22?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {**CALL, "function": {"name": "add", "arguments": {"a": 20, "b": 22}}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "42"}]
    ids, dropped = trimming.fit_prompt(HarmonyTemplate(None), messages, limit=4096, reserve=512,  # type: ignore[arg-type]
                                       opened_think=False, template_kwargs={"tools": [ADD]})
    expected = [{**m, "tool_calls": [CALL]} if m.get("tool_calls") else m for m in messages]
    assert dropped == 0 and ids == vllm_server_prompt(expected, [ADD])


@pytest.fixture(scope="module")
def gpt_oss_tokenizer() -> Any:
    """The process's one load of it (3 s here), shared with test_api_harmony's scripts and the tool fixtures."""
    from tests.support import harmony_tokenizer

    return harmony_tokenizer.gpt_oss_tokenizer()


REPLY = ('<|channel|>analysis<|message|>They want 20+22. I will call add.<|end|>'
         '<|start|>assistant to=functions.add<|channel|>commentary <|constrain|>json<|message|>',
         '{"a": 20, "b": 22, "note": "<|call|> is text here"}',  # the model spells the marker as text
         '<|call|>')


def reply_ids(tok: Any) -> list[int]:
    head, arguments, end = REPLY
    return [*tok.encode(head, add_special_tokens=False),
            *tok.encode(arguments, add_special_tokens=False, split_special_tokens=True),
            *tok.encode(end, add_special_tokens=False)]


@pytest.mark.parametrize("group", [1, 3, 1000])
def test_channels_go_to_the_panes_and_a_commentary_call_is_a_call(gpt_oss_tokenizer: Any, group: int) -> None:
    """Bug caught: Harmony markup (<|channel|>analysis…) shown in the answer pane, the analysis not in the
    thinking pane, the call lost or cut at a marker its arguments spell as text, or any of it depending on
    where the stream was cut."""
    family = model_family("openai/gpt-oss-20b")
    ids = reply_ids(gpt_oss_tokenizer)
    assert ids.count(200012) == 1, "the marker in the arguments must be text tokens"
    splitter = make_splitter(family.parser, gpt_oss_tokenizer, start="open")
    assert isinstance(splitter, HarmonySplitter)
    gate = gate_for(family.tool_parser, gpt_oss_tokenizer, ToolOffer((ADD,)))
    texts, events = ReplyTexts(), []
    for start in range(0, len(ids), group):
        chunk = ids[start:start + group]
        for event in texts.take("r", splitter.feed(gpt_oss_tokenizer.decode(chunk), chunk)):
            events.extend(gate.feed(event))
    for event in texts.take("r", splitter.flush()):
        events.extend(gate.feed(event))
    events.extend(gate.feed(Finished("r", "stop", texts.thinking_text, texts.answer_text)))
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.reason == "tool_calls"
    assert finished.thinking_text == "They want 20+22. I will call add." and finished.answer_text == ""
    [call] = [e for e in events if isinstance(e, ToolCallDelta)]
    assert call.name == "add"
    assert json.loads(call.arguments_delta) == {"a": 20, "b": 22, "note": "<|call|> is text here"}


def test_a_forced_answer_closes_the_analysis_and_opens_the_final_channel_as_harmony_does() -> None:
    """Bug caught: the think budget or Answer now appending ``</think>`` to a gpt-oss reply (text Harmony doesn't
    know: the model goes on in its analysis channel) instead of closing the analysis and opening ``final``."""
    from openai_harmony import Conversation, Message, Role
    from vllm.entrypoints.openai.parser.harmony_utils import (
        build_harmony_preamble,
        get_encoding,
        parse_chat_inputs_to_harmony_messages,
    )

    messages = [{"role": "user", "content": "What is 20+22?"}]
    template = HarmonyTemplate(None)
    thought = "They want 20+22."
    generated = template.encode("<|channel|>analysis<|message|>" + thought)  # the reply so far, cut mid-analysis
    forced = harmony_prompt_ids(messages) + generated + template.encode(FORCED_FINAL)
    analysis = Message.from_role_and_content(Role.ASSISTANT, thought).with_channel("analysis")
    turns = [*build_harmony_preamble(reasoning_effort="medium"), *parse_chat_inputs_to_harmony_messages(messages),
             analysis]
    expected = get_encoding().render_conversation_for_completion(Conversation.from_messages(turns), Role.ASSISTANT)
    assert forced == [*expected, *template.encode("<|channel|>final<|message|>")]


def test_a_tool_rounds_thinking_reaches_harmony_until_the_turn_is_answered() -> None:
    """Bug caught: the chat's tool rounds sent back without the thinking that led to the calls (gpt-oss then
    reasons from scratch after every call), or that thinking kept once the turn has its answer, or reaching
    other families' chat templates (whose history never had it)."""
    from app.core.chat.conversation import Conversation, ToolRound, ToolStep, Turn
    from app.engine.reply.tool_calls import template_messages

    turn = Turn(user="What is 20+22?", tool_rounds=[ToolRound("CALL-THOUGHT use add", [
        ToolStep("call_1", "add", '{"a": 20, "b": 22}', "demo", "42", "ok")])])
    conversation = Conversation(turns=[turn])
    assert "CALL-THOUGHT" in decoded(harmony_prompt_ids(conversation.messages(), [ADD]))  # type: ignore[arg-type]
    assert not any("reasoning" in m for m in template_messages(conversation.messages()))
    turn.answer = "It is 42."
    conversation.turns.append(Turn(user="thanks"))
    later = decoded(harmony_prompt_ids(conversation.messages(), [ADD]))  # type: ignore[arg-type]
    assert "CALL-THOUGHT" not in later and "It is 42." in later


@pytest.mark.parametrize("effort", ["low", "medium", "high"])
def test_the_reasoning_effort_setting_reaches_the_reply_prompt_as_vllms_server_writes_it(effort: str) -> None:
    """Bug caught: the Reasoning effort setting (Settings → Sampling, or an API request's reasoning_effort)
    not reaching the reply's prompt, so gpt-oss always ran at Harmony's default, medium; and (found by this
    test) the reply's prompt ending "<|start|>assistant<think>\n", think-tag text Harmony never writes."""
    from app.core.settings.settings import SamplingConfig
    from app.engine.local.reply_prompt import ReplyPrompts
    from app.server.api_protocol import ChatRequest

    messages = [{"role": "user", "content": "What is 20+22?"}]
    prompts = ReplyPrompts(None, model_family("openai/gpt-oss-20b"), max_model_len=4096, reasoning_mode=True)
    sampling = ChatRequest.model_validate({"messages": messages, "reasoning_effort": effort}).sampling(
        SamplingConfig())
    assert sampling.reasoning_effort == effort
    ids, dropped = prompts.for_reply(messages, sampling, thinking_on=True, offer=None)  # type: ignore[arg-type]
    assert dropped == 0 and ids == vllm_server_prompt(messages, None, effort)
    assert f"Reasoning: {effort}" in decoded(ids)


def test_an_unknown_reasoning_effort_is_refused_by_the_api_and_the_settings() -> None:
    """Bug caught: a client's reasoning_effort "max" (not a Harmony level) silently run as medium."""
    from pydantic import ValidationError

    from app.core.settings.settings import SamplingConfig
    from app.server.api_protocol import ChatRequest

    with pytest.raises(ValidationError, match="reasoning_effort"):
        ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "max"})
    with pytest.raises(ValidationError, match="reasoning_effort"):
        SamplingConfig(reasoning_effort="max")  # type: ignore[arg-type]


def test_a_paused_gpt_oss_reply_resumes_inside_its_analysis_channel(gpt_oss_tokenizer: Any) -> None:
    """Pause–edit–resume (and a loop's Continue) on gpt-oss. Bugs caught: the edited thinking sent straight
    after ``<|start|>assistant`` with no channel (the model reads it as a message with no header and starts a
    new one), or vLLM's Harmony parser starting fresh on the continuation, so the model's further analysis
    landed in the answer pane or the kept thinking was shown twice."""
    from openai_harmony import Conversation, Message, Role
    from vllm.entrypoints.openai.parser.harmony_utils import (
        build_harmony_preamble,
        get_encoding,
        parse_chat_inputs_to_harmony_messages,
    )

    from app.engine.local.reply_prompt import ReplyPrompts

    messages = [{"role": "user", "content": "How long is 300 cm in metres?"}]
    prompts = ReplyPrompts(gpt_oss_tokenizer, model_family("openai/gpt-oss-20b"), 4096, reasoning_mode=True)
    edited = "300 cm is 300 centimetres.\nHint: check the units."
    kept = prompts.resumed_thinking(edited)
    analysis = Message.from_role_and_content(Role.ASSISTANT, edited).with_channel("analysis")
    turns = [*build_harmony_preamble(reasoning_effort="medium"), *parse_chat_inputs_to_harmony_messages(messages),
             analysis]
    rendered = get_encoding().render_conversation_for_completion(Conversation.from_messages(turns), Role.ASSISTANT)
    end = gpt_oss_tokenizer.encode("<|end|>", add_special_tokens=False)
    assert [*harmony_prompt_ids(messages), *kept, *end] == rendered[:-len(
        gpt_oss_tokenizer.encode("<|start|>assistant", add_special_tokens=False))], "Harmony's own analysis message"

    splitter = make_splitter("openai_gptoss", gpt_oss_tokenizer, start="open", kept_ids=kept)
    assert isinstance(splitter, HarmonySplitter)
    went_on = gpt_oss_tokenizer.encode(" So 3 m.<|end|><|start|>assistant<|channel|>final<|message|>3 m",
                                       add_special_tokens=False)
    texts = ReplyTexts()
    texts.start_from(edited, "")
    for token in went_on:
        texts.take("r", splitter.feed(gpt_oss_tokenizer.decode([token]), [token]))
    texts.take("r", splitter.flush())
    assert (texts.thinking_text, texts.answer_text) == (edited + " So 3 m.", "3 m")
