"""A repo's files grouped into the quantizations it offers (FileSets), from the hub's listing and config.json.

- The top folder's safetensors with its config.json and tokenizer: one set, labelled by config.json's
  ``quantization_config.quant_method`` (FP8, AWQ, …) or its dtype (bf16).
- A subfolder with its own config.json and safetensors (``FP8/``, ``AWQ/``): one set each.
- GGUF files: one set per file (a split GGUF's parts together), not loadable here: Nalar loads safetensors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from app.core.hub.search import QUANT_LABELS, FileSet
from app.core.models.hub_download import DEFAULT_ALLOW, DEFAULT_IGNORE, _wanted

# The formats vLLM runs here (issue 50): a set in any other is listed but not offered for download.
LOADABLE = {"bf16", "fp16", "fp32", "FP8", "AWQ", "GPTQ", "compressed-tensors", "MXFP4"}
DTYPE_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
GGUF_QUANT = re.compile(r"(?:^|[.\-_])((?:I?Q\d[A-Z0-9_]*?)|BF16|F16|F32)(?:[.\-]|$)", re.IGNORECASE)
GGUF_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$")
GGUF_NOTE = ("GGUF: Nalar loads safetensors only (vLLM's GGUF support is single-file and experimental); "
             "pick a safetensors set or another repo.")


@dataclass(frozen=True)
class RepoFile:
    name: str
    size: int  # 0 when the hub didn't say
    sha256: str | None  # the LFS hash, when the hub gives it


def folder_of(name: str) -> str:
    return name.rsplit("/", 1)[0] if "/" in name else ""


def set_label(config: dict[str, Any] | None) -> str:
    """FP8, AWQ, … from quant_method; else the weights' dtype (bf16 when config.json says none)."""
    config = config or {}
    quant = config.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method"):
        method = str(quant["quant_method"]).lower()
        return QUANT_LABELS.get(method, method)
    text = config.get("text_config") or {}
    dtype = config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype") or "bfloat16"
    return DTYPE_NAMES.get(str(dtype), str(dtype))


def weight_folders(files: tuple[RepoFile, ...]) -> list[str]:
    """Folders that hold safetensors outside the ignored ``original/`` copies, the top folder first."""
    folders = {folder_of(f.name) for f in files if f.name.endswith(".safetensors")
               and _wanted(f.name, DEFAULT_ALLOW, DEFAULT_IGNORE)}
    return sorted(folders, key=lambda folder: (folder != "", folder))


def file_sets(files: tuple[RepoFile, ...], configs: dict[str, dict[str, Any]],
              index_totals: dict[str, int] | None = None) -> list[FileSet]:
    """Every set of the repo. ``configs``: config.json by folder ("" for the top); ``index_totals``: the
    safetensors index's total_size by folder, used when the listing gives no sizes."""
    sets = []
    for folder in weight_folders(files):
        if folder and folder not in configs:
            continue  # a subfolder without its own config.json is not a model of its own
        mine = tuple(f for f in files if folder_of(f.name) == folder and _wanted(f.name, DEFAULT_ALLOW, DEFAULT_IGNORE))
        weights = sum(f.size for f in mine if f.name.endswith(".safetensors"))
        if not all(f.size for f in mine if f.name.endswith(".safetensors")):
            weights = (index_totals or {}).get(folder, weights)
        label = set_label(configs.get(folder))
        where = f"{folder}/ " if folder else ""
        loadable = label in LOADABLE and folder in configs
        note = "" if loadable else (f"{where}has no config.json" if folder not in configs
                                    else f"{label}: not a format vLLM runs here")
        sets.append(FileSet(f"{label} ({folder})" if folder else label, tuple(f.name for f in mine), weights,
                            loadable, note))
    for name, parts in _gguf_groups(files).items():
        match = GGUF_QUANT.search(name.rsplit("/", 1)[-1].removesuffix(".gguf"))
        label = f"GGUF {match.group(1).upper()}" if match else "GGUF"
        sets.append(FileSet(label, tuple(p.name for p in parts), sum(p.size for p in parts), False, GGUF_NOTE))
    return sets


def _gguf_groups(files: tuple[RepoFile, ...]) -> dict[str, list[RepoFile]]:
    groups: dict[str, list[RepoFile]] = {}
    for f in files:
        if f.name.endswith(".gguf"):
            groups.setdefault(GGUF_SPLIT.sub(".gguf", f.name), []).append(f)
    return groups
