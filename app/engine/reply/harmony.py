"""gpt-oss's Harmony format, through vLLM's own code for it.

* ``reasoning.HarmonySplitter``: vLLM's ``HarmonyParser`` (the ``openai_gptoss`` reasoning parser with the ``openai``
  tool parser, as vLLM's server composes them) reads the reply's token ids: the ``analysis`` channel is
  thinking, ``final`` (and ``commentary`` to no one) is answer. A ``commentary`` message to
  ``functions.NAME`` is a call: it goes to the answer as its own Harmony markup (``CALL_START`` …
  ``<|call|>``), where the tool gate holds it like any family's call markup and ``harmony_parse`` turns
  it into calls, again with vLLM's parser.
* ``HarmonyTemplate``: the prompt as vLLM's server renders it for gpt-oss (its system and developer
  preamble, the chat turns as Harmony messages, ``render_for_completion``), behind the
  ``apply_chat_template`` that trimming calls. An assistant turn's ``reasoning`` becomes its analysis
  message; vLLM drops analysis before the last final answer, so earlier thinking goes between user
  turns and stays between tool calls, as the Harmony format says.

Harmony's text comes from the token ids (``openai_harmony``'s o200k encoding), not from the detokenized
text, so the markup never reaches a pane whether or not special tokens were kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from app.core.settings.settings import ReasoningEffort
from app.engine.events import ToolCall
from app.engine.reply.kept_thinking import as_reasoning

REASONING_PARSER = "openai_gptoss"
TOOL_PARSER = "openai"
CALL_START = "<|channel|>commentary to=functions."
CALL_END = "<|call|>"
NEXT_MESSAGE = "<|start|>assistant"
# The think budget or Answer now ends the analysis and opens the final answer, as Harmony writes a turn
FORCED_FINAL = "<|end|><|start|>assistant<|channel|>final<|message|>"
ANALYSIS_OPEN = "<|channel|>analysis<|message|>"  # how a reply's thinking starts after <|start|>assistant
Effort = ReasoningEffort


def harmony_request(tools: Sequence[dict[str, Any]] = (), messages: Sequence[dict[str, Any]] = (),
             effort: Effort | None = None) -> Any:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    fields: dict[str, Any] = {"messages": list(messages) or [{"role": "user", "content": ""}]}
    if tools:
        fields.update(tools=list(tools), tool_choice="auto")
    if effort is not None:
        fields["reasoning_effort"] = effort
    return ChatCompletionRequest.model_validate(fields)


def harmony_parser(tokenizer: Any, tools: Sequence[dict[str, Any]] = ()) -> Any:
    """vLLM's HarmonyParser, composed as its server composes it for gpt-oss."""
    from vllm.parser.parser_manager import ParserManager

    parser_cls = ParserManager.get_parser(tool_parser_name=TOOL_PARSER, reasoning_parser_name=REASONING_PARSER,
                                          enable_auto_tools=True, model_name="gpt-oss", is_harmony=True)
    assert parser_cls is not None
    return parser_cls(tokenizer, harmony_request(tools).tools, model_config=None)


def call_markup(name: str, arguments: str) -> str:
    """One call as gpt-oss writes it (after ``<|start|>assistant``), for the tool gate to read back.

    The gate re-reads the markup with special tokens spelled as tokens, so a marker the model wrote as text
    inside its JSON arguments (``"<|call|>"`` in a file's content) would end the call there: JSON arguments
    are written with ``<`` escaped (``\u003c``), which parses back to the same value, and vLLM's parser
    re-serializes JSON arguments anyway (``json.dumps(json.loads(…))``)."""
    try:
        arguments = json.dumps(json.loads(arguments), ensure_ascii=False).replace("<", "\\u003c")
    except ValueError:
        pass  # not JSON (cut off by the token limit): as written
    return f"{CALL_START}{name} <|constrain|>json<|message|>{arguments}{CALL_END}"


def harmony_parse(tokenizer: Any, tools: Sequence[dict[str, Any]]) -> Callable[[str], tuple[str, list[ToolCall]]]:
    """The tool gate's Parse for gpt-oss: held Harmony markup → (content, calls), through vLLM's HarmonyParser on
    the markup's token ids (Harmony's own encoding, special tokens spelled as tokens)."""
    from vllm.entrypoints.openai.parser.harmony_utils import get_encoding
    from vllm.renderers.chat_utils import make_tool_call_id

    request = harmony_request(tools)

    def parse(text: str) -> tuple[str, list[ToolCall]]:
        ids = get_encoding().encode(text, allowed_special="all")
        _, content, calls = harmony_parser(tokenizer, tools).parse(
            text, request, enable_auto_tools=True, model_output_token_ids=ids)
        if not calls:
            return text if CALL_START not in text else (content or ""), []
        return content or "", [ToolCall(make_tool_call_id(), call.name, call.arguments or "{}") for call in calls]

    return parse


