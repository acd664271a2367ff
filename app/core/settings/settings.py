"""Nalar's settings: one typed, validated schema, stored as JSON in the config dir.

Every option is declared once here, with its range and description; the
settings dialog and the engine both read this schema, never a second list.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.core.settings import paths

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # 2: presets
SETTINGS_FILE = "settings.json"

KvCacheDtype = Literal["auto", "bfloat16", "fp8_e4m3", "fp8_e5m2"]
FP8_KV_DTYPES: frozenset[str] = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2"})  # "fp8": vLLM's alias, in old reports
SpeculativeMethod = Literal["off", "ngram", "suffix", "draft_model"]
KV_FALLBACK: KvCacheDtype = "auto"  # the dtype every engine runs: the model's own (bf16 or fp16)


def is_fp8(kv_cache_dtype: str) -> bool:
    """The KV dtype stores 8-bit floats (half the bytes per token of ``auto``)."""
    return kv_cache_dtype in FP8_KV_DTYPES


class EngineConfig(BaseModel):
    """What the engine is started with. Changing any of it needs an engine restart."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)

    model: str = Field("", description="Model folder or Hugging Face id; empty means the embedded SmolLM2-135M.")
    kv_cache_dtype: KvCacheDtype = Field("auto", description="Element type of the KV cache. fp8 halves its size.")
    max_model_len: int = Field(4096, ge=256, le=1_048_576, description="Context length in tokens.")
    gpu_memory_utilization: float = Field(
        0.85, gt=0.05, le=0.98, description="Share of VRAM vLLM may take for weights and KV cache (GPU only).")
    cpu_kv_cache_gib: float = Field(
        1.0, ge=0.0078125, le=512, description="KV cache pool size on the CPU engine (from 8 MiB: a saturation "
                                               "sweep wants a pool that fills).")
    enable_prefix_caching: bool = Field(True, description="Reuse the KV of a shared conversation prefix.")
    enforce_eager: bool | None = Field(
        None, description="Skip graph capture: faster start, slower decode. None: eager on CPU only.")
    trust_remote_code: bool = Field(False, description="Run Python code shipped with the model. Off unless opted in.")
    reasoning_mode: bool = Field(
        True, description="For models without native thinking: open <think> and give them a think budget.")
    tensor_parallel_size: int = Field(
        1, ge=1, le=64, description="Split the model across this many local GPUs (tensor parallel; GPU only).")
    # Off by default; `nalar bench spec`'s figures and why are in Settings and docs/BENCHMARKS.md.
    speculative_method: SpeculativeMethod = Field(
        "off", description="Speculative decoding: propose tokens cheaply, verify several per read of the weights. "
                           "ngram: prompt lookup (no extra model); suffix: Arctic Inference's suffix trees (needs "
                           "the arctic-inference package); draft_model: a small model of the same tokenizer.")
    num_speculative_tokens: int = Field(4, ge=1, le=16, description="Tokens proposed per step (speculation only).")
    prompt_lookup_max: int = Field(4, ge=1, le=64, description="Longest n-gram matched in the text so far (ngram).")
    prompt_lookup_min: int = Field(2, ge=1, le=64, description="Shortest n-gram matched (ngram).")
    draft_model: str = Field("", description="The draft model's folder or hub id (draft_model): same tokenizer "
                                             "as the model, much smaller. Empty: the catalog's pair once "
                                             "downloaded (R1 distills: the 1.5B distill).")


LoopAction = Literal["conclude", "resample", "stop", "warn"]
ReasoningEffort = Literal["low", "medium", "high"]  # gpt-oss's, as vLLM's server takes it


