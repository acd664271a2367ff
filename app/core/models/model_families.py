"""How each model family thinks, which vLLM reasoning parser splits it, and its model card's sampling.

One table, read by the engine (parser, Think switch, prompt) and by the UI (Settings, the switch's label).
Families are matched on the model's name and config.json's ``model_type``; the first match wins,
so the specific names (Instruct-2507, Coder, R1 distills of Qwen3) come before plain "qwen3".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.core.settings.settings import SamplingConfig, changed

# hybrid: the chat template turns thinking on or off (enable_thinking); always: the model always thinks;
# plain: no native thinking (Nalar's reasoning mode can ask it to think in <think> tags).
ThinkingStyle = Literal["hybrid", "always", "plain"]


@dataclass(frozen=True)
class CardSampling:
    """Sampling a model card recommends."""

    temperature: float
    top_p: float
    top_k: int = 0  # 0: off


@dataclass(frozen=True)
class ModelFamily:
    name: str
    thinking: ThinkingStyle
    parser: str | None = None  # vLLM reasoning parser for its <think> output
    sampling_thinking: CardSampling | None = None
    sampling_answer: CardSampling | None = None  # with thinking off (hybrid) or for plain models
    system_prompt: bool = True  # R1 distills: the card says to put everything in the user turn
    tool_parser: str = "hermes"  # vLLM tool parser for its calls (--tool-call-parser); hermes where none is its own
    # Think markers that are control tokens the model writes itself (Magistral's [THINK] … [/THINK]): the prompt
    # opens no <think> block for it, and a forced end of thinking writes its own closing token.
    own_think_tokens: tuple[str, str] | None = None

    def sampling(self, thinking: bool) -> CardSampling | None:
        return self.sampling_thinking if thinking and self.thinking != "plain" else self.sampling_answer

    def summary(self) -> str:
        """One line for a model list: how it thinks and the sampling its card recommends for that."""
        how = {"hybrid": "thinks when the Think switch is on", "always": "always thinks",
               "plain": "no native thinking"}[self.thinking]
        card = self.sampling(True)
        if card is None:
            return f"{self.name}: {how}"
        top_k = f", top-k {card.top_k}" if card.top_k else ""
        return f"{self.name}: {how} · card sampling: temperature {card.temperature}, top-p {card.top_p}{top_k}"

    def thinks(self, switch_on: bool) -> bool:
        """Whether a reply thinks natively, given the chat's Think switch."""
        return self.thinking == "always" or (self.thinking == "hybrid" and switch_on)


_QWEN3_THINKING = CardSampling(0.6, 0.95, 20)
_QWEN3_ANSWER = CardSampling(0.7, 0.8, 20)

PLAIN = ModelFamily("plain chat model", "plain")

