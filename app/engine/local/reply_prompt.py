"""A reply's prompt on the local engine: the thinking decision, the chat template's tokens, and the oldest
turns dropped to leave room for the reply (app.engine.reply.trimming)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.core.chat.images import ImagePart, split_content, text_only_reason
from app.core.models.model_families import ModelFamily
from app.core.settings.settings import ReasoningEffort, SamplingConfig
from app.engine.base import Message
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import EngineReady
from app.engine.reply import trimming
from app.engine.reply.harmony import ANALYSIS_OPEN, FORCED_FINAL, HarmonyTemplate
from app.engine.reply.harmony import REASONING_PARSER as HARMONY_REASONING
from app.engine.reply.kept_thinking import KeptThinkingTemplate, mark_kept
from app.engine.reply.reasoning import THINK_CLOSE
from app.engine.reply.tool_calls import ToolOffer, template_messages

REASONING_SYSTEM_PROMPT = ("You are a helpful assistant. Think step by step inside <think> and "
                           "</think>, then give a short, clear answer.")
FORCED_THINK_CLOSE = "\n" + THINK_CLOSE + "\n\n"


def place_system(messages: Sequence[Message], family: ModelFamily, reasoning: bool = False) -> list[Message]:
    """Where the model reads a system prompt (a chat's preset, an API client's). Families whose card says to use
    none (the R1 distills: "all instructions should be contained within the user prompt") get its text at the
    start of the first question instead. ``reasoning``: Nalar's reasoning mode, whose instruction goes first."""
    chat = list(messages)
    system = chat.pop(0)["content"] or "" if chat and chat[0]["role"] == "system" else ""
    if reasoning and REASONING_SYSTEM_PROMPT not in system:
        system = f"{REASONING_SYSTEM_PROMPT}\n\n{system}".strip()
    if not system:
        return chat
    if family.system_prompt:
        return [{"role": "system", "content": system}, *chat]
    first = next((n for n, m in enumerate(chat) if m["role"] == "user"), None)
    if first is None:
        return chat
    chat[first] = {**chat[first], "content": f"{system}\n\n{chat[first]['content'] or ''}"}
    return chat


class ReplyPrompts:
    """Prompts for one loaded engine: its tokenizer, its model's family and its context length."""

    def __init__(self, tokenizer: Any, family: ModelFamily, max_model_len: int, reasoning_mode: bool) -> None:
        self.tokenizer = tokenizer
        self.family = family
        self.max_model_len = max_model_len
        self.reasoning_mode = reasoning_mode

    @property
    def harmony(self) -> bool:
        """gpt-oss: its prompt and its forced answer are Harmony's channels, not think tags."""
        return self.family.parser == HARMONY_REASONING

    @property
    def forced_close(self) -> str:
        """What ends the thinking when the budget is spent or the user presses Answer now."""
        if self.family.own_think_tokens is not None:
            return self.family.own_think_tokens[1]  # a control token: "</think>" would be text it never writes
        return FORCED_FINAL if self.harmony else FORCED_THINK_CLOSE

    def thinking_on(self, sampling: SamplingConfig) -> bool:
        """The family's own thinking, or for a plain model our reasoning prompt if the config asks for it."""
        plain = self.family.thinking == "plain"
        return sampling.think_budget > 0 and (
            self.family.thinks(sampling.thinking) or (plain and sampling.thinking and self.reasoning_mode))

    def fit(self, messages: Sequence[Message], reserve: int, opened_think: bool,
            tools: Sequence[dict[str, Any]] = (), effort: ReasoningEffort = "medium") -> tuple[list[int], int]:
        """Token ids of the chat prompt, dropping the oldest turns until ``reserve`` tokens fit after it.
        Offered ``tools`` go to the model's own chat template, which writes them into the prompt; ``effort``
        is gpt-oss's reasoning effort (Harmony's system message), which other templates don't take."""
        # Hybrid templates switch thinking with a keyword (Qwen3, GLM: enable_thinking; DeepSeek: thinking).
        switch: dict[str, Any] = ({"enable_thinking": opened_think, "thinking": opened_think}
                                  if self.family.thinking == "hybrid" else {})
        if tools:
            switch["tools"] = list(tools)
        # gpt-oss: Harmony rendered as vLLM's server renders it (tool rounds' reasoning kept), not a Jinja template
        tokenizer: Any = HarmonyTemplate(self.tokenizer, effort) if self.harmony else self.tokenizer
        chat = list(messages)
        if not self.harmony:  # earlier turns' kept thinking: written in as the family's think block
            chat, blocks = mark_kept(chat, self.family.own_think_tokens)
            chat = template_messages(chat)
            tokenizer = KeptThinkingTemplate(tokenizer, blocks) if blocks else tokenizer
        # Harmony opens its analysis channel itself, and Magistral its [THINK]: a <think> there is text it never wrote
        opens_itself = self.harmony or self.family.own_think_tokens is not None
        return trimming.fit_prompt(tokenizer, chat, limit=self.max_model_len, reserve=reserve,
                                   opened_think=opened_think and not opens_itself, template_kwargs=switch)

    def for_reply(self, messages: list[Message], sampling: SamplingConfig, thinking_on: bool,
                  offer: ToolOffer | None) -> tuple[list[int], int]:
        """The reply's prompt ids and how many old turns were dropped to leave room for its tokens."""
        messages = place_system(messages, self.family, reasoning=thinking_on and self.family.thinking == "plain")
        budget = sampling.think_budget if thinking_on else 0
        reserve = min(budget + sampling.max_tokens, self.max_model_len // 4)
        return self.fit(messages, reserve, opened_think=thinking_on, tools=offer.tools if offer is not None else (),
                        effort=sampling.reasoning_effort)

    def resumed_thinking(self, thinking: str) -> list[int]:
        """A paused or cut reply's kept thinking as the tokens to go on after: gpt-oss's sits in the analysis
        channel the reply had opened after the prompt's ``<|start|>assistant``, so the channel comes first."""
        return self.encode(ANALYSIS_OPEN + thinking) if self.harmony else self.encode(thinking)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []


def image_prompt(messages: Sequence[Message], ready: EngineReady | None
                 ) -> tuple[list[Message], list[tuple[ImagePart, ...]]]:
    """Messages as a vision model's chat template takes them (an ``{"type": "image"}`` placeholder part per
    image, before the text, as HF processors write them), and each message's images, for vLLM's
    multi_modal_data. Messages without images pass unchanged; images for a text-only model are refused."""
    out: list[Message] = []
    images: list[tuple[ImagePart, ...]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            text, found = split_content(content)
            message = {**message, "content": [*({"type": "image"} for _ in found), {"type": "text", "text": text}]
                       if found else text}
        else:
            found = ()
        out.append(message)
        images.append(found)
    if any(images) and not (ready is not None and ready.reads_images):
        raise EngineFailure(FailureKind.BAD_MESSAGES, text_only_reason(ready.model if ready is not None else ""),
                            "Send the question without its images, or load a vision model.")
    return out, images


def kept_images(messages: Sequence[Message], images: list[tuple[ImagePart, ...]], dropped: int) -> list[ImagePart]:
    """The images of the turns the prompt kept, in order: trimming keeps a leading system message and drops
    the ``dropped`` oldest turns after it (trimming.fit_history)."""
    system = 1 if messages and messages[0]["role"] == "system" else 0
    kept = images[:system] + images[system + dropped:]
    return [image for found in kept for image in found]