class LoopGuardConfig(BaseModel):
    """The loop guard: when a reply starts repeating itself, catch it and still give an answer."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)

    enabled: bool = Field(True, description="Watch every reply for thinking or answers that loop.")
    action: LoopAction = Field(
        "conclude", description="On a loop: conclude (cut the loop, ask for the answer), resample (retry from "
                                "the loop's start, hotter), stop, or only warn. A looping answer is always cut.")
    start_after_tokens: int = Field(256, ge=0, le=131_072, description="Tokens of the reply before checks start.")
    check_every_tokens: int = Field(16, ge=1, le=1024, description="Tokens between two checks.")
    max_period_tokens: int = Field(256, ge=4, le=4096, description="Longest exact repeat looked for, in tokens.")
    min_copies: int = Field(3, ge=2, le=100, description="Copies of a passage (4+ tokens) that make a loop.")
    min_loop_tokens: int = Field(64, ge=8, le=8192, description="Tokens the copies must cover together.")
    short_period_copies: int = Field(32, ge=4, le=1000, description="Copies needed for a 1-3 token repeat.")
    segment_min_chars: int = Field(40, ge=10, le=2000,
                                   description="Shortest sentence or line compared for near-duplicates.")
    similarity: float = Field(0.85, gt=0.0, le=1.0,
                              description="Word-trigram Jaccard at which two sentences count as the same.")
    similar_segments: int = Field(3, ge=2, le=50, description="Near-duplicate sentences that make a loop.")
    segment_window: int = Field(12, ge=2, le=200, description="How many recent sentences are compared.")
    list_item_copies: int = Field(
        16, ge=2, le=200, description="Near-duplicate list items (lines opening with 1., -, Step 3:) that make a "
                                      "loop: a list's lines may share one template and differ only in numbers.")
    resample_temperature: float = Field(
        0.9, ge=0.0, le=2.0, description="Temperature of a resample (at least this, and above the current one).")
    max_resamples: int = Field(2, ge=0, le=10, description="Resamples per reply before the guard concludes.")


class RequestControls(BaseModel):
    """What one API request asks for beyond the settings: the local API server fills it from the
    request's fields, the window leaves it at these defaults. Not shown in Settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stop: tuple[str, ...] = Field((), max_length=16, description="Stop sequences; the text ends before them.")
    seed: int | None = Field(None, ge=0, lt=2**63, description="Per-request seed for reproducible sampling.")
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    json_schema: str | None = Field(None, description="JSON text of a schema the answer must match "
                                                      "(structured outputs).")
    json_object: bool = Field(False, description="The answer must be one JSON object.")


MAX_THINK_BUDGET = 131_072  # "Unlimited": the reply is cut by the context first (LocalReply.room)
# The named think budgets (the per-chat control, and the API's reasoning_effort), in tokens.
THINK_BUDGET_LEVELS: dict[str, int] = {"low": 512, "medium": 2_048, "high": 8_192}


def budget_effort(budget: int) -> ReasoningEffort | None:
    """gpt-oss: a named budget (Low, Medium, High) is its reasoning effort; other numbers leave the effort be."""
    levels: dict[int, ReasoningEffort] = {THINK_BUDGET_LEVELS["low"]: "low", THINK_BUDGET_LEVELS["medium"]: "medium",
                                          THINK_BUDGET_LEVELS["high"]: "high"}
    return levels.get(budget)


