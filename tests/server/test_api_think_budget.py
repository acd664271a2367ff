"""``thinking_token_budget`` (vLLM's field) and ``reasoning_effort`` (OpenAI's) on the local API (issue 35, item 1),
parsed as the server parses a body; the accepted values are checked against vLLM 0.32's own validator."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.settings.settings import MAX_THINK_BUDGET, THINK_BUDGET_LEVELS, SamplingConfig
from app.server.api_protocol import ApiError, parse_chat_request

HI = [{"role": "user", "content": "hi"}]
DEFAULTS = SamplingConfig(think_budget=64, max_tokens=512)


def sampling(**fields: Any) -> SamplingConfig:
    return parse_chat_request({"messages": HI, **fields}).sampling(DEFAULTS)


def refusal(**fields: Any) -> ApiError:
    with pytest.raises(ApiError) as refused:
        sampling(**fields)
    return refused.value


def vllm_accepts(value: object) -> bool:
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import validate_thinking_token_budget

    try:
        validate_thinking_token_budget(value)  # type: ignore[arg-type]
    except (VLLMValidationError, ValueError, TypeError):
        return False
    return True


@pytest.mark.parametrize("value", [-5, -2, -1, 0, 1, 7, 512, MAX_THINK_BUDGET, True, False, 1.0, 2.5, "8", [8]])
def test_the_budgets_vllm_accepts_are_the_ones_nalar_accepts(value: object) -> None:
    """Bug caught: a budget vLLM's server takes (-1 for unlimited, 0) refused here, so a client written for vLLM
    breaks against Nalar; or one it refuses (a bool, a float, below -1) taken and silently rounded."""
    if vllm_accepts(value):
        chosen = sampling(thinking_token_budget=value).think_budget
        assert chosen == (MAX_THINK_BUDGET if value == -1 else value)
    else:
        error = refusal(thinking_token_budget=value)
        assert error.status == 400 and error.param == "thinking_token_budget", error


def test_a_budget_over_nalars_bound_is_refused_naming_the_field() -> None:
    """Bug caught: a budget past SamplingConfig's bound reaching its validation as a 500 (vLLM has no bound)."""
    error = refusal(thinking_token_budget=MAX_THINK_BUDGET + 1)
    assert error.status == 400 and error.param == "thinking_token_budget" and "131072" in error.message


@pytest.mark.parametrize("effort", ["low", "medium", "high"])
def test_an_effort_level_is_its_budget(effort: str) -> None:
    """Bug caught: reasoning_effort accepted but ignored (the default budget kept), or mapped to another level."""
    chosen = sampling(reasoning_effort=effort)
    assert chosen.think_budget == THINK_BUDGET_LEVELS[effort] and chosen.thinking
    assert chosen.reasoning_effort == effort, "gpt-oss's template reads the effort itself"
    assert THINK_BUDGET_LEVELS == {"low": 512, "medium": 2_048, "high": 8_192}


def test_effort_none_turns_thinking_off_and_other_efforts_are_refused_by_name() -> None:
    """Bug caught: "none" still thinking; vLLM's xhigh/max/minimal silently taken as some level of ours."""
    off = sampling(reasoning_effort="none")
    assert not off.thinking and off.think_budget == 0
    for effort in ("minimal", "xhigh", "max", "HIGH", 3):
        error = refusal(reasoning_effort=effort)
        assert error.status == 400 and error.param == "reasoning_effort", (effort, error)


def test_the_budget_wins_over_the_effort_and_shares_max_tokens_with_the_answer() -> None:
    """Bug caught: the effort's budget overriding an explicit thinking_token_budget (vLLM applies the budget);
    an asked budget split like the default (limit // 2) so the client's budget was cut to half its limit; or
    thinking plus answer over the client's max_tokens."""
    assert sampling(reasoning_effort="high", thinking_token_budget=40).think_budget == 40
    within = sampling(thinking_token_budget=300, max_tokens=100)
    assert (within.think_budget, within.max_tokens) == (99, 1)
    small = sampling(thinking_token_budget=10, max_tokens=100)
    assert (small.think_budget, small.max_tokens) == (10, 90)
    unlimited = sampling(thinking_token_budget=-1)
    assert (unlimited.think_budget, unlimited.max_tokens) == (MAX_THINK_BUDGET, 512)
    assert sampling().think_budget == 64, "neither field: the server's default budget"
