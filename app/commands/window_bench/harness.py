"""What the window benches share: the app's own Qt start-up made once, a window on it, a scratch history, the
stall meter, waiting on the loop, and the embedded model's engine config. The one place under commands/ that
reaches the window (through app/ui/app_main.py) and imports Qt."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from app.core.settings.settings import EngineConfig, Settings


def embedded_engine_config(**overrides: Any) -> EngineConfig:
    """The embedded model, as the engine benches start it."""
    from app.core.models.embedded_model import ensure_embedded_model

    return EngineConfig(model=str(ensure_embedded_model()), max_model_len=2048, **overrides)


_QT: tuple[Any, Any] | None = None  # the UI benches share one QApplication and one qasync loop


def qt_app() -> Any:
    """The app's own Qt start-up (app_main.start_qt), made once; ``close_ui_loop`` ends it."""
    global _QT
    if _QT is not None:
        return _QT
    if not (os.environ.get("QT_QPA_PLATFORM") or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        # Without a display Qt's plugin loader aborts the process; the UI benches measure the
        # event loop, not drawing, so the offscreen platform serves them as well.
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        print("nalar bench: no display found; using Qt's offscreen platform", file=sys.stderr)
    from app.ui.app_main import start_qt

    _QT = start_qt([sys.argv[0]])
    return _QT


def close_ui_loop() -> None:
    global _QT
    if _QT is not None:
        from app.ui.app_main import close_qt

        close_qt(*_QT)
        _QT = None


def scratch_history() -> Any:
    """A history of the bench's own, deleted at exit: the UI benches' 50,000-token chats stay out of the user's."""
    import atexit
    import shutil
    import tempfile
    from pathlib import Path

    from app.core.chat.history import HistoryStore

    folder = Path(tempfile.mkdtemp(prefix="nalar-bench-history-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return HistoryStore(folder / "history.sqlite3")


def bench_window(engine: Any, settings: Settings, *, history: Any = None, keys: Any = None) -> tuple[Any, Any]:
    """A window of the app's own start-up (app_main.open_window) on the benches' one Qt app, and its loop: how the
    other benches' modules get a window without importing Qt or ui/."""
    from app.ui.app_main import open_window

    _, loop = qt_app()
    return open_window(engine, settings, history=history, keys=keys), loop


def close_bench_window(window: Any) -> None:
    """``window`` closed as the user closes it, then what the app's exit ends with it (app_main.end_window)."""
    from app.ui.app_main import end_window

    end_window(window)


def send(window: Any, text: str) -> None:
    """As the user sends: the prompt typed, then the "send" action (Ctrl+Return, Chat → Send)."""
    window.prompt.setPlainText(text)
    window.menus.trigger("send")


class StallMeter:
    """Longest gap between ticks of a fast timer on the UI loop: how long the UI froze."""

    def __init__(self, interval_ms: int = 2) -> None:
        from PySide6.QtCore import QTimer

        self.interval = interval_ms / 1000
        self.longest = 0.0
        self.last_tick = time.perf_counter()  # read by a watching thread: how long the loop has been held now
        self._timer = QTimer()
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)

    def start(self) -> None:
        self.last_tick = time.perf_counter()
        self.longest = 0.0
        self._timer.start()

    def stop(self) -> float:
        """The longest gap, the one still open counted too (a loop held until now never ticked again)."""
        self._timer.stop()
        self._tick()
        return self.longest

    def _tick(self) -> None:
        now = time.perf_counter()
        self.longest = max(self.longest, now - self.last_tick - self.interval)
        self.last_tick = now


def wait(loop: Any, condition: Any, timeout: float) -> None:
    import asyncio

    async def until() -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError("benchmark condition not met in time")
            await asyncio.sleep(0.01)

    loop.run_until_complete(until())
