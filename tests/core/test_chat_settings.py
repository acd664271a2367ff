"""A chat's preset values without a window: the settings file's presets (and its migration from schema 1), the
request's sampling and system message, where an R1 distill reads the system prompt, and remote profiles'
budget fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.chat.chat_settings import ChatSettings, chat_budget, chat_messages, chat_sampling
from app.core.chat.conversation import Conversation, Message, Turn
from app.core.models.model_families import model_family
from app.core.settings.settings import (
    SCHEMA_VERSION,
    EndpointProfile,
    Preset,
    PresetsConfig,
    SamplingConfig,
    load_settings,
    save_settings,
)
from app.engine.local.reply_prompt import REASONING_SYSTEM_PROMPT, ReplyPrompts, place_system
from app.engine.remote.remote import chat_request
from tests.conftest import require_embedded_model

R1 = model_family("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B")
PLAIN = model_family("HuggingFaceTB/SmolLM2-135M-Instruct")
CAREFUL = Preset(name="Careful", system_prompt="Check every step.", think_budget=37, temperature=0.2)


def question() -> list[Message]:
    """A chat's messages: one question."""
    return Conversation(turns=[Turn(user="Is 91 prime?")]).messages()


def test_an_old_settings_file_loads_with_the_built_in_presets_and_keeps_its_sampling(tmp_path: Path) -> None:
    """Bugs caught: a schema-1 file (no presets) refused or moved aside as corrupt, its own sampling lost; or a file
    with presets not marked newer, so an older Nalar would move it aside instead of leaving it alone."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"schema_version": 1, "sampling": {"temperature": 0.3, "think_budget": 700}}))
    settings, notice = load_settings(path)
    assert notice is None and settings.sampling.temperature == 0.3
    assert [p.name for p in settings.presets.presets] == ["Default", "Quick answer", "Careful proof"]
    assert settings.presets.default_preset.temperature is None, "Default is today's sampling (Settings')"
    assert chat_sampling(None, True, settings.sampling, settings.presets).think_budget == 700
    save_settings(settings, path)
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION == 2
    assert load_settings(path)[0] == settings


def test_presets_are_validated() -> None:
    """Bug caught: two presets of one name, or a default that names none, saved and then unreadable."""
    with pytest.raises(ValueError, match="same name"):
        PresetsConfig(presets=(Preset(name="A"), Preset(name="A")), default="A")
    with pytest.raises(ValueError, match="not in the list"):
        PresetsConfig(presets=(Preset(name="A"),), default="B")


def test_a_chat_runs_with_its_own_values_and_settings_for_the_rest() -> None:
    """Bugs caught: the chat's values ignored (Settings' used), or a value the preset leaves unset overriding
    the model card's sampling with a made-up default; the chat's Think switch lost."""
    presets = PresetsConfig(presets=(Preset(name="Default"), CAREFUL))
    base = SamplingConfig(temperature=0.6, top_p=0.9, top_k=40, think_budget=1024)
    sampling = chat_sampling(ChatSettings.of(CAREFUL), False, base, presets)
    assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.think_budget, sampling.thinking) == (
        0.2, 0.9, 40, 37, False)
    assert chat_budget(None, base, presets) == 1024
    assert chat_messages(ChatSettings.of(CAREFUL), question(), presets)[0] == {"role": "system",
                                                                         "content": "Check every step."}
    assert chat_messages(None, question(), presets) == [{"role": "user", "content": "Is 91 prime?"}]


def test_named_budgets_are_gpt_oss_efforts() -> None:
    """Bug caught: a gpt-oss chat set to Low or High thinking at Settings' effort, since its template takes an
    effort, not a token count."""
    presets = PresetsConfig()
    base = SamplingConfig(reasoning_effort="medium")
    efforts = [chat_sampling(ChatSettings().with_budget(b), True, base, presets).reasoning_effort
               for b in (512, 2048, 8192, 37)]
    assert efforts == ["low", "medium", "high", "medium"]


def test_r1_distills_read_the_system_prompt_in_the_first_question() -> None:
    """Bug caught: a preset's system prompt sent to an R1 distill as a system turn, which its card says not to
    use; or dropped; or a plain model in reasoning mode losing Nalar's think instruction to the preset's."""
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Q1"},
                {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"}]
    assert not R1.system_prompt
    assert place_system(messages, R1) == [{"role": "user", "content": "Be terse.\n\nQ1"},
                                          {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"}]
    assert place_system(messages, PLAIN) == messages
    reasoning = place_system(messages, PLAIN, reasoning=True)
    assert reasoning[0] == {"role": "system", "content": f"{REASONING_SYSTEM_PROMPT}\n\nBe terse."}
    assert place_system(messages[1:], PLAIN, reasoning=True)[0]["content"] == REASONING_SYSTEM_PROMPT


def test_an_r1_distills_rendered_prompt_has_the_preset_in_its_first_user_turn() -> None:
    """The same decision through a real tokenizer's chat template (the embedded model's, standing in for the R1
    distill's, which is not shipped): the preset's text opens the user turn and no system turn carries it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(require_embedded_model()))
    prompts = ReplyPrompts(tokenizer, R1, max_model_len=2048, reasoning_mode=True)
    presets = PresetsConfig(presets=(Preset(name="Default"), CAREFUL))
    messages = chat_messages(ChatSettings.of(CAREFUL), question(), presets)
    ids, _dropped = prompts.for_reply(messages, SamplingConfig(think_budget=37), thinking_on=True, offer=None)
    text = tokenizer.decode(ids)
    assert "<|im_start|>user\nCheck every step.\n\nIs 91 prime?" in text
    assert "<|im_start|>system\nCheck every step." not in text


def test_remote_profiles_send_the_budget_only_when_switched_on() -> None:
    """Bugs caught: thinking_token_budget sent to every server (many refuse unknown fields), or never, even to a
    vLLM server that enforces it; gpt-oss's effort not sent with it."""
    sampling = SamplingConfig(think_budget=512, thinking=True)
    off = chat_request("m", [{"role": "user", "content": "q"}], sampling, None, None)
    assert "thinking_token_budget" not in off.get("extra_body", {}) and "reasoning_effort" not in off
    on = chat_request("m", [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}], sampling, None,
                      None, send_budget=True)
    assert on["extra_body"]["thinking_token_budget"] == 512 and on["reasoning_effort"] == "low"
    assert on["messages"][0] == {"role": "system", "content": "s"}, "a remote server gets the system message"
    odd = chat_request("m", [], SamplingConfig(think_budget=37), None, None, send_budget=True)
    assert odd["extra_body"]["thinking_token_budget"] == 37 and "reasoning_effort" not in odd
    gpt = chat_request("openai/gpt-oss-20b", [], SamplingConfig(think_budget=37, reasoning_effort="high"), None, None,
                       send_budget=True)
    assert gpt["reasoning_effort"] == "high"
    assert EndpointProfile(name="p", base_url="http://h/v1").send_think_budget is False
