"""KV quality check: how much does rounding the KV cache through FP8 change the model's next-token choices?

transformers runs the same model twice over the same tokens (teacher-forced along the prompts' own
greedy continuations): once with the K and V the attention reads left as they are, once rounded
through an FP8 format at a per-layer scale. vLLM stores ``fp8(x / scale)`` and reads back
``fp8 * scale``, saturating at the format's largest value; the rounding here does the same.

Reported per variant: top-1 agreement with the unrounded run, and the mean KL divergence
KL(unrounded || rounded) per scored token. Scales are 1.0 (what vLLM uses when the checkpoint
has none) or calibrated: per layer, the largest |K| and |V| seen on calibration prompts, divided
by the format's largest value (what llm-compressor's min-max observer writes).

No Qt here; torch and transformers load lazily, only when a check runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# The fixed reasoning prompts the check and `nalar bench` run. Short, varied, answerable by small models.
REASONING_PROMPTS = (
    "A farmer has 17 sheep. All but 9 run away. How many sheep are left? Think it through step by step.",
    "If a train leaves at 3:40 pm and the trip takes 2 hours 35 minutes, when does it arrive? Explain.",
    "Which is larger, 0.7 or 0.65? Explain your reasoning carefully.",
)
# Calibration sees other text than the check scores, so the check measures scales, not memorised prompts.
# Whole exchanges (question and a reasoned answer), so the chat template's special tokens are seen too.
CALIBRATION_EXCHANGES = (
    ("How does a refrigerator keep food cold?",
     "A refrigerant evaporates inside the coils and absorbs heat from the food compartment. A compressor "
     "squeezes the vapour, which gets hot, and the coils at the back release that heat into the room. "
     "So the fridge moves heat from inside to outside; it does not make cold."),
    ("What causes the seasons on Earth?",
     "Earth's axis is tilted by about 23.4 degrees. When a hemisphere leans toward the Sun, sunlight hits it "
     "more directly and days are longer, so it is summer there. Distance to the Sun matters far less."),
    ("Why do we see lightning before we hear thunder?",
     "Light travels at about 300,000 km per second, sound at about 343 m per second. Both leave the flash at "
     "once, so the light arrives almost instantly and the sound later: three seconds is roughly one kilometre."),
    ("Solve x^2 - 5x + 6 = 0 and explain each step.",
     "Look for two numbers that multiply to 6 and add to -5: -2 and -3. So (x - 2)(x - 3) = 0, and a product "
     "is zero only when a factor is zero. Therefore x = 2 or x = 3. Check: 4 - 10 + 6 = 0 and 9 - 15 + 6 = 0."),
    ("Is it cheaper to walk or cycle 5 km to work?",
     "Walking costs only shoes but takes about an hour each way. Cycling needs a bike and upkeep, perhaps a few "
     "hundred a year, and takes about twenty minutes. If time has value, cycling is usually the better deal."),
    ("Write a two-sentence story about a lighthouse keeper.",
     "Every night for forty years, Mara lit the lamp for ships that never came. On the last night, a small "
     "boat rowed out of the fog, and her brother stepped ashore holding the letter she had sent him long ago."),
)

# Largest finite value of each format; vLLM's cache kernels saturate there.
FP8_MAX = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}
VARIANTS = ("fp8_e4m3", "fp8_e5m2")
# Text outside the calibration set reaches past its max |K| or |V| (here by up to 1.37× on SmolLM2), and
# past the scale a value saturates. One binade of headroom costs only the smallest values a bit of precision.
CALIBRATION_HEADROOM = 2.0
ATTENTION_NAME = "nalar_kv_rounding"


class CheckCancelled(Exception):
    """The user cancelled a running check or calibration."""


ProgressSink = Callable[[float, str], None]


@dataclass(frozen=True)
class VariantResult:
    kv_dtype: str  # fp8_e4m3 or fp8_e5m2
    scales: str  # "1.0" or "calibrated"
    top1_agreement: float  # 0..1
    mean_kl: float  # nats per scored token
    tokens: int


@dataclass(frozen=True)
class LayerScales:
    """Per-layer K and V scales for one FP8 format."""

    kv_dtype: str
    k: tuple[float, ...]
    v: tuple[float, ...]

    @classmethod
    def from_amax(cls, kv_dtype: str, k_amax: Sequence[float], v_amax: Sequence[float]) -> LayerScales:
        top = FP8_MAX[kv_dtype] / CALIBRATION_HEADROOM
        # A layer that saw only zeros keeps scale 1.0 rather than 0 (vLLM treats ≤ 0 as "no scale").
        return cls(kv_dtype, tuple(a / top if a > 0 else 1.0 for a in k_amax),
                   tuple(a / top if a > 0 else 1.0 for a in v_amax))


@dataclass
class QualityReport:
    model: str
    prompts: int
    tokens_per_prompt: int
    seconds: float
    results: list[VariantResult] = field(default_factory=list)
    calibrated_from: int = 0  # calibration prompts behind the calibrated rows

    def result(self, kv_dtype: str, scales: str) -> VariantResult | None:
        return next((r for r in self.results if r.kv_dtype == kv_dtype and r.scales == scales), None)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "prompts": self.prompts, "tokens_per_prompt": self.tokens_per_prompt,
                "seconds": round(self.seconds, 1), "calibrated_from": self.calibrated_from,
                "results": [asdict(r) for r in self.results]}


def fp8_round(x: torch.Tensor, kv_dtype: str, scale: float) -> torch.Tensor:
    """x stored as fp8(x / scale) and read back, as vLLM's cache does, saturating at the format's max."""
    import torch

    fp8 = torch.float8_e4m3fn if kv_dtype == "fp8_e4m3" else torch.float8_e5m2
    top = FP8_MAX[kv_dtype]
    stored = (x.float() / scale).clamp(-top, top).to(fp8)
    return (stored.float() * scale).to(x.dtype)


class _KvTap:
    """Per-attention-layer state the registered attention function reads: round, observe, or pass."""

    def __init__(self) -> None:
        self.kv_dtype: str | None = None
        self.k_scale = 1.0
        self.v_scale = 1.0
        self.observe = False
        self.k_amax = 0.0
        self.v_amax = 0.0


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def kv_rounding_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                              **kwargs: Any) -> Any:
        # key and value are what the attention reads: every cached position, post-RoPE, like vLLM's cache.
        tap: _KvTap | None = getattr(module, "nalar_kv_tap", None)
        if tap is not None:
            if tap.observe:
                tap.k_amax = max(tap.k_amax, float(key.abs().max()))
                tap.v_amax = max(tap.v_amax, float(value.abs().max()))
            if tap.kv_dtype is not None:
                key = fp8_round(key, tap.kv_dtype, tap.k_scale)
                value = fp8_round(value, tap.kv_dtype, tap.v_scale)
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register(ATTENTION_NAME, kv_rounding_attention)


class KvQualityModel:
    """The user's model under transformers (float32 on CPU), with a tap on every attention layer."""

    def __init__(self, model_dir: Path, *, trust_remote_code: bool = False) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # the job reports its own progress
        _register_attention()
        self.model_dir = Path(model_dir)
        self.tokenizer: Any = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=trust_remote_code)
        # float32, so the only rounding compared is the KV cache's.
        self.model: Any = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32, attn_implementation=ATTENTION_NAME,
            trust_remote_code=trust_remote_code)
        self.model.eval()
        self._continuations: dict[tuple[tuple[int, ...], int], list[int]] = {}
        self.taps: list[_KvTap] = []
        self.attention_names: list[str] = []  # checkpoint names of the attention modules, in layer order
        for name, module in self.model.named_modules():
            if hasattr(module, "layer_idx") and hasattr(module, "o_proj"):
                module.nalar_kv_tap = _KvTap()
                self.taps.append(module.nalar_kv_tap)
                self.attention_names.append(name)
        if not self.taps:
            raise ValueError(f"No attention layers found in {model_dir}: the KV check supports decoder-only "
                             "models whose attention has `layer_idx` and `o_proj` (Llama, Qwen, Mistral…).")

    def _chat_ids(self, messages: list[dict[str, str]], fallback_text: str, add_generation_prompt: bool) -> list[int]:
        if getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                                     tokenize=True)
            if hasattr(ids, "keys"):  # transformers 5 may return a BatchEncoding
                ids = ids["input_ids"]
            return [int(i) for i in ids]
        return [int(i) for i in self.tokenizer(fallback_text)["input_ids"]]

    def prompt_ids(self, prompt: str) -> list[int]:
        return self._chat_ids([{"role": "user", "content": prompt}], prompt, add_generation_prompt=True)

    def exchange_ids(self, question: str, answer: str) -> list[int]:
        messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        return self._chat_ids(messages, f"{question}\n{answer}", add_generation_prompt=False)

    def _set_taps(self, kv_dtype: str | None, scales: LayerScales | None = None, observe: bool = False) -> None:
        for index, tap in enumerate(self.taps):
            tap.kv_dtype = kv_dtype
            tap.k_scale = scales.k[index] if scales else 1.0
            tap.v_scale = scales.v[index] if scales else 1.0
            tap.observe = observe

    def continuations(self, prompts: Sequence[list[int]], tokens: int,
                      cancel: threading.Event | None = None) -> list[list[int]]:
        """The unrounded model's own greedy continuation of each prompt: the texts the check is teacher-forced
        along. One batch (left-padded) for all of them: decoding a step costs about the same for two prompts as
        for one here, so the batch halves the generation, which is most of a check's time. Continuations are
        kept for the next check on this model."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        class StopWhenCancelled(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> bool:
                return cancel is not None and cancel.is_set()

        missing = list(dict.fromkeys(tuple(ids) for ids in prompts if (tuple(ids), tokens) not in self._continuations))
        if missing:
            self._set_taps(None)
            pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None \
                else self.tokenizer.eos_token_id
            width = max(len(ids) for ids in missing)
            batch = torch.tensor([[pad] * (width - len(ids)) + list(ids) for ids in missing])
            mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in missing])
            threads = torch.get_num_threads()
            # Decoding one token at a time is many tiny ops: more threads only spin against each other
            # (measured 13 tok/s on one thread, 1 tok/s on two while the other core was busy).
            torch.set_num_threads(1)
            try:
                with torch.inference_mode():
                    out = self.model.generate(batch, attention_mask=mask, max_new_tokens=tokens,
                                              min_new_tokens=tokens, do_sample=False, pad_token_id=pad,
                                              stopping_criteria=StoppingCriteriaList([StopWhenCancelled()]))
            finally:
                torch.set_num_threads(threads)
            _check(cancel)  # a cancelled generation stopped early: don't keep it
            for row, ids in enumerate(missing):
                self._continuations[(ids, tokens)] = [int(i) for i in out[row, width:]]
        return [self._continuations[(tuple(ids), tokens)] for ids in prompts]

    def log_probs(self, sequence: list[int], scored_from: int, kv_dtype: str | None,
                  scales: LayerScales | None = None) -> torch.Tensor:
        """Log-probabilities at every position that predicts a token from ``scored_from`` on."""
        import torch

        self._set_taps(kv_dtype, scales)
        with torch.inference_mode():
            logits = self.model(torch.tensor([sequence])).logits[0, scored_from - 1:-1]
        return torch.log_softmax(logits.float(), dim=-1)

    def calibrate(self, exchanges: Sequence[tuple[str, str]] = CALIBRATION_EXCHANGES,
                  progress: ProgressSink | None = None,
                  cancel: threading.Event | None = None) -> tuple[list[float], list[float]]:
        """Per-layer max |K| and |V| over whole exchanges, one forward pass each (turn into scales with
        LayerScales.from_amax), as llm-compressor's min-max observer does over its calibration set."""
        import torch

        for tap in self.taps:
            tap.k_amax = tap.v_amax = 0.0
        for index, (question, answer) in enumerate(exchanges):
            _check(cancel)
            self._set_taps(None, observe=True)
            with torch.inference_mode():
                self.model(torch.tensor([self.exchange_ids(question, answer)]))
            self._set_taps(None)
            if progress:
                progress((index + 1) / len(exchanges), f"calibration text {index + 1}/{len(exchanges)}")
        return [t.k_amax for t in self.taps], [t.v_amax for t in self.taps]


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise CheckCancelled("cancelled")


