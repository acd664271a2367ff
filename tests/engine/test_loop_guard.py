"""The loop detector and the stream helper's handling of a loop, on synthetic token streams.

The golden streams of the real engine are in test_loop_golden.py; these pin the thresholds.
"""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from app.core.settings.settings import LoopGuardConfig, SamplingConfig
from app.engine.events import LoopDetected
from app.engine.reply.loop_guard import LoopDetector
from app.engine.reply.reasoning import Split
from app.engine.reply.stream import ReplyStream

NOW = LoopGuardConfig()


def feed_ids(detector: LoopDetector, ids: list[int], texts: list[str] | None = None):
    """Feed one token a delta; return (the loop, the token count when it fired)."""
    for index, token in enumerate(ids):
        loop = detector.feed([token], texts[index] if texts else f"<{token}>")
        if loop is not None:
            return loop, index + 1
    return None, len(ids)


def noise(count: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000, 50_000) for _ in range(count)]


@pytest.mark.parametrize("period", [4, 7, 16, 48, 100, 256])
def test_exact_repeat_is_found_within_three_copies_or_64_tokens(period: int) -> None:
    prefix = noise(300, seed=period)
    passage = noise(period, seed=period + 1)
    loop, at = feed_ids(LoopDetector(NOW), prefix + passage * max(5, 100 // period))
    assert loop is not None and loop.kind == "exact"
    assert loop.period == period and loop.start_token == 300
    needed = max(64, 3 * period)
    assert at - 300 <= needed + NOW.check_every_tokens  # caught at the first check after the copies exist
    assert loop.copies >= 3 and loop.first_copy_end_token == 300 + period


def test_short_periods_need_32_copies() -> None:
    """A rule of dashes or a zero-filled array repeats 1-3 tokens legitimately: 31 copies are not a loop."""
    detector = LoopDetector(NOW)
    assert feed_ids(detector, noise(300) + [7, 8] * 31 + noise(40, seed=5))[0] is None
    loop, _ = feed_ids(LoopDetector(NOW), noise(300) + [7, 8] * 40)
    assert loop is not None and loop.period == 2 and loop.copies >= 32


def test_two_copies_or_a_short_span_are_not_a_loop() -> None:
    passage = noise(40, seed=3)
    assert feed_ids(LoopDetector(NOW), noise(300) + passage * 2 + noise(100, seed=9))[0] is None
    five = noise(5, seed=4)  # 3 copies of 5 tokens cover 15 < 64
    assert feed_ids(LoopDetector(NOW), noise(300) + five * 3 + noise(100, seed=8))[0] is None


def test_nothing_is_reported_before_the_start_threshold() -> None:
    detector = LoopDetector(NOW)
    passage = noise(10, seed=2)
    for index, token in enumerate(passage * 20):
        assert detector.feed([token], "x", watch=index < 0) is None  # recorded, not judged
    assert detector.feed([passage[0]], "x") is not None  # the first check may fire at once


def words(sentence: str) -> list[str]:
    return [w + " " for w in sentence.split(" ")]


def test_drifting_sentences_are_a_loop_and_it_starts_at_the_first_copy() -> None:
    intro = "We start by reading the question carefully and noting what is asked of us here. "
    loop_text = [f"So the total is {n} apples plus {n + 5} apples which makes {2 * n + 5} apples in the basket. "
                 for n in range(3, 40)]
    tokens = words(intro * 0 + "".join(f"Note {i}: the farmer counts the fields, then the cows again. " for i in
                                       range(1)) + " ".join(["filler"] * 260) + ". ")
    start = len(tokens)
    tokens += [w for sentence in loop_text for w in words(sentence)]
    detector = LoopDetector(NOW)
    loop, at = feed_ids(detector, list(range(len(tokens))), tokens)
    assert loop is not None and loop.kind == "drift"
    assert loop.start_token == start
    per_copy = len(words(loop_text[0]))
    assert at - start <= 3 * per_copy + NOW.check_every_tokens + 1
    assert loop.copies >= 3


def test_a_numbered_list_with_different_items_is_not_a_loop() -> None:
    items = ["Preheat the oven to a moderate heat and grease the tin", "Whisk the eggs with the sugar until pale",
             "Fold in the flour gently with a metal spoon", "Pour the batter into the prepared tin and level it",
             "Bake until a skewer comes out clean from the middle", "Let the cake cool on a rack before icing it"]
    text = "".join(f"{i + 1}. {item}.\n" for i, item in enumerate(items * 1)) * 1
    tokens = words(" ".join(["intro"] * 300) + "\n" + text)
    assert feed_ids(LoopDetector(NOW), list(range(len(tokens))), tokens)[0] is None


def test_a_numbered_list_that_counts_on_is_not_a_loop_however_long() -> None:
    """Its known false positive: "Step i:" lines, and files written line by line in a tool call's JSON
    string, differ only in their numbers. A list counts on; a loop repeats itself."""
    steps = "".join(f"Step {i}: check that the value in row {i} of the table is smaller than the limit of {10 * i}.\n"
                    for i in range(1, 41))
    escaped = "".join(f"line {i:03d}: the quick brown fox jumps over the lazy dog\\n" for i in range(120))
    for listing in (steps, '{"path": "big.txt", "content": "' + escaped + '"}'):
        tokens = words(" ".join(["intro"] * 300) + "\n" + listing)
        assert feed_ids(LoopDetector(NOW), list(range(len(tokens))), tokens)[0] is None


def test_list_items_that_repeat_need_list_item_copies() -> None:
    """Items that don't count on (bullets, or the same number again) may still share a template for a while."""
    intro = words(" ".join(["intro"] * 300) + "\n")
    for marker in ("- ", "Step 3: "):
        lines = [f"{marker}check that the value in row {i} of the table is smaller than the limit of {10 * i}.\n"
                 for i in range(1, 41)]
        fifteen = intro + words("".join(lines[:15]))
        assert feed_ids(LoopDetector(NOW), list(range(len(fifteen))), fifteen)[0] is None
        tokens = intro + words("".join(lines))
        loop, at = feed_ids(LoopDetector(NOW), list(range(len(tokens))), tokens)
        assert loop is not None and loop.kind == "drift" and loop.copies == NOW.list_item_copies
        assert at - len(intro) <= NOW.list_item_copies * len(words(lines[1])) + NOW.check_every_tokens + 1
    sentences = [f"Check that the value in row {i} of the table is smaller than the limit of {10 * i}. "
                 for i in range(1, 41)]
    tokens = intro + words("".join(sentences))
    loop, _ = feed_ids(LoopDetector(NOW), list(range(len(tokens))), tokens)
    assert loop is not None and loop.copies == NOW.similar_segments, "outside a list, 3 copies are a loop"


def test_numbers_only_rows_are_not_compared() -> None:
    rows = "".join(f"| {i} | {i * 3} | {i * 7}.5 | {i * 11} | {i + 2000} |\n" for i in range(40))
    tokens = words(" ".join(["intro"] * 300) + "\n" + rows)
    assert feed_ids(LoopDetector(NOW), list(range(len(tokens))), tokens)[0] is None


def test_rewind_forgets_the_cut_loop() -> None:
    detector = LoopDetector(NOW)
    passage = noise(20, seed=6)
    loop, _ = feed_ids(detector, noise(300) + passage * 5)
    assert loop is not None
    detector.rewind(loop.start_token, loop.start_char)
    assert detector.tokens == 300 and detector.chars == loop.start_char
    assert feed_ids(detector, noise(200, seed=11))[0] is None


def test_thresholds_are_validated_in_the_schema() -> None:
    with pytest.raises(ValidationError):
        LoopGuardConfig(similarity=1.5)
    with pytest.raises(ValidationError):
        SamplingConfig().with_loop_guard(action="explode")
    assert SamplingConfig().with_loop_guard(action="warn").loop_guard.action == "warn"


def stream_loop(action: str, phase: str = "thinking") -> tuple[ReplyStream, LoopDetected]:
    sampling = SamplingConfig(think_budget=1024, max_tokens=512).with_loop_guard(action=action)
    stream = ReplyStream("r1", sampling=sampling)
    for token in noise(300):
        stream.step(phase, Split(f"w{token} ", "") if phase == "thinking" else Split("", f"w{token} "), [token])
    passage = noise(30, seed=1)
    for _ in range(6):
        for token in passage:
            stream.step(phase, Split(f"p{token} ", "") if phase == "thinking" else Split("", f"p{token} "), [token])
            if stream.loop is not None:
                return stream, stream.act_on_loop(can_conclude=True, can_resample=True)
    raise AssertionError("no loop found")


def test_conclude_keeps_the_thinking_up_to_the_loop_and_says_what_it_saved() -> None:
    stream, event = stream_loop("conclude")
    assert event.outcome == "concluded" and event.start_token == 300 and event.period == 30
    assert stream.texts.thinking_text == stream.texts.thinking_text[:event.start_char]
    assert len(stream.texts.thinking_text) == event.start_char == event.kept_char
    assert event.tokens_saved == 1024 - stream.rates["thinking"].tokens
    assert "30-token passage ×" in event.summary() and "concluded" in event.summary()
    assert stream.finished("stop")[-1].loops == (event,)


def test_an_answer_loop_is_cut_after_its_first_copy() -> None:
    stream, event = stream_loop("conclude", phase="answer")
    assert event.outcome == "cut" and event.phase == "answer"
    assert stream.texts.answer_text.endswith(" ") and len(stream.texts.answer_text) == event.kept_char
    assert event.kept_char > event.start_char  # the first copy stays


def test_warn_only_keeps_everything_and_stops_watching() -> None:
    stream, event = stream_loop("warn")
    assert event.outcome == "warned" and event.tokens_saved == 0
    assert len(stream.texts.thinking_text) == event.detected_char
    for token in noise(30, seed=1) * 6:
        stream.step("thinking", Split(f"p{token} ", ""), [token])
    assert stream.loop is None


def test_resample_falls_back_to_conclude_then_stop_as_the_backend_allows() -> None:
    stream, event = stream_loop("resample")
    assert event.outcome == "resampled"
    stream = ReplyStream("r2", sampling=SamplingConfig().with_loop_guard(action="resample"))
    for token in noise(300) + noise(30, seed=1) * 6:
        stream.step("thinking", Split(f"t{token} ", ""), [token])
        if stream.loop is not None:
            assert stream.act_on_loop(can_conclude=False, can_resample=False).outcome == "stopped"
            break
    else:
        raise AssertionError("no loop found")
