"""The scheduler figures vLLM reports each engine step, kept where the gauges and benchmarks read them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.engine.events import SpecDecodeFigures
from app.engine.reply.stream import KvFigures


@dataclass
class KvStats:
    """Latest scheduler figures, written by the stat logger on the engine loop."""

    usage: float = 0.0
    running: int = 0
    waiting: int = 0
    peak_usage: float = 0.0
    preempted: int = 0  # requests vLLM preempted since the engine started (it recomputes them from scratch)
    on_record: Callable[[KvStats], None] | None = None  # a benchmark's per-step recorder, on the engine loop
    speculation: SpecDecodeFigures | None = None  # summed since the start; None until a step speculated

    def figures(self) -> KvFigures:
        """What a reply's gauges read now."""
        return KvFigures(self.usage, self.running, self.waiting, self.speculation)

    def add_spec_decoding(self, spec: Any) -> None:
        """Add one step's vLLM SpecDecodingStats (num_drafts, num_draft_tokens, num_accepted_tokens)."""
        total = self.speculation or SpecDecodeFigures()
        self.speculation = SpecDecodeFigures(total.drafts + int(spec.num_drafts),
                                             total.draft_tokens + int(spec.num_draft_tokens),
                                             total.accepted_tokens + int(spec.num_accepted_tokens))


def stat_logger_class(stats: KvStats) -> Any:
    """A vLLM stat logger class bound to ``stats``. vLLM marks this interface unstable."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class KvStatLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.stats = stats

        def record(self, scheduler_stats: Any, iteration_stats: Any,
                   mm_cache_stats: Any = None, engine_idx: int = 0) -> None:
            if scheduler_stats is not None:
                self.stats.usage = float(scheduler_stats.kv_cache_usage)
                self.stats.peak_usage = max(self.stats.peak_usage, self.stats.usage)
                self.stats.running = int(scheduler_stats.num_running_reqs)
                self.stats.waiting = int(scheduler_stats.num_waiting_reqs)
                if scheduler_stats.spec_decoding_stats is not None:
                    self.stats.add_spec_decoding(scheduler_stats.spec_decoding_stats)
            if iteration_stats is not None:
                self.stats.preempted += int(iteration_stats.num_preempted_reqs)
            if self.stats.on_record is not None:
                self.stats.on_record(self.stats)

        def log_engine_initialized(self) -> None:
            pass

    return KvStatLogger
