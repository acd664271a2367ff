"""EngineBridge: the one place engine events become Qt signals.

Engine events arrive on the engine thread; ``post`` only appends them to a
deque (thread-safe). A frame timer on the GUI thread drains it, joining text
deltas so a widget gets one update per frame however fast tokens come, and
gauges are emitted at most ``GAUGE_HZ`` times a second.
"""

from __future__ import annotations

import collections
import time
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.loop_thread import on_engine
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.base import EngineBase, Message
from app.engine.events import (
    AnswerDelta,
    BackendChosen,
    ContextTrimmed,
    EngineErrorEvent,
    EngineEvent,
    EngineReady,
    Finished,
    LoopDetected,
    Metrics,
    StatusChanged,
    ThinkingDelta,
)
from app.engine.requests import Resume

FRAME_MS = 16
GAUGE_HZ = 10


class EngineBridge(QObject):
    status_changed = Signal(object)   # StatusChanged
    engine_ready = Signal(object)     # EngineReady
    thinking_delta = Signal(str, str)  # request id, text
    answer_delta = Signal(str, str)
    metrics_updated = Signal(object)  # Metrics, throttled
    notice = Signal(str)
    error = Signal(object)            # EngineErrorEvent
    finished = Signal(object)         # Finished
    backend_chosen = Signal(object)   # BackendChosen: which backend answers a request
    loop_detected = Signal(object)    # LoopDetected: the loop guard found a loop and acted

    def __init__(self, engine: EngineBase, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine = engine
        engine.set_status_sink(self.post)
        self._pending: collections.deque[EngineEvent] = collections.deque()
        self._latest_metrics: Metrics | None = None
        self._last_gauge_emit = 0.0
        self._frame = QTimer(self)
        self._frame.setInterval(FRAME_MS)
        self._frame.timeout.connect(self.drain)
        self._frame.start()

    def set_engine(self, engine: EngineBase) -> None:
        """Switch backends (Settings → Backends); the caller shuts the old engine down."""
        self.engine = engine
        engine.set_status_sink(self.post)

    # ---- engine thread side ---------------------------------------------------------------

    def post(self, event: EngineEvent) -> None:
        """Thread-safe: called on the engine thread for every event."""
        self._pending.append(event)

    # ---- GUI thread side ------------------------------------------------------------------

    def drain(self) -> None:
        """Emit what arrived since the last frame, in order, with text deltas joined."""
        text_kind: type | None = None
        text_rid = ""
        parts: list[str] = []

        def flush_text() -> None:
            nonlocal text_kind, parts
            if parts:
                signal = self.thinking_delta if text_kind is ThinkingDelta else self.answer_delta
                signal.emit(text_rid, "".join(parts))
            text_kind, parts = None, []

        while self._pending:
            event = self._pending.popleft()
            if isinstance(event, (ThinkingDelta, AnswerDelta)):
                if type(event) is not text_kind or event.request_id != text_rid:
                    flush_text()
                    text_kind, text_rid = type(event), event.request_id
                parts.append(event.text)
                continue
            flush_text()
            if isinstance(event, Metrics):
                self._latest_metrics = event
            elif isinstance(event, Finished):
                if event.metrics is not None:
                    self._latest_metrics = event.metrics
                self._emit_gauges(force=True)
                self.finished.emit(event)
            elif isinstance(event, StatusChanged):
                self.status_changed.emit(event)
            elif isinstance(event, EngineErrorEvent):
                self.error.emit(event)
            elif isinstance(event, BackendChosen):
                self.backend_chosen.emit(event)
            elif isinstance(event, LoopDetected):
                self.loop_detected.emit(event)
            elif isinstance(event, ContextTrimmed):
                self.notice.emit(f"The conversation is longer than the context: the oldest "
                                 f"{event.dropped_messages} message(s) were left out of this request.")
        flush_text()
        self._emit_gauges()

    def _emit_gauges(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._latest_metrics is None or (not force and now - self._last_gauge_emit < 1.0 / GAUGE_HZ):
            return
        self._last_gauge_emit = now
        self.metrics_updated.emit(self._latest_metrics)
        self._latest_metrics = None

    # ---- awaitable engine calls, for @asyncSlot handlers on the UI loop --------------------

    async def start(self, config: EngineConfig) -> EngineReady:
        ready = await on_engine(self.engine.loop_thread, self.engine.start(config))
        self.drain()
        self.engine_ready.emit(ready)
        return ready

    async def generate(self, messages: list[Message], sampling: SamplingConfig, request_id: str,
                       *, ignore_eos: bool = False, resume: Resume | None = None,
                       tools: list[dict[str, Any]] | None = None, tool_choice: Any = None) -> Finished | None:
        """``tools`` (OpenAI's shape) and ``tool_choice`` go to the engine only when a chat offers tools."""
        offered: dict[str, Any] = {"tools": tools, "tool_choice": tool_choice or "auto"} if tools else {}
        stream = self.engine.stream_to(self.post, messages, sampling, request_id, ignore_eos=ignore_eos, resume=resume,
                                       **offered)
        return await on_engine(self.engine.loop_thread, stream)

    async def abort(self, request_id: str) -> None:
        await on_engine(self.engine.loop_thread, self.engine.abort(request_id))

    def answer_now(self, request_id: str) -> None:
        self.engine.request_answer_now(request_id)

    async def shutdown(self) -> None:
        await on_engine(self.engine.loop_thread, self.engine.shutdown())

    def close(self, timeout: float = 15.0) -> None:
        """Blocking: used when the window closes, after the UI loop stops."""
        self._frame.stop()
        self.engine.close(timeout)

    @property
    def ready(self) -> Any:
        return self.engine.ready
