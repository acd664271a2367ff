"""CompareRunner: a Comparison's replies sent to the one engine at once, and their events routed to its columns.

Each variant is its own request through the bridge, all awaited together: the engine's loop runs them side by
side and vLLM batches them in its steps (nothing in EngineHost or the engine process serialises generate()).
The bridge's deltas carry their request id; the chat's ReplyFeed ignores ids that aren't its own, and this
runner takes only the comparison's. Every turn is saved as it starts and ends, as the chat's replies are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from PySide6.QtCore import QObject, Signal

from app.core.chat.conversation import Conversation
from app.core.chat.history import HistoryStore
from app.core.settings.settings import SamplingConfig
from app.core.steering.compare import Comparison, PresetLookup, Variant, VariantRun
from app.engine.events import Finished, Metrics
from app.ui.controllers.bridge import EngineBridge

log = logging.getLogger(__name__)
FINISHED_WAIT_S = 10.0  # for the bridge to hand over the Finished of a request that has returned


class CompareRunner(QObject):
    """Runs one Comparison at a time; ``peak_running`` is the most requests the engine reported running at once."""

    column_changed = Signal(int)  # a column's figures changed (its tokens, or it ended)
    all_done = Signal()

    def __init__(self, bridge: EngineBridge, history: HistoryStore, presets: PresetLookup | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.bridge, self.history, self.presets = bridge, history, presets
        self.comparison: Comparison | None = None
        self.figures: dict[str, Metrics] = {}  # each request's latest figures
        self.peak_running = 0
        self.ignore_eos = False  # benchmarks and tests: replies of fixed length
        bridge.thinking_delta.connect(self._on_thinking)
        bridge.answer_delta.connect(self._on_answer)
        bridge.metrics_updated.connect(self._on_metrics)
        bridge.finished.connect(self._on_finished)

    @property
    def running(self) -> bool:
        return self.comparison is not None and not self.comparison.done

    async def run(self, conversation: Conversation, index: int, variants: Sequence[Variant],
                  sampling: SamplingConfig, on_started: Callable[[], object] | None = None) -> Comparison:
        """The question at ``index`` under each variant of ``sampling`` (the chat's), all at once; returns when
        every reply has ended. Raises ValueError for a bad set of variants before anything is sent.
        ``on_started``: the comparison's turns exist and are saved (a view builds its columns), nothing is sent."""
        samplings = [variant.sampling(sampling, self.presets) for variant in variants]
        comparison = self.comparison = Comparison(conversation, index, variants)
        self.figures.clear()
        self.peak_running = 0
        ready, backend = self.bridge.ready, self.bridge.engine.backend_name
        context = conversation.turns[:index]
        requests = []
        for run, run_sampling in zip(comparison.runs, samplings, strict=True):
            run.turn.model, run.turn.kv_cache_dtype = (ready.model, ready.kv_cache_dtype) if ready else ("", "")
            run.turn.backend = backend
            self.history.start_turn(conversation, run.turn)
            comparison.start(run)
            messages = Conversation(turns=[*context, run.turn]).messages()
            requests.append(self.bridge.generate(messages, run_sampling, run.request_id, ignore_eos=self.ignore_eos))
        self.history.set_leaf(conversation)  # each start moved the chat's leaf; it stays on the branch shown
        if on_started is not None:
            on_started()
        results = await asyncio.gather(*requests, return_exceptions=True)
        for run, result in zip(comparison.runs, results, strict=True):
            if isinstance(result, BaseException) and not run.done:  # the engine thread failed: end it cleanly
                log.error("a compared reply failed", exc_info=result)
                self._end(run, Finished(run.request_id, "error", run.reply.thinking, run.reply.answer))
        # A request returns once the engine has sent its last event; the bridge hands the Finished over at its
        # next frame, so under load it can come after this point. Each reply ends (and is saved) first.
        deadline = asyncio.get_running_loop().time() + FINISHED_WAIT_S
        while not all(run.done for run in comparison.runs) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        for run in comparison.runs:
            if not run.done:
                log.error("a compared reply's end never arrived: %s", run.request_id)
                self._end(run, Finished(run.request_id, "error", run.reply.thinking, run.reply.answer))
        return comparison

    async def stop(self) -> None:
        """Stop every reply still running; what arrived is kept, marked stopped."""
        if self.comparison is not None:
            await asyncio.gather(*(self.bridge.abort(run.request_id) for run in self.comparison.runs if not run.done))

    def keep(self, place: int) -> None:
        """The ``place``-th reply becomes the chat's branch, remembered; the others stay as its siblings."""
        assert self.comparison is not None
        self.comparison.keep(place)
        self.history.set_leaf(self.comparison.conversation)

    def _run(self, request_id: str) -> VariantRun | None:
        return self.comparison.run_of(request_id) if self.comparison is not None else None

    def _on_thinking(self, request_id: str, text: str) -> None:
        if (run := self._run(request_id)) is not None and not run.done:
            run.reply.add_thinking(text)

    def _on_answer(self, request_id: str, text: str) -> None:
        if (run := self._run(request_id)) is not None and not run.done:
            run.reply.add_answer(text)

    def _on_metrics(self, metrics: Metrics) -> None:
        if (run := self._run(metrics.request_id)) is not None and not run.done:
            self._count(run, metrics)

    def _count(self, run: VariantRun, metrics: Metrics) -> None:
        self.figures[run.request_id] = metrics
        self.peak_running = max(self.peak_running, metrics.running_requests)
        run.reply.count_tokens(metrics.thinking_tokens)
        assert self.comparison is not None
        self.column_changed.emit(self.comparison.runs.index(run))

    def _on_finished(self, finished: Finished) -> None:
        if (run := self._run(finished.request_id)) is not None and not run.done:
            self._end(run, finished)

    def _end(self, run: VariantRun, finished: Finished) -> None:
        assert self.comparison is not None
        turn = run.turn
        if (metrics := finished.metrics) is not None:
            turn.thinking_tokens, turn.answer_tokens, turn.ttft_s = (metrics.thinking_tokens, metrics.answer_tokens,
                                                                     metrics.ttft_s)
            turn.answer_tok_s = metrics.answer_tok_s
            self._count(run, metrics)
        self.comparison.finish(run, finished.reason, finished.thinking_text, finished.answer_text)
        self.history.finish_turn(turn)
        self.column_changed.emit(self.comparison.runs.index(run))
        if self.comparison.done:
            self.all_done.emit()
