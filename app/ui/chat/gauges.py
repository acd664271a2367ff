"""GaugeBar: memory, KV-cache use, tokens/s, ms/token, time to first token, context."""

from __future__ import annotations

import collections
import os
from typing import Any

import psutil
from PySide6.QtCore import QPointF, QTimer
from PySide6.QtGui import QColor, QPainter, QPen, QPolygonF
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QProgressBar, QWidget

from app.core.measure.fp8_scales import fp8_scales_text, model_folder
from app.core.measure.saturation import headroom_text, load_latest_profile
from app.engine.events import EngineReady, Metrics, SpecDecodeFigures

MEMORY_POLL_MS = 1000
GIB = 1 << 30


class MemoryProbe:
    """VRAM of GPU 0 through NVML (never a CUDA context here); process and system RAM without one."""

    def __init__(self) -> None:
        self._nvml_handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            if pynvml.nvmlDeviceGetCount() > 0:
                self._nvml_handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # pynvml missing or no driver: this is a CPU machine
            self._nvml_handle = None
        self._process = psutil.Process(os.getpid())

    @property
    def has_gpu(self) -> bool:
        return self._nvml_handle is not None

    def read(self) -> tuple[str, int, int]:
        """(label, used bytes, total bytes)."""
        if self._nvml_handle is not None:
            import pynvml

            info = pynvml.nvmlDeviceGetMemoryInfo(self._nvml_handle)
            return "VRAM", int(info.used), int(info.total)
        rss = self._process.memory_info().rss
        for child in self._process.children(recursive=True):
            try:
                rss += child.memory_info().rss
            except psutil.Error:
                continue
        return "RAM (no NVIDIA GPU)", rss, psutil.virtual_memory().total


class Sparkline(QWidget):
    """The last minute or so of tokens/s."""

    def __init__(self, parent: QWidget | None = None, samples: int = 60) -> None:
        super().__init__(parent)
        self.values: collections.deque[float] = collections.deque(maxlen=samples)
        self.setMinimumSize(120, 28)
        self.setToolTip("tokens/s, recent history")

    def add(self, value: float) -> None:
        self.values.append(value)
        self.update()

    def paintEvent(self, event: object) -> None:
        if len(self.values) < 2:
            return
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        peak = max(self.values) or 1.0
        width, height = self.width() - 2, self.height() - 2
        step = width / (self.values.maxlen - 1 if self.values.maxlen else 1)
        offset = width - step * (len(self.values) - 1)
        points = [QPointF(1 + offset + i * step, 1 + height * (1 - v / peak)) for i, v in enumerate(self.values)]
        painter.setPen(QPen(QColor("#2e7d32"), 1.5))
        painter.drawPolyline(QPolygonF(points))
        painter.end()  # not left to the wrapper's collection: a frame kept alive (a traceback) would hold it open


