"""canitoolcall 0.1.1's offline fixtures through Nalar's tool path, one item per family.

Each fixture's raw model output goes through Nalar's ``<think>`` splitter and ToolCallGate with the
vLLM tool parser canitoolcall's own vLLM adapter picks for the fixture's model, and the calls must equal
the fixture's expected ones. The parsers get no tokenizer here (the fixtures' models' tokenizers are
on the Hugging Face hub, which this offline suite can't reach), so deepseek's parsers, which look their
special tokens up in the vocabulary, can't load: those fixtures are counted apart. For the same reason
canitoolcall's own vLLM adapter (it loads each model's tokenizer) can't run in the same pass here; the
floors below are Nalar's own counts measured on this path, so a regression names the fixtures it broke.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.engine.events import AnswerDelta, Finished, ThinkingDelta
from app.engine.reasoning import ThinkTagSplitter
from app.engine.tool_calls import ToolCallGate, ToolOffer, vllm_parse

canitoolcall = pytest.importorskip("canitoolcall")
from canitoolcall.adapters.vllm import resolve_parsers  # noqa: E402

FIXTURES = Path(canitoolcall.__file__).parent / "_data" / "fixtures"
# family → fixtures whose calls Nalar's path must get right (measured; raise when it gets better)
FLOORS = {"qwen3-hermes": 41, "qwen3-xml": 50, "glm": 45, "kimi": 31, "deepseek": 9}


class _NoVocabulary:
    """No model tokenizer offline: text-based parsers need none; vocabulary-based ones fail to load."""

    def get_vocab(self) -> dict[str, int]:
        return {}


def _arguments(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return ("not JSON", text)


def _replay(fixture: dict[str, Any], parser: str) -> list[tuple[str, Any]] | None:
    offer = ToolOffer(tuple(fixture.get("tools") or ()) or ({"type": "function", "function": {"name": "x"}},))
    try:
        gate = ToolCallGate(offer, vllm_parse(parser, _NoVocabulary(), offer), parser)
    except Exception:
        return None  # the parser needs the model's vocabulary
    opened = (fixture.get("generation_prompt") or "").rstrip().endswith("<think>")
    splitter = ThinkTagSplitter(prompt_opened_think=opened)
    part, tail = splitter.feed(fixture["raw_output"]), splitter.flush()
    thinking, answer = part.thinking + tail.thinking, part.answer + tail.answer
    events = gate.feed(ThinkingDelta("r", thinking)) if thinking else []
    events += gate.feed(AnswerDelta("r", answer)) if answer else []
    finished = gate.feed(Finished("r", "stop", thinking, answer))[-1]
    assert isinstance(finished, Finished)
    return [(call.name, _arguments(call.arguments)) for call in finished.tool_calls]


@pytest.mark.parametrize("family", sorted(FLOORS))
def test_canitoolcall_fixtures_through_nalars_tool_path(family: str) -> None:
    """Bug caught: a change to the gate (markers, held text, calls inside thinking) or to the parser
    choice that loses calls the parsers found before; the failure lists the fixtures."""
    passed, failed, unavailable = [], [], []
    for path in sorted((FIXTURES / family).glob("*.jsonl")):
        for line in path.read_text().splitlines():
            fixture = json.loads(line)
            expected = (fixture.get("expected") or {})
            if "tool_calls" not in expected:
                continue
            rule = resolve_parsers(family, fixture["models"][0])
            if rule is None or rule.choice is None:
                continue
            got = _replay(fixture, rule.choice.tool_parser)
            want = [(call["name"], call.get("arguments")) for call in expected["tool_calls"] or ()]
            (unavailable if got is None else passed if got == want else failed).append(fixture["id"])
    assert len(passed) >= FLOORS[family], f"{family}: {len(passed)} passed; failing: {failed}; " \
                                          f"parser unavailable offline: {len(unavailable)}"