class SamplingConfig(BaseModel):
    """Per-request sampling; defaults are those recommended for R1-style models."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)

    temperature: float = Field(0.6, ge=0.0, le=2.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0, le=1000, description="Sample from the k likeliest tokens; 0: all of them.")
    max_tokens: int = Field(1024, ge=1, le=131_072, description="Most answer tokens per reply.")
    repetition_penalty: float = Field(1.0, ge=1.0, le=2.0)
    think_budget: int = Field(1024, ge=0, le=MAX_THINK_BUDGET,
                              description="Most thinking tokens before the answer is forced.")
    thinking: bool = Field(True, description="The Think switch (each chat keeps its own; this is a new chat's). "
                                              "Qwen3: through the chat template; R1, QwQ: always on; "
                                              "other models: Nalar's reasoning mode.")
    reasoning_effort: ReasoningEffort = Field(
        "medium", description="gpt-oss, which always thinks: how long (Harmony's 'Reasoning: low|medium|high').")
    loop_guard: LoopGuardConfig = Field(default_factory=LoopGuardConfig)
    request: RequestControls = Field(default_factory=RequestControls)  # per API request; not in Settings

    def with_loop_guard(self, **changes: Any) -> SamplingConfig:
        """A validated copy with loop-guard fields changed (``model_copy(update=)`` would not validate)."""
        guard = LoopGuardConfig.model_validate({**self.loop_guard.model_dump(), **changes})
        return SamplingConfig.model_validate({**self.model_dump(), "loop_guard": guard.model_dump()})


class PresetValues(BaseModel):
    """What a preset sets for a chat: its system prompt, sampling, think budget and Think and Tools switches.

    A value left None follows Settings → Sampling (which follows the model card when a model is chosen), so the
    built-in Default is today's sampling, and a preset names only what it changes."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)

    system_prompt: str = Field("", max_length=20_000, description="Read by the model through its chat template "
                                                                  "(R1 distills: at the start of the first question).")
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="None: Settings → Sampling's.")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="None: Settings → Sampling's.")
    top_k: int | None = Field(None, ge=0, le=1000, description="Sample from the k likeliest tokens (0: all); "
                                                               "None: Settings → Sampling's.")
    max_tokens: int | None = Field(None, ge=1, le=131_072, description="Most answer tokens per reply; None: "
                                                                       "Settings → Sampling's.")
    think_budget: int | None = Field(None, ge=0, le=MAX_THINK_BUDGET, description="Most thinking tokens before the "
                                                                                  "answer is forced; None: Settings'.")
    thinking: bool | None = Field(None, description="The Think switch of a chat that takes this preset; "
                                                     "None: Settings' Think (new chats).")
    tools: bool | None = Field(None, description="The Tools switch of a chat that takes this preset; "
                                                 "None: Settings → Tools' switch of new chats.")
    knowledge: tuple[str, ...] = Field((), max_length=32, description="The knowledge collections a chat that takes "
                                       "this preset asks over (Knowledge… makes them); none: it asks without.")


class Preset(PresetValues):
    """A named set of chat values, chosen per chat beside the Think switch."""

    name: str = Field(min_length=1, max_length=64, description="Shown beside the Think switch.")


DEFAULT_PRESET = "Default"


def built_in_presets() -> tuple[Preset, ...]:
    """Default (today's sampling, no system prompt), Quick answer (a short think) and Careful proof (a long one)."""
    return (Preset(name=DEFAULT_PRESET),
            Preset(name="Quick answer", think_budget=THINK_BUDGET_LEVELS["low"],
                   system_prompt="Answer briefly and directly."),
            Preset(name="Careful proof", think_budget=THINK_BUDGET_LEVELS["high"], max_tokens=4096,
                   system_prompt="Reason carefully and check each step. Give a complete, rigorous proof."))


class PresetsConfig(BaseModel):
    """The presets a chat can take; ``default`` is what a new chat (and a chat without its own values) uses."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)

    presets: tuple[Preset, ...] = Field(default_factory=built_in_presets, min_length=1)
    default: str = Field(DEFAULT_PRESET, description="The preset of new chats.")

    @model_validator(mode="after")
    def _default_exists(self) -> PresetsConfig:
        names = [preset.name for preset in self.presets]
        if len(names) != len(set(names)):
            raise ValueError("two presets have the same name")
        if self.default not in names:
            raise ValueError(f"the default preset {self.default!r} is not in the list")
        return self

    def preset(self, name: str) -> Preset | None:
        return next((p for p in self.presets if p.name == name), None)

    @property
    def default_preset(self) -> Preset:
        return self.preset(self.default) or self.presets[0]


LOCAL_PROFILE = "local"


class EndpointProfile(BaseModel):
    """A remote OpenAI-compatible endpoint. Its API key lives in the OS keyring under ``name``, never here."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)

    name: str = Field(min_length=1, max_length=64, description="Shown in the UI and recorded with each reply.")
    base_url: str = Field(pattern=r"^https?://\S+$", description="For example http://gpu-box:8000/v1.")
    model: str = Field("", description="Model id on the server; empty means the first one it serves.")
    send_think_budget: bool = Field(
        False, description="Send the chat's think budget as thinking_token_budget (and gpt-oss's reasoning_effort): "
                           "vLLM servers take them, many others refuse a request that has them.")


