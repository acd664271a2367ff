"""Discover's search, off the GUI thread: typing is debounced, each query runs through the one runner, its results
and then each result's verdicts (on a few threads of its own) stream in, and the GUI thread takes them in at most
every ``DRAIN_MS``.

Workers only append typed arrivals to a deque; a timer on the GUI thread hands them to ``SearchState``, which
refuses any of a query the user has typed past. No widget is touched off the GUI thread.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.hub.search import HubGated, HubModel, HubOffline, search_models
from app.core.hub.verdicts import FitVerdict, MachineBudget, VerdictCache, this_machine, verdicts_for
from app.ui.controllers.operations import Operation, run_blocking
from app.ui.model_browser.search_state import Query, SearchState

log = logging.getLogger(__name__)
DEBOUNCE_MS = 250  # a pause in typing this long starts the search
DRAIN_MS = 30  # arrivals reach the list at most this often: one list update per tick, however fast they come
RESULT_LIMIT = 50
VERDICT_WORKERS = 6  # each verdict reads config.json and the file sizes: network-bound, so a few at once


@dataclass(frozen=True)
class _Result:
    generation: int
    model: HubModel


@dataclass(frozen=True)
class _Verdicts:
    generation: int
    repo_id: str
    verdicts: tuple[FitVerdict, ...] | None
    error: str = ""


@dataclass(frozen=True)
class _Listed:
    """The hub's listing ended (``problem``: why it failed); verdicts may still be coming."""

    generation: int
    problem: str | None


@dataclass(frozen=True)
class _Ended:
    generation: int


Arrival = _Result | _Verdicts | _Listed | _Ended


class HubSearch(QObject):
    """Feeds ``state`` from the hub; ``changed`` after each batch of arrivals (on the GUI thread)."""

    changed = Signal()

    def __init__(self, state: SearchState, budget: MachineBudget | None = None, cache: VerdictCache | None = None,
                 parent: QObject | None = None, *, endpoint: str | None = None,
                 debounce_ms: int = DEBOUNCE_MS) -> None:
        super().__init__(parent)
        self.state, self.budget, self.cache, self.endpoint = state, budget, cache, endpoint
        self.operations: list[Operation[None]] = []  # the searches still running (a dropped one runs to its end)
        self._inbox: collections.deque[Arrival] = collections.deque()
        self._pending = Query("")
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(debounce_ms)
        self._debounce.timeout.connect(self.start_now)
        self._drain = QTimer(self)
        self._drain.setInterval(DRAIN_MS)
        self._drain.timeout.connect(self.take_arrivals)

    # ---- the GUI thread ------------------------------------------------------------------------------------

    def request(self, query: Query) -> None:
        """The user typed or changed a filter: whatever still arrives for the query before is dropped from now
        on, and this one starts after a short pause in typing."""
        self.state.drop()
        self._pending = query
        self._debounce.start()

    def start_now(self) -> None:
        """The pending query, without waiting for the debounce (Return in the search box)."""
        self._debounce.stop()
        generation = self.state.begin(self._pending)
        self.changed.emit()
        if not self._pending.text.strip():
            return
        query = self._pending
        operation = run_blocking(f"Searching the hub for {query.text!r}", lambda: self._search(generation, query),
                                 parent=self)
        operation.failure(lambda exc: self._inbox.append(_Listed(generation, f"The search failed: {exc}")))
        self.operations = [op for op in self.operations if op.running] + [operation]
        self._drain.start()

    def take_arrivals(self) -> None:
        """Everything that arrived since the last tick, into the state; one ``changed`` for all of it."""
        applied = False
        while self._inbox:
            arrival = self._inbox.popleft()
            state = self.state
            if isinstance(arrival, _Result):
                applied |= state.add_result(arrival.generation, arrival.model) is not None
            elif isinstance(arrival, _Verdicts):
                applied |= state.set_verdicts(arrival.generation, arrival.repo_id, arrival.verdicts,
                                              arrival.error) is not None
            elif isinstance(arrival, _Listed):
                applied |= state.finish(arrival.generation, arrival.problem)
        if applied:
            self.changed.emit()
        if not any(op.running for op in self.operations) and not self._inbox:
            self._drain.stop()

    @property
    def busy(self) -> bool:
        return any(op.running for op in self.operations) or bool(self._inbox) or self._debounce.isActive()

    def close(self) -> None:
        """Drops the running query (the dialog closing): its threads stop at their next step, without holding
        the GUI thread for a request still in flight."""
        self._debounce.stop()
        self._drain.stop()
        self.state.drop()
        for operation in self.operations:
            operation.cancel()

    def wait(self, timeout: float = 10.0) -> bool:
        """Until the search's threads have ended (the window closing: none is left behind)."""
        return all(operation.wait(timeout) for operation in self.operations)

    # ---- worker threads ------------------------------------------------------------------------------------

    def _machine(self) -> MachineBudget:
        if self.budget is None:
            self.budget = this_machine()  # measured once (bandwidth on a CPU machine), off the GUI thread
        return self.budget

    def _search(self, generation: int, query: Query) -> None:
        problem: str | None = None
        pool = concurrent.futures.ThreadPoolExecutor(VERDICT_WORKERS, thread_name_prefix="nalar-verdict")
        try:
            budget = self._machine()
            for model in search_models(query.text, sort=query.sort, limit=RESULT_LIMIT,
                                       only_reasoning=query.only_reasoning, endpoint=self.endpoint):
                if not self.state.is_current(generation):
                    break  # typed past: the rest of the listing is never fetched
                self._inbox.append(_Result(generation, model))
                pool.submit(self._verdicts, generation, model, budget)
        except (HubOffline, HubGated) as exc:
            problem = str(exc)
        except Exception as exc:  # a bug or a hub answer we don't know: said, and logged
            log.warning("hub search for %r failed", query.text, exc_info=True)
            problem = f"The search failed ({type(exc).__name__}: {exc}). The log folder has the details."
        finally:
            self._inbox.append(_Listed(generation, problem))
            pool.shutdown(wait=True)  # a verdict of a dropped query returns at once (is_current)
            self._inbox.append(_Ended(generation))

    def _verdicts(self, generation: int, model: HubModel, budget: MachineBudget) -> None:
        if not self.state.is_current(generation):
            return
        repo_id = model.repo_id
        try:  # the listing's commit: a repo seen at that commit is answered from the cache, with no request
            found = tuple(verdicts_for(repo_id, budget, cache=self.cache, endpoint=self.endpoint,
                                       commit=model.commit or None))
        except (HubOffline, HubGated) as exc:
            self._inbox.append(_Verdicts(generation, repo_id, None, str(exc)))
        except Exception as exc:
            log.warning("no verdict for %s", repo_id, exc_info=True)
            self._inbox.append(_Verdicts(generation, repo_id, None, f"{type(exc).__name__}: {exc}"))
        else:
            self._inbox.append(_Verdicts(generation, repo_id, found))
