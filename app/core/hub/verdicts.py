"""The planner's verdict for each file set of a hub repo on this machine, before anything is downloaded.

Reads only ``config.json`` and the weights' sizes (the hub's file metadata, else the safetensors index),
cached on disk by repo and commit. A GPU is planned with ``planner.plan`` on its VRAM; a CPU machine by RAM
and measured bandwidth with the welcome dialog's arithmetic (``cpu_catalog``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from app.core.hub.search import FileSet, HubModel


@dataclass(frozen=True)
class MachineBudget:
    """What this machine offers a model: GPU VRAM (free/total), or CPU RAM and measured bandwidth."""

    kind: Literal["gpu", "cpu"]
    memory_bytes: int  # VRAM total on a GPU, RAM total on a CPU
    bandwidth_gbps: float | None
    free_bytes: int | None = None  # free VRAM now (NVML), which limits vLLM's share; None on a CPU
    name: str = ""  # "NVIDIA GeForce RTX 4090", "CPU"

    def describe(self) -> str:
        raise NotImplementedError


def this_machine() -> MachineBudget:
    """The first GPU's VRAM (NVML), else this machine's RAM and measured bandwidth: the welcome dialog's source."""
    raise NotImplementedError


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

    def text(self) -> str:
        """"fits", "fits with context 12,288", "doesn't fit (needs 19.2 GiB, you have 16.0 GiB)"."""
        raise NotImplementedError


class VerdictCache:
    """config.json and weight sizes per (repo, commit), on disk under the data dir: a verdict for a new budget
    needs no network."""

    def __init__(self, folder: Path | None = None) -> None:
        raise NotImplementedError


def verdicts_for(repo_id: str, budget: MachineBudget, *, cache: VerdictCache | None = None,
                 endpoint: str | None = None) -> list[FitVerdict]:
    """One verdict per file set of ``repo_id``. Raises HubOffline, HubGated."""
    raise NotImplementedError


def catalog_models(budget: MachineBudget) -> list[tuple[HubModel, list[FitVerdict]]]:
    """The welcome dialog's catalog (GPU and CPU entries) as HubModels with verdicts, offline: the browser's
    list when the hub can't be reached."""
    raise NotImplementedError
