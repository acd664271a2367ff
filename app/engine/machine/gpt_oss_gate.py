"""gpt-oss on an NVIDIA card: what vLLM 0.32 runs it with, read from its source.

* **MXFP4 MoE weights** (``fused_moe/oracle/mxfp4.py``, ``select_mxfp4_moe_backend``): vLLM walks its
  gpt-oss priority list and takes the first experts class whose ``is_supported_config`` passes.
  FlashInfer TRT-LLM needs SM 10.x; FlashInfer CUTLASS with bf16 activations is SM 9.0 only; the OAI Triton
  kernels need SM 9.0-12.x and on consumer Blackwell (12.x) are put after Marlin; Marlin runs from SM 7.5.
  So every RTX card from the 20 series on (7.5, 8.6, 8.9, 12.0) runs the experts on **Marlin** (weight-only
  4 bit, bf16 activations), and anything older has no backend at all.
* **Attention** (``platforms/cuda.py``'s priorities, each backend's ``validate_configuration``): gpt-oss
  has attention sinks (and a 128-token sliding window on every other layer, which every backend here
  takes). FlashAttention serves sinks only as FA3/FA4 (SM 9.0, 10.x; the CUDA wheel builds FA2 for 8.x and
  12.x); FlashInfer only through TRT-LLM's XQA decode kernels on 9.0/12.x, whose cubins come from NVIDIA's
  artifactory or the ``flashinfer-cubin`` package; Triton takes sinks anywhere. So an RTX 30xx/40xx runs
  **TRITON_ATTN**, a 50xx FLASHINFER with the cubins and TRITON_ATTN without. An FP8 KV cache then
  follows Triton's rule (8.9+, vLLM #26431): none on an RTX 30xx.

tests/engine/test_cuda_rehearsal.py runs vLLM's own selection with the device faked and checks both.
"""

from __future__ import annotations

import json
from pathlib import Path

from app.core.settings.settings import is_fp8

GPT_OSS_MODEL_TYPE = "gpt_oss"
MARLIN_MIN = (7, 5)


def is_gpt_oss(model: str, model_type: str | None = None) -> bool:
    """gpt-oss by config.json's model_type, else by the model's name (a hub id not downloaded yet)."""
    return model_type == GPT_OSS_MODEL_TYPE or (model_type is None and "gpt-oss" in model.lower())


def model_is_gpt_oss(model: str) -> bool:
    """``is_gpt_oss`` for a configured model: its folder's config.json where there is one, else its name."""
    try:
        model_type = json.loads((Path(model) / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        model_type = None
    return is_gpt_oss(model, model_type if isinstance(model_type, str) else None)


def mxfp4_moe_backend_for(cc: tuple[int, int]) -> str | None:
    """vLLM 0.32's MXFP4 MoE backend for gpt-oss at this compute capability (kernels as the CUDA wheel ships
    them: FlashInfer installed, no optional Humming or triton_kernels); None where none runs."""
    if cc[0] == 10:
        return "FLASHINFER_TRTLLM_MXFP4_BF16"
    if cc == (9, 0):
        return "FLASHINFER_CUTLASS_MXFP4_BF16"
    return "MARLIN" if cc >= MARLIN_MIN else None


def sink_attention_backend_for(kv_cache_dtype: str, cc: tuple[int, int], cubins: bool) -> str | None:
    """The attention backend vLLM 0.32 chooses for a model with attention sinks (gpt-oss), or None where
    the KV dtype can't run. ``cubins``: FlashInfer's TRT-LLM cubins can be had (artifactory or installed)."""
    fp8 = is_fp8(kv_cache_dtype)
    if cc[0] in (9, 10) and (not fp8 or (kv_cache_dtype == "fp8_e4m3" and cc[0] == 9)):
        return "FLASH_ATTN"  # FA3 on 9.0, FA4 on 10.x: the only FlashAttention builds with sinks
    if cubins and (cc == (9, 0) or cc[0] == 12):
        return "FLASHINFER"  # TRT-LLM's XQA decode kernel serves the sinks
    if fp8 and cc < (8, 9):
        return None  # Triton's fp8 KV fails at start below 8.9
    return "TRITON_ATTN"


def mxfp4_refusal(gpu_name: str, cc: tuple[int, int]) -> str | None:
    """Why this card can't run gpt-oss's MoE weights, or None where it can."""
    if mxfp4_moe_backend_for(cc) is not None:
        return None
    return (f"{gpu_name} (compute capability {cc[0]}.{cc[1]}) can't run gpt-oss's MXFP4 expert weights: "
            f"vLLM 0.32's slowest backend for them, Marlin, needs compute capability "
            f"{MARLIN_MIN[0]}.{MARLIN_MIN[1]}+ (RTX 20xx or newer).")
