"""Search the Hugging Face hub (``HfApi.list_models``) and describe each result as a typed :class:`HubModel`.

Any hub mirror that serves ``/api/models`` works (``HF_ENDPOINT`` or the ``endpoint`` argument). An
unreachable hub raises :class:`HubOffline` at once (a short connect timeout), a gated or private repo
:class:`HubGated` naming ``hf auth login``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from app.core.models.hub_download import hub_endpoint
from app.core.models.hub_problems import first_line, hub_problem
from app.core.models.model_families import model_family

if TYPE_CHECKING:  # huggingface_hub is imported when a search starts, not with the window
    from huggingface_hub.hf_api import ExpandModelProperty_T

log = logging.getLogger(__name__)

SortKey = Literal["downloads", "trending"]
CONNECT_TIMEOUT_S = 3.0  # an unreachable hub is said at once: huggingface_hub's own retries take half a minute
# What a result shows, asked in one listing (no request per result).
EXPAND: list[ExpandModelProperty_T] = ["downloads", "likes", "lastModified", "tags", "gated", "cardData",
                                       "safetensors", "config", "pipeline_tag", "sha"]
# Quantization labels from hub tags and config.json's quant_method: the formats vLLM runs here, GGUF said apart.
QUANT_LABELS = {"fp8": "FP8", "awq": "AWQ", "gptq": "GPTQ", "compressed-tensors": "compressed-tensors",
                "mxfp4": "MXFP4", "gguf": "GGUF", "bitsandbytes": "bitsandbytes", "fbgemm_fp8": "FP8"}
DTYPE_LABELS = {"BF16": "bf16", "F16": "fp16", "F32": "fp32", "F8_E4M3": "FP8"}


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
    commit: str = ""  # the listing's sha: verdicts_for(commit=…) answers from its cache without a request


def search_models(query: str, *, sort: SortKey = "downloads", limit: int = 50, only_reasoning: bool = False,
                  endpoint: str | None = None) -> Iterator[HubModel]:
    """Text-generation models matching ``query``, best first; a generator, so results stream as pages arrive.

    ``only_reasoning``: only families whose Think behaviour is "hybrid" or "always". Raises HubOffline.
    """
    from huggingface_hub import HfApi

    endpoint = (endpoint or hub_endpoint()).rstrip("/")
    check_online(endpoint)
    api = HfApi(endpoint=endpoint)
    results = api.list_models(search=query or None, filter="text-generation", limit=limit, expand=EXPAND,
                              sort="trending_score" if sort == "trending" else "downloads")
    try:
        for info in results:
            model = hub_model(info)
            if only_reasoning and model.think.startswith("plain"):
                continue
            yield model
    except Exception as exc:
        raise hub_error(exc, endpoint, query or "the search") from None


def check_online(endpoint: str) -> None:
    """HubOffline within CONNECT_TIMEOUT_S when ``endpoint`` doesn't answer at all (one request, no retries)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    if constants.HF_HUB_OFFLINE:
        raise HubOffline(f"HF_HUB_OFFLINE is set, so Nalar does not ask {endpoint}. Fix: unset HF_HUB_OFFLINE; "
                         "meanwhile the catalog and the library work offline.")
    try:
        get_session().head(endpoint, timeout=CONNECT_TIMEOUT_S)
    except Exception as exc:
        raise HubOffline(offline_message(endpoint, exc)) from None


def offline_message(endpoint: str, exc: BaseException) -> str:
    return (f"{endpoint} can't be reached ({type(exc).__name__}): this machine is offline or the hub is down. "
            "Fix: check the network (or HF_ENDPOINT) and retry; the catalog and the library work offline.")


def hub_error(exc: BaseException, endpoint: str, what: str) -> RuntimeError:
    """The typed error for a failure of huggingface_hub: HubGated for a login or licence the hub wants and for a
    repo it doesn't know, HubOffline for connection failures, else a RuntimeError with the hub's first line."""
    if isinstance(exc, (HubOffline, HubGated)):
        return exc
    problem = hub_problem(exc)
    if problem == "gated":
        return HubGated(f"{what} is gated or private on {endpoint}: accept its licence on the model's hub page, "
                        "then log in with `hf auth login` and retry.")
    if problem == "not_found":
        return HubGated(f"{what} was not found on {endpoint}, or it is private. Fix: check the id, or log in "
                        "with `hf auth login` if it is yours.")
    if problem == "unreachable":
        return HubOffline(offline_message(endpoint, exc))
    return RuntimeError(f"{endpoint} answered with an error for {what}: {first_line(exc)}. Fix: retry later.")


def hub_model(info: Any) -> HubModel:
    """A listing's ModelInfo as a HubModel (its fields are optional: a mirror may give fewer)."""
    config = info.config if isinstance(info.config, dict) else {}
    safetensors = info.safetensors
    parameters = int(safetensors.total) if safetensors is not None and safetensors.total else None
    card = info.card_data
    license_ = card.get("license") if card is not None else None
    family = model_family(info.id, config.get("model_type"))
    return HubModel(
        repo_id=info.id, downloads=int(info.downloads or 0), likes=int(info.likes or 0),
        last_modified=info.last_modified, parameters=parameters,
        quantizations=quantization_labels(info.tags or (), config,
                                          tuple(safetensors.parameters) if safetensors is not None else ()),
        license=str(license_) if license_ else None, gated=bool(info.gated),
        think=f"{family.thinking} · {family.name}", commit=str(info.sha or ""))


def quantization_labels(tags: Any, config: dict[str, Any], dtypes: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What the repo says of its quantization before its files are listed: config's quant_method, then tags,
    then the dtypes of the hub's safetensors count (BF16 → bf16)."""
    labels: list[str] = []
    quant = config.get("quantization_config")
    method = str(quant.get("quant_method", "")).lower() if isinstance(quant, dict) else ""
    for key in (method, *(str(tag).lower() for tag in tags)):
        label = QUANT_LABELS.get(key)
        if label and label not in labels:
            labels.append(label)
    if not labels:
        labels = [DTYPE_LABELS[d] for d in dtypes if d in DTYPE_LABELS][:1]
    return tuple(labels)
