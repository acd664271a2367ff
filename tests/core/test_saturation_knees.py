"""The saturation knee logic on stat series: one recorded from a real sweep (tests/data), and small
constructed ones for the cases a real run on this machine does not hit on demand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.measure.saturation import (
    CellSeries,
    DtypeSweep,
    LatencyTargets,
    RequestTiming,
    StatSample,
    build_row,
    headroom_text,
    percentile,
    predicted_kv_knee,
    row_should_stop,
    sentence,
    series_from_dict,
    summarise_cell,
    sweep_to_dict,
)

RECORDED = Path(__file__).resolve().parents[1] / "support" / "data" / "saturation_series.json"


def request(sent: float, first: float, gap_s: float, tokens: int, measured: bool = True) -> RequestTiming:
    return RequestTiming(sent, tuple((first + i * gap_s, 1) for i in range(tokens)), measured)


def cell(context: int, concurrency: int, *, gap_s: float, usage: float = 0.3, preempted: int = 0,
         waiting: int = 0, stall_s: float = 0.0) -> CellSeries:
    """``concurrency`` requests of 33 tokens at ``gap_s``; the last one stalls ``stall_s`` mid-way."""
    requests = [request(0.0, 0.2, gap_s, 33) for _ in range(concurrency)]
    if stall_s:
        deltas = list(requests[-1].deltas)
        deltas = deltas[:16] + [(t + stall_s, n) for t, n in deltas[16:]]
        requests[-1] = RequestTiming(0.0, tuple(deltas))
    samples = (StatSample(0.0, 0.99, 0, 0, 7),  # what the previous cell left: not this cell's
               StatSample(0.1, usage, concurrency, waiting, 7), StatSample(0.5, usage, concurrency, 0, 7 + preempted))
    return CellSeries(context, concurrency, samples, tuple(requests))


def test_a_cell_reads_peak_kv_preemptions_queueing_and_latency_from_its_series() -> None:
    result = summarise_cell(cell(512, 3, gap_s=0.05, usage=0.6, preempted=2, waiting=1, stall_s=1.6),
                            total_blocks=20, block_size=128)
    assert result.peak_kv_usage == 0.6  # not the 0.99 the previous cell left
    assert result.preemptions == 2 and result.waited
    # 20 blocks at 60% leave 8 free; a 513-token prompt needs 5: the wait was not for KV.
    assert not result.waited_for_kv and result.kv_saturated
    assert result.ms_per_token_p50 == pytest.approx(50.0)
    assert result.ms_per_token_p95 == pytest.approx(50 + 0.9 * 1600 / 32)  # the stalled request, interpolated
    assert result.ttft_p50_s == pytest.approx(0.2) and result.requests == 3
    tight = summarise_cell(cell(512, 3, gap_s=0.05, usage=0.8, waiting=1), total_blocks=20, block_size=128)
    assert tight.waited_for_kv and tight.kv_saturated and tight.preemptions == 0  # 4 free blocks < 5 needed
    # Past that point more chats only queue: the row stops, whatever the latency.
    assert row_should_stop([tight], LatencyTargets(relative=(100.0,)))
    assert not row_should_stop([result], LatencyTargets(relative=(100.0,)))


def test_staggering_requests_load_the_engine_but_are_not_measured() -> None:
    series = CellSeries(256, 2, (StatSample(0, 0, 0, 0, 0), StatSample(1, 0.2, 2, 0, 0)),
                        (request(0, 0.1, 0.9, 5, measured=False), request(0, 0.1, 0.05, 33)))
    result = summarise_cell(series, total_blocks=10, block_size=128)
    assert result.requests == 1 and result.ms_per_token_p95 == pytest.approx(50.0)


def test_knees_targets_and_the_sentence_on_a_constructed_row() -> None:
    targets = LatencyTargets(relative=(2.0,))
    cells = [summarise_cell(cell(768, 1, gap_s=0.04), total_blocks=11, block_size=128),
             summarise_cell(cell(768, 2, gap_s=0.05, usage=0.97), total_blocks=11, block_size=128),
             summarise_cell(cell(768, 3, gap_s=0.06, usage=1.0, preempted=3), total_blocks=11, block_size=128),
             summarise_cell(cell(768, 4, gap_s=0.09, usage=1.0, preempted=5), total_blocks=11, block_size=128)]
    assert [row_should_stop(cells[:n], targets) for n in (1, 2, 3, 4)] == [False, False, False, True]
    row = build_row(768, cells, targets, predicted=2)
    assert row.targets_ms == pytest.approx((80.0,))
    assert row.kv_knee == 2  # ≥ 95% KV use counts, before any preemption
    assert row.latency_knee(80.0) == 4 and row.most_under(80.0) == 3 and row.stopped_at_latency_knee
    sweep = DtypeSweep("auto", True, kv_capacity_tokens=1408, block_size=128, rows=(row,))
    assert sentence(sweep, "2x the single-stream ms/token") == (
        "auto: 3 chats of 768 stay under 2x the single-stream ms/token (80 ms/token p95); a 4th triggers "
        "preemption (90 ms/token p95) (the planner predicted the KV knee at 2).")
    report = {"when": "now", "runs": [sweep_to_dict(sweep, "2x the single-stream ms/token")]}
    tip = headroom_text(report, "auto")
    assert "768-token chats: 3 under 80 ms/token; KV knee at 2 (predicted 2)" in tip
    assert "No saturation profile for KV fp8_e4m3" in headroom_text(report, "fp8_e4m3")


def test_gpu_targets_are_absolute_and_a_row_stops_at_the_loosest() -> None:
    targets = LatencyTargets.default(on_gpu=True)
    assert targets.for_row(7.0) == (100.0, 250.0)
    cells = [summarise_cell(cell(8192, c, gap_s=g), total_blocks=1000, block_size=16)
             for c, g in ((1, 0.02), (2, 0.12), (4, 0.3))]
    assert not row_should_stop(cells[:2], targets) and row_should_stop(cells, targets)
    row = build_row(8192, cells, targets, predicted=None)
    assert (row.latency_knee(100.0), row.latency_knee(250.0)) == (2, 4)
    assert (row.most_under(100.0), row.most_under(250.0)) == (1, 2) and row.kv_knee is None


def test_the_planner_knee_counts_whole_blocks_at_full_length() -> None:
    # 32 MiB of bf16 KV for SmolLM2 (23,040 bytes/token): 11 blocks of 128 tokens, one of them vLLM's
    # null block; fp8: 22 (21 usable).
    assert predicted_kv_knee(1408, 128, 640, 16) == 2  # 6 blocks a chat: 2 take 12 > 10
    assert predicted_kv_knee(2816, 128, 640, 16) == 4  # 3 × 6 = 18 < 0.95 × 21 ≤ 4 × 6
    assert predicted_kv_knee(1408, 128, 512, 64) == 2  # 2 × 5 = 10 ≥ 9.5: full, though nothing is preempted
    assert predicted_kv_knee(1408, 128, 256, 64) == 4  # 3 blocks a chat
    assert predicted_kv_knee(0, 128, 256, 64) is None
    assert percentile([5.0], 95) == 5.0 and percentile([1.0, 2.0, 3.0], 50) == 2.0


def test_the_recorded_sweep_finds_the_knees_it_found_live() -> None:
    """Series recorded by `nalar bench saturation --keep-series` on the embedded model (see BENCHMARKS.md)."""
    recorded = json.loads(RECORDED.read_text())
    targets = LatencyTargets(tuple(recorded["absolute_targets"]), tuple(recorded["relative_targets"]))
    for dtype, expected in recorded["expected"].items():
        cells_by_context: dict[int, list] = {}
        for data in recorded["series"]:
            if data["kv_cache_dtype"] != dtype:
                continue
            series = series_from_dict(data)
            cells_by_context.setdefault(series.context_tokens, []).append(
                summarise_cell(series, total_blocks=data["total_blocks"], block_size=data["block_size"]))
        for context, cells in cells_by_context.items():
            row = build_row(context, cells, targets, None)
            want = expected[str(context)]
            assert row.kv_knee == want["kv_knee"], (dtype, context)
            assert [row.latency_knee(t) for t in row.targets_ms] == want["latency_knees"], (dtype, context)
            assert sum(c.preemptions for c in cells) == want["preemptions"], (dtype, context)


def test_the_recorded_second_chat_waited_for_kv_rather_than_being_preempted() -> None:
    """In that recording the second 640-token chat arrived a step late (a loaded 2-core machine): the
    first already held 6 of the 10 usable blocks, the second's prompt needs 6, so it waited; nothing
    was preempted. That still is the KV knee: the pool, not the CPU, held it back."""
    recorded = json.loads(RECORDED.read_text())
    data = next(s for s in recorded["series"] if s["concurrency"] == 2 and s["context_tokens"] == 640)
    result = summarise_cell(series_from_dict(data), total_blocks=data["total_blocks"], block_size=data["block_size"])
    assert data["total_blocks"] == 10 and result.peak_kv_usage == pytest.approx(0.6)
    assert result.waited_for_kv and result.preemptions == 0 and result.kv_saturated
    assert result.ttft_p95_s > result.ttft_p50_s  # the waiting chat's first token came later
    row = build_row(640, [summarise_cell(series_from_dict(s), total_blocks=10, block_size=128)
                          for s in recorded["series"]], LatencyTargets(relative=(50.0,)), predicted=2)
    assert sentence(DtypeSweep("auto", True, rows=(row,)), "50x").endswith(
        "as far as the sweep went; the KV knee is at 2 (a chat waited for KV space) "
        "(the planner predicted the KV knee at 2).")


def test_the_recorded_preemptions_and_a_2x_latency_knee() -> None:
    """The 384-token row (300 output tokens): one chat alone, two that outgrow the 10 blocks (one is
    preempted, and counted when it runs again), four (three preemptions). Its p95 ms/token went
    137 → 219 → 535: against 2x the single stream (275 ms) the latency knee is at 4, two chats fit."""
    recorded = json.loads(RECORDED.read_text())
    cells = [summarise_cell(series_from_dict(s), total_blocks=s["total_blocks"], block_size=s["block_size"])
             for s in recorded["series"] if s["context_tokens"] == 384]
    assert [(c.concurrency, c.preemptions, round(c.peak_kv_usage, 2)) for c in cells] == \
        [(1, 0, 0.6), (2, 1, 1.0), (4, 3, 1.0)]
    row = build_row(384, cells, LatencyTargets(relative=(2.0,)), predicted=2)
    assert row.kv_knee == 2 and row.latency_knee(row.targets_ms[0]) == 4 and row.most_under(row.targets_ms[0]) == 2
    assert row_should_stop(cells, LatencyTargets(relative=(2.0,))) and not row_should_stop(cells[:2], LatencyTargets())
    assert sentence(DtypeSweep("auto", True, rows=(row,)), "2x").startswith(
        "auto: 2 chats of 384 stay under 2x (275 ms/token p95); at 4: preemption (535 ms/token p95)")


def test_the_cpu_default_plan_fills_its_pool_at_two_to_four_chats() -> None:
    """The issue's bound: preemption must really happen at 2-4 chats. Fails if the plan's pool, block size or
    contexts drift apart (e.g. a bigger pool, or the planner assuming vLLM's 128-token blocks)."""
    from app.commands.saturation import SweepPlan
    from app.core.models.planner import plan as plan_kv

    sweep = SweepPlan.default(on_gpu=False)
    smollm2 = {"model_type": "llama", "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
               "hidden_size": 576, "max_position_embeddings": 8192}
    planned = plan_kv(smollm2, max_model_len=sweep.max_model_len, cpu_kv_pool_bytes=sweep.cpu_kv_pool_mib << 20,
                      block_size=sweep.kv_block_size)
    auto = planned.row("auto").capacity_tokens
    assert auto == 352 and auto >= sweep.max_model_len  # 11 blocks of 32: vLLM starts only if one chat fits
    knees = [predicted_kv_knee(auto, 32, context, sweep.output_tokens) for context in sweep.contexts]
    assert knees == [4, 2, 2] and all(k in sweep.concurrency for k in knees)
    assert all(c + sweep.output_tokens <= sweep.max_model_len for c in sweep.contexts)
