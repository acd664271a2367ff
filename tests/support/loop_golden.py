"""The loop guard's golden streams: load them, label them, replay them through the app's accounting.

Labels come from each phase of the whole stream (the thinking first), after the fact, by looser rules
than the detector's (an exact repeat of 3+ copies over the issue's 64 tokens that runs to within 64 tokens of the
phase's end; or a tail chain of 4+ sentences each Jaccard >= 0.6 with one of the next six; or one sentence of
40+ characters word for word 3+ times among the last 12). A stream
whose label says it loops is a positive; every other stream is a negative.

The labels the tests use are stored per stream (data/loops/labels.json) and their counts pinned; these rules
wrote them and import nothing from the detector (app.engine.reply.loop_guard): its own sentence split and word
trigrams are below.
`python -m tests.support.loop_golden --check-labels` says whether the rules still give the stored labels.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.settings.settings import LoopGuardConfig, SamplingConfig
from app.engine.reply.reasoning import ThinkTagSplitter
from app.engine.reply.stream import Phase, ReplyStream

DATA = Path(__file__).parent / "data" / "loops"
LABELS = DATA / "labels.json"

# The labeller's own text rules, kept apart from the detector's so a change there can't move the labels.
SENTENCE_END = re.compile(r"\n|\\n|(?<=[.!?:;])\s")  # a newline (or a JSON string's escaped one), or after . ! ? : ;
WORD = re.compile(r"[^\W\d_]+|\d+(?:[.,]\d+)*")


def trigrams(text: str) -> frozenset[tuple[str, str, str]] | None:
    """Lower-cased word trigrams, every number read as "#"; None for a sentence of under five letter words."""
    words = [w if w[0].isalpha() else "#" for w in WORD.findall(text.lower())]
    if sum(w != "#" for w in words) < 5:
        return None
    return frozenset(zip(words, words[1:], words[2:], strict=False))


def jaccard(a: frozenset[Any], b: frozenset[Any]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def load(name: str) -> list[dict[str, Any]]:
    with gzip.open(DATA / name, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def all_streams() -> list[dict[str, Any]]:
    """Every captured stream: greedy thinking turns, samples at temperature 0.6, greedy chat turns."""
    names = ("greedy_candidates.jsonl.gz", "sampled_t06.jsonl.gz", "greedy_candidates_more.jsonl.gz",
             "sampled_t06_more.jsonl.gz")
    streams = [stream for name in names if (DATA / name).exists() for stream in load(name)]
    if (answers := DATA / "greedy_answer.json").exists():
        streams += json.loads(answers.read_text(encoding="utf-8"))["streams"]
    return streams


@dataclass(frozen=True)
class Replay:
    """One stream through ReplyStream: each phase's token ids and text, and where the guard fired."""

    tokens: dict[str, list[int]]
    text: dict[str, str]
    detected_phase: str | None = None
    detected_token: int = 0
    detected_start: int = 0
    detected_period: int = 0
    kind: str = ""


def bursts(stream: dict[str, Any], size: int) -> list[tuple[list[int], str]]:
    """The recorded deltas as speculative decoding delivers them: up to ``size`` tokens a step (1 proposed
    token verified plus the accepted drafts). A think tag ends its burst, as a phase change ends vLLM's delta."""
    out: list[tuple[list[int], str]] = []
    ids: list[int] = []
    text = ""
    for delta_ids, delta_text in zip(stream["ids"], stream["texts"], strict=True):
        ids, text = ids + list(delta_ids), text + delta_text
        if len(ids) >= size or "think>" in delta_text:
            out.append((ids, text))
            ids, text = [], ""
    return out + ([(ids, text)] if ids else [])


