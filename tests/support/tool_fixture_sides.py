"""canitoolcall's offline fixtures through two adapters in one run: its own vLLM adapter, and Nalar's tool path.

Both go through canitoolcall's own replay (``adapters.worker.replay``: one plain parse plus one stream per
chunking strategy) and its own checks (``runner.evaluate``), so they are judged alike.

**The stand-in tokenizer.** canitoolcall's vLLM adapter loads each fixture model's tokenizer from the
Hugging Face hub, which this offline machine can't reach. Both sides get the same stand-in instead: the
embedded model's byte-level BPE tokenizer with the family's markers and stop tokens added as single tokens
(as they are in the real vocabularies), loaded through vLLM's own ``get_tokenizer``, in the tokenizer mode
the adapter asks for. Its chat template renders the adapter's one user turn and then the fixture's own
generation prompt, so the prompt's tail (which tells the parsers whether thinking is open) is the real one
(the adapter's own ``generation_prompt_match`` confirms it for every fixture).
What this changes:

* the fixtures' recorded ``output_token_ids`` are the real vocabularies' ids: the stand-in can't decode
  them, so the raw output is re-tokenized with the stand-in (the text and the markers are the same; how
  plain text splits into tokens differs, which moves the stream split points);
* mistral, whose parsing needs mistral_common's own tokenizer (control tokens text can't spell), is
  counted as "needs the real tokenizer".

**gpt-oss runs on its real tokenizer**, rebuilt offline from the o200k vocabulary openai_harmony embeds
(tests/support/harmony_tokenizer.py): both sides read the fixtures' recorded ids, vLLM's Harmony parser
on them directly. The adapter's Harmony prompt call, written for vLLM 0.30, is brought to 0.32
(``VllmAdapterOn032``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from canitoolcall.adapters.base import Adapter, ReplayInput, Support, ToolSpec
from canitoolcall.adapters.vllm import ARCH_TOKENIZER_MODES, VllmAdapter
from canitoolcall.adapters.worker import replay
from canitoolcall.chunking import DEFAULT_STRATEGIES
from canitoolcall.fixtures import Family, Fixture, load_fixtures
from canitoolcall.results import ParsedToolCall, ParseResult, Status
from canitoolcall.runner import evaluate, family_for

from app.core.models.model_families import model_family
from app.engine.events import AnswerDelta, EngineEvent, Finished, ThinkingDelta, ToolCallDelta
from app.engine.reply.reasoning import ReplyTexts, make_splitter, think_start_of_prompt
from app.engine.reply.tool_calls import ToolOffer, gate_for
from tests.support.harmony_tokenizer import gpt_oss_tokenizer
from tests.support.tool_fixture_reference import keep_tally, kept_tally

EMBEDDED_TOKENIZER = Path.home() / ".cache" / "nalar" / "models" / "SmolLM2-135M-Instruct"
PASSING = (Status.PASS, Status.SOFT_PASS)
# Real configs' architectures/model_type, which the adapter reads for its tokenizer mode and Harmony.
STANDIN_CONFIGS = {
    "openai/gpt-oss": {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"]},
    "DeepSeek-V3.2": {"model_type": "deepseek_v32", "architectures": ["DeepseekV32ForCausalLM"]},
    "DeepSeek-V4.1": {"model_type": "deepseek_v41", "architectures": ["DeepseekV41ForCausalLM"]},
    "DeepSeek-V4": {"model_type": "deepseek_v4", "architectures": ["DeepseekV4ForCausalLM"]},
    "Kimi-K3": {"model_type": "kimi_k3", "architectures": ["KimiK3ForConditionalGeneration"]},
}
NEEDS_REAL_TOKENIZER = {
    "mistral": "mistral_common's own tokenizer for each fixture's model: its control tokens ([TOOL_CALLS], [ARGS], "
               "[CALL_ID], [THINK]) can't be spelled in text, so every fixture is its recorded ids. Of the files "
               "mistral_common ships, tekken_240718.json and tekken_240911.json (version v3, no [THINK]) decode only "
               "the 3 replies without control tokens, and mistral_instruct_tokenizer_240323.model.v3 the 10 of "
               "Mistral-7B-Instruct-v0.3 (tests/engine/test_mistral_tokenizers.py); the 34 others, all 13 [THINK] "
               "ones among them, need their model's own tekken.json at the pinned revision (v13 with [THINK]=34, "
               "[/THINK]=35: mistralai/Magistral-Small-2509 tekken.json; v11: Mistral-Small-3.2-24B-Instruct-2506's), "
               "which the Hugging Face hub serves and this offline machine can't reach (curl: could not resolve "
               "huggingface.co). Unproven until then: vLLM's `mistral` reasoning and tool parsers against Nalar's path",
}
# Families whose real tokenizer is built offline: both sides read the fixtures' recorded ids with it. vLLM's
# tokenizer over it is loaded once a process (3 s here) and shared with the other gpt-oss tests; nothing sets on it.
REAL_TOKENIZERS = {"gpt-oss": gpt_oss_tokenizer}


def standin_config(repo: str) -> dict[str, Any]:
    return next((config for key, config in STANDIN_CONFIGS.items() if key in repo), {"model_type": "llama"})


class StandinTokenizers:
    """One family's stand-in: a tokenizer folder, vLLM's tokenizer per mode over it, and the generation
    prompt its template ends with (set per group of fixtures; the tokenizers are loaded once)."""

    def __init__(self, root: Path, family: Family) -> None:
        from tokenizers import AddedToken, Tokenizer

        # The embedded model's tokenizer files, the family's words added to its tokenizer.json (the Rust
        # tokenizer's own add and save: transformers' copy and save_pretrained took 0.3 s a family).
        tok = Tokenizer.from_file(str(EMBEDDED_TOKENIZER / "tokenizer.json"))
        words = [*family.markers, *(stop for ref in family.reference_models for stop in ref.stop_tokens)]
        tok.add_tokens([AddedToken(word, special=False, normalized=False) for word in dict.fromkeys(words)])
        self.folder = root / family.slug
        self.folder.mkdir(parents=True)
        tok.save(str(self.folder / "tokenizer.json"))
        for name in ("tokenizer_config.json", "chat_template.jinja", "config.json"):
            shutil.copyfile(EMBEDDED_TOKENIZER / name, self.folder / name)
        self.loaded: dict[str, Any] = {}
        self.template = ""

    def use_prompt(self, generation_prompt: str) -> None:
        self.template = ("{% for m in messages %}User: {{ m.content }}\n{% endfor %}"
                         "{% if add_generation_prompt %}" + _jinja_literal(generation_prompt) + "{% endif %}")
        for tok in self.loaded.values():
            tok.chat_template = self.template

    def tokenizer(self, mode: str) -> Any:
        """vLLM's tokenizer over the stand-in, in the adapter's mode (kimi_k3 loads as hf in vLLM too)."""
        mode = "hf" if mode in ("auto", "kimi_k3") else mode
        if mode not in self.loaded:
            from vllm.tokenizers import registry

            self.loaded[mode] = registry.get_tokenizer(str(self.folder), tokenizer_mode=mode, trust_remote_code=False)
            self.loaded[mode].chat_template = self.template
        return self.loaded[mode]


class RealTokenizers:
    """A family's real tokenizer (built offline), in the shape StandinTokenizers has: the prompt is the
    renderer's own (Harmony's for gpt-oss), so ``use_prompt`` has nothing to set."""

    def __init__(self, tok: Any) -> None:
        self._tok = tok

    def use_prompt(self, generation_prompt: str) -> None:
        pass

    def tokenizer(self, mode: str) -> Any:
        return self._tok


class VllmAdapterOn032(VllmAdapter):
    """canitoolcall's vLLM adapter with its Harmony prompt call brought to vLLM 0.32: written for 0.30, it
    calls ``OnlineRenderer._make_request_with_harmony`` on a stand-in self without the ``renderer`` that 0.32
    reads (for prompt ids forwarded by disaggregated serving, which a chat request doesn't carry)."""

    def _render_prompt(self, setup: Any) -> list[int]:
        if not setup.is_harmony:
            return super()._render_prompt(setup)
        from types import SimpleNamespace

        from vllm.renderers.online_renderer import OnlineRenderer

        request = self._make_request(setup, stream=False)
        stand_in = SimpleNamespace(supports_browsing=False, supports_code_interpreter=False, renderer=None)
        _, (engine_input,) = OnlineRenderer._make_request_with_harmony(stand_in, request, request.tools is not None)
        return [int(i) for i in engine_input["prompt_token_ids"]]


def _jinja_literal(text: str) -> str:
    return "{{ " + json.dumps(text) + " }}"


@contextmanager
def standin_hub(monkeypatch: Any, tokenizers: StandinTokenizers, config_root: Path) -> Iterator[None]:
    """vLLM's tokenizer loader and the hub's config download, answered by the stand-ins (offline)."""
    import huggingface_hub
    import vllm.tokenizers

    def get_tokenizer(repo: str, *args: Any, tokenizer_mode: str = "auto", **kwargs: Any) -> Any:
        return tokenizers.tokenizer(tokenizer_mode)

    def hf_hub_download(repo: str, filename: str, *args: Any, **kwargs: Any) -> str:
        if filename != "config.json":
            raise FileNotFoundError(filename)
        path = config_root / (repo.replace("/", "--") + ".json")
        path.write_text(json.dumps(standin_config(repo)))
        return str(path)

    with monkeypatch.context() as patch:
        patch.setattr(vllm.tokenizers, "get_tokenizer", get_tokenizer)
        patch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
        yield


class NalarToolPath(Adapter):
    """Nalar's tool path as a canitoolcall adapter: vLLM's detokenizer (special tokens kept when tools are
    offered, as EngineHost asks), the family's reasoning splitter, ReplyTexts, ToolCallGate with the
    family's tool parser (model_families), and the API server's message (reasoning, content, tool_calls)."""

    name: ClassVar[str] = "nalar"
    pinned_version: ClassVar[str] = "this checkout"

    def __init__(self, tokenizer_of: Callable[[ReplayInput], Any]) -> None:
        self.tokenizer_of = tokenizer_of

    def version(self) -> str:
        return self.pinned_version

    def supports(self, family: str, model: str) -> Support:
        return Support(True)

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        fam = model_family(raw.model)
        return {"reasoning_parser": fam.parser, "tool_parser": fam.tool_parser}

    def units(self, raw: ReplayInput) -> list[int]:
        if raw.token_ids is not None:  # a real tokenizer's recorded ids, as vLLM's adapter takes them
            return list(raw.token_ids)
        return [int(i) for i in self.tokenizer_of(raw).encode(raw.text, add_special_tokens=False)]

    def special_token_ids(self, raw: ReplayInput) -> Collection[int] | None:
        return special_ids(self.tokenizer_of(raw))

    def parse(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> ParseResult:
        return self.parse_stream(raw, [self.units(raw)], tools)

    def parse_stream(self, raw: ReplayInput, chunks: Sequence[Sequence[int]], tools: Sequence[ToolSpec]) -> ParseResult:
        try:
            return self._reply(raw, chunks, tools)
        except Exception as exc:  # noqa: BLE001 - canitoolcall's contract: a parser's exception is an outcome
            return ParseResult(exception=f"{type(exc).__name__}: {exc}")

    def _reply(self, raw: ReplayInput, chunks: Sequence[Sequence[int]], tools: Sequence[ToolSpec]) -> ParseResult:
        tok = self.tokenizer_of(raw)
        fam = model_family(raw.model)
        offer = ToolOffer(tuple(dict(t) for t in tools)) if tools else None
        thinking_on = fam.thinks(raw.thinking is not False)  # EngineHost._thinking_on, reasoning mode off
        start = think_start_of_prompt(raw.generation_prompt or "") or ("open" if thinking_on else "none")
        splitter = make_splitter(fam.parser, tok, start=start)
        gate = gate_for(fam.tool_parser, tok, offer) if offer is not None else None
        texts = ReplyTexts()
        out: list[EngineEvent] = []

        def send(events: list[EngineEvent]) -> None:
            for event in events:
                out.extend(gate.feed(event) if gate is not None else [event])

        for text, ids in zip(detokenized(tok, [list(c) for c in chunks], keep_special=offer is not None),
                             chunks, strict=True):
            send(texts.take("r", splitter.feed(text, list(ids))))
        send(texts.take("r", splitter.flush()))
        send([Finished("r", "stop", texts.thinking_text, texts.answer_text)])
        return server_message(out)


def server_message(events: Sequence[EngineEvent]) -> ParseResult:
    """What the API server's plain reply says for these events (api_replies.complete_reply's fields)."""
    thinking = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    answer = "".join(e.text for e in events if isinstance(e, AnswerDelta))
    calls: dict[int, list[str]] = {}
    for e in events:
        if isinstance(e, ToolCallDelta):
            name, args = calls.setdefault(e.index, ["", ""])
            calls[e.index] = [name + (e.name or ""), args + e.arguments_delta]
    return ParseResult(content=answer or None, reasoning_content=thinking or None,
                       tool_calls=tuple(ParsedToolCall(name, args) for name, args in calls.values()))


def detokenized(tok: Any, groups: list[list[int]], *, keep_special: bool) -> list[str]:
    """Text per id group from vLLM's v1 IncrementalDetokenizer, as the engine's output processor runs it."""
    from types import SimpleNamespace

    from vllm import SamplingParams
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer

    request = SimpleNamespace(request_id="r", sampling_params=SamplingParams(skip_special_tokens=not keep_special),
                              prompt_token_ids=[], prompt_embeds=None)
    detokenizer = IncrementalDetokenizer.from_new_request(tok, request)
    texts = []
    for i, group in enumerate(groups):
        detokenizer.update(group, False)
        texts.append(detokenizer.get_next_output_text(i == len(groups) - 1, True))
    return texts


def special_ids(tok: Any) -> frozenset[int]:
    ids = {int(i) for i in tok.all_special_ids}
    decoder = getattr(tok, "added_tokens_decoder", None) or {}
    ids.update(int(i) for i, t in decoder.items() if getattr(t, "special", False))
    return frozenset(ids)


@dataclass
class FamilyTally:
    """One family's counts on one side."""

    fixtures: int = 0
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # fixture id → first failing check
    needs_real_tokenizer: list[str] = field(default_factory=list)
    # whether vLLM's rendered prompt ended with the fixture's generation prompt (the adapter checks it)
    prompt_matched: list[str] = field(default_factory=list)
    prompt_mismatch: list[str] = field(default_factory=list)


def first_failure(case: Any) -> str:
    if case.harness_error:
        return "harness: " + case.harness_error.splitlines()[0][:200]
    bad = [r for r in case.checks if r.status not in PASSING]
    return f"{bad[0].check}[{bad[0].strategy}]: {bad[0].detail}" if bad else str(case.status)


def fixtures_of(family: str) -> list[Fixture]:
    return load_fixtures(None, families=[family])


def run_family(family_slug: str, monkeypatch: Any, tmp: Path) -> dict[str, FamilyTally]:
    """Every fixture of one family through canitoolcall's vLLM adapter and Nalar's tool path."""
    fixtures = fixtures_of(family_slug)
    family = family_for(fixtures[0])
    assert family is not None
    real = REAL_TOKENIZERS.get(family_slug)
    tokenizers: StandinTokenizers | RealTokenizers = (
        RealTokenizers(real()) if real is not None else StandinTokenizers(tmp / "tokenizers", family))
    (tmp / "configs").mkdir(parents=True, exist_ok=True)
    reference = kept_tally(family_slug)  # vLLM's side from an earlier run with the same inputs, if kept
    tallies = {"vllm": reference or FamilyTally(), "nalar": FamilyTally()}
    by_prompt: dict[str, list[Fixture]] = {}
    for fixture in fixtures:
        raw = ReplayInput.from_fixture(fixture, family)
        by_prompt.setdefault(raw.generation_prompt or "", []).append(fixture)

    def tokenizer_of(raw: ReplayInput) -> Any:
        arch = standin_config(raw.model).get("architectures", [])
        return tokenizers.tokenizer(next((ARCH_TOKENIZER_MODES[a] for a in arch if a in ARCH_TOKENIZER_MODES), "hf"))

    for prompt, group in by_prompt.items():
        tokenizers.use_prompt(prompt)
        # a fresh vLLM adapter per prompt: it caches its rendered prompt per model
        sides: dict[str, Adapter] = {"vllm": VllmAdapterOn032()} if reference is None else {}
        sides["nalar"] = NalarToolPath(tokenizer_of)
        with standin_hub(monkeypatch, tokenizers, tmp / "configs"):
            for fixture in group:
                stripped = fixture if real is not None else replace_ids(fixture)
                for side, adapter in sides.items():
                    tally = tallies[side]
                    tally.fixtures += 1
                    if family_slug in NEEDS_REAL_TOKENIZER:
                        tally.needs_real_tokenizer.append(fixture.id)
                        continue
                    try:
                        reply = replay(adapter, stripped, family, DEFAULT_STRATEGIES)
                        case = evaluate(stripped, family, reply)
                    except Exception as exc:  # noqa: BLE001 - a harness failure fails this fixture, named
                        tally.failed[fixture.id] = f"harness: {type(exc).__name__}: {str(exc)[:200]}"
                        continue
                    match = (reply.get("parser_config") or {}).get("generation_prompt_match")
                    if match is not None:
                        (tally.prompt_matched if match else tally.prompt_mismatch).append(fixture.id)
                    if case.status in PASSING:
                        tally.passed.append(fixture.id)
                    else:
                        tally.failed[fixture.id] = first_failure(case)
    if reference is None:
        keep_tally(family_slug, tallies["vllm"])
    return tallies


def replace_ids(fixture: Fixture) -> Fixture:
    """The fixture without its real vocabulary's token ids: the stand-in re-tokenizes the raw output."""
    return replace(fixture, output_token_ids=None)
