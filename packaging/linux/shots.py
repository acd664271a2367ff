"""What the README's screenshot scripts share: the Qt loop run until their last shot is taken."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QTimer

from app.ui.app_main import cancel_pending_tasks


def run_until_done(loop: Any, done: list[int], first: Callable[[], None]) -> int:
    """``first`` once the window has had time to draw (200 ms), then the loop until a step appends to ``done``."""
    QTimer.singleShot(200, first)
    with loop:
        loop.run_until_complete(_until(done))
        loop.run_until_complete(cancel_pending_tasks())
    return 0


async def _until(done: list[int]) -> None:
    while not done:
        await asyncio.sleep(0.05)