def compare(reference: torch.Tensor, rounded: torch.Tensor) -> tuple[int, float, int]:
    """(top-1 matches, summed KL(reference || rounded), positions) between two log-prob tables."""
    import torch

    matches = int((reference.argmax(-1) == rounded.argmax(-1)).sum())
    kl = torch.nn.functional.kl_div(rounded, reference, log_target=True, reduction="sum")
    return matches, float(kl), int(reference.shape[0])


def run_quality_check(model_dir: Path, *, prompts: Sequence[str] = REASONING_PROMPTS, tokens: int = 128,
                      variants: Sequence[str] = VARIANTS, calibrated: dict[str, LayerScales] | None = None,
                      calibrate_with: Sequence[tuple[str, str]] | None = CALIBRATION_EXCHANGES,
                      trust_remote_code: bool = False,
                      progress: ProgressSink | None = None, cancel: threading.Event | None = None,
                      quality_model: KvQualityModel | None = None) -> QualityReport:
    """Scale-1.0 and calibrated rows for each FP8 variant against the unrounded cache.

    ``calibrated`` supplies scales (for example read back from a calibrated folder); otherwise they
    are computed from ``calibrate_with``, or the calibrated rows are left out when that is None.
    """
    started = time.perf_counter()
    say = progress or (lambda fraction, message: None)
    if quality_model is None:
        say(0.0, "loading the model in transformers")
    qm = quality_model or KvQualityModel(model_dir, trust_remote_code=trust_remote_code)
    _check(cancel)
    scales: dict[str, LayerScales] = dict(calibrated or {})
    missing = [v for v in variants if v not in scales]
    if missing and calibrate_with:
        k_amax, v_amax = qm.calibrate(calibrate_with, cancel=cancel,
                                      progress=lambda fraction, message: say(0.05 + 0.35 * fraction, message))
        for variant in missing:
            scales[variant] = LayerScales.from_amax(variant, k_amax, v_amax)

    plans = [(v, "1.0", None) for v in variants] + [(v, "calibrated", scales[v]) for v in variants if v in scales]
    totals = {(v, s): [0, 0.0, 0] for v, s, _ in plans}
    prompt_ids = [qm.prompt_ids(prompt) for prompt in prompts]
    say(0.4, f"{len(prompts)} prompt(s): the unrounded continuations")
    continuations = qm.continuations(prompt_ids, tokens, cancel)
    for index, (ids, continuation) in enumerate(zip(prompt_ids, continuations, strict=True)):
        _check(cancel)
        say(0.6 + 0.4 * index / len(prompts), f"prompt {index + 1}/{len(prompts)}: the rounded caches")
        sequence = ids + continuation
        reference = qm.log_probs(sequence, len(ids), None)
        for variant, scale_kind, layer_scales in plans:
            _check(cancel)
            matches, kl, count = compare(reference, qm.log_probs(sequence, len(ids), variant, layer_scales))
            total = totals[(variant, scale_kind)]
            total[0] += matches
            total[1] += kl
            total[2] += count
    say(1.0, "done")
    results = [VariantResult(v, s, t[0] / t[2], t[1] / t[2], int(t[2])) for (v, s), t in totals.items()]
    return QualityReport(model=str(model_dir), prompts=len(prompts), tokens_per_prompt=tokens,
                         seconds=time.perf_counter() - started, results=results,
                         calibrated_from=len(calibrate_with or ()) if missing else 0)


