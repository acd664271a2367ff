"""A plain asyncio loop on a named thread, and the one helper to reach it from another loop.

The window side of the engine (EngineProcess's pipe reader and replies) and the MCP client each get one: their
async code must not run on qasync's loop, where a slow call would stall the window. The loop class is built
directly: on Python 3.11 ``qasync.run`` swaps the global policy, and ``asyncio.new_event_loop()`` would hand
back a Qt loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """A named thread running a plain asyncio loop until ``stop``."""

    def __init__(self, name: str = "nalar-engine") -> None:
        self.loop = asyncio.SelectorEventLoop()
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            # Cancelled, not dropped: a task still pending (an abandoned start's call) ends through its
            # `finally`s instead of being destroyed pending at exit.
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.wait(pending, timeout=2))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on this loop from any thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call_soon(self, callback: Any, *args: Any) -> None:
        self.loop.call_soon_threadsafe(callback, *args)

    def stop(self, timeout: float = 10.0) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout)


async def on_engine(loop_thread: LoopThread, coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` on ``loop_thread``'s loop from another loop (the UI's qasync loop).

    The one crossing from the window's async code into a loop thread. Cancelling the awaiting task cancels
    the task on the loop thread too.
    """
    return await asyncio.wrap_future(loop_thread.submit(coro))
