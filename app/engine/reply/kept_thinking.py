"""An earlier turn's kept thinking (its "keep its thinking" switch on), in the prompt as its family writes it.

Chat templates drop earlier thinking on purpose (Qwen3's renders ``reasoning_content`` only after the last
question, R1's cuts everything up to ``</think>`` from an assistant message), so the thinking can't go
through them as text or as a field. Each kept answer gets a marker instead, the template renders around it,
and the marker becomes the think block in the rendered text: the template's own framing, with the thinking
where the model writes it. Harmony (gpt-oss) gets an analysis message that is spared when earlier analysis
is dropped (app.engine.reply.harmony).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.core.steering.kept_thinking import KEPT_KEY, think_block

MARKER = "\u2063kept-thinking-{}\u2063"  # invisible separators around it: text a model or user never writes


def mark_kept(messages: Sequence[dict[str, Any]],
              tags: tuple[str, str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Messages for a chat template: each kept thinking out of its message, a marker before that answer; and
    the think blocks (in the family's own ``tags`` where it has them), the n-th for marker n."""
    out: list[dict[str, Any]] = []
    blocks: list[str] = []
    for message in messages:
        kept = message.get(KEPT_KEY)
        message = {key: value for key, value in message.items() if key != KEPT_KEY}
        if kept:
            message["content"] = MARKER.format(len(blocks)) + str(message.get("content") or "")
            blocks.append(think_block(str(kept), tags))
        out.append(message)
    return out, blocks


class KeptThinkingTemplate:
    """A tokenizer whose ``apply_chat_template`` writes the kept think blocks where their markers were."""

    def __init__(self, tokenizer: Any, blocks: Sequence[str]) -> None:
        self._tokenizer = tokenizer
        self._blocks = list(blocks)

    def apply_chat_template(self, conversation: list[Any], **kwargs: Any) -> Any:
        text = self._tokenizer.apply_chat_template(conversation, **kwargs)
        if not isinstance(text, str):  # tokenize=True: trimming never asks for it
            raise TypeError("KeptThinkingTemplate renders text only")
        for n, block in enumerate(self._blocks):
            text = text.replace(MARKER.format(n), block)
        return text

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def __call__(self, text: list[str], *, add_special_tokens: bool = False) -> Any:
        return self._tokenizer(text, add_special_tokens=add_special_tokens)


def as_reasoning(messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[str]]:
    """Harmony: each kept thinking as the assistant message's ``reasoning`` (its analysis message), and the
    kept texts, which the drop of earlier analysis spares."""
    out: list[dict[str, Any]] = []
    kept: set[str] = set()
    for message in messages:
        text = message.get(KEPT_KEY)
        message = {key: value for key, value in message.items() if key != KEPT_KEY}
        if text:
            message["reasoning"] = str(text).strip()
            kept.add(message["reasoning"])
        out.append(message)
    return out, kept
