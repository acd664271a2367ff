"""Write calibrated FP8 KV scales where vLLM loads them: a compressed-tensors checkpoint, as llm-compressor makes.

The calibrated model is a new folder next to the source. Small files (config, tokenizer) are copied,
weight files are linked (hard link, else symlink), and one more file, ``kv_cache_scales.safetensors``,
holds a scalar ``<attention>.k_scale`` and ``<attention>.v_scale`` per layer. config.json gains
``quantization_config`` with a static per-tensor ``kv_cache_scheme``, which makes vLLM create and
load those parameters (vLLM ≥ 0.19 no longer computes scales, and uses 1.0 without them).
The scales are for FP8 E4M3: vLLM refuses E5M2 with a checkpoint that declares a KV scheme.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from app.core.measure.kv_quality import LayerScales

SCALES_FILE = "kv_cache_scales.safetensors"
MARK_FILE = "nalar-kv-calibration.json"
INDEX_FILE = "model.safetensors.index.json"

# What llm-compressor writes for a static FP8 KV cache with a min-max observer.
KV_CACHE_SCHEME = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True,
                   "group_size": None, "block_structure": None, "actorder": None, "observer": "minmax",
                   "observer_kwargs": {}}


class CalibrationError(ValueError):
    """The model can't take calibrated scales; the message says why and what to do."""


def calibrated_folder_for(model_dir: Path) -> Path:
    return model_dir.parent / f"{model_dir.name}-fp8-kv-calibrated"


def _quantization_config(config: dict[str, Any], model_dir: Path) -> dict[str, Any]:
    existing = config.get("quantization_config")
    if existing is None:
        return {"quant_method": "compressed-tensors", "format": "dense", "quantization_status": "compressed",
                "config_groups": {}, "ignore": [], "kv_cache_scheme": KV_CACHE_SCHEME}
    method = existing.get("quant_method")
    if method == "compressed-tensors":
        return {**existing, "kv_cache_scheme": KV_CACHE_SCHEME}
    raise CalibrationError(
        f"{model_dir} is already quantized with '{method}'. vLLM reads KV-cache scales only from "
        "compressed-tensors checkpoints (what llm-compressor writes), so calibrated scales can't be added "
        "to this one. Use the FP8 KV cache at scale 1.0, or an llm-compressor build of the model.")


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        try:
            target.symlink_to(source.resolve())
        except OSError:
            shutil.copy2(source, target)


def write_calibrated_model(model_dir: Path, scales: LayerScales, attention_names: list[str],
                           out_dir: Path | None = None, *, extra: dict[str, Any] | None = None) -> Path:
    """A copy of ``model_dir`` with ``scales`` where vLLM loads them; returns the new folder.

    ``attention_names`` are the checkpoint names of the attention modules (``model.layers.0.self_attn``…),
    in the order of ``scales``. An existing calibrated folder is replaced as a whole, never half-written.
    """
    import torch
    from safetensors.torch import save_file

    model_dir = Path(model_dir)
    if scales.kv_dtype != "fp8_e4m3":
        raise CalibrationError("vLLM loads checkpoint KV scales for FP8 E4M3 only; calibrate for fp8_e4m3.")
    if len(attention_names) != len(scales.k):
        raise CalibrationError(f"{len(scales.k)} scales for {len(attention_names)} attention layers.")
    config_path = model_dir / "config.json"
    if not config_path.is_file():
        raise CalibrationError(f"{model_dir} has no config.json: choose a Hugging Face model folder.")
    if not any(model_dir.glob("*.safetensors")):
        raise CalibrationError(f"{model_dir} has no .safetensors weights; vLLM needs them to load scales.")
    config = json.loads(config_path.read_text())
    config["quantization_config"] = _quantization_config(config, model_dir)

    out = Path(out_dir) if out_dir else calibrated_folder_for(model_dir)
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for item in model_dir.iterdir():
        if item.name in ("config.json", INDEX_FILE, MARK_FILE, SCALES_FILE) or not item.is_file():
            continue
        if item.suffix == ".safetensors":
            _link_or_copy(item, staging / item.name)
        else:
            shutil.copy2(item, staging / item.name)
    (staging / "config.json").write_text(json.dumps(config, indent=2))

    tensors = {}
    for name, k, v in zip(attention_names, scales.k, scales.v, strict=True):
        tensors[f"{name}.k_scale"] = torch.tensor(k, dtype=torch.float32)
        tensors[f"{name}.v_scale"] = torch.tensor(v, dtype=torch.float32)
    save_file(tensors, str(staging / SCALES_FILE), metadata={"format": "pt"})
    index_path = model_dir / INDEX_FILE
    if index_path.is_file():  # vLLM loads only the files a sharded model's index names
        index = json.loads(index_path.read_text())
        index.setdefault("weight_map", {}).update({name: SCALES_FILE for name in tensors})
        (staging / INDEX_FILE).write_text(json.dumps(index, indent=2))

    mark = {"source": str(model_dir.resolve()), "kv_dtype": scales.kv_dtype, "created": time.strftime("%Y-%m-%d %H:%M"),
            "attention": attention_names, "k_scale": list(scales.k), "v_scale": list(scales.v), **(extra or {})}
    (staging / MARK_FILE).write_text(json.dumps(mark, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def read_calibrated_scales(model_dir: Path) -> LayerScales | None:
    """The scales a calibrated folder holds (from its scales file, the one vLLM reads), or None."""
    from safetensors import safe_open

    path = Path(model_dir) / SCALES_FILE
    if not path.is_file():
        return None
    with safe_open(str(path), framework="pt") as f:
        names = sorted({key.rsplit(".", 1)[0] for key in f.keys()}, key=_layer_order)
        k = tuple(float(f.get_tensor(f"{name}.k_scale")) for name in names)
        v = tuple(float(f.get_tensor(f"{name}.v_scale")) for name in names)
    return LayerScales("fp8_e4m3", k, v)


def _layer_order(name: str) -> tuple[int, str]:
    numbers = [int(part) for part in name.split(".") if part.isdigit()]
    return (numbers[0] if numbers else -1, name)


def vllm_loaded_scales(model: Any) -> list[tuple[float, float]]:
    """(k_scale, v_scale) per attention layer as a loaded vLLM model holds them.

    Runs inside vLLM's worker through ``LLM.apply_model``, so it must stay a module-level function.
    """
    return [(float(module._k_scale_float), float(module._v_scale_float)) for module in model.modules()
            if hasattr(module, "_k_scale_float") and hasattr(module, "kv_cache_dtype")]
