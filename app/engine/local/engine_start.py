"""One start of vLLM's AsyncLLM in this process: the model found, the StartPlan decided, the engine built,
its figures read. EngineHost runs one LocalStart per start and keeps what it returns."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from app.core.models.model_families import model_family
from app.core.models.model_folder import folder_problem, looks_local
from app.core.settings.settings import EngineConfig
from app.engine.errors import NO_SPECULATION, EngineFailure, FailureKind
from app.engine.events import EngineReady, SpeculationVerdict, StartPlan
from app.engine.local import import_warmup, vllm_logging
from app.engine.local.kv_stats import KvStats, stat_logger_class
from app.engine.local.reply_prompt import ReplyPrompts
from app.engine.local.start_failures import classify_start_failure
from app.engine.local.start_progress import StartWatcher
from app.engine.machine import capability, cpu_runtime, speculation
from app.engine.machine.orphans import (
    children_since,
    end_orphans,
    end_processes,
    owner_environment,
    record_engine_processes,
)
from app.engine.machine.start_plan import check_machine, plan_start

log = logging.getLogger(__name__)
Status = Callable[[str, str, float | None], None]  # (state, message, progress), as EngineBase._status takes it


def check_model_path(model: str) -> Path | None:
    """A local model folder must be one vLLM can load (see app.core.models.model_folder). Hub ids pass through."""
    if not looks_local(model):
        return None
    path = Path(model).expanduser()
    problem = folder_problem(path)
    if problem is not None:
        raise EngineFailure(FailureKind.MODEL_NOT_FOUND, problem.message, problem.fix)
    return path


def engine_arguments(plan: StartPlan, model: str, on_cpu: bool, kv_block_size: int | None) -> dict[str, Any]:
    """vLLM's engine arguments for this plan."""
    config = plan.config
    kwargs: dict[str, Any] = dict(
        model=model,
        kv_cache_dtype=config.kv_cache_dtype,  # our names are vLLM's ("fp8_e4m3", not the alias "fp8")
        max_model_len=config.max_model_len,
        enable_prefix_caching=config.enable_prefix_caching,
        enforce_eager=on_cpu if config.enforce_eager is None else config.enforce_eager,
        trust_remote_code=config.trust_remote_code,
    )
    if kv_block_size:
        kwargs["block_size"] = kv_block_size
    if (spec := speculation.speculative_config(config, model)) is not None:
        kwargs["speculative_config"] = spec
    # Forced tool calls and JSON answers without free whitespace: small models fill their tokens with
    # newlines inside the JSON otherwise (xgrammar reads this engine-wide, not per request).
    from vllm.config import StructuredOutputsConfig
    kwargs["structured_outputs_config"] = StructuredOutputsConfig(backend="xgrammar", disable_any_whitespace=True)
    if on_cpu:
        kwargs["kv_cache_memory_bytes"] = int(config.cpu_kv_cache_gib * (1 << 30))
        kwargs["distributed_executor_backend"] = cpu_runtime.model_executor()
    else:
        kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
        kwargs["tensor_parallel_size"] = config.tensor_parallel_size
    return kwargs


@dataclass
class LoadedEngine:
    """What a start leaves: vLLM's engine client, its figures, and its prompts."""

    engine: Any
    ready: EngineReady
    prompts: ReplyPrompts
    processes: list[tuple[int, float]]  # (pid, start time) of the engine's processes


