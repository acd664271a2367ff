"""SIGTERM and SIGINT close the window the way the user's close does.

The real-engine shutdown cases (tests/real/test_shutdown_real.py) close the real app through the window manager at
every point of the engine's start, and send SIGTERM at the first and last of them: between those, a signal
reaches the same close. This is that decision, checked in seconds with the scripted engine.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from app.ui.app_main import _close_on_signals


@pytest.fixture
def restored_signal_handlers() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_closes_the_window_through_its_own_close(qtbot, make_window, restored_signal_handlers: None,
                                                           sig: signal.Signals) -> None:
    """Bugs caught: SIGTERM (a desktop's logout, `kill`) or Ctrl+C ends the process without the window's close,
    so the engine's processes are never ended; or the handler waits for Qt's loop to wake by itself (a
    Python signal handler runs only between bytecodes) and the app ignores the signal while idle."""
    window = make_window()
    qtbot.waitUntil(window.controls.send_button.isEnabled, timeout=30_000)
    closed: list[bool] = []
    original_close_event = window.closeEvent

    def close_event(event: object) -> None:
        closed.append(True)
        original_close_event(event)

    window.closeEvent = close_event  # type: ignore[method-assign]
    _close_on_signals(window)
    os.kill(os.getpid(), sig)
    qtbot.waitUntil(lambda: bool(closed) and not window.isVisible(), timeout=10_000)
    qtbot.waitUntil(lambda: not window.controller.bridge.engine.loop_thread.alive, timeout=10_000)