class BackendsConfig(BaseModel):
    """Which engine answers: the local one or a remote profile, with an optional fallback."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)

    profiles: tuple[EndpointProfile, ...] = Field((), description="Remote endpoints (OpenAI-compatible).")
    active: str = Field(LOCAL_PROFILE, description="The backend that answers first: 'local' or a profile name.")
    fallback: str = Field("", description="Profile that answers when the active one can't; empty means none.")
    fallback_to_local: bool = Field(
        False, description="When the active backend is remote and fails, answer with the local engine.")
    first_token_budget_s: float = Field(
        5.0, ge=0.5, le=600, description="Seconds the active backend gets to send its first token.")

    def profile(self, name: str) -> EndpointProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


class ApiServerConfig(BaseModel):
    """Serve the loaded model to other apps on this machine. Its bearer token lives in the keyring."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)

    enabled: bool = Field(False, description="Serve an OpenAI-compatible API on 127.0.0.1.")
    port: int = Field(8765, ge=1024, le=65535, description="Port on 127.0.0.1.")


def _is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loopback_url_problem(url: str) -> str | None:
    """Why ``url`` can't be a tool server (None when it can): only http(s) on this machine's loopback."""
    parsed = urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return f"{url!r} is not an http:// or https:// URL."
    if not _is_loopback_host(parsed.hostname):
        return (f"{parsed.hostname} is not this machine: tool servers over HTTP must listen on loopback "
                "(127.0.0.1, ::1 or localhost). Run a remote server behind a local stdio command instead.")
    return None


