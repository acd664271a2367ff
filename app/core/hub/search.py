"""Search the Hugging Face hub (``HfApi.list_models``) and describe each result as a typed :class:`HubModel`.

Any hub mirror that serves ``/api/models`` works (``HF_ENDPOINT`` or the ``endpoint`` argument). An
unreachable hub raises :class:`HubOffline` at once (a short connect timeout), a gated or private repo
:class:`HubGated` naming ``hf auth login``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

SortKey = Literal["downloads", "trending"]


class HubOffline(RuntimeError):
    """The hub can't be reached: the message names the endpoint and says the machine is offline or the hub down."""


class HubGated(RuntimeError):
    """A gated or private repo: the message names ``hf auth login``."""


@dataclass(frozen=True)
class FileSet:
    """One loadable quantization of a repo: the files it needs and their weight bytes."""

    label: str  # "bf16", "FP8", "AWQ", "GPTQ", "MXFP4", "compressed-tensors", "GGUF Q4_K_M" …
    files: tuple[str, ...]  # the repo files it needs (weights + config/tokenizer)
    weight_bytes: int
    loadable: bool  # can vLLM here load it
    note: str = ""  # why not, or a caveat


@dataclass(frozen=True)
class HubModel:
    repo_id: str
    downloads: int
    likes: int
    last_modified: datetime | None
    parameters: int | None  # from the hub's safetensors metadata when it gives it
    quantizations: tuple[str, ...]  # labels known from tags and config before the file listing
    license: str | None
    gated: bool
    think: str  # the family's Think behaviour: "hybrid · Qwen3", "always · DeepSeek-R1 distill", "plain · …"


def search_models(query: str, *, sort: SortKey = "downloads", limit: int = 50, only_reasoning: bool = False,
                  endpoint: str | None = None) -> Iterator[HubModel]:
    """Text-generation models matching ``query``, best first; a generator, so results stream as pages arrive.

    ``only_reasoning``: only families whose Think behaviour is "hybrid" or "always". Raises HubOffline.
    """
    raise NotImplementedError
