"""The planner's verdict for each file set of a hub repo on this machine, before anything is downloaded.

Reads only ``config.json`` and the weights' sizes (the hub's file metadata, else the safetensors index),
cached on disk by repo and commit (:class:`VerdictCache`). A GPU is planned with ``planner.plan`` on its VRAM
at the share vLLM may take; a CPU machine by RAM and bandwidth with the welcome dialog's numbers
(``cpu_catalog``: RAM_SHARE, RUNTIME_OVERHEAD_BYTES, CPU_CONTEXT).

The verdict is judged on the fp8 KV row (the longer context); both rows are given.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.core.hub.file_sets import LOADABLE, file_sets, folder_of, set_label
from app.core.hub.repo_facts import RepoFacts, VerdictCache, fetch_facts
from app.core.hub.search import FileSet, HubModel, HubOffline, check_online
from app.core.models import cpu_catalog
from app.core.models.hub_download import hub_endpoint
from app.core.models.model_catalog import DEFAULT_CONTEXT_CAP
from app.core.models.model_folder import folder_problem
from app.core.models.planner import (
    GIB,
    NVML_TO_CUDA_TOTAL,
    PlannerError,
    attention_shape,
    bandwidth_for,
    bytes_read_per_token,
    estimate_weight_bytes,
    gpu_overhead_bytes,
    plan,
    read_safetensors_weight_bytes,
    utilization_for_free_vram,
)

# Below this many tokens a context is no use for a reasoning model: "doesn't fit" rather than "fits with 512".
__all__ = ["FitVerdict", "MachineBudget", "VerdictCache", "catalog_models", "folder_verdict", "this_machine", "verdict",
           "verdicts_for"]

MIN_USABLE_CONTEXT = 2048
GPU_SHARE = 0.9  # vLLM's default gpu_memory_utilization, lowered when other programs hold VRAM


@dataclass(frozen=True)
class MachineBudget:
    """What this machine offers a model: GPU VRAM (free/total), or CPU RAM and measured bandwidth."""

    kind: Literal["gpu", "cpu"]
    memory_bytes: int  # VRAM total on a GPU, RAM total on a CPU
    bandwidth_gbps: float | None
    free_bytes: int | None = None  # free VRAM now (NVML), which limits vLLM's share; None on a CPU
    name: str = ""  # "NVIDIA GeForce RTX 4090", "CPU"

    def describe(self) -> str:
        speed = f", {self.bandwidth_gbps:.0f} GB/s" if self.bandwidth_gbps else ""
        if self.kind == "gpu":
            free = f" ({self.free_bytes / GIB:.1f} GiB free)" if self.free_bytes is not None else ""
            return f"{self.name or 'GPU'}: {self.memory_bytes / GIB:.1f} GiB VRAM{free}{speed}"
        return f"{self.name or 'CPU'}: {self.memory_bytes / GIB:.1f} GiB RAM{speed}"

    def usable_bytes(self) -> int:
        """What models may take of it: vLLM's share of the VRAM, or RAM_SHARE of the RAM."""
        if self.kind == "cpu":
            return int(cpu_catalog.RAM_SHARE * self.memory_bytes)
        return int(self.memory_bytes * NVML_TO_CUDA_TOTAL * self.gpu_share())

    def gpu_share(self) -> float:
        if self.free_bytes is None:
            return GPU_SHARE
        return utilization_for_free_vram(GPU_SHARE, self.free_bytes, self.memory_bytes)


def this_machine() -> MachineBudget:
    """The first GPU's VRAM (NVML), else this machine's RAM and measured bandwidth: the welcome dialog's source."""
    from app.core.models.gpus import read_nvidia_gpus

    gpus = read_nvidia_gpus()
    if gpus:
        gpu = gpus[0]
        return MachineBudget("gpu", gpu.vram_total_bytes, bandwidth_for(gpu.name), gpu.vram_free_bytes, gpu.name)
    return MachineBudget("cpu", cpu_catalog.ram_total_bytes(), cpu_catalog.host_bandwidth().gbps, None, "CPU")


