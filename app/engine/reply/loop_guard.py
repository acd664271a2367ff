"""LoopDetector: notices a reply that repeats itself, on the token stream of any backend.

Two signs of a loop, checked every ``check_every_tokens`` once the reply has ``start_after_tokens``:

* exact periodic repeats at the tail: a passage of 4..``max_period_tokens`` tokens at least
  ``min_copies`` times in a row covering ``min_loop_tokens``; a 1-3 token passage needs
  ``short_period_copies`` copies (so ``----`` rules and ``0, 0, 0`` arrays stay legal);
* near-duplicate sentences whose wording drifts (numbers change, a word is swapped): word trigrams,
  with numbers masked, whose Jaccard reaches ``similarity`` for ``similar_segments`` of the last
  ``segment_window`` sentences of ``segment_min_chars`` or more.

Lists repeat legitimately. Items (lines that open with ``-``, ``3.`` or ``Step 3:``) that share one
template need ``list_item_copies``; numbered lines that count on (item 7 the same as item 6) are a
listing, not a loop (a file written line by line, steps of a method), and are not counted at all: a
loop repeats itself, a list counts on. A loop that counts is left to the token budgets.

Token ids are what the detector compares; a backend without ids (a remote server) passes one key
per chunk. It also maps tokens to characters of the phase's text, so a loop can be cut out.
"""

from __future__ import annotations

import bisect
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.core.settings.settings import LoopGuardConfig

_BOUNDARY = re.compile(r"\n|\\n|(?<=[.!?:;])\s")  # a JSON string's escaped newline ends a line too
_WORD = re.compile(r"[^\W\d_]+|\d+(?:[.,]\d+)*")
MIN_WORDS = 5  # a sentence of fewer letter words (a row of figures, a rule) is not compared
# A line that opens a list item: a bullet, "3.", "(b)", "Step 4:", "line 012:"; ``n`` is its number.
_LIST_ITEM = re.compile(r"\s*(?:[-*+•]|\(?(?P<n>\d{1,4})[.):]|\(?[a-zA-Z][.)]|"
                        r"[A-Za-z]{2,12} (?P<m>\d{1,4})\s*[:.)-])\s")
_CODE_SYMBOLS = frozenset("()[]{}=_<>*/+|&%#@$;")
CODE_SYMBOL_SHARE = 0.08  # more symbols than this: code or markup, left to the exact check


@dataclass(frozen=True)
class Loop:
    """Where a loop is: token indices count from the phase's first token, characters from its text's start."""

    kind: Literal["exact", "drift"]
    period: int  # tokens per copy
    copies: int
    start_token: int
    start_char: int
    first_copy_end_token: int
    first_copy_end_char: int


@dataclass
class _Segment:
    start_char: int
    end_char: int
    start_token: int
    grams: frozenset[tuple[str, str, str]]
    list_item: bool
    number: int | None  # the list item's number
    checked: bool = False


def trigrams(text: str) -> frozenset[tuple[str, str, str]] | None:
    """Word trigrams with numbers masked, or None when the text has too few words to judge."""
    words = [w if w[0].isalpha() else "#" for w in _WORD.findall(text.lower())]
    if sum(1 for w in words if w != "#") < MIN_WORDS:
        return None
    return frozenset(zip(words, words[1:], words[2:], strict=False))