@dataclass(frozen=True)
class Advice:
    kv_dtype: str
    confidence: str  # "high", "medium" or "low"
    reason: str


def advise(report: QualityReport, fp8_runs_here: bool, unsupported_reason: str | None = None, *,
           scales_in_folder: bool = False) -> Advice:
    """Turn a quality report into a recommendation a user can act on.

    The advice is about the scales vLLM will really use: the folder's own (``scales_in_folder``, a
    calibrated folder) or 1.0. Better calibrated rows of an uncalibrated folder become a tip to calibrate.
    """
    e4m3 = report.result("fp8_e4m3", "calibrated" if scales_in_folder else "1.0")
    if e4m3 is None:
        return Advice("auto", "low", "No E4M3 measurement: run the quality check.")
    scored = report.prompts * report.tokens_per_prompt
    # With n scored tokens, one disagreement moves agreement by 1/n; few tokens, little confidence.
    confidence = "high" if scored >= 300 else "medium" if scored >= 100 else "low"
    which = "this folder's calibrated scales" if scales_in_folder else "scale 1.0, as vLLM runs this folder"
    figures = (f"E4M3 ({which}) agrees with the unrounded cache on {e4m3.top1_agreement:.1%} of next tokens, "
               f"mean KL {e4m3.mean_kl:.4f}")
    calibrated = None if scales_in_folder else report.result("fp8_e4m3", "calibrated")
    tip = ""
    if calibrated and (calibrated.top1_agreement >= e4m3.top1_agreement + 0.01
                       or calibrated.mean_kl <= e4m3.mean_kl / 2):
        tip = (f" Calibrated scales reach {calibrated.top1_agreement:.1%} (KL {calibrated.mean_kl:.4f}): "
               "run the calibration and use the calibrated model.")
    if not fp8_runs_here:
        return Advice("auto", confidence, f"{figures}, but this machine can't run an FP8 KV cache: "
                      f"{(unsupported_reason or 'not supported').rstrip('.')}.")
    if e4m3.top1_agreement >= 0.98 and e4m3.mean_kl <= 0.02:
        return Advice("fp8_e4m3", confidence, f"{figures}: FP8 keeps this model's choices, and doubles the "
                      f"context that fits.{tip}")
    if e4m3.top1_agreement >= 0.95:
        return Advice("fp8_e4m3", "medium" if confidence == "high" else "low",
                      f"{figures}: usable when you need the context, with some drift in long reasoning.{tip}")
    return Advice("auto", confidence, f"{figures}: too much drift; keep the KV cache at the model's precision.{tip}")
