"""Speculative decoding: vLLM's ``speculative_config`` for a setting, and which methods can run here.

Whether a method can run is vLLM's own decision: the engine arguments of this start, with the method's
speculative config, go through ``EngineArgs.create_engine_config`` (SpeculativeConfig and VllmConfig's
validation, with this model's config and this KV dtype), and its error text is the reason. No rule of
vLLM's is copied here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, get_args

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
        spec["model"] = config.draft_model or model  # no pairing: the model drafts for itself (a smoke test)
    return spec


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
