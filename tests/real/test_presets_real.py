"""A chat's preset on the real engine (embedded SmolLM2, a plain model in Nalar's reasoning mode): the system
prompt the model reads through its chat template, and a think budget of the chat's own that holds."""

from __future__ import annotations

import pytest

from app.core.chat.chat_settings import ChatSettings, chat_messages, chat_sampling
from app.core.chat.conversation import Conversation, Turn
from app.core.settings.settings import Preset, PresetsConfig, SamplingConfig
from app.engine.events import Finished
from app.engine.local.host import REASONING_SYSTEM_PROMPT, EngineHost
from app.engine.local.reply_prompt import ReplyPrompts

pytestmark = pytest.mark.real_engine

PIRATE = Preset(name="Pirate", system_prompt="You are a pirate. Say arr.", think_budget=37, max_tokens=12)
PRESETS = PresetsConfig(presets=(Preset(name="Default"), PIRATE))
SETTINGS_SAMPLING = SamplingConfig(temperature=0.0, think_budget=1024, max_tokens=64)  # Settings' own budget


def reply(host: EngineHost, conversation: Conversation, rid: str) -> Finished:
    sampling = chat_sampling(conversation.settings, conversation.thinking, SETTINGS_SAMPLING, PRESETS)
    messages = chat_messages(conversation.settings, conversation.messages(), PRESETS)
    finished = host.loop_thread.submit(host.stream_to(lambda event: None, messages, sampling, rid,
                                                      ignore_eos=True)).result(300)
    assert finished is not None and finished.reason in ("stop", "length"), finished
    return finished


def test_the_model_reads_the_presets_system_prompt(real_engine: EngineHost, monkeypatch) -> None:
    """Bugs caught: the preset's system prompt never reaching the chat template (the chat asked without it), or
    replacing Nalar's reasoning instruction so a plain model no longer thinks in tags."""
    rendered: list[list[int]] = []
    real_for_reply = ReplyPrompts.for_reply

    def recording(self, *args, **kwargs):  # the engine's own prompt, as it goes to vLLM
        ids, dropped = real_for_reply(self, *args, **kwargs)
        rendered.append(ids)
        return ids, dropped

    monkeypatch.setattr(ReplyPrompts, "for_reply", recording)
    conversation = Conversation(turns=[Turn(user="Who are you?")], settings=ChatSettings.of(PIRATE))
    finished = reply(real_engine, conversation, "preset-system")
    [ids] = rendered
    assert finished.metrics is not None and finished.metrics.prompt_tokens == len(ids)
    tokenizer = real_engine.tokenizer
    assert tokenizer is not None
    text = tokenizer.decode(ids)
    system = text.split("<|im_start|>user")[0]
    assert "<|im_start|>system" in system and "You are a pirate. Say arr." in system
    assert REASONING_SYSTEM_PROMPT in system, "reasoning mode's instruction stays, before the preset's"
    assert finished.thinking_text.strip(), "the model still thinks"


def test_a_chats_own_think_budget_holds(real_engine: EngineHost) -> None:
    """Bug caught: a chat's budget (37) ignored for Settings' (1024): with ignore_eos the thinking would run on
    to Settings' budget instead of being closed at the chat's and the answer asked for."""
    conversation = Conversation(turns=[Turn(user="What is 12 times 7? Think it through.")],
                                settings=ChatSettings.of(PIRATE))
    finished = reply(real_engine, conversation, "preset-budget")
    assert finished.metrics is not None
    assert 0 < finished.metrics.thinking_tokens <= 37
    assert finished.answer_text.strip() and finished.metrics.answer_tokens == 12, "the answer was asked for"
