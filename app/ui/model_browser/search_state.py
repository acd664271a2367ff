"""The Discover tab's state, with no Qt: the query running now (its generation), the results that arrived for it and
their verdicts, the filters. Tests drive it without a window; the Qt side (hub_search) feeds it on the GUI thread.

A search's results and verdicts carry the generation they were asked for: once the user has typed again, an
older generation's arrivals are refused here, so a stale query's results are never shown. ``is_current`` is the
one method worker threads call (to stop early); everything else runs on the GUI thread.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from app.core.hub.search import HubModel
from app.core.hub.verdicts import FitVerdict

Sort = Literal["downloads", "trending"]

# The Format filter's choices: what the combo shows → the file set labels' first word it keeps (none: all).
FORMATS: dict[str, tuple[str, ...]] = {
    "Any format": (), "bf16/fp16": ("bf16", "fp16"), "FP8": ("FP8",), "AWQ": ("AWQ",), "GPTQ": ("GPTQ",),
    "compressed-tensors": ("compressed-tensors",), "MXFP4": ("MXFP4",), "GGUF": ("GGUF",),
}


@dataclass(frozen=True)
class ResultRow:
    """One hub result and, once worked out off the GUI thread, its verdict per file set."""

    model: HubModel
    verdicts: tuple[FitVerdict, ...] | None = None  # None: still being worked out
    verdict_error: str = ""  # why there is no verdict (the hub refused the repo's files, a gated repo)

    @property
    def fits(self) -> bool | None:
        """Whether some file set loads here (at full or a shorter context); None while unknown."""
        if self.verdicts is None:
            return None if not self.verdict_error else False
        return any(v.fits != "no" and v.file_set.loadable for v in self.verdicts)


def kept(row: ResultRow, only_fits: bool, fmt: str = "Any format") -> bool:
    """Whether the filters keep ``row``: with a format, one of its file sets is that format (the listing's
    quantizations until the verdicts come); with *Only what fits* as well, that same file set is the one that fits."""
    names = {name.lower() for name in FORMATS.get(fmt, ())}
    if not names:
        return not only_fits or bool(row.fits)
    if row.verdicts is None:
        return not only_fits and any(q.split(" ", 1)[0].lower() in names for q in row.model.quantizations)
    return any(v.file_set.label.split(" ", 1)[0].lower() in names
               and (not only_fits or (v.fits != "no" and v.file_set.loadable)) for v in row.verdicts)


@dataclass(frozen=True)
class Query:
    text: str
    sort: Sort = "downloads"
    only_reasoning: bool = False


class SearchState:
    """What Discover shows: the rows of the current query, the filters, and a status line."""

    def __init__(self) -> None:
        self.generation = 0
        self.query = Query("")
        self.only_fits = False
        self.format = "Any format"  # a key of FORMATS
        self.rows: list[ResultRow] = []
        self.searching = False
        self.problem: str | None = None  # the hub offline, a gated repo: said in the status line
        self._index: dict[str, int] = {}

    # ---- worker threads ------------------------------------------------------------------------------------

    def is_current(self, generation: int) -> bool:
        """Safe from any thread (one int read): a worker stops fetching for a query the user has typed past."""
        return generation == self.generation

    # ---- the GUI thread ------------------------------------------------------------------------------------

    def begin(self, query: Query) -> int:
        """A new query: earlier results go, and every arrival for an older generation is refused from now on."""
        self.generation += 1
        self.query = query
        self.rows = []
        self._index = {}
        self.problem = None
        self.searching = bool(query.text.strip())
        return self.generation

    def drop(self) -> None:
        """The user typed again: what still arrives for the running query is refused; its rows stay until the
        next ``begin`` (no flicker while typing)."""
        self.generation += 1
        self.searching = False

    def add_result(self, generation: int, model: HubModel) -> int | None:
        """The row's index, or None when the result belongs to a dropped query (or came twice)."""
        if generation != self.generation or model.repo_id in self._index:
            return None
        self._index[model.repo_id] = len(self.rows)
        self.rows.append(ResultRow(model))
        return len(self.rows) - 1

    def set_verdicts(self, generation: int, repo_id: str, verdicts: tuple[FitVerdict, ...] | None,
                     error: str = "") -> int | None:
        """The row's index, or None when stale or unknown."""
        index = self._index.get(repo_id)
        if generation != self.generation or index is None:
            return None
        self.rows[index] = replace(self.rows[index], verdicts=verdicts, verdict_error=error)
        return index

    def finish(self, generation: int, problem: str | None = None) -> bool:
        """The search ended (``problem``: why it failed, for the status line); False when stale."""
        if generation != self.generation:
            return False
        self.searching = False
        self.problem = problem
        return True

    def visible(self) -> list[ResultRow]:
        """The rows shown: with *Only what fits*, those known to fit (a row whose verdict is still coming waits);
        with a Format, those that have it (see ``kept``)."""
        return [row for row in self.rows if kept(row, self.only_fits, self.format)]

    @property
    def verdicts_pending(self) -> int:
        return sum(1 for row in self.rows if row.verdicts is None and not row.verdict_error)

    @property
    def offline_list(self) -> bool:
        """The catalog (the offline list) is shown instead of results: an empty box, or the hub unreachable."""
        return not self.query.text.strip() or (self.problem is not None and not self.rows)

    def status(self) -> str:
        """One plain line under the search box."""
        text = self.query.text.strip()
        if not text:
            return "Type to search the Hugging Face hub. Below: Nalar's catalog, planned for this machine."
        if self.problem is not None and not self.rows:
            return self.problem
        shown = len(self.visible())
        count = f"{len(self.rows)} result{'s' if len(self.rows) != 1 else ''} for “{text}”"
        why = (f"not {self.format}" + (" that fits" if self.only_fits else "")) if FORMATS.get(self.format) \
            else "they don't fit"
        hidden = f" ({len(self.rows) - shown} hidden: {why})" if shown < len(self.rows) else ""
        pending = self.verdicts_pending
        work = ("searching…" if self.searching else
                f"working out {pending} verdict{'s' if pending != 1 else ''}…" if pending else "all verdicts in")
        problem = f" {self.problem}" if self.problem else ""
        return f"{count}{hidden} · {work}{problem}"
