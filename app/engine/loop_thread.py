"""The engine's own asyncio loop on a dedicated thread, and the one helper to reach it.

vLLM's AsyncLLM cannot run on qasync's loop (it calls ``run_in_executor`` with
keyword arguments, which qasync rejects), and ``from_engine_args`` blocks for tens
of seconds. So the engine gets a plain ``SelectorEventLoop`` on its own thread.
We construct that loop class directly: on Python 3.11 ``qasync.run`` swaps the
global policy, and ``asyncio.new_event_loop()`` would hand back a Qt loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class EngineLoopThread:
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
        """Schedule ``coro`` on the engine loop from any thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call_soon(self, callback: Any, *args: Any) -> None:
        self.loop.call_soon_threadsafe(callback, *args)

    def stop(self, timeout: float = 10.0) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout)


async def on_engine(loop_thread: EngineLoopThread, coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` on the engine loop from another loop (the UI's qasync loop).

    This is the only crossing from UI-side async code into the engine. Cancelling
    the awaiting task cancels the engine-side task too.
    """
    return await asyncio.wrap_future(loop_thread.submit(coro))
