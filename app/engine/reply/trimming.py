"""Fitting a conversation into the context window: the oldest turns go first.

The obvious way (``fit_by_dropping_one_at_a_time``) re-renders and re-tokenises the whole history
once per dropped turn: quadratic, and it ran on the engine loop (27 s for 200 messages of 4.5 KB).
``fit_history`` finds the same cut while tokenising each message at most once, newest first, and
only as far back as the window can reach; the chat template then renders just around the cut to
make it exact. It relies on one property of chat templates: a conversation with fewer turns never
renders to more tokens. The tests hold it to the obvious way on the real tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from app.core.chat.conversation import Message
from app.engine.errors import EngineFailure, FailureKind
from app.engine.reply.reasoning import THINK_OPEN


class ChatTokenizer(Protocol):
    """What trimming needs of a tokenizer: Hugging Face's (and vLLM's wrapper of it) have both."""

    def apply_chat_template(self, conversation: list[Any], *, add_generation_prompt: bool,
                            tokenize: bool) -> Any: ...

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]: ...

    def __call__(self, text: list[str], *, add_special_tokens: bool) -> Any: ...


def prompt_ids(tokenizer: ChatTokenizer, messages: Sequence[Message], opened_think: bool,
               template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """The chat template's prompt as token ids, with ``<think>`` opened when the reply starts inside it.
    ``template_kwargs`` reach the template (a hybrid model's thinking switch)."""
    try:
        prompt = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False,
                                               **(template_kwargs or {}))
        if opened_think and not prompt.rstrip().endswith(THINK_OPEN):
            prompt += THINK_OPEN + "\n"
        return list(tokenizer.encode(prompt, add_special_tokens=False))
    except Exception as exc:  # jinja's TemplateError ("roles must alternate"), the tokenizer's TypeError…
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise EngineFailure(FailureKind.BAD_MESSAGES, f"The model's chat template refused these messages: "
                                                      f"{first_line}",
                            "Change the messages (for example, alternate user and assistant turns).") from exc


def fit_prompt(tokenizer: ChatTokenizer, messages: Sequence[Message], *, limit: int, reserve: int,
               opened_think: bool, template_kwargs: Mapping[str, Any] | None = None) -> tuple[list[int], int]:
    """Prompt ids that leave ``reserve`` of ``limit`` tokens free, and how many old turns were dropped.

    A leading system message is always kept, and so is the newest turn: when that alone is too long
    for the context, PROMPT_TOO_LONG says so.
    """
    ids, dropped = fit_history(tokenizer, messages, budget=limit - reserve, opened_think=opened_think,
                               template_kwargs=template_kwargs)
    if len(ids) >= limit - 1:
        raise EngineFailure(FailureKind.PROMPT_TOO_LONG,
                            f"The message is {len(ids):,} tokens; the context holds {limit:,}.",
                            "Shorten the message, or raise the context length in Settings.")
    return ids, dropped


def fit_history(tokenizer: ChatTokenizer, messages: Sequence[Message], *, budget: int,
                opened_think: bool, template_kwargs: Mapping[str, Any] | None = None) -> tuple[list[int], int]:
    """The fewest oldest turns to drop so the prompt is at most ``budget`` tokens (never the newest)."""
    system = list(messages[:1]) if messages and messages[0]["role"] == "system" else []
    turns = list(messages[len(system):])
    rendered: dict[int, list[int]] = {}

    def ids_without(dropped: int) -> list[int]:
        if dropped not in rendered:
            rendered[dropped] = prompt_ids(tokenizer, system + turns[dropped:], opened_think, template_kwargs)
        return rendered[dropped]

    newest = max(len(turns) - 1, 0)
    if newest == 0:
        return ids_without(0), 0
    guess = _estimate_cut(tokenizer, turns, budget, ids_without)
    cut = _first_fitting(lambda dropped: len(ids_without(dropped)) <= budget, guess, newest)
    return ids_without(cut), cut


def _estimate_cut(tokenizer: ChatTokenizer, turns: list[Message], budget: int,
                  ids_without: Callable[[int], list[int]]) -> int:
    """Where the cut probably falls, from each turn's own token count plus what the template adds
    around a turn of its role (measured on the newest turns: "assistant" may cost more than "user").

    Walks back from the newest turn in batches sized to what is left of the budget, and stops as soon
    as it is spent, so turns far older than the window are never tokenised.
    """
    newest = len(turns) - 1
    total = len(ids_without(newest))  # exact: the newest turn with the system message and framing
    if total > budget:
        return newest
    framing: dict[str, int] = {}
    sample_chars = sample_tokens = 0
    for index in range(newest - 1, max(newest - 3, -1), -1):
        own = _token_counts(tokenizer, turns[index:index + 1])[0]
        added = len(ids_without(index)) - len(ids_without(index + 1)) - own
        framing.setdefault(turns[index]["role"], max(0, added))
        sample_chars, sample_tokens = sample_chars + len(turns[index]["content"]), sample_tokens + own
    default = max(framing.values())
    chars_per_token = max(1.0, sample_chars / max(1, sample_tokens))
    end = newest
    while end > 0:
        # Enough turns, by their length and framing, to spend what is left of the budget, and a quarter more.
        reach, start = (budget - total) * chars_per_token * 1.25, end - 1
        while start > 0 and reach > 0:
            reach -= len(turns[start]["content"]) + default * chars_per_token
            start -= 1
        counts = _token_counts(tokenizer, turns[start:end])
        for index in range(end - 1, start - 1, -1):
            total += counts[index - start] + framing.get(turns[index]["role"], default)
            if total > budget:
                return index + 1
        end = start
    return 0


def _token_counts(tokenizer: ChatTokenizer, turns: Sequence[Message]) -> list[int]:
    try:
        encoded = tokenizer([turn["content"] for turn in turns], add_special_tokens=False)
        return [len(ids) for ids in encoded["input_ids"]]
    except Exception:  # a tokenizer without batch calls, or content it refuses: the exact pass will say
        return [len(turn["content"]) // 4 for turn in turns]


def _first_fitting(fits: Callable[[int], bool], guess: int, last: int) -> int:
    """The smallest k in [0, last] with ``fits(k)``, or ``last`` when none fits.

    ``fits`` is monotone (dropping more turns never makes the prompt longer). The search starts at
    ``guess`` and moves outwards in doubling steps, so a good guess costs two probes.
    """
    if fits(guess):
        fitting, step = guess, 1
        while fitting > 0:
            probe = max(0, fitting - step)
            if not fits(probe):
                refused = probe
                break
            fitting, step = probe, step * 2
        else:
            return 0
    else:
        refused, step = guess, 1
        while True:
            probe = min(last, refused + step)
            if fits(probe):
                fitting = probe
                break
            if probe == last:
                return last
            refused, step = probe, step * 2
    while fitting - refused > 1:  # refused < answer <= fitting
        middle = (refused + fitting) // 2
        if fits(middle):
            fitting = middle
        else:
            refused = middle
    return fitting


def fit_by_dropping_one_at_a_time(tokenizer: ChatTokenizer, messages: Sequence[Message], *, budget: int,
                                  opened_think: bool) -> tuple[list[int], int]:
    """The obvious, quadratic way, kept as the reference ``fit_history`` is checked against (tests, bench)."""
    system = list(messages[:1]) if messages and messages[0]["role"] == "system" else []
    turns = list(messages[len(system):])
    dropped = 0
    while True:
        ids = prompt_ids(tokenizer, system + turns, opened_think)
        if len(ids) <= budget or len(turns) <= 1:
            return ids, dropped
        turns.pop(0)
        dropped += 1
