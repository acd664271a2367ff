"""A chat's own generation values: the preset it took, copied (not referenced), so editing the preset later
leaves the chat as it was; and what a request of that chat is built from (its system message, its sampling).

Stored as JSON in ``conversations.chat_settings`` ('' = the chat follows Settings' default preset). A
``Conversation`` holds its ``ChatSettings``; the functions here take the chat's values (``conversation.settings``,
None for the default preset) and what they combine them with, so this module sits under conversations.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.core.settings.settings import (
    MAX_THINK_BUDGET,
    THINK_BUDGET_LEVELS,
    Preset,
    PresetsConfig,
    PresetValues,
    SamplingConfig,
    budget_effort,
    changed,
)

log = logging.getLogger(__name__)


class ChatSettings(BaseModel):
    """The values a chat runs with, and the name of the preset they were taken from (shown, never looked up)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: str = Field("", max_length=64)
    values: PresetValues = Field(default_factory=PresetValues)

    @classmethod
    def of(cls, preset: Preset) -> ChatSettings:
        """A snapshot of ``preset``: later edits of the preset don't reach it."""
        return cls(preset=preset.name, values=PresetValues.model_validate(preset.model_dump(exclude={"name"})))

    def with_budget(self, budget: int) -> ChatSettings:
        return ChatSettings(preset=self.preset, values=changed(self.values, think_budget=budget))

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> ChatSettings | None:
        """The stored cell; None for '' (follows the default) or a damaged cell (logged, not fatal)."""
        if not text:
            return None
        try:
            return cls.model_validate_json(text)
        except (ValidationError, ValueError):
            log.warning("unreadable chat settings in the history; the chat follows the default preset")
            return None


def effective(chat: ChatSettings | None, presets: PresetsConfig) -> ChatSettings:
    """The chat's own values, or (none stored) Settings' default preset as it is now."""
    return chat or ChatSettings.of(presets.default_preset)


SAMPLED = ("temperature", "top_p", "top_k", "max_tokens", "think_budget")


def chat_sampling(chat: ChatSettings | None, thinking: bool, base: SamplingConfig,
                  presets: PresetsConfig) -> SamplingConfig:
    """``base`` (Settings' sampling: the model card's, the loop guard, penalties) with what the chat's values set
    (temperature, top-p, top-k, max tokens, think budget) and its Think switch; a named budget (Low, Medium,
    High) also sets gpt-oss's reasoning effort."""
    values = effective(chat, presets).values
    own = {name: getattr(values, name) for name in SAMPLED if getattr(values, name) is not None}
    budget = own.get("think_budget", base.think_budget)
    return changed(base, **own, thinking=thinking, reasoning_effort=budget_effort(budget) or base.reasoning_effort)


def chat_budget(chat: ChatSettings | None, base: SamplingConfig, presets: PresetsConfig) -> int:
    """The think budget the chat's replies run with."""
    budget = effective(chat, presets).values.think_budget
    return base.think_budget if budget is None else budget


def chat_messages(chat: ChatSettings | None, messages: list[dict[str, Any]],
                  presets: PresetsConfig) -> list[dict[str, Any]]:
    """The chat's messages (``Conversation.messages()``) for the model, its preset's system prompt first as a
    system message (the local engine moves it into the first question for families whose card wants no system
    prompt)."""
    system = effective(chat, presets).values.system_prompt.strip()
    return [{"role": "system", "content": system}, *messages] if system else messages


def budget_label(budget: int) -> str:
    """How the budget control and the thinking header name a budget."""
    for level, tokens in THINK_BUDGET_LEVELS.items():
        if tokens == budget:
            return f"{level.capitalize()} ({tokens:,})"
    return "Unlimited" if budget >= MAX_THINK_BUDGET else f"{budget:,} tokens"