class HarmonyTemplate:
    """A tokenizer whose ``apply_chat_template`` renders Harmony as vLLM's server does (see the module doc)."""

    def __init__(self, tokenizer: Any, effort: Effort = "medium") -> None:
        self._tokenizer = tokenizer
        self.effort = effort

    def apply_chat_template(self, conversation: list[Any], *, add_generation_prompt: bool = True,
                            tokenize: bool = False, tools: Sequence[dict[str, Any]] | None = None,
                            **_ignored: Any) -> Any:
        """Harmony's prompt for ``conversation``; template switches (enable_thinking) don't apply to it."""
        ids = harmony_prompt_ids(conversation, tools or (), self.effort)
        return ids if tokenize else self.decode(ids)

    def decode(self, ids: Sequence[int], **_ignored: Any) -> str:
        from vllm.entrypoints.openai.parser.harmony_utils import get_encoding

        return str(get_encoding().decode(list(ids)))

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        from vllm.entrypoints.openai.parser.harmony_utils import get_encoding

        return list(get_encoding().encode(text, allowed_special="all"))

    def __call__(self, text: list[str], *, add_special_tokens: bool = False) -> dict[str, list[list[int]]]:
        return {"input_ids": [self.encode(t) for t in text]}


def _with_text_arguments(message: dict[str, Any]) -> dict[str, Any]:
    """Harmony writes a call's arguments as its message text: JSON text, where templates take objects."""
    if not message.get("tool_calls"):
        return message
    calls = [{**call, "function": {**call["function"], "arguments": args if isinstance(
        args := call["function"].get("arguments") or "", str) else json.dumps(args, ensure_ascii=False)}}
        for call in message["tool_calls"]]
    return {**message, "tool_calls": calls}


def harmony_prompt_ids(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = (),
                       effort: Effort = "medium") -> list[int]:
    """The prompt ids vLLM's server renders for a gpt-oss chat request (OnlineRenderer's Harmony branch)."""
    from vllm.entrypoints.openai.parser.harmony_utils import (
        build_harmony_preamble,
        extract_instructions_from_messages,
        parse_chat_inputs_to_harmony_messages,
        render_for_completion,
    )
    from vllm.utils.mistral import mt

    messages, kept = as_reasoning(messages)
    request = harmony_request(tools, [_with_text_arguments(m) for m in messages], effort)
    mt.maybe_serialize_tool_calls(request)  # as vLLM's renderer does: pydantic leaves tool_calls unread
    instructions, chat = extract_instructions_from_messages(list(request.messages))
    rendered = build_harmony_preamble(instructions=instructions, tools=request.tools if tools else None,
                                      reasoning_effort=request.reasoning_effort, with_custom_tools=bool(tools))
    rendered.extend(parse_chat_inputs_to_harmony_messages(chat))
    return list(render_for_completion(rendered)) if not kept else _render_keeping(rendered, kept)


def _render_keeping(rendered: list[Any], kept: set[str]) -> list[int]:
    """render_for_completion, but the analysis of a turn whose thinking is kept survives the drop of analysis
    before the last final answer (the Harmony rule, which stays for every other turn)."""
    from openai_harmony import Conversation, RenderConversationConfig, Role
    from vllm.entrypoints.openai.parser.harmony_utils import _use_legacy_tool_call_headers, get_encoding

    finals = [i for i, m in enumerate(rendered) if m.author.role == Role.ASSISTANT and m.channel == "final"]
    last_final = finals[-1] if finals else -1
    spared = [m for i, m in enumerate(rendered) if not (
        i < last_final and m.channel == "analysis" and "".join(getattr(c, "text", "") for c in m.content) not in kept)]
    ids = get_encoding().render_conversation_for_completion(
        Conversation.from_messages(spared), Role.ASSISTANT, config=RenderConversationConfig(auto_drop_analysis=False))
    return list(_use_legacy_tool_call_headers(ids))