def replay(stream: dict[str, Any], guard: LoopGuardConfig | None = None, burst: int = 1) -> Replay:
    """Feed the recorded deltas as EngineHost's think phase does; stop at the first loop found. ``burst``:
    group them as speculative decoding of up to that many tokens a step would."""
    sampling = SamplingConfig(loop_guard=(guard or LoopGuardConfig()).model_dump())
    reply = ReplyStream("golden", sampling=sampling)
    splitter = ThinkTagSplitter(prompt_opened_think=stream["mode"] == "think")
    tokens: dict[str, list[int]] = {"thinking": [], "answer": []}
    deltas = zip(stream["ids"], stream["texts"], strict=True) if burst == 1 else bursts(stream, burst)
    for ids, text in deltas:
        phase: Phase = "thinking" if splitter.in_thinking else "answer"
        tokens[phase].extend(ids)
        reply.step(phase, splitter.feed(text, ids), ids)
        if reply.loop is not None:
            found_phase, loop = reply.loop
            return Replay(tokens, {"thinking": reply.texts.thinking_text, "answer": reply.texts.answer_text},
                          found_phase, len(tokens[found_phase]), loop.start_token, loop.period, loop.kind)
    return Replay(tokens, {"thinking": reply.texts.thinking_text, "answer": reply.texts.answer_text})


@dataclass(frozen=True)
class Label:
    phase: str
    start_token: int
    period: int
    kind: str


def _exact_label(ids: list[int]) -> tuple[int, int] | None:
    """An exact repeat that runs to within 64 tokens of the end: the budget may have cut its last copy, or the
    loop slid into another at the very end ("1 m" ×250, then "1" ×26, then ``</think>``)."""
    for cut in range(64):
        if (found := _exact_tail(ids[:len(ids) - cut])) is not None:
            return found
    return None


