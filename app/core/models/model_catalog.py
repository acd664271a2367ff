"""Models Nalar recommends on first run, planned against the VRAM this machine has.

Each entry ships its ``config.json`` in ``resources/model_configs`` so the planner works before
anything is downloaded (and offline). The recommendation is the planner's: the largest model whose
weights fit and that still has ``MIN_CONTEXT`` tokens of FP8 KV cache, so it follows the planner's
arithmetic instead of a hand-kept VRAM table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.models.hub_download import download_dir, is_complete
from app.core.models.model_folder import folder_problem
from app.core.models.planner import GIB, Plan, plan, utilization_for_free_vram
from app.core.settings import paths
from app.core.settings.settings import is_fp8

# R1-style models think for thousands of tokens before they answer: less context than this is no use.
MIN_CONTEXT = 8192
# What Nalar sets max_model_len to after a download: long enough to reason, short enough to start fast.
DEFAULT_CONTEXT_CAP = 32768
PLAN_DTYPES = ("fp8_e4m3", "auto")


@dataclass(frozen=True)
class CatalogModel:
    repo_id: str
    label: str
    config_name: str  # resources/model_configs/<config_name>.json: the base model's architecture
    weight_bytes: int  # the download's safetensors total, which is what sits in VRAM
    quantization: str  # "bf16" or "AWQ 4-bit"
    gpu_memory_utilization: float = 0.90
    note: str = ""
    draft: str = ""  # repo id of the catalog model that drafts for it (speculative decoding): same tokenizer

    def config(self) -> dict[str, Any]:
        path = paths.resources_dir() / "model_configs" / f"{self.config_name}.json"
        return json.loads(path.read_text(encoding="utf-8"))


# The R1 distills share Qwen2.5's tokenizer; the 1.5B one is distilled from the same R1 traces as the others.
R1_DRAFT = "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"

# Smallest first. Weight sizes are those of the published safetensors (AWQ keeps embeddings in 16 bit).
CATALOG: tuple[CatalogModel, ...] = (
    CatalogModel("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "DeepSeek-R1-Distill-Qwen-1.5B",
                 "DeepSeek-R1-Distill-Qwen-1.5B", int(3.55e9), "bf16"),
    CatalogModel("casperhansen/deepseek-r1-distill-qwen-7b-awq", "DeepSeek-R1-Distill-Qwen-7B (AWQ)",
                 "DeepSeek-R1-Distill-Qwen-7B", int(5.57e9), "AWQ 4-bit", draft=R1_DRAFT),
    CatalogModel("casperhansen/deepseek-r1-distill-qwen-14b-awq", "DeepSeek-R1-Distill-Qwen-14B (AWQ)",
                 "DeepSeek-R1-Distill-Qwen-14B", int(9.99e9), "AWQ 4-bit", draft=R1_DRAFT),
    # MXFP4 experts (the published safetensors; attention, router and embeddings stay bf16). vLLM runs the
    # experts on Marlin on RTX cards (engine/machine/gpt_oss_gate.py); its KV grows with its 12 full layers only.
    CatalogModel("openai/gpt-oss-20b", "gpt-oss-20b (MXFP4)", "gpt-oss-20b", int(13.76e9), "MXFP4",
                 gpu_memory_utilization=0.95,
                 note="Takes 95% of VRAM: close other programs that use the GPU. RTX 20xx or newer."),
    CatalogModel("Qwen/QwQ-32B-AWQ", "QwQ-32B (AWQ)", "QwQ-32B", int(19.76e9), "AWQ 4-bit",
                 gpu_memory_utilization=0.95,
                 note="Takes 95% of VRAM: close other programs that use the GPU."),
)


@dataclass(frozen=True)
class Recommendation:
    model: CatalogModel
    plan: Plan
    fits: bool  # the weights fit and at least MIN_CONTEXT tokens of FP8 KV cache remain
    max_context: dict[str, int]  # per KV dtype: the longest single conversation, capped by the model's own limit

    def recommended_context(self, kv_cache_dtype: str) -> int:
        """max_model_len to set: what fits at this KV dtype, capped so the engine starts quickly."""
        key = "fp8_e4m3" if is_fp8(kv_cache_dtype) else "auto"
        return max(256, min(self.max_context[key], DEFAULT_CONTEXT_CAP))

    def summary(self) -> str:
        fp8, bf16 = self.max_context["fp8_e4m3"], self.max_context["auto"]
        if self.fits:
            verdict = "fits"
        elif fp8 == 0:
            verdict = "too big: the weights don't fit"
        else:
            verdict = f"too tight: under {MIN_CONTEXT:,} tokens of context"
        return (f"{verdict} · {self.model.weight_bytes / GIB:.1f} GiB of weights ({self.model.quantization}) · "
                f"max context {fp8:,} tokens at fp8, {bf16:,} at bf16")


def plan_model(model: CatalogModel, vram_total_bytes: int, vram_free_bytes: int | None = None) -> Recommendation:
    """Planned at the model's memory share, or less where other programs hold VRAM now: vLLM refuses to
    start unless that share of the total is free (``vram_free_bytes``, from NVML)."""
    config = model.config()
    share = model.gpu_memory_utilization
    if vram_free_bytes is not None:
        share = utilization_for_free_vram(share, vram_free_bytes, vram_total_bytes)
    result = plan(config, model=model.repo_id, weight_bytes=model.weight_bytes,
                  max_model_len=MIN_CONTEXT, kv_dtypes=PLAN_DTYPES, vram_total_bytes=vram_total_bytes,
                  gpu_memory_utilization=share)
    limit = result.model_max_len or 1 << 30
    max_context = {row.kv_cache_dtype: min(row.capacity_tokens, limit) for row in result.rows}
    return Recommendation(model, result, max_context["fp8_e4m3"] >= MIN_CONTEXT, max_context)


def recommendations(vram_total_bytes: int, vram_free_bytes: int | None = None) -> list[Recommendation]:
    """Every catalog model, planned for this VRAM (and what of it is free), smallest first."""
    return [plan_model(model, vram_total_bytes, vram_free_bytes) for model in CATALOG]


def best(recs: list[Recommendation]) -> Recommendation | None:
    """The largest model that fits, or None when none does (the embedded model is then the choice)."""
    fitting = [r for r in recs if r.fits]
    return max(fitting, key=lambda r: r.model.weight_bytes) if fitting else None


def catalog_entry(model: str) -> CatalogModel | None:
    """The catalog model a setting names: its hub id, or the folder Nalar downloaded it to."""
    name = Path(model).expanduser().name if model else ""
    for entry in CATALOG:
        if model == entry.repo_id or (name and name == download_dir(entry.repo_id).name):
            return entry
    return None


@dataclass(frozen=True)
class DraftPairing:
    """The catalog's draft for a model. ``folder`` is its download when complete, else None (not here yet).
    ``heterogeneous_vocab``: the two vocabularies differ in size (the 1.5B distill has 151,936 rows, the 7B and
    14B 152,064 for one tokenizer), which vLLM refuses unless ``use_heterogeneous_vocab`` maps the tokens."""

    target: CatalogModel
    draft: CatalogModel
    folder: Path | None
    heterogeneous_vocab: bool


def draft_pairing(model: str) -> DraftPairing | None:
    """The catalog's pair for ``model``, or None when the catalog pairs it with nothing."""
    target = catalog_entry(model)
    draft = catalog_entry(target.draft) if target and target.draft else None
    if target is None or draft is None:
        return None
    folder = download_dir(draft.repo_id)
    differ = target.config().get("vocab_size") != draft.config().get("vocab_size")
    return DraftPairing(target, draft, folder if is_complete(folder) else None, differ)


def validate_model_folder(folder: Path) -> str | None:
    """None when vLLM can load this folder, else what is wrong and how to fix it."""
    problem = folder_problem(folder, need_weights=True)
    return None if problem is None else str(problem)
