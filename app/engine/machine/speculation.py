"""Speculative decoding: vLLM's ``speculative_config`` for a setting, and which methods can run here.

Whether a method can run is vLLM's own decision: the engine arguments of this start, with the method's
speculative config, go through ``EngineArgs.create_engine_config`` (SpeculativeConfig and VllmConfig's
validation, with this model's config and this KV dtype), and its error text is the reason. No rule of
vLLM's is copied here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from app.core.models.model_catalog import catalog_entry, draft_pairing
from app.core.models.planner import PlannerError, load_model_config
from app.core.settings.settings import EngineConfig, SpeculativeMethod
from app.engine.events import SpeculationVerdict

log = logging.getLogger(__name__)

METHODS: tuple[SpeculativeMethod, ...] = tuple(m for m in get_args(SpeculativeMethod) if m != "off")
NEEDS = {"ngram": "no extra model: proposes from the text so far",
         "suffix": "the arctic-inference package (PyPI); no extra model",
         "draft_model": "a draft model's weights and its KV cache (same tokenizer, much smaller)"}


def speculative_config(config: EngineConfig, model: str,
                       method: SpeculativeMethod | None = None) -> dict[str, Any] | None:
    """vLLM's ``speculative_config`` for ``method`` (the setting's by default); None for off."""
    method = config.speculative_method if method is None else method
    if method == "off":
        return None
    spec: dict[str, Any] = {"method": method, "num_speculative_tokens": config.num_speculative_tokens}
    if method == "ngram":
        spec.update(prompt_lookup_max=config.prompt_lookup_max, prompt_lookup_min=config.prompt_lookup_min)
    elif method == "suffix":
        spec.pop("num_speculative_tokens")  # suffix decides its own depth (vLLM defaults it to the tree's)
    elif method == "draft_model":
        spec.update(draft_model_spec(config.draft_model, model))
    return spec


def draft_model_spec(draft: str, model: str) -> dict[str, Any]:
    """The draft's part of the config: the setting's draft, else the catalog's pair once downloaded, else the
    model itself (a smoke test, never faster). Vocabularies of different sizes go through vLLM's token mapping,
    since its validation refuses them otherwise; the validation still judges the result."""
    pairing = draft_pairing(model)
    if not draft and pairing is not None and pairing.folder is not None:
        draft = str(pairing.folder)
    spec: dict[str, Any] = {"model": draft or model}
    sizes = vocab_size(spec["model"]), vocab_size(model)
    if None not in sizes and sizes[0] != sizes[1]:
        spec["use_heterogeneous_vocab"] = True
    return spec


def vocab_size(model: str) -> int | None:
    """What vLLM compares (the text model's vocab_size): from a local folder's config.json or the catalog's
    shipped one; None for a hub id Nalar has no config of."""
    entry = catalog_entry(model)
    try:
        config = load_model_config(Path(model).expanduser()) if entry is None else entry.config()
    except PlannerError:
        return None
    size = config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")
    return int(size) if size else None


def vllm_reason(exc: BaseException) -> str:
    """vLLM's message, on one line (pydantic wraps it in its own validation text)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            messages = [str(e.get("msg", "")) for e in errors()]
            if messages:
                return "; ".join(m.removeprefix("Value error, ") for m in messages)
        except (TypeError, AttributeError):
            pass
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def judge_method(engine_kwargs: dict[str, Any], spec: dict[str, Any],
                 build: Callable[..., Any] | None = None) -> str | None:
    """None when vLLM's config validation accepts ``spec`` with these engine arguments, else its reason."""
    if build is None:
        from vllm import AsyncEngineArgs
        build = AsyncEngineArgs
    try:
        build(**{**engine_kwargs, "speculative_config": dict(spec)}).create_engine_config()
    except Exception as exc:  # noqa: BLE001 - vLLM raises ValueError, ImportError, NotImplementedError…
        return vllm_reason(exc)
    return None


def judge_methods(config: EngineConfig, model: str, engine_kwargs: dict[str, Any]) -> tuple[SpeculationVerdict, ...]:
    """Every method judged by vLLM for this start's model and engine arguments (the KV dtype among them)."""
    base = {k: v for k, v in engine_kwargs.items() if k != "speculative_config"}
    verdicts = []
    for method in METHODS:
        spec = speculative_config(config, model, method)
        assert spec is not None
        verdicts.append(SpeculationVerdict(method, judge_method(base, spec)))
        log.info("speculative decoding %s: %s", method, verdicts[-1].reason or "vLLM accepts it here")
    return tuple(verdicts)
