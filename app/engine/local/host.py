"""EngineHost: owns vLLM's AsyncLLM (its engine client) on the engine loop thread of the process it runs in.

In the app that is the engine process (app.engine.process.process_server), a child of the window; benchmarks and
commands may run it in their own process.

Every ``async def`` here runs on the engine loop. Other threads reach them with
``host.loop_thread.submit(...)`` (sync callers) or ``on_engine(...)`` (async
callers on another loop). ``generate`` is an async stream of typed events.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import psutil

from app.core.models.model_families import PLAIN, model_family
from app.core.models.model_folder import folder_problem, looks_local
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.base import EngineBase, EventSink, Message
from app.engine.errors import EngineFailure, FailureKind, engine_stopped
from app.engine.events import (
    ContextTrimmed,
    EngineErrorEvent,
    EngineEvent,
    EngineReady,
    Finished,
)
from app.engine.local import import_warmup, vllm_logging
from app.engine.local.kv_stats import KvStats, stat_logger_class
from app.engine.local.local_reply import LocalReply, ReplyRequests, answer_constraint, check_seed
from app.engine.local.start_failures import classify_start_failure
from app.engine.local.start_progress import StartWatcher
from app.engine.machine import capability, cpu_runtime, gpu_start
from app.engine.machine.orphans import (
    OWNER_ENV,
    children_since,
    end_orphans,
    other_owners_recorded,
    owner_tag,
    record_engine_processes,
    same_process,
)
from app.engine.reply import trimming
from app.engine.reply.reasoning import THINK_CLOSE, make_splitter, think_start_of_prompt
from app.engine.reply.stream import KvFigures, ReplyStream
from app.engine.reply.tool_calls import ToolCallGate, ToolOffer, forced_schema, gate_for, offer_of, template_messages
from app.engine.requests import Resume, ToolChoice, Tools

log = logging.getLogger(__name__)

REASONING_SYSTEM_PROMPT = ("You are a helpful assistant. Think step by step inside <think> and "
                           "</think>, then give a short, clear answer.")
FORCED_THINK_CLOSE = "\n" + THINK_CLOSE + "\n\n"
ORPHAN_RECHECK_S = 5.0
IGNORE_EOS_ENV = "NALAR_IGNORE_EOS"


def check_model_path(model: str) -> Path | None:
    """A local model folder must be one vLLM can load (see app.core.models.model_folder). Hub ids pass through."""
    if not looks_local(model):
        return None
    path = Path(model).expanduser()
    problem = folder_problem(path)
    if problem is not None:
        raise EngineFailure(FailureKind.MODEL_NOT_FOUND, problem.message, problem.fix)
    return path


def _engine_arguments(config: EngineConfig, model: str, probe: capability.HardwareProbe,
                      kv_block_size: int | None) -> dict[str, Any]:
    """vLLM's engine arguments for this config on this machine."""
    on_cpu = probe.engine_kind == "cpu"
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
    # Forced tool calls and JSON answers without free whitespace: small models fill their tokens with
    # newlines inside the JSON otherwise (xgrammar reads this engine-wide, not per request).
    from vllm.config import StructuredOutputsConfig
    kwargs["structured_outputs_config"] = StructuredOutputsConfig(backend="xgrammar", disable_any_whitespace=True)
    if on_cpu:
        kwargs["kv_cache_memory_bytes"] = int(config.cpu_kv_cache_gib * (1 << 30))
    else:
        kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
        kwargs["tensor_parallel_size"] = config.tensor_parallel_size
    if backend := capability.attention_backend_for(config.kv_cache_dtype, probe):
        log.info("vLLM is expected to choose the %s attention backend", backend)
    return kwargs