class GaugeBar(QFrame):
    """Always visible. Fed by the bridge's throttled ``metrics_updated`` and a 1 Hz memory poll."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("GaugeBar")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.memory_probe = MemoryProbe()
        self.memory_label = QLabel()
        self.memory_bar = QProgressBar(textVisible=True)
        self.kv_label = QLabel("KV cache")
        self.kv_bar = QProgressBar(textVisible=True)
        self.kv_bar.setRange(0, 1000)
        self.kv_bar.setFormat("–")
        self.thinking_rate = QLabel("–")
        self.answer_rate = QLabel("–")
        self.ttft = QLabel("–")
        self.speculation_title = QLabel("Speculation")
        self.speculation = QLabel("–")
        self.speculation.setObjectName("SpeculationGauge")
        self.speculation.setToolTip("Of the tokens proposed, the share vLLM's verification accepted, and the "
                                    "tokens gained per verification step (1 means no gain).")
        self.context_bar = QProgressBar(textVisible=True)
        self.context_bar.setFormat("–")
        self.sparkline = Sparkline()
        for label in (self.thinking_rate, self.answer_rate, self.ttft):
            label.setMinimumWidth(150)

        grid = QGridLayout(self)
        grid.setContentsMargins(8, 4, 8, 4)
        entries = [
            (self.memory_label, self.memory_bar), (self.kv_label, self.kv_bar),
            (QLabel("Thinking"), self.thinking_rate), (QLabel("Answer"), self.answer_rate),
            (QLabel("Time to first token"), self.ttft), (self.speculation_title, self.speculation),
            (QLabel("Context"), self.context_bar),
            (QLabel("tok/s"), self.sparkline),
        ]
        for column, (title, widget) in enumerate(entries):
            title.setStyleSheet("color: palette(mid); font-size: 8pt;")
            grid.addWidget(title, 0, column)
            grid.addWidget(widget, 1, column)

        self._show_speculation(False)
        self.kv_usage = 0.0
        self.kv_capacity_tokens = 0
        self.kv_cache_dtype: str | None = None
        self.fp8_scales = ""  # which fp8 scales the engine runs with, for the KV tooltip
        self.plan = ""  # the local start's plan (StartPlan.describe), for the KV tooltip
        self.saturation_profile = load_latest_profile()
        self._show_headroom()
        self.tok_s = 0.0
        self._poll = QTimer(self)
        self._poll.setInterval(MEMORY_POLL_MS)
        self._poll.timeout.connect(self.poll_memory)
        self._poll.start()
        self.poll_memory()

    def poll_memory(self) -> None:
        label, used, total = self.memory_probe.read()
        self.memory_label.setText(label)
        self.memory_bar.setRange(0, max(1, total // (1 << 20)))
        self.memory_bar.setValue(used // (1 << 20))
        self.memory_bar.setFormat(f"{used / GIB:.1f} / {total / GIB:.0f} GiB")

    def set_saturation_profile(self, report: dict[str, Any] | None) -> None:
        """A saturation sweep finished: the KV gauge's tooltip shows its headroom from now on."""
        self.saturation_profile = report
        self._show_headroom()

    def _show_headroom(self) -> None:
        if self.saturation_profile is None:
            text = "No saturation profile yet: Engine → Measure FP8… → Saturation measures how many chats fit."
        else:
            text = headroom_text(self.saturation_profile, self.kv_cache_dtype or "auto")
        text = "\n\n".join(part for part in (self.fp8_scales, self.plan, text) if part)
        self.kv_bar.setToolTip(text)
        self.kv_label.setToolTip(text)

    def set_engine(self, ready: EngineReady | None) -> None:
        local = ready is not None and ready.backend == "local"
        self.kv_cache_dtype = ready.kv_cache_dtype if ready is not None and local else None
        self.fp8_scales = fp8_scales_text(ready.kv_cache_dtype, model_folder(ready.model)) if ready and local else ""
        self.plan = ready.plan.describe() if ready is not None and ready.plan is not None else ""
        self._show_headroom()
        self._show_speculation(ready is not None and ready.plan is not None
                               and ready.plan.config.speculative_method != "off")
        if ready is None:
            self.kv_label.setText("KV cache")
            self.kv_bar.setFormat("engine not running")
            self.kv_bar.setValue(0)
            return
        self.kv_capacity_tokens = ready.kv_capacity_tokens
        self.kv_label.setText(f"KV cache ({ready.kv_cache_dtype})" if local else "KV cache (on the server)")
        self.kv_bar.setValue(0)
        self.kv_bar.setFormat(kv_text(0.0, ready.kv_capacity_tokens))
        self.context_bar.setRange(0, max(1, ready.max_model_len))
        self.context_bar.setValue(0)
        self.context_bar.setFormat(context_text(0, ready.max_model_len))

    def update_metrics(self, metrics: Metrics) -> None:
        self.kv_usage = metrics.kv_usage
        self.kv_bar.setValue(int(metrics.kv_usage * 1000) if metrics.kv_capacity_tokens else 0)
        self.kv_bar.setFormat(kv_text(metrics.kv_usage, metrics.kv_capacity_tokens))
        self.thinking_rate.setText(_rate_text(metrics.thinking_tok_s, metrics.thinking_ms_per_token))
        self.answer_rate.setText(_rate_text(metrics.answer_tok_s, metrics.answer_ms_per_token))
        self.ttft.setText("–" if metrics.ttft_s is None else f"{metrics.ttft_s * 1000:.0f} ms")
        self.context_bar.setRange(0, max(1, metrics.max_model_len))
        self.context_bar.setValue(min(metrics.context_tokens, metrics.max_model_len))
        self.context_bar.setFormat(context_text(metrics.context_tokens, metrics.max_model_len))
        if metrics.speculation is not None:
            self._show_speculation(True)
            self.speculation.setText(speculation_text(metrics.speculation))
        self.tok_s = metrics.thinking_tok_s if metrics.phase == "thinking" else metrics.answer_tok_s
        self.sparkline.add(self.tok_s)

    def show_context(self, tokens: int | None, max_model_len: int, *, estimate: bool) -> None:
        """What the branch shown holds (the model reads it next), counted here, not reported by a request; None:
        still being counted (a long chat just opened)."""
        self.context_bar.setRange(0, max(1, max_model_len))
        self.context_bar.setValue(min(tokens or 0, max_model_len))
        self.context_bar.setFormat("counting tokens…" if tokens is None else
                                   ("≈" if estimate else "") + context_text(tokens, max_model_len))

    def _show_speculation(self, shown: bool) -> None:
        """Only an engine that speculates has this gauge."""
        self.speculation_title.setVisible(shown)
        self.speculation.setVisible(shown)
        if not shown:
            self.speculation.setText("–")


def speculation_text(figures: SpecDecodeFigures) -> str:
    """"62% accepted, 2.4 tok/step" from vLLM's counters; before the first draft, a dash."""
    if figures.drafts == 0:
        return "no drafts yet"
    return f"{figures.acceptance_rate:.0%} accepted, {figures.mean_accepted_length:.2f} tok/step"


def kv_text(usage: float, capacity_tokens: int) -> str:
    """The KV gauge's words. A remote server reports no pool (capacity 0): say so, not "0.0 % of 0"."""
    if capacity_tokens <= 0:
        return "not reported by the server"
    return f"{usage:.1%} of {capacity_tokens:,} tokens" if usage else f"0% of {capacity_tokens:,} tokens"


def context_text(tokens: int, max_model_len: int) -> str:
    """The context gauge's words; a server that doesn't report its context length gets no "/ 0"."""
    if max_model_len <= 0:
        return f"{tokens:,} tokens (the server reports no limit)"
    return f"{tokens:,} / {max_model_len:,}"


def _rate_text(tok_s: float, ms_per_token: float) -> str:
    if tok_s <= 0:
        return "–"
    return f"{tok_s:.1f} tok/s · {ms_per_token:.0f} ms/token"