# (needles that must all be in "name model_type", lowercased) → family
_FAMILIES: tuple[tuple[tuple[str, ...], ModelFamily], ...] = (
    (("qwen3", "instruct-2507"), ModelFamily("Qwen3 Instruct-2507", "plain", sampling_answer=_QWEN3_ANSWER)),
    (("qwen3", "coder"), ModelFamily("Qwen3-Coder", "plain", sampling_answer=_QWEN3_ANSWER,
                                     tool_parser="qwen3_coder")),
    (("r1-distill",), ModelFamily("DeepSeek-R1 distill", "always", "deepseek_r1",
                                  CardSampling(0.6, 0.95), system_prompt=False)),
    (("deepseek-r1",), ModelFamily("DeepSeek-R1", "always", "deepseek_r1", CardSampling(0.6, 0.95),
                                   system_prompt=False, tool_parser="deepseek_v3")),
    (("qwq",), ModelFamily("QwQ", "always", "deepseek_r1", CardSampling(0.6, 0.95, 40))),
    (("qwen3", "thinking-2507"), ModelFamily("Qwen3 Thinking-2507", "always", "qwen3", _QWEN3_THINKING)),
    (("qwen3.",), ModelFamily("Qwen3.5+", "hybrid", "qwen3", _QWEN3_THINKING, _QWEN3_ANSWER,
                              tool_parser="qwen3_coder")),
    (("qwen3",), ModelFamily("Qwen3", "hybrid", "qwen3", _QWEN3_THINKING, _QWEN3_ANSWER)),
    (("deepseek-v3.2",), ModelFamily("DeepSeek-V3.2", "hybrid", "deepseek_r1", tool_parser="deepseek_v32")),
    (("deepseek-v3.",), ModelFamily("DeepSeek-V3.1", "hybrid", "deepseek_r1", tool_parser="deepseek_v31")),
    (("deepseek-v4.1",), ModelFamily("DeepSeek-V4.1", "hybrid", "deepseek_r1", tool_parser="deepseek_v41")),
    (("deepseek-v4",), ModelFamily("DeepSeek-V4", "hybrid", "deepseek_r1", tool_parser="deepseek_v4")),
    (("glm-4.5",), ModelFamily("GLM-4.5+", "hybrid", "deepseek_r1", tool_parser="glm45")),
    (("glm-4.6",), ModelFamily("GLM-4.5+", "hybrid", "deepseek_r1", tool_parser="glm45")),
    (("glm-4.7",), ModelFamily("GLM-4.7+", "hybrid", "deepseek_r1", tool_parser="glm47")),
    (("glm-5",), ModelFamily("GLM-4.7+", "hybrid", "deepseek_r1", tool_parser="glm47")),
    (("kimi-k2", "thinking"), ModelFamily("Kimi-K2 Thinking", "always", "deepseek_r1", tool_parser="kimi_k2")),
    (("kimi-k2.",), ModelFamily("Kimi-K2.5+", "hybrid", "deepseek_r1", tool_parser="kimi_k2")),
    (("kimi-k2",), ModelFamily("Kimi-K2 Instruct", "plain", tool_parser="kimi_k2")),
    (("kimi-k3",), ModelFamily("Kimi-K3", "hybrid", "kimi_k3", tool_parser="kimi_k3")),
    (("gemma-4",), ModelFamily("Gemma 4", "hybrid", "gemma4", tool_parser="gemma4")),
    # Magistral reasons in [THINK] control tokens when its card's system prompt asks (mistral_common's default);
    # card: temperature 0.7, top-p 0.95. vLLM's `mistral` parsers read both the split and the calls.
    (("magistral",), ModelFamily("Magistral", "always", "mistral", CardSampling(0.7, 0.95), tool_parser="mistral",
                                 own_think_tokens=("[THINK]", "[/THINK]"))),
    # gpt-oss always reasons (Harmony's analysis channel; effort low/medium/high); card: temperature 1, top-p 1
    (("gpt-oss",), ModelFamily("gpt-oss", "always", "openai_gptoss", CardSampling(1.0, 1.0), tool_parser="openai")),
    (("llama-4",), ModelFamily("Llama 4", "plain", tool_parser="llama4_pythonic")),
    (("llama-3",), ModelFamily("Llama 3.x", "plain", tool_parser="llama3_json")),
)


def model_family(model_name: str, model_type: str | None = None) -> ModelFamily:
    """The family of a model folder or hub id; PLAIN when none matches."""
    haystack = f"{model_name} {model_type or ''}".lower()
    for needles, family in _FAMILIES:
        if all(needle in haystack for needle in needles):
            return family
    return PLAIN


def with_card_sampling(sampling: SamplingConfig, family: ModelFamily) -> SamplingConfig:
    """The model card's temperature, top-p and top-k (for thinking on, if the family thinks)."""
    card = family.sampling(sampling.thinking)
    if card is None:
        return sampling
    return changed(sampling, temperature=card.temperature, top_p=card.top_p, top_k=card.top_k)


GREEDY_THINKING_WARNING = ("Greedy decoding (temperature 0) with thinking on: the model cards warn that it leads to "
                           "endless repetition. Fix: set the temperature to 0.6 in Settings.")


def sampling_warning(sampling: SamplingConfig, family: ModelFamily) -> str | None:
    """What is wrong with these settings for this family's thinking, if anything."""
    thinks = family.thinks(sampling.thinking) or (family.thinking == "plain" and sampling.thinking)
    return GREEDY_THINKING_WARNING if thinks and sampling.temperature == 0 and sampling.think_budget > 0 else None