def _exact_tail(ids: list[int]) -> tuple[int, int] | None:
    n = len(ids)
    for period in range(1, min(512, n // 3) + 1):
        i = n - 1
        while i - period >= 0 and ids[i] == ids[i - period]:
            i -= 1
        span = n - 1 - i + period
        if span >= 3 * period and span >= 64 and (period >= 4 or span >= 16 * period):
            return n - span, period
    return None


def _drift_label(text: str, ids_count: int, char_to_token: list[int]) -> tuple[int, int] | None:
    segments: list[tuple[int, frozenset[Any]]] = []
    start = 0
    for match in SENTENCE_END.finditer(text):
        piece = text[start:match.end()]
        grams = trigrams(piece) if len(piece.strip()) >= 20 else None
        if grams:
            segments.append((start, grams))
        start = match.end()
    chain = 0
    first = None
    for index in range(len(segments) - 1, -1, -1):
        later = segments[index + 1:index + 7]
        if later and any(jaccard(segments[index][1], other) >= 0.6 for _, other in later):
            chain += 1
            first = index
        elif index < len(segments) - 7:  # the chain from the tail is broken
            break
    if first is None or chain < 4:
        return None
    start_char = segments[first][0]
    start_token = char_to_token[min(start_char, len(char_to_token) - 1)] if char_to_token else 0
    period = max(1, (ids_count - start_token) // max(1, chain))
    return start_token, period


def _verbatim_label(text: str, ids_count: int, char_to_token: list[int]) -> tuple[int, int] | None:
    """One sentence of 40+ characters said word for word (numbers masked) 3+ times among the phase's last 12
    sentences, its last copy where the guard watches (token 256 on): a loop even when other sentences come
    between the copies (the tail chain misses that). Copies that all come earlier and stop by themselves are
    left alone by design (the guard starts at 256), as is a short list counting on."""
    sentences: list[tuple[int, frozenset[Any]]] = []
    start = 0
    for match in SENTENCE_END.finditer(text + "\n"):
        piece = text[start:match.end()]
        if len(piece.strip()) >= 40 and (grams := trigrams(piece)):
            sentences.append((start, grams))
        start = match.end()
    tail = sentences[-12:]
    for index, (start_char, grams) in enumerate(tail):
        copies = [other for other in tail[index + 1:] if other[1] == grams]
        last_token = char_to_token[min(copies[-1][0], len(char_to_token) - 1)] if copies and char_to_token else 0
        if len(copies) >= 2 and last_token >= LoopGuardConfig().start_after_tokens:
            start_token = char_to_token[min(start_char, len(char_to_token) - 1)] if char_to_token else 0
            period = max(1, (ids_count - start_token) // (len(copies) + 1))
            return start_token, period
    return None


def stored_labels() -> list[Label | None]:
    """The labels the tests use, one per stream of ``all_streams()``, in its order."""
    streams = json.loads(LABELS.read_text(encoding="utf-8"))["streams"]
    return [None if entry["loop"] is None else Label(**entry["loop"]) for entry in streams]


def label(stream: dict[str, Any]) -> Label | None:
    """Does a phase of the stream end in a loop (the thinking first), and where did it begin (phase-relative)?"""
    splitter = ThinkTagSplitter(prompt_opened_think=stream["mode"] == "think")
    reply = ReplyStream("label")
    phase_ids: dict[str, list[int]] = {"thinking": [], "answer": []}
    char_to_token: dict[str, list[int]] = {"thinking": [], "answer": []}
    for ids, text in zip(stream["ids"], stream["texts"], strict=True):
        phase: Phase = "thinking" if splitter.in_thinking else "answer"
        before = len(reply.texts.thinking_text if phase == "thinking" else reply.texts.answer_text)
        reply.step(phase, splitter.feed(text, ids), ids)
        after = len(reply.texts.thinking_text if phase == "thinking" else reply.texts.answer_text)
        char_to_token[phase].extend([len(phase_ids[phase])] * (after - before))
        phase_ids[phase].extend(ids)
    # Each phase that ran, thinking first: a thinking loop cut by the budget is followed by an answer.
    for phase in ("thinking", "answer"):
        ids = phase_ids[phase]
        if not ids:
            continue
        text = reply.texts.thinking_text if phase == "thinking" else reply.texts.answer_text
        found = []
        if (exact := _exact_label(ids)) is not None:
            found.append(Label(phase, exact[0], exact[1], "exact"))
        if (drift := _drift_label(text, len(ids), char_to_token[phase])) is not None:
            found.append(Label(phase, drift[0], drift[1], "drift"))
        if (verbatim := _verbatim_label(text, len(ids), char_to_token[phase])) is not None:
            found.append(Label(phase, verbatim[0], verbatim[1], "drift"))
        if found:
            return min(found, key=lambda lab: lab.start_token)
    return None


def main() -> int:
    """Print the figures docs/BENCHMARKS.md quotes (``--check-labels``: compare the rules with the stored labels)."""
    import statistics
    import sys
    import time

    if "--check-labels" in sys.argv:
        differ = [(i, lab, now) for i, (lab, stream) in enumerate(zip(stored_labels(), all_streams(), strict=True))
                  if (now := label(stream)) != lab]
        for index, stored, now in differ:
            print(f"stream {index}: stored {stored}, the rules now give {now}")
        print(f"{len(differ)} of {len(stored_labels())} labels differ from the stored ones")
        return 1 if differ else 0

    streams = all_streams()
    caught, delays, late, missed, flagged = 0, [], [], [], []
    positives = negatives = tokens = 0
    started = time.perf_counter()
    for stream in streams:
        lab = label(stream)
        result = replay(stream)
        tokens += sum(len(ids) for ids in stream["ids"])
        where = f"{stream['mode']}/{stream['temperature']}: {stream['prompt'][:50]}"
        if lab is None:
            negatives += 1
            if result.detected_phase is not None:
                flagged.append(where)
            continue
        positives += 1
        if result.detected_phase != lab.phase:
            missed.append(f"{where} ({lab})")
            continue
        caught += 1
        start = max(lab.start_token, LoopGuardConfig().start_after_tokens if lab.phase == "thinking" else 0)
        delay = result.detected_token - start
        delays.append(delay)
        if delay > max(3 * lab.period, 512):
            late.append(f"{where}: {delay} tokens ({lab})")
    elapsed = time.perf_counter() - started
    kinds = {}
    for stream in streams:
        lab = label(stream)
        if lab is not None:
            kinds[(lab.kind, lab.phase, stream["temperature"])] = kinds.get((lab.kind, lab.phase,
                                                                              stream["temperature"]), 0) + 1
    print(f"streams {len(streams)}, tokens {tokens:,}, replay {elapsed:.1f} s")
    print(f"positives {positives} ({kinds}), caught {caught}, late {len(late)}, missed {len(missed)}")
    if delays:
        print(f"delay after the loop began (or token 256): median {statistics.median(delays):.0f}, "
              f"max {max(delays)} tokens")
    print(f"negatives {negatives}, flagged {len(flagged)}")
    for line in late + missed + flagged:
        print("  ", line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
