"""What a hostile case is made of: a window to act on (``Stage``), and what the user does and waits to see
(``Probe``). The cases themselves are in cases.py, the measuring in measure.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from app.commands.window_bench.harness import bench_window, close_bench_window, scratch_history
from app.core.chat.conversation import Conversation
from app.core.settings.keystore import KeyStore
from app.core.settings.settings import Settings
from app.engine.scripted import Script, ScriptedEngineDouble

Answer = Literal["result", "message"]


@dataclass
class Probe:
    """One hostile input, ready to give: ``trigger`` is the user's act (timed from its start, on the GUI thread);
    ``answered`` says "result" or "message" once the window shows one, else None; ``waiting_for`` is what it
    waits for, and ``shown`` what the window shows meanwhile, both said when the deadline passes."""

    trigger: Callable[[], object]
    answered: Callable[[], Answer | None]
    waiting_for: str
    shown: Callable[[], str] = lambda: ""
    cleanup: Callable[[], object] = lambda: None


Act = Callable[["Stage"], Probe]


@dataclass(frozen=True)
class Case:
    """A hostile input by name: ``act`` sets the window up (not timed) and returns its probe; past ``deadline_s``
    the case has failed."""

    name: str
    deadline_s: float
    act: Act


class MemoryKeys(KeyStore):
    """Keys in memory only: the bench's API server token never reaches the user's keyring."""

    @property
    def persistent(self) -> bool:
        return False


@dataclass
class Stage:
    """A case's folder and window: the scripted engine, started as the user has it, a scratch history holding
    what the case puts there, keys in memory. ``close`` ends the window as the user and the app's exit do."""

    folder: Path
    keys: MemoryKeys = field(default_factory=MemoryKeys)
    window: Any = None
    loop: Any = None

    def open(self, *, scripts: Sequence[Script] = (), settings: Settings | None = None,
             conversations: Sequence[Conversation] = ()) -> Any:
        history = scratch_history()
        if conversations:
            history.add_conversations(list(conversations))
        engine = ScriptedEngineDouble(scripts)
        self.window, self.loop = bench_window(engine, settings or Settings(), history=history, keys=self.keys)
        self.window.menus.trigger("restart_engine")
        self.wait(self.window.controls.send_button.isEnabled, 30, "the scripted engine ready")
        return self.window

    def wait(self, condition: Callable[[], object], timeout: float, what: str) -> None:
        """Set-up only (not timed): the loop runs until ``condition`` holds."""
        async def until() -> None:
            deadline = time.monotonic() + timeout
            while not condition():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"set-up: {what} not reached in {timeout:.0f} s")
                await asyncio.sleep(0.01)

        self.loop.run_until_complete(until())

    def close(self) -> None:
        if self.window is not None:
            close_bench_window(self.window)
            self.loop.run_until_complete(asyncio.sleep(0.1))  # the deferred deletes and the engine's last events
            self.window = None
