"""Which FP8 KV scales a model runs with, said where the user sees the KV cache.

vLLM reads per-layer k/v scales from a compressed-tensors checkpoint (``kv_cache_scheme``, as
llm-compressor or `nalar calibrate` writes it) and otherwise uses 1.0, with a warning in a log no one
reads. Every GPU model in the catalog is AWQ, and vLLM reads scales only from compressed-tensors
checkpoints, so those always run at 1.0: we say so, and why.
"""

from __future__ import annotations

import json
from pathlib import Path

from app.core.settings.settings import is_fp8

CHECK = "`nalar kv-check --engine` measures what fp8 changes in this model's answers."


def fp8_scales_text(kv_cache_dtype: str, model_dir: Path | None) -> str:
    """One sentence for the settings dialog and the KV gauge's tooltip; "" for a 16-bit KV cache."""
    if not is_fp8(kv_cache_dtype):
        return ""
    quant: dict[str, object] = {}
    if model_dir is not None:
        try:
            config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
            quant = config.get("quantization_config") or {}
        except (OSError, ValueError, AttributeError):
            quant = {}
    if quant.get("kv_cache_scheme"):
        return f"fp8, calibrated scales (from the checkpoint). {CHECK}"
    method = str(quant.get("quant_method") or "")
    if method.lower() in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        return (f"fp8, scales 1.0 (uncalibrated): this model's weights are {method.upper()}, and vLLM reads KV "
                "scales only from compressed-tensors checkpoints, so they can't be calibrated. "
                f"{CHECK}")
    return f"fp8, scales 1.0 (uncalibrated): `nalar calibrate` writes calibrated scales. {CHECK}"


def model_folder(model: str) -> Path | None:
    """The local folder of a loaded model ("scripted-double" and hub ids have none)."""
    path = Path(model).expanduser()
    return path if path.is_dir() else None
