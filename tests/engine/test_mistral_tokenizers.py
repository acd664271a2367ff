"""Which tokenizers that mistral_common ships decode canitoolcall's Mistral fixtures (issue 38, item 4).

Every Mistral fixture carries the real tokenizer's ``output_token_ids`` (control tokens such as [THINK],
[TOOL_CALLS] and [ARGS] can't be recovered from text). A fixture can be run side by side only with a
tokenizer that turns those ids back into its ``raw_output``. This pins what the shipped files do, so the
skip reason in tests/support/tool_fixture_sides.py stays the measured one.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("mistral_common")
pytest.importorskip("canitoolcall")


def data_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent


def mistral_fixtures() -> list[dict]:  # type: ignore[type-arg]
    folder = data_dir("canitoolcall") / "_data" / "fixtures" / "mistral"
    return [json.loads(line) for name in ("imported.jsonl", "rendered.jsonl")
            for line in (folder / name).read_text().splitlines() if line.strip()]


def decodes(tokenizer, ids: list[int], raw: str) -> bool:  # type: ignore[no-untyped-def]
    """The ids spell the raw output, control tokens as their names (SentencePiece's pieces joined, its
    word marker as a space and its dummy prefix dropped, where mistral_common's keep-special decode leaves
    the markers in)."""
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

    try:
        if tokenizer.decode(ids, special_token_policy=SpecialTokenPolicy.KEEP) == raw:
            return True
        text = "".join(tokenizer.id_to_piece(i) for i in ids).replace("\u2581", " ")
        return text.removeprefix(" ") == raw
    except (IndexError, ValueError):  # an id past this vocabulary
        return False


def test_the_shipped_tokenizers_decode_only_the_fixtures_without_v11_or_v13_control_tokens() -> None:
    """Bug caught: the Mistral side-by-side skipped for a reason that isn't true (a shipped tekken that does
    decode the v13 [THINK] fixtures), or run on a tokenizer that turns their control ids into other text."""
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    shipped = data_dir("mistral_common") / "data"
    tokenizers = {name: MistralTokenizer.from_file(str(shipped / name)).instruct_tokenizer.tokenizer
                  for name in ("tekken_240718.json", "tekken_240911.json",
                               "mistral_instruct_tokenizer_240323.model.v3")}
    fixtures = mistral_fixtures()
    assert len(fixtures) == 47
    by_tokenizer = {name: sorted(fx["id"] for fx in fixtures if decodes(tok, fx["output_token_ids"], fx["raw_output"]))
                    for name, tok in tokenizers.items()}
    plain = ["mistral/v11-no-call", "mistral/v13-no-call", "mistral/vllm-v11-think-text"]
    assert by_tokenizer["tekken_240718.json"] == by_tokenizer["tekken_240911.json"] == plain, \
        "the shipped tekken files (v3, no [THINK]) decode only replies without control tokens"
    v3 = sorted(fx["id"] for fx in fixtures if fx["tokenizer"]["repo"] == "mistralai/Mistral-7B-Instruct-v0.3")
    assert len(v3) == 10 and by_tokenizer["mistral_instruct_tokenizer_240323.model.v3"] == v3, \
        "Mistral-7B-Instruct-v0.3's fixtures decode with the shipped v3 SentencePiece model"
    think = [fx for fx in fixtures if "[THINK]" in fx["raw_output"]]
    assert think and not any(fx["id"] in ids for fx in think for ids in by_tokenizer.values()), \
        "no shipped file decodes a [THINK] fixture: those need the model's own v13 tekken.json"
    assert {fx["tokenizer"]["repo"] for fx in think} >= {"mistralai/Magistral-Small-2509"}
