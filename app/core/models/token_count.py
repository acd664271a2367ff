"""Counting tokens in the window, before anything is sent: with the model's own tokenizer where its folder
has one (tokenizer.json, read by the Rust ``tokenizers`` library in milliseconds), else an estimate that
says it is one.

What a question may add is checked against the context the engine runs with: the conversation so far,
the reply's room (thinking and answer), and the files. A file that does not fit is refused before
anything is sent, with by how much and the fixes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CHARS_PER_TOKEN_ESTIMATE = 3.5  # English text and code with BPE vocabularies of 32k–200k entries


@dataclass(frozen=True)
class TokenCounter:
    tokenizer_file: Path | None  # None: an estimate from the length

    @property
    def exact(self) -> bool:
        return self.tokenizer_file is not None

    def count(self, text: str) -> int:
        if self.tokenizer_file is None:
            return int(len(text) / CHARS_PER_TOKEN_ESTIMATE) + 1
        return _exact_count(self.tokenizer_file, text)


@lru_cache(maxsize=256)
def _exact_count(path: Path, text: str) -> int:
    """Remembered per text: each send and each thread render count every earlier turn again (the keep-thinking
    switches, the context fit), which re-encoded the whole conversation each time (3 → 80 ms a send at 60
    turns). 256 texts: a conversation's recent turns, and a bounded memory for long answers."""
    return len(_tokenizer(path).encode(text, add_special_tokens=False).ids)


@lru_cache(maxsize=4)
def _tokenizer(path: Path):  # type: ignore[no-untyped-def]  # tokenizers ships no stubs
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


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