@dataclass(frozen=True)
class FitVerdict:
    repo_id: str
    file_set: FileSet
    max_context_fp8: int  # 0 when it doesn't fit at all
    max_context_bf16: int
    ms_per_token_floor: float | None
    fits: Literal["fits", "shorter", "no"]
    needs_bytes: int
    have_bytes: int
    note: str = ""  # why it could not be planned (no config.json), or the planner's caveat

    def text(self) -> str:
        """"fits", "fits with context 12,288", "doesn't fit (needs 19.2 GiB, you have 16.0 GiB)"."""
        if self.fits == "fits":
            return "fits"
        if self.fits == "shorter":
            return f"fits with context {self.max_context_fp8:,}"
        if not self.needs_bytes:
            return f"can't tell: {self.note}"
        return f"doesn't fit (needs {self.needs_bytes / GIB:.1f} GiB, you have {self.have_bytes / GIB:.1f} GiB)"


def verdict(repo_id: str, file_set: FileSet, config: dict[str, Any] | None, budget: MachineBudget) -> FitVerdict:
    """The plan of one set on ``budget``: the longest context at fp8 and bf16 KV, the ms/token floor, the verdict."""
    have = budget.usable_bytes()
    try:
        if config is None:
            raise PlannerError("no config.json, so the planner can't size its KV cache")
        shape = attention_shape(config)
    except PlannerError as exc:
        return FitVerdict(repo_id, file_set, 0, 0, None, "no", 0, have, str(exc).rstrip("."))
    model_max = int(config.get("max_position_embeddings") or (config.get("text_config") or {}).get(
        "max_position_embeddings") or DEFAULT_CONTEXT_CAP)
    weights = file_set.weight_bytes
    if budget.kind == "gpu":
        target = min(model_max, DEFAULT_CONTEXT_CAP)
        overhead = gpu_overhead_bytes(config, have)
        result = plan(config, model=repo_id, weight_bytes=weights, max_model_len=target,
                      kv_dtypes=("fp8_e4m3", "auto"), vram_total_bytes=budget.memory_bytes,
                      gpu_memory_utilization=budget.gpu_share(), bandwidth_gbps=budget.bandwidth_gbps)
    else:
        target = min(model_max, cpu_catalog.CPU_CONTEXT)
        overhead = cpu_catalog.RUNTIME_OVERHEAD_BYTES
        result = plan(config, model=repo_id, weight_bytes=weights, max_model_len=target,
                      kv_dtypes=("fp8_e4m3", "auto"), cpu_kv_pool_bytes=max(0, have - weights - overhead),
                      bandwidth_gbps=budget.bandwidth_gbps)
    fp8, bf16 = (min(result.row(dtype).capacity_tokens, model_max) for dtype in ("fp8_e4m3", "auto"))
    fits: Literal["fits", "shorter", "no"] = "fits" if fp8 >= target else "shorter" if fp8 >= MIN_USABLE_CONTEXT \
        else "no"
    context = target if fits == "fits" else fp8 if fits == "shorter" else MIN_USABLE_CONTEXT
    needs = weights + overhead + shape.kv_bytes_per_token("fp8_e4m3") * context
    if fits == "no":
        fp8 = bf16 = 0
    return FitVerdict(repo_id, file_set, fp8, bf16, floor_ms(config, file_set, budget.bandwidth_gbps), fits, needs,
                      have, shape.note)


UNQUANTIZED_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0}


def floor_ms(config: dict[str, Any], file_set: FileSet, bandwidth_gbps: float | None) -> float | None:
    """ms/token floor as the welcome dialog gives it: bytes read per decoded token at EXPECTATION_CONTEXT (the
    weights but the input embedding's unread rows, plus fp8 KV) ÷ bandwidth. The weights' element size is the
    dtype's for an unquantized set, else taken from the set's real size (a 4-bit set reads about a quarter)."""
    if not bandwidth_gbps:
        return None
    weight_bytes = file_set.weight_bytes
    try:
        per_parameter = UNQUANTIZED_BYTES.get(file_set.label.split(" ")[0]) or \
            weight_bytes / estimate_weight_bytes(config, 1.0)
        read = bytes_read_per_token(config, context_tokens=cpu_catalog.EXPECTATION_CONTEXT, kv_dtype="fp8_e4m3",
                                    weight_element_bytes=per_parameter)
    except (KeyError, ValueError, TypeError, ZeroDivisionError, PlannerError):  # not a dense decoder's config
        read = weight_bytes
    return read / (bandwidth_gbps * 1e9) * 1000