class ToolServer(BaseModel):
    """An MCP server the user added: a command Nalar starts (stdio) or a streamable-HTTP URL on loopback."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$",
                      description="Shown with its tools; letters, digits, - _ and . only.")
    command: str = Field("", description="Executable to start (stdio); empty when the server is a URL.")
    args: tuple[str, ...] = Field((), description="The command's arguments, one per item (no shell).")
    url: str = Field("", description="Streamable-HTTP endpoint on loopback, e.g. http://127.0.0.1:8000/mcp.")

    @model_validator(mode="after")
    def _one_transport(self) -> ToolServer:
        if bool(self.command.strip()) == bool(self.url.strip()):
            raise ValueError("give either a command (stdio) or a URL, not both or neither")
        if self.url and (problem := loopback_url_problem(self.url)):
            raise ValueError(problem)
        return self


def tool_key(server: str, tool: str) -> str:
    """How settings name one tool of one server ("server/tool")."""
    return f"{server}/{tool}"


class ToolsConfig(BaseModel):
    """Tools from MCP servers. No tool runs without the user's approval unless it is in ``always_allow``."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)

    servers: tuple[ToolServer, ...] = Field((), description="MCP servers; their commands come only from here.")
    disabled: tuple[str, ...] = Field((), description="Tools switched off (server/tool): never offered to the model.")
    always_allow: tuple[str, ...] = Field((), description="Tools (server/tool) that run without asking each time.")
    call_timeout_s: float = Field(30.0, ge=1.0, le=3600.0, description="Seconds a tool call may take; then the "
                                                                        "model is told it timed out.")
    enabled: bool = Field(False, description="The Tools switch of new chats.")

    @model_validator(mode="after")
    def _unique_names(self) -> ToolsConfig:
        names = [server.name for server in self.servers]
        if len(names) != len(set(names)):
            raise ValueError("two tool servers have the same name")
        # A grant goes with its server: a server added later under the same name starts with none.
        kept = tuple(key for key in self.always_allow if key.split("/", 1)[0] in names)
        if kept != self.always_allow:
            object.__setattr__(self, "always_allow", kept)  # frozen model: set once, while it is validated
        return self

    def server(self, name: str) -> ToolServer | None:
        return next((s for s in self.servers if s.name == name), None)


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    schema_version: int = SCHEMA_VERSION
    engine: EngineConfig = Field(default_factory=EngineConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    backends: BackendsConfig = Field(default_factory=BackendsConfig)
    api_server: ApiServerConfig = Field(default_factory=ApiServerConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)  # absent in older files: defaults, no migration
    presets: PresetsConfig = Field(default_factory=PresetsConfig)  # schema 2 (MIGRATIONS[1] seeds them)

    def with_engine(self, **changes: Any) -> Settings:
        """These settings with engine fields changed, validated: the one way code changes an engine setting."""
        return changed(self, engine={**self.engine.model_dump(), **changes})


Model = TypeVar("Model", bound=BaseModel)


def changed(base: Model, /, **changes: Any) -> Model:
    """A copy of ``base`` with ``changes``, validated as a loaded file is (``model_copy(update=)`` is not).

    ``base`` is positional-only: ``model`` is also an EngineConfig field name.
    """
    return type(base).model_validate({**base.model_dump(), **changes})


# Migrations take the raw dict of version N and return version N + 1.
def _add_presets(raw: dict[str, Any]) -> dict[str, Any]:
    """1 → 2: the built-in presets (Default leaves the file's own sampling in charge). The version goes up so that
    an older Nalar leaves a file with presets untouched instead of moving it aside as unreadable."""
    raw.setdefault("presets", {"presets": [p.model_dump() for p in built_in_presets()], "default": DEFAULT_PRESET})
    return raw


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _add_presets}


def settings_path() -> Path:
    return paths.config_dir() / SETTINGS_FILE


def _migrate(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    version = int(raw.get("schema_version", SCHEMA_VERSION))
    if version > SCHEMA_VERSION:
        raise paths.DataUnavailable(f"Your settings ({path}) were written by a newer Nalar (schema {version}; this "
                                    f"one reads up to {SCHEMA_VERSION}).",
                                    "Run the newer Nalar, or update this one. The file was left untouched.")
    while version < SCHEMA_VERSION:
        raw = MIGRATIONS[version](raw)
        version += 1
        raw["schema_version"] = version
    return raw


def load_settings(path: Path | None = None) -> tuple[Settings, str | None]:
    """Load settings. Returns (settings, notice); the notice tells the user about a recovery.

    A file that can't be read as valid settings is moved aside and defaults load, so
    nothing the user wrote is lost and Nalar still starts. A file from a newer Nalar is not damaged:
    it raises DataUnavailable and stays as it is (saving defaults over it would lose it).
    """
    path = path or settings_path()
    if not path.exists():
        return Settings(), None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return Settings.model_validate(_migrate(raw, path) if isinstance(raw, dict) else raw), None
    except (OSError, ValueError, ValidationError, KeyError) as exc:
        backup = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        path.replace(backup)
        log.warning("settings file %s was unreadable (%s); moved to %s", path, type(exc).__name__, backup)
        return Settings(), (f"Your settings file could not be read ({_short_reason(exc)}). "
                            f"It was saved as {backup} and the defaults are in use.")


def _short_reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return str(exc).splitlines()[0][:200]


def save_settings(settings: Settings, path: Path | None = None) -> None:
    """Write atomically, so a crash mid-write never leaves a half file."""
    path = path or settings_path()
    paths.private_dir(path.parent)
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # a leftover from a crash could carry another mode: O_EXCL makes ours 0600
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, paths.PRIVATE_FILE)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(settings.model_dump_json(indent=2))
    os.replace(tmp, path)
