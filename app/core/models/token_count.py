"""Counting tokens in the window, before anything is sent: with the model's own tokenizer where its folder
has one (tokenizer.json, read by the Rust ``tokenizers`` library in milliseconds), else an estimate that
says it is one.

What a question may add is checked against the context the engine runs with: the conversation so far,
the reply's room (thinking and answer), and the files. A file that does not fit is refused before
anything is sent, with by how much and the fixes.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHARS_PER_TOKEN_ESTIMATE = 3.5  # English text and code with BPE vocabularies of 32k–200k entries
# What the window may count on its own thread, once the tokenizer is read: the texts not yet counted, at most this
# many and this long in all (about 5 ms on a 2-core machine). More (a long file, a reopened 16,000-turn chat, a 1 MB
# answer: 0.2-1 s) is counted on a worker, and reading tokenizer.json (0.1-0.3 s) is always a worker's.
SYNC_TEXTS = 200
SYNC_CHARS = 20_000


@dataclass(frozen=True)
class TokenCounter:
    tokenizer_file: Path | None  # None: an estimate from the length

    @property
    def exact(self) -> bool:
        return self.tokenizer_file is not None

    def count(self, text: str) -> int:
        """Blocking: reads the tokenizer and encodes ``text`` if need be (a worker's call, or a short text's)."""
        if self.tokenizer_file is None:
            return int(len(text) / CHARS_PER_TOKEN_ESTIMATE) + 1
        known = _COUNTS.get(self.tokenizer_file, text)
        return known if known is not None else self.count_all([text])[0]

    def known(self, text: str) -> int | None:
        """The count if it costs nothing now (an estimate, or a text counted before); else None."""
        if self.tokenizer_file is None:
            return self.count(text)
        return _COUNTS.get(self.tokenizer_file, text)

    def cheap(self, texts: Sequence[str]) -> bool:
        """Whether counting all of ``texts`` now is cheap enough for the GUI thread: an estimate, or the tokenizer
        read and at most SYNC_TEXTS texts of SYNC_CHARS characters in all not counted yet."""
        return self._new_if_cheap(texts) is not None

    def count_if_cheap(self, texts: Sequence[str]) -> bool:
        """Counts ``texts`` now if that is cheap (``cheap``), in one pass over them; whether it was."""
        new = self._new_if_cheap(texts)
        if new:
            self.count_all(new)
        return new is not None

    def _new_if_cheap(self, texts: Sequence[str]) -> list[str] | None:
        if self.tokenizer_file is None:
            return []
        if not _loaded(self.tokenizer_file):
            return None
        new: list[str] = []
        chars, get, path = 0, _COUNTS.get, self.tokenizer_file
        for text in texts:
            if get(path, text) is None:
                new.append(text)
                chars += len(text)
                if len(new) > SYNC_TEXTS or chars > SYNC_CHARS:
                    return None
        return new

    def count_all(self, texts: Sequence[str]) -> list[int]:
        """Blocking: each text's count, those not counted before encoded in one batch (the tokenizer lets go of
        the GIL while it encodes, so a worker's long count doesn't hold the window)."""
        if self.tokenizer_file is None:
            return [self.count(text) for text in texts]
        path = self.tokenizer_file
        counts = {text: _COUNTS.get(path, text) for text in texts}
        new = [text for text, count in counts.items() if count is None]
        if new:
            encodings = _tokenizer(path).encode_batch(new, add_special_tokens=False)
            for text, encoding in zip(new, encodings, strict=True):
                counts[text] = len(encoding)
                _COUNTS.put(path, text, len(encoding))
        return [counts[text] or 0 for text in texts]


class _Counts:
    """The texts counted, remembered: each send and each thread render count every earlier turn again (the
    keep-thinking switches, the context fit, the gauge), which re-encoded the whole conversation each time (3 → 80
    ms a send at 60 turns). Bounded by texts and by their characters, the first counted dropped first. A look-up
    takes no lock (a dict's get is atomic in CPython): a 16,000-turn chat's 32,000 texts are looked up in a few ms."""

    MAX_TEXTS = 100_000
    MAX_CHARS = 32 << 20

    def __init__(self) -> None:
        self._counts: dict[Path, dict[str, int]] = {}
        self._order: deque[tuple[Path, str]] = deque()
        self._chars = 0
        self._lock = threading.Lock()  # writers: the GUI thread and the workers

    def get(self, path: Path, text: str) -> int | None:
        counts = self._counts.get(path)
        return None if counts is None else counts.get(text)

    def put(self, path: Path, text: str, count: int) -> None:
        with self._lock:
            counts = self._counts.setdefault(path, {})
            if text not in counts:
                self._order.append((path, text))
                self._chars += len(text)
            counts[text] = count
            while len(self._order) > self.MAX_TEXTS or self._chars > self.MAX_CHARS and len(self._order) > 1:
                old_path, dropped = self._order.popleft()
                self._counts[old_path].pop(dropped, None)
                self._chars -= len(dropped)

    def clear(self) -> None:
        with self._lock:
            self._counts, self._order, self._chars = {}, deque(), 0


_COUNTS = _Counts()
_TOKENIZERS: dict[Path, Any] = {}  # tokenizers.Tokenizer (it ships no stubs), by file
_TOKENIZERS_LOCK = threading.Lock()


def _loaded(path: Path) -> bool:
    return path in _TOKENIZERS


def _tokenizer(path: Path) -> Any:
    """The file's tokenizer, read once (0.1-0.3 s: never on the GUI thread, see ``TokenCounter.cheap``)."""
    with _TOKENIZERS_LOCK:
        if path not in _TOKENIZERS:
            from tokenizers import Tokenizer

            _TOKENIZERS[path] = Tokenizer.from_file(str(path))
        return _TOKENIZERS[path]


def forget_counts() -> None:
    """Every remembered count and tokenizer dropped (for tests that watch the reading and the encoding)."""
    _COUNTS.clear()
    with _TOKENIZERS_LOCK:
        _TOKENIZERS.clear()


def counter_for(model_folder: Path | None) -> TokenCounter:
    """The model's own tokenizer if its folder has tokenizer.json (a remote model, or a hub id not yet
    downloaded, gets the estimate)."""
    if model_folder is not None and (model_folder / "tokenizer.json").is_file():
        return TokenCounter(model_folder / "tokenizer.json")
    return TokenCounter(None)


@dataclass(frozen=True)
class ContextFit:
    context_tokens: int  # the engine's max_model_len
    used_tokens: int  # the conversation so far, the question and the files
    reply_tokens: int  # room kept for the reply (think budget + answer)

    @property
    def over_by(self) -> int:
        return max(0, self.used_tokens + self.reply_tokens - self.context_tokens)

    @property
    def fits(self) -> bool:
        return self.over_by == 0

    def refusal(self, files_tokens: int) -> str:
        """Why the question can't go, with the numbers and the fixes."""
        return (f"The files need {files_tokens:,} tokens; with the conversation and room for the reply "
                f"({self.reply_tokens:,}), that is {self.used_tokens + self.reply_tokens:,} of the "
                f"{self.context_tokens:,}-token context: {self.over_by:,} too many. Attach fewer or shorter files, "
                "start a new chat, lower Max answer tokens or the think budget, or raise the context length in "
                "Settings (the planner shows what fits), or use a model with a longer context.")