class EngineHost(EngineBase):
    """vLLM's engine client, in this process (EngineCore runs in vLLM's own child). Construct on any thread;
    its coroutines run on ``loop_thread``."""

    can_resume = True

    def __init__(self, on_status: EventSink | None = None) -> None:
        super().__init__(on_status)
        self._engine: Any = None
        self._tokenizer: Any = None
        self._family = PLAIN
        self.config: EngineConfig | None = None
        self.ready: EngineReady | None = None
        self.kv = KvStats()
        self.engine_log = vllm_logging.engine_log_path()
        self._engine_processes: list[tuple[int, float]] = []  # (pid, start time) of this engine's processes
        self._loading_since_children: set[int] | None = None  # our child pids before a load began, while it runs
        self._live: dict[str, str] = {}  # our request id → vLLM's current request id
        self._answer_now: set[str] = set()
        self._aborted: set[str] = set()
        self._orphan_watch: asyncio.Task[None] | None = None
        self.start_phases: list[tuple[str, float]] = []  # the last start's phases, as vLLM logged them

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self, config: EngineConfig, *, kv_block_size: int | None = None) -> EngineReady:
        """Load the model. Raises EngineFailure; the engine is then stopped and can start again.

        ``kv_block_size`` is for benchmarks (the saturation sweep's small pool); None is vLLM's choice.
        """
        if self._engine is not None:
            await self.shutdown()
        self._status("loading", "checking settings…", 0.02)
        try:
            ready = await self._start(config, kv_block_size)
        except EngineFailure as failure:
            self._status("failed", failure.message)
            raise
        self._status("ready", f"ready: {ready.model} · KV {ready.kv_cache_dtype} · "
                              f"{ready.kv_capacity_tokens:,} tokens", 1.0)
        if self._orphan_watch is None or self._orphan_watch.done():
            self._orphan_watch = asyncio.ensure_future(self._watch_for_orphans())
        return ready

    async def _watch_for_orphans(self) -> None:
        """Search again every few seconds while another Nalar's record is left: a crashed run whose
        parent hasn't reaped it yet, or one that dies later, must not keep its engine (and VRAM)."""
        loop = asyncio.get_running_loop()
        while await loop.run_in_executor(None, other_owners_recorded):
            await asyncio.sleep(ORPHAN_RECHECK_S)
            await loop.run_in_executor(None, end_orphans)  # it logs what it ends

    async def _start(self, config: EngineConfig, kv_block_size: int | None = None) -> EngineReady:
        """The steps of a start: check and resolve the model, import vLLM, build the engine, read its figures."""
        started = time.perf_counter()
        config, model, local_path, probe = await self._resolve_model(config)
        engine_log = self.engine_log = vllm_logging.configure_vllm_logging()
        # Children inherit this, so leftovers from a crash can be told apart from anyone else's vLLM.
        os.environ[OWNER_ENV] = owner_tag()
        self._status("loading", "importing vLLM…", 0.15)
        with import_warmup.engine_loading():  # torch's loading would freeze the window
            from vllm import AsyncEngineArgs
        kwargs = _engine_arguments(config, model, probe, kv_block_size)
        self._status("loading", "loading model… (this takes a while)", 0.2)
        await self._build_engine(AsyncEngineArgs(**kwargs), config, engine_log, on_cpu=probe.engine_kind == "cpu")
        self.config = config
        return self._read_ready(config, model, local_path, started)

    async def _resolve_model(self, config: EngineConfig
                             ) -> tuple[EngineConfig, str, Path | None, capability.HardwareProbe]:
        """End a crashed run's leftovers, check the KV dtype here, find the model (the embedded one by default),
        and on a GPU check the machine and fit the config to the free memory (app.engine.machine.gpu_start)."""
        ended = await asyncio.get_running_loop().run_in_executor(None, end_orphans)
        if ended:
            self._status("loading", f"ended {ended} engine process(es) left by a crashed run", 0.03)
        probe = capability.probe_hardware()
        reason = capability.kv_dtype_unsupported_reason(config.kv_cache_dtype, probe)
        if reason:
            raise EngineFailure(FailureKind.KV_DTYPE_UNSUPPORTED, reason,
                                "Use KV cache dtype 'auto' (bf16) on this machine.", {"kv_cache_dtype": "auto"})
        model = config.model
        if not model:
            from app.core.models.embedded_model import EmbeddedModelError, ensure_embedded_model

            self._status("loading", "preparing the embedded model…", 0.05)
            try:
                model = str(await asyncio.get_running_loop().run_in_executor(
                    None, lambda: ensure_embedded_model(lambda m, f: self._status("loading", m, 0.05 + 0.1 * f))))
            except EmbeddedModelError as exc:
                raise EngineFailure(FailureKind.MODEL_NOT_FOUND, str(exc).split("\n")[0],
                                    "Check the network, then retry.") from exc
        local_path = check_model_path(model)
        if probe.engine_kind == "cuda":  # driver, toolchain, kernels, then what is free now
            budget = gpu_start.prepare_gpu_start(config, probe, local_path)
            if budget.note:
                log.info("%s", budget.note)
                self._status("loading", budget.note, 0.06)
            config = budget.config
        os.environ.update(gpu_start.engine_environment(probe))  # EngineCore and its compilers inherit it
        return config, model, local_path, probe

    async def _build_engine(self, engine_args: Any, config: EngineConfig, engine_log: Path, *, on_cpu: bool) -> None:
        """vLLM's AsyncLLM (it starts EngineCore and loads the weights); its failures become typed ones."""
        from vllm.v1.engine.async_llm import AsyncLLM

        log_offset = vllm_logging.log_size(engine_log)
        self.kv = KvStats()
        children_before = {p.pid for p in psutil.Process().children(recursive=True)}
        self._loading_since_children = children_before
        try:
            # Blocks this loop for tens of seconds; nothing else runs here meanwhile. No local name
            # holds the engine: a traceback stored during vLLM's imports keeps this frame alive.
            with cpu_runtime.engine_core_environment(enabled=on_cpu) as preloaded, import_warmup.engine_loading(), \
                    StartWatcher(engine_log, log_offset, not on_cpu,
                                 lambda line, done: self._status("loading", line, done)) as watcher:
                self.start_phases = watcher.phases_seen
                if preloaded:
                    log.info("EngineCore preloads %s", ", ".join(p.name for p in preloaded))
                self._engine = AsyncLLM.from_engine_args(engine_args, stat_loggers=[stat_logger_class(self.kv)])
        except Exception as exc:  # vLLM raises plain RuntimeError/ValueError: classify them
            log.warning("engine start failed: %s", exc)
            raise classify_start_failure(exc, vllm_logging.read_log_since(engine_log, log_offset), config,
                                         str(engine_log), on_cpu) from exc
        finally:
            self._loading_since_children = None
        self._engine_processes = [(p.pid, p.create_time()) for p in children_since(children_before)]
        record_engine_processes()

    def _read_ready(self, config: EngineConfig, model: str, local_path: Path | None, started: float) -> EngineReady:
        """The loaded engine's tokenizer, model family and capacity figures (from vLLM's own config)."""
        self._tokenizer = self._engine.get_tokenizer()
        model_type = None
        if local_path is not None:
            with contextlib.suppress(OSError, ValueError):
                model_type = json.loads((local_path / "config.json").read_text()).get("model_type")
        self._family = model_family(model, model_type)
        cache = self._engine.vllm_config.cache_config
        capacity = int(getattr(cache, "kv_cache_size_tokens", 0) or (cache.num_gpu_blocks or 0) * cache.block_size)
        self.ready = EngineReady(
            model=model, kv_cache_dtype=config.kv_cache_dtype,
            max_model_len=self._engine.vllm_config.model_config.max_model_len,
            kv_capacity_tokens=capacity,
            max_concurrency=float(getattr(cache, "kv_cache_max_concurrency", 0.0) or 0.0),
            load_seconds=time.perf_counter() - started)
        return self.ready

    async def shutdown(self) -> None:
        """Stop the engine and its EngineCore process. Safe to call twice."""
        engine, self._engine, self.ready = self._engine, None, None
        if self._orphan_watch is not None:
            self._orphan_watch.cancel()
            self._orphan_watch = None
        if engine is None:
            return
        self._status("stopping", "stopping engine…")
        # Synchronous (SIGTERM, a grace period, then it kills the process tree). It runs on this
        # loop on purpose: from another thread it races vLLM's output handler task.
        engine.shutdown()
        del engine
        gc.collect()  # drop AsyncLLM now; its __del__ at interpreter exit would shut down again
        record_engine_processes()  # what is left (nothing, or multiprocessing's resource tracker)
        self._status("stopped", "engine stopped")

    def close(self, timeout: float = 30.0) -> None:
        """Shut down; if vLLM's shutdown didn't finish in time, end its processes ourselves."""
        loading_since = self._loading_since_children
        if loading_since is not None:
            # The loop is blocked in from_engine_args, so a shutdown would wait for the whole load.
            # Ending the processes it started makes the load fail now, and the loop free.
            starting = children_since(loading_since)
            log.info("closing while the engine loads: ending %d engine process(es)", len(starting))
            for proc in starting:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(starting, timeout=5)
        super().close(timeout)
        leftover = [proc for pid, created in self._engine_processes if (proc := same_process(pid, created))]
        if leftover:
            log.warning("engine shutdown left %d process(es); ending them", len(leftover))
            for proc in leftover:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(leftover, timeout=5)

    @property
    def is_ready(self) -> bool:
        return self._engine is not None and not getattr(self._engine, "errored", False)

    def engine_died(self) -> bool:
        """True once a started engine's process is gone (vLLM's monitor thread notices). Thread-safe read."""
        engine = self._engine
        return engine is not None and bool(getattr(engine, "errored", False))

    # ---- requests --------------------------------------------------------------------------

    def request_answer_now(self, request_id: str) -> None:
        """End thinking early; thread-safe."""
        self.loop_thread.call_soon(self._answer_now.add, request_id)

    async def abort(self, request_id: str) -> None:
        self._aborted.add(request_id)
        vllm_id = self._live.get(request_id)
        if vllm_id and self._engine is not None:
            await self._engine.abort(vllm_id)

    def fit_prompt(self, messages: Sequence[Message], reserve: int, opened_think: bool,
                   tools: Sequence[dict[str, Any]] = ()) -> tuple[list[int], int]:
        """Token ids of the chat prompt, dropping the oldest turns until ``reserve`` tokens fit after it.
        Offered ``tools`` go to the model's own chat template, which writes them into the prompt."""
        assert self.ready is not None
        # Hybrid templates switch thinking with a keyword (Qwen3, GLM: enable_thinking; DeepSeek: thinking).
        switch: dict[str, Any] = ({"enable_thinking": opened_think, "thinking": opened_think}
                                  if self._family.thinking == "hybrid" else {})
        if tools:
            switch["tools"] = list(tools)
        return trimming.fit_prompt(self._tokenizer, template_messages(messages), limit=self.ready.max_model_len,
                                   reserve=reserve, opened_think=opened_think, template_kwargs=switch)

    def tool_gate(self, offer: ToolOffer) -> ToolCallGate:
        """The family's vLLM tool parser over a reply's events (see tool_calls.gate_for)."""
        return gate_for(self._family.tool_parser, self._tokenizer, offer)

    async def generate(self, messages: Sequence[Message], sampling: SamplingConfig, request_id: str | None = None, *,
                       ignore_eos: bool = False, resume: Resume | None = None, tools: Tools | None = None,
                       tool_choice: ToolChoice | None = None) -> AsyncGenerator[EngineEvent, None]:
        """Stream one reply: thinking and answer deltas, metrics, then exactly one Finished.

        ``ignore_eos`` is for benchmarks that need a fixed number of tokens. ``NALAR_IGNORE_EOS=1`` sets it
        for a whole app process: tests that act mid-reply need replies as long on a fast machine as a slow one.
        ``resume`` goes on with a reply the loop guard cut, after its kept text (prefix caching keeps it cheap).
        """
        rid = request_id or uuid.uuid4().hex[:12]
        ignore_eos = ignore_eos or os.environ.get(IGNORE_EOS_ENV) == "1"
        try:
            if not self.is_ready:
                raise EngineFailure(FailureKind.NOT_READY, "The engine is not running.",
                                    "Wait for the model to load, or restart the engine.")
            offer = offer_of(tools, tool_choice)
            gate = self.tool_gate(offer) if offer is not None else None
            async for event in self._generate(list(messages), sampling, rid, ignore_eos, resume, offer):
                for out in gate.feed(event) if gate is not None else (event,):
                    yield out
        except EngineFailure as failure:
            yield EngineErrorEvent(rid, failure)
            yield Finished(rid, "error", "", "")
        except Exception as exc:  # noqa: BLE001 (logged in _request_failure): e.g. a prompt the template can't build
            yield EngineErrorEvent(rid, self._request_failure(rid, exc))
            yield Finished(rid, "error", "", "")
        finally:
            self._live.pop(rid, None)
            self._answer_now.discard(rid)
            self._aborted.discard(rid)

    @property
    def tokenizer(self) -> Any:
        """The engine's tokenizer (None until it is ready): benchmarks build their prompts with it."""
        return self._tokenizer

    def raw_generate(self, ids: list[int], params: Any, request_id: str) -> AsyncIterator[Any]:
        """vLLM's own output stream for ``ids``, past the reply layer: benchmarks measure the engine itself."""
        return self._engine.generate(self.engine_prompt(ids), params, request_id)

    def engine_prompt(self, ids: list[int]) -> Any:
        """Token ids rendered the way vLLM now wants them (raw prompts are deprecated), or raw on a vLLM
        without the Renderer API."""
        from vllm.inputs import TokensPrompt

        prompt = TokensPrompt(prompt_token_ids=ids)
        renderer = getattr(self._engine, "renderer", None)
        if renderer is None or not hasattr(renderer, "render_cmpl"):
            return prompt
        return renderer.render_cmpl([prompt])[0]

    async def _generate(self, messages: list[Message], sampling: SamplingConfig, rid: str, ignore_eos: bool,
                        resume: Resume | None, offer: ToolOffer | None = None) -> AsyncGenerator[EngineEvent, None]:
        """One reply: its prompt and splitter here, its requests by ReplyRequests.run (think, then maybe
        answer), then exactly one Finished (stop, length, loop, abort, or error with the partial reply kept)."""
        thinking_on = self._thinking_on(sampling)
        prompt_ids, dropped = self._reply_prompt(messages, sampling, thinking_on, offer)
        if dropped:
            yield ContextTrimmed(rid, dropped)
        start = think_start_of_prompt(self._tokenizer.decode(prompt_ids[-8:])) or ("open" if thinking_on else "none")
        splitter = make_splitter(self._family.parser, self._tokenizer, start=start)
        reply = self._new_reply(rid, sampling, prompt_ids, thinking_on, ignore_eos, offer)
        close_ids = self._encode(FORCED_THINK_CLOSE)
        if resume is not None:
            reply.generated_ids = self._encode(resume.thinking) if thinking_on else []
            reply.stream.resume_from(resume, len(reply.generated_ids))
        requests = ReplyRequests(self._engine, self.engine_prompt, self._live, self._aborted, self._answer_now)
        resumed_answer = self._encode(resume.answer) if resume is not None and resume.phase == "answer" else None
        with self.keeping(rid, reply.stream.texts):
            try:
                async for event in requests.run(reply, splitter, close_ids, resumed_answer):
                    yield event
            except asyncio.CancelledError:
                yield reply.stream.aborted()
                raise
            except Exception as exc:  # noqa: BLE001 (logged in _request_failure): keep the partial reply
                for event in reply.stream.failed(self._request_failure(rid, exc)):
                    yield event
                return
            for event in reply.stream.finished(reply.finish):
                yield event

    def _thinking_on(self, sampling: SamplingConfig) -> bool:
        """The family's own thinking, or for a plain model our reasoning prompt if the config asks for it."""
        assert self.config is not None
        plain = self._family.thinking == "plain"
        return sampling.think_budget > 0 and (
            self._family.thinks(sampling.thinking) or (plain and sampling.thinking and self.config.reasoning_mode))

    def _reply_prompt(self, messages: list[Message], sampling: SamplingConfig, thinking_on: bool,
                      offer: ToolOffer | None) -> tuple[list[int], int]:
        """The reply's prompt ids and how many old turns were dropped to leave room for its tokens."""
        assert self.ready is not None
        if thinking_on and self._family.thinking == "plain" and not any(m["role"] == "system" for m in messages):
            messages = [{"role": "system", "content": REASONING_SYSTEM_PROMPT}, *messages]
        budget = sampling.think_budget if thinking_on else 0
        reserve = min(budget + sampling.max_tokens, self.ready.max_model_len // 4)
        prompt_ids, dropped = self.fit_prompt(messages, reserve, opened_think=thinking_on,
                                              tools=offer.tools if offer is not None else ())
        check_seed(self._engine.vllm_config, sampling, len(prompt_ids))
        return prompt_ids, dropped

    def _new_reply(self, rid: str, sampling: SamplingConfig, prompt_ids: list[int], thinking_on: bool,
                   ignore_eos: bool, offer: ToolOffer | None) -> LocalReply:
        """The reply's state and stream, with this engine's figures."""
        ready = self.ready  # kept: a shutdown mid-reply clears self.ready
        assert ready is not None
        stream = ReplyStream(rid, prompt_tokens=len(prompt_ids), max_model_len=ready.max_model_len,
                             kv_capacity_tokens=ready.kv_capacity_tokens,
                             kv=lambda: KvFigures(self.kv.usage, self.kv.running, self.kv.waiting), sampling=sampling)
        return LocalReply(stream, sampling, prompt_ids, sampling.think_budget if thinking_on else 0, ignore_eos,
                          can_conclude=thinking_on,
                          constraint=answer_constraint(sampling, forced_schema(offer) if offer is not None else None),
                          keep_special_tokens=offer is not None)

    def _request_failure(self, rid: str, exc: Exception) -> EngineFailure:
        """A failed request as a typed failure: a dead engine says so, a schema xgrammar refuses is the
        client's to fix, anything else is logged."""
        from vllm.exceptions import VLLMValidationError
        from vllm.v1.engine.exceptions import EngineDeadError

        if isinstance(exc, EngineDeadError) or getattr(self._engine, "errored", False):
            return engine_stopped()
        if isinstance(exc, VLLMValidationError) and any(word in str(exc).lower() for word in ("schema", "grammar")):
            log.info("request %s: the grammar engine refused its schema: %s", rid, exc)
            return EngineFailure(FailureKind.BAD_SCHEMA, f"The JSON schema can't be enforced: {str(exc)[:300]}",
                                 "Simplify the schema (xgrammar has no allOf of several branches, for example).")
        log.exception("request %s failed", rid)
        return EngineFailure(FailureKind.REQUEST_FAILED, f"The request failed: {exc}",
                             f"Try again; details are in {vllm_logging.engine_log_path()}.")

    def _encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False)) if text else []
