"""The API's max_tokens covers thinking and answer together (issue 39, item 12), parsed as the server parses it."""

from __future__ import annotations

import pytest

from app.core.settings.settings import SamplingConfig
from app.server.api_protocol import parse_chat_request

HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("think_budget", [0, 1, 10, 64, 1024])
@pytest.mark.parametrize("limit", [1, 2, 3, 17, 100, 1000, 4096])
def test_thinking_plus_answer_never_exceeds_max_tokens(think_budget: int, limit: int) -> None:
    """Bug caught: the client's max_tokens given to the answer alone, or to the thinking and the answer each,
    so a reply could run to twice what the client asked for (and bill it); or thinking taking all of it, so
    no answer was left."""
    defaults = SamplingConfig(think_budget=think_budget, max_tokens=512)
    for field in ("max_tokens", "max_completion_tokens"):
        sampling = parse_chat_request({"messages": HI, field: limit}).sampling(defaults)
        assert sampling.think_budget + sampling.max_tokens <= limit, (field, sampling)
        assert sampling.max_tokens >= 1 and sampling.max_tokens >= limit - think_budget
        assert sampling.think_budget <= min(think_budget, limit // 2), "the answer keeps at least half"


def test_max_completion_tokens_wins_over_max_tokens_and_no_limit_keeps_the_defaults() -> None:
    """Bug caught: the deprecated max_tokens taking precedence over max_completion_tokens (OpenAI's order)."""
    defaults = SamplingConfig(think_budget=64, max_tokens=512)
    both = parse_chat_request({"messages": HI, "max_tokens": 1000, "max_completion_tokens": 40}).sampling(defaults)
    assert (both.think_budget, both.max_tokens) == (20, 20)
    plain = parse_chat_request({"messages": HI}).sampling(defaults)
    assert (plain.think_budget, plain.max_tokens) == (64, 512)