class LocalStart:
    """The steps of one start. ``loading_since`` is set while vLLM loads: closing then ends what it spawned."""

    def __init__(self, status: Status, kv: KvStats) -> None:
        self._status = status
        self.kv = kv
        self.engine_log = vllm_logging.engine_log_path()
        self.phases: list[tuple[str, float]] = []  # as vLLM logged them
        self.loading_since: set[int] | None = None  # our child pids before the load began, while it runs

    async def run(self, config: EngineConfig, kv_block_size: int | None = None) -> LoadedEngine:
        """Check and resolve the model, plan, import vLLM, build the engine, read its figures."""
        started = time.perf_counter()
        plan, model, local_path = await self._plan(config)
        on_cpu = capability.probe_hardware().engine_kind == "cpu"
        self.engine_log = vllm_logging.configure_vllm_logging()
        # Children inherit this, so leftovers from a crash can be told apart from anyone else's vLLM.
        os.environ.update(owner_environment())
        os.environ.update(dict(plan.environment))  # EngineCore and its compilers inherit it
        self._status("loading", "importing vLLM…", 0.15)
        with import_warmup.engine_loading():
            from vllm import AsyncEngineArgs
        kwargs = engine_arguments(plan, model, on_cpu, kv_block_size)
        # Loading starts here for the user: judging the speculative methods runs vLLM's config validation once
        # per method (seconds on a busy machine) and belongs to the load.
        self._status("loading", "loading model… (this takes a while)", 0.2)
        verdicts = self._judge_speculation(plan.config, model, kwargs)
        if plan.attention_backend:
            log.info("vLLM is expected to choose the %s attention backend", plan.attention_backend)
        engine, processes = await self._build(AsyncEngineArgs(**kwargs), plan.config, on_cpu)
        loaded = self._read_ready(engine, plan, model, local_path, processes, started)
        loaded.ready = dataclasses.replace(loaded.ready, speculation=verdicts)
        return loaded

    @staticmethod
    def _judge_speculation(config: EngineConfig, model: str, kwargs: dict[str, Any]
                           ) -> tuple[SpeculationVerdict, ...]:
        """Every method as vLLM's validation judges it here (the Settings dialog greys out the refused ones);
        the chosen one refused fails the start now, with vLLM's reason, before any weights load."""
        verdicts = speculation.judge_methods(config, model, kwargs)
        chosen = next((v for v in verdicts if v.method == config.speculative_method), None)
        if chosen is not None and chosen.reason is not None:
            raise EngineFailure(FailureKind.SPECULATION_UNSUPPORTED,
                                f"vLLM refuses speculative decoding '{chosen.method}' here: {chosen.reason}",
                                "Set Settings → Engine → Speculative method to off"
                                + (", or install arctic-inference" if chosen.method == "suffix" else "") + ".",
                                NO_SPECULATION)
        return verdicts

    def end_load(self) -> None:
        """From another thread, while vLLM loads: the loop is blocked in from_engine_args, so a shutdown would
        wait for the whole load. Ending the processes it started makes the load fail now, and the loop free."""
        loading_since = self.loading_since
        if loading_since is not None:
            end_processes(children_since(loading_since), "closing while the engine loads: ending %d engine process(es)")

    async def _plan(self, config: EngineConfig) -> tuple[StartPlan, str, Path | None]:
        """End a crashed run's leftovers, check the machine (a refusal comes before any download), find the
        model (the embedded one by default), then plan the start for what is free now."""
        ended = await asyncio.get_running_loop().run_in_executor(None, end_orphans)
        if ended:
            self._status("loading", f"ended {ended} engine process(es) left by a crashed run", 0.03)
        facts = check_machine(config, capability.probe_hardware())
        model = config.model or await self._embedded_model()
        local_path = check_model_path(model)
        plan = plan_start(config, facts, local_path)
        for note in plan.notes:
            log.info("%s", note)
            self._status("loading", note, 0.06)
        return plan, model, local_path

    async def _embedded_model(self) -> str:
        from app.core.models.embedded_model import EmbeddedModelError, ensure_embedded_model

        self._status("loading", "preparing the embedded model…", 0.05)
        try:
            return str(await asyncio.get_running_loop().run_in_executor(
                None, lambda: ensure_embedded_model(lambda m, f: self._status("loading", m, 0.05 + 0.1 * f))))
        except EmbeddedModelError as exc:
            raise EngineFailure(FailureKind.MODEL_NOT_FOUND, str(exc).split("\n")[0],
                                "Check the network, then retry.") from exc

    async def _build(self, engine_args: Any, config: EngineConfig, on_cpu: bool
                     ) -> tuple[Any, list[tuple[int, float]]]:
        """vLLM's AsyncLLM (it starts EngineCore and loads the weights); its failures become typed ones."""
        from vllm.v1.engine.async_llm import AsyncLLM

        log_offset = vllm_logging.log_size(self.engine_log)
        children_before = {p.pid for p in psutil.Process().children(recursive=True)}
        self.loading_since = children_before
        try:
            # Blocks this loop for tens of seconds; nothing else runs here meanwhile.
            with cpu_runtime.engine_core_environment(enabled=on_cpu) as preloaded, import_warmup.engine_loading(), \
                    StartWatcher(self.engine_log, log_offset, not on_cpu,
                                 lambda line, done: self._status("loading", line, done)) as watcher:
                self.phases = watcher.phases_seen
                if preloaded:
                    log.info("EngineCore preloads %s", ", ".join(p.name for p in preloaded))
                engine = AsyncLLM.from_engine_args(engine_args, stat_loggers=[stat_logger_class(self.kv)])
        except Exception as exc:  # vLLM raises plain RuntimeError/ValueError: classify them
            log.warning("engine start failed: %s", exc)
            raise classify_start_failure(exc, vllm_logging.read_log_since(self.engine_log, log_offset), config,
                                         str(self.engine_log), on_cpu) from exc
        finally:
            self.loading_since = None
        processes = [(p.pid, p.create_time()) for p in children_since(children_before)]
        record_engine_processes()
        return engine, processes

    @staticmethod
    def _read_ready(engine: Any, plan: StartPlan, model: str, local_path: Path | None,
                    processes: list[tuple[int, float]], started: float) -> LoadedEngine:
        """The loaded engine's tokenizer, model family and capacity figures (from vLLM's own config)."""
        tokenizer = engine.get_tokenizer()
        model_type = None
        if local_path is not None:
            with contextlib.suppress(OSError, ValueError):
                model_type = json.loads((local_path / "config.json").read_text()).get("model_type")
        cache = engine.vllm_config.cache_config
        capacity = int(getattr(cache, "kv_cache_size_tokens", 0) or (cache.num_gpu_blocks or 0) * cache.block_size)
        max_model_len = engine.vllm_config.model_config.max_model_len
        ready = EngineReady(
            model=model, kv_cache_dtype=plan.config.kv_cache_dtype, max_model_len=max_model_len,
            kv_capacity_tokens=capacity,
            max_concurrency=float(getattr(cache, "kv_cache_max_concurrency", 0.0) or 0.0),
            load_seconds=time.perf_counter() - started, backend="local", plan=plan,
            reads_images=reads_images(engine.vllm_config.model_config))
        prompts = ReplyPrompts(tokenizer, model_family(model, model_type), max_model_len, plan.config.reasoning_mode)
        return LoadedEngine(engine, ready, prompts, processes)


def reads_images(model_config: Any) -> bool:
    """Whether vLLM runs this model as one of its multimodal models, with images as input: vLLM's registry
    decides from the config's architectures (ModelConfig.is_multimodal_model), so no list is kept here."""
    return bool(getattr(model_config, "is_multimodal_model", False))