def jaccard(a: frozenset[tuple[str, str, str]], b: frozenset[tuple[str, str, str]]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


class LoopDetector:
    """One phase's stream (thinking or answer). ``feed`` each delta; it returns a Loop once."""

    def __init__(self, config: LoopGuardConfig, *, off: bool = False) -> None:
        self.config = config
        self.off = off
        self.ids: list[int] = []
        self.char_end: list[int] = []  # the phase text's length after each token
        self._pending = ""  # text since the last sentence boundary
        self._pending_start = (0, 0)  # (char, token) where the pending text began
        self.chars = 0  # length of the phase text so far
        self._segments: deque[_Segment] = deque(maxlen=max(config.segment_window, config.list_item_copies))
        self._line_start = True  # the pending text opens a line
        self._list_item: tuple[bool, int | None] = (False, None)  # the current line opens a list item; its number
        self._next_check = 0
        self._checked_to: int | None = None  # the exact check has tried every end up to here; None: not watching

    @property
    def tokens(self) -> int:
        return len(self.ids)

    def feed(self, ids: Sequence[int], text: str, *, watch: bool = True) -> Loop | None:
        """Take one delta (its token ids and the text it added to the phase). ``watch`` False only records."""
        if self.off:
            return None
        first_token = len(self.ids)
        self._add_text(text, first_token)
        self.ids.extend(ids)
        self.char_end.extend([self.chars] * len(ids))
        if not watch:
            return None
        if self._checked_to is None:
            self._checked_to = first_token  # watching starts with this delta's tokens
        if len(self.ids) < self._next_check:
            return None
        # An exact repeat shows only while the text ends inside it: every end since the last check is tried,
        # so where the checks fall (deltas of several tokens: speculative decoding) can't hide a loop. Checks
        # keep to a grid of check_every_tokens, so a burst delays one by less than its length, never more.
        every = self.config.check_every_tokens
        ends = range(self._checked_to + 1, len(self.ids) + 1)
        self._next_check = (len(self.ids) // every + 1) * every
        self._checked_to = len(self.ids)
        return next((loop for end in ends if (loop := self._exact(end)) is not None), None) or self._drift()

    def rewind(self, tokens: int, chars: int) -> None:
        """Forget everything after ``tokens`` / ``chars`` (a loop was cut out there)."""
        del self.ids[tokens:], self.char_end[tokens:]
        self.chars = chars
        self._pending, self._pending_start = "", (chars, tokens)
        while self._segments and self._segments[-1].end_char > chars:
            self._segments.pop()
        self._next_check = tokens + self.config.check_every_tokens
        self._checked_to = None if self._checked_to is None else min(self._checked_to, tokens)

    def char_at(self, token: int) -> int:
        """Where token ``token`` begins in the phase text."""
        return self.char_end[token - 1] if 0 < token <= len(self.char_end) else 0

    def token_at(self, char: int) -> int:
        """The first token that ends past ``char``."""
        return bisect.bisect_right(self.char_end, char)

    # ---- exact repeats ---------------------------------------------------------------------

    def _exact(self, n: int) -> Loop | None:
        """An exact repeat that the stream's first ``n`` tokens end in."""
        ids, c = self.ids, self.config
        top = min(c.max_period_tokens, n // 2)
        last, before = ids[n - 1], ids[n - 2]
        # Cheap reject first, in one pass: a period must repeat the last two tokens.
        candidates = [p for p in range(1, top + 1) if ids[n - 1 - p] == last and ids[n - 2 - p] == before] \
            if n > 2 else []
        for period in candidates:
            need = period * c.short_period_copies if period < 4 else max(c.min_loop_tokens, period * c.min_copies)
            if need > n:
                continue
            i = n - 1
            while i - period >= 0 and ids[i] == ids[i - period]:
                i -= 1
            span = n - 1 - i + period  # tokens from the first copy's start to the tail
            if span < need:
                continue
            start = n - span
            copies = span // period
            end = start + period
            return Loop("exact", period, copies, start, self.char_at(start), end, self.char_at(end))
        return None

    # ---- near duplicates -------------------------------------------------------------------

    def _add_text(self, text: str, token: int) -> None:
        if not self._pending.strip():  # a sentence starts with this delta, not the blank before it
            self._pending, self._pending_start = "", (self.chars, token)
        self._pending += text
        self.chars += len(text)
        while (match := _BOUNDARY.search(self._pending)) is not None:
            segment, self._pending = self._pending[:match.end()], self._pending[match.end():]
            start_char, start_token = self._pending_start
            if self._line_start:
                item = _LIST_ITEM.match(segment)
                number = item and (item.group("n") or item.group("m"))
                self._list_item = (item is not None, int(number) if number else None)
            self._close_segment(segment, start_char, start_token)
            self._line_start = segment.endswith(("\n", "\\n"))
            self._pending_start = (start_char + len(segment), token)

    def _close_segment(self, text: str, start_char: int, start_token: int) -> None:
        body = text.strip()
        if len(body) < self.config.segment_min_chars:
            return  # too short to judge (a list marker of its own, "Step 3:", goes with the next sentence)
        list_item, self._list_item = self._list_item, (False, None)  # the item is its line's first sentence
        if sum(ch in _CODE_SYMBOLS for ch in body) > CODE_SYMBOL_SHARE * len(body):
            return  # a line of code: parallel lines (add/sub/mul) look alike legitimately
        grams = trigrams(text)
        if grams:
            self._segments.append(_Segment(start_char, start_char + len(text), start_token, grams, *list_item))

    def _drift(self) -> Loop | None:
        segments = list(self._segments)
        for index, newest in enumerate(segments):
            if newest.checked:
                continue
            newest.checked = True
            need, window = ((self.config.list_item_copies, self.config.list_item_copies) if newest.list_item
                            else (self.config.similar_segments, self.config.segment_window))
            similar = [s for s in segments[max(0, index + 1 - window):index]
                       if jaccard(s.grams, newest.grams) >= self.config.similarity]
            if newest.number is not None and any(s.number == newest.number - 1 for s in similar):
                continue  # a numbered list counting on
            if len(similar) + 1 < need:
                continue
            first, second = similar[0], (similar[1] if len(similar) > 1 else newest)
            copies = len(similar) + 1
            period = max(1, (newest.start_token - first.start_token) // (copies - 1))
            end_token = second.start_token
            return Loop("drift", period, copies, first.start_token, first.start_char, end_token, second.start_char)
        return None