def verdicts_for(repo_id: str, budget: MachineBudget, *, cache: VerdictCache | None = None,
                 endpoint: str | None = None, commit: str | None = None) -> list[FitVerdict]:
    """One verdict per file set of ``repo_id``. ``commit`` (a search result's ``sha``): answered from the cache
    without a request when that commit was seen. An unreachable hub answers from the last commit cached, else
    raises HubOffline; a gated repo raises HubGated."""
    endpoint = (endpoint or hub_endpoint()).rstrip("/")
    cache = cache or VerdictCache()
    facts = cache.get(repo_id, commit) if commit else None
    if facts is None:
        try:
            check_online(endpoint)
            facts = fetch_facts(repo_id, endpoint, cache)
        except HubOffline:
            facts = cache.latest(repo_id)
            if facts is None:
                raise
    return [verdict(repo_id, fs, config_for(facts, fs), budget)
            for fs in file_sets(facts.files, facts.configs, facts.index_totals)]


def folder_verdict(folder: Path, budget: MachineBudget) -> FitVerdict | None:
    """The verdict of a model folder on disk (a download, a hub-cache snapshot, a folder the user added), from its
    own config.json and weights only: no hub, so it works offline and for a repo the hub no longer lists. The
    weights are the safetensors headers' tensor sizes, else the files' sizes (a header that can't be read). None
    when the folder has a ``model_folder.folder_problem`` (that problem is the reason, shown with the entry)."""
    if folder_problem(folder, need_weights=True) is not None:
        return None
    loaded = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config = loaded if isinstance(loaded, dict) else None  # not an object: verdict() says "can't tell"
    weights = _weight_bytes(folder)
    label = set_label(config)
    loadable = label in LOADABLE
    file_set = FileSet(label, tuple(sorted(path.name for path in folder.glob("*.safetensors"))), weights, loadable,
                       "" if loadable else f"{label}: not a format vLLM runs here")
    return verdict(folder.name, file_set, config, budget)


def _weight_bytes(folder: Path) -> int:
    """The headers' tensor sizes; the files' sizes when a header is not one (its declared length past the file's
    end would make the planner's reader allocate it)."""
    files = sorted(folder.glob("*.safetensors"))
    sizes = sum(path.stat().st_size for path in files)
    try:
        for path in files:
            with path.open("rb") as handle:
                (length,) = struct.unpack("<Q", handle.read(8).ljust(8, b"\xff"))
            if length > path.stat().st_size - 8:
                return sizes
        return read_safetensors_weight_bytes(folder) or sizes
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return sizes


def config_for(facts: RepoFacts, file_set: FileSet) -> dict[str, Any] | None:
    """The set's own folder's config.json (the top one for a GGUF set)."""
    first = next((name for name in file_set.files if name.endswith((".safetensors", ".gguf"))), "")
    folder = folder_of(first) if first.endswith(".safetensors") else ""
    return facts.configs.get(folder)


def catalog_models(budget: MachineBudget) -> list[tuple[HubModel, list[FitVerdict]]]:
    """The welcome dialog's catalog (GPU and CPU entries) as HubModels with verdicts, offline: the browser's
    list when the hub can't be reached. The entries this machine kind is recommended from come first."""
    from app.core.models.model_catalog import CATALOG, CatalogModel
    from app.core.models.model_families import model_family

    first, second = (CATALOG, cpu_catalog.CPU_CATALOG) if budget.kind == "gpu" else (cpu_catalog.CPU_CATALOG, CATALOG)
    seen: set[str] = set()
    result = []
    entry: CatalogModel
    for entry in (*first, *second):
        if entry.repo_id in seen:
            continue
        seen.add(entry.repo_id)
        config = entry.config()
        label = entry.quantization.split()[0]
        family = model_family(entry.repo_id, config.get("model_type"))
        model = HubModel(entry.repo_id, 0, 0, None, None, (label,), None, False, f"{family.thinking} · {family.name}")
        file_set = FileSet(label, (), entry.weight_bytes, True, entry.note)
        result.append((model, [verdict(entry.repo_id, file_set, config, budget)]))
    return result
