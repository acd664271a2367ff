"""The engine process's pipe: typed messages (app.engine.process.process_protocol) and each side's table.

Fast: every message round-trips through pickle; each side's table is driven message by message; and
both real sides (EngineProcess in this process, process_server's loop in a spawned child) talk over a
real pipe, with a scripted engine double below the child's server instead of vLLM.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import time
import typing
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import pytest

from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.base import Message
from app.engine.errors import EngineFailure, EngineFix, FailureKind
from app.engine.events import (
    AnswerDelta,
    EngineErrorEvent,
    EngineEvent,
    EngineReady,
    Finished,
    LoopDetected,
    StartPlan,
    StatusChanged,
)
from app.engine.process import process_protocol as protocol
from app.engine.process import process_server
from app.engine.process.bench_entry import MeasureRaw
from app.engine.process.engine_process import EngineProcess
from app.engine.requests import MessageSpec, Resume, ToolChoiceSpec, ToolSpec
from app.engine.scripted import Script, ScriptedEngineDouble

CONFIG = EngineConfig(model="/models/x", kv_cache_dtype="fp8_e4m3", max_model_len=4096)
SAMPLING = SamplingConfig(think_budget=64, max_tokens=32).with_loop_guard(action="stop")
FAILURE = EngineFailure(FailureKind.KV_DTYPE_UNSUPPORTED, "This machine can't run an FP8 KV cache.",
                        "Use KV cache dtype 'auto' (bf16).", EngineFix(kv_cache_dtype="auto"))
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
SPECS = tuple(ToolSpec.from_openai(t) for t in TOOLS)
PLAN = StartPlan(CONFIG, "FLASHINFER", True, ("Other programs use 3.0 GiB of VRAM: starting with 70%.",),
                 (("PATH", "/usr/bin"),))
READY = EngineReady("m", "fp8_e4m3", 4096, 46_592, 11.4, 1.5, backend="local", plan=PLAN)

EXAMPLES: list[Any] = [
    protocol.Start(call=1, config=CONFIG, kv_block_size=16),
    protocol.Abort(call=2, request_id="r1"),
    protocol.Shutdown(call=3),
    protocol.Generate("r2", (MessageSpec("user", "hi"),), SAMPLING, ignore_eos=True,
                      resume=Resume("thinking", "kept thought"), tools=SPECS,
                      tool_choice=ToolChoiceSpec("function", "get_weather")),
    protocol.Cancel("r2"),
    protocol.AnswerNow("r2"),
    protocol.Exit(),
    protocol.Result(1, READY),
    protocol.Failure(2, FAILURE),
    protocol.Event("r2", Finished("r2", "loop", "kept thought", "")),
    protocol.Status(StatusChanged("loading", "loading model…", 0.2)),
    protocol.EngineDied(start=3),
    MeasureRaw(call=4, tokens=64, index=0, messages=(MessageSpec("user", "count"),)),
]


def test_every_message_has_an_example_here() -> None:
    """Bug caught: a message added to the protocol without a round-trip case below."""
    declared = set(typing.get_args(protocol.ToEngineProcess)) | set(typing.get_args(protocol.ToWindow))
    assert declared <= {type(message) for message in EXAMPLES}


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_each_message_round_trips_through_pickle(message: Any) -> None:
    """Bug caught: a field that doesn't pickle (a lambda, a lock, an exception's extra fields) raises in the
    pipe's reader thread, and the window waits forever for the reply."""
    copy = pickle.loads(pickle.dumps(message))
    assert copy == message and type(copy) is type(message)


def test_an_engine_failure_keeps_its_kind_fix_and_fallback_across_the_pipe() -> None:
    """Bug caught: Exception pickles only its message, so unpickling raised TypeError in the window's reader
    thread, or the window showed a failure without its kind (the banner's action) or fix."""
    for message in (protocol.Failure(1, FAILURE), protocol.Event("r1", EngineErrorEvent("r1", FAILURE))):
        copy = pickle.loads(pickle.dumps(message))
        failure = copy.failure if isinstance(copy, protocol.Failure) else copy.event.failure
        assert isinstance(failure, EngineFailure)
        assert (failure.kind, failure.message, failure.fix, failure.fallback) == (
            FAILURE.kind, FAILURE.message, FAILURE.fix, FAILURE.fallback)


def _loose(hint: Any) -> list[str]:
    """The parts of a type hint that let anything through: Any, or a dict."""
    if hint is Any or hint is dict or typing.get_origin(hint) is dict:
        return [str(hint)]
    return [part for arg in typing.get_args(hint) for part in _loose(arg)]


def test_no_field_of_a_pipe_message_is_any_or_a_dict() -> None:
    """Bug caught: ``Result.value: Any``, ``tools: list[dict]`` and ``fallback: dict`` let anything cross the
    pipe, so a wrong payload failed far from where it was sent, and mypy checked none of it."""
    import dataclasses

    from app.engine.errors import EngineFix

    classes = [*typing.get_args(protocol.ToEngineProcess), *typing.get_args(protocol.ToWindow), EngineFix,
               StartPlan, EngineReady, ToolSpec, ToolChoiceSpec]
    loose = {f"{cls.__name__}.{name}": parts for cls in classes
             for name, hint in typing.get_type_hints(cls).items()
             if dataclasses.is_dataclass(cls) and (parts := _loose(hint))}
    assert loose == {}


def test_tools_and_messages_cross_the_pipe_typed_and_come_back_as_openai_json() -> None:
    """Bug caught: a tool's description or schema, or a message's calls, call id or thinking, dropped or changed
    between the window and the child's chat template."""
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather now.",
                                             "parameters": {"type": "object", "properties": {"city": {}}}}}
    assert ToolSpec.from_openai(tool).as_openai() == tool
    history = [{"role": "user", "content": "Weather in Oslo?"},
               {"role": "assistant", "content": None, "reasoning_content": "Ask the tool.",
                "tool_calls": [{"id": "c1", "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "4 °C"}, {"role": "user", "content": "x", "name": "n"}]
    assert [MessageSpec.from_openai(m).as_openai() for m in history] == history
    # A stored tool round as the window sends it: its thinking under vLLM's "reasoning", which Harmony keeps
    # between tool calls (bug caught: dropped here, so gpt-oss in the app lost the thinking behind its call).
    from app.core.chat.conversation import ToolRound, ToolStep

    step = ToolStep("c1", "get_weather", '{"city": "Oslo"}', result="4 °C", status="ok")
    round_messages = ToolRound("Ask the tool for Oslo.", [step]).messages()
    assert round_messages[0]["reasoning"] == "Ask the tool for Oslo."
    assert [MessageSpec.from_openai(m).as_openai() for m in round_messages] == round_messages
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice in ("auto", "none", "required", named):
        assert ToolChoiceSpec.from_openai(choice).as_openai() == choice


def test_a_message_no_table_knows_is_refused_by_name() -> None:
    with pytest.raises(protocol.ProtocolError, match="MeasureRaw"):
        protocol.dispatch({protocol.Exit: lambda m: None}, EXAMPLES[-1])


# ---- the child's side: process_server.run on a fake pipe ------------------------------------------

class FakePipe:
    """A scripted Connection: hands out ``incoming`` in order, each once the calls before it are answered
    (as the window awaits them), and records what is sent; once ``done(sent)``, EOF (the window closing
    its end)."""

    def __init__(self, incoming: list[Any], done: Any) -> None:
        self.incoming = list(incoming)
        self.sent: list[Any] = []
        self.done = done
        self.closed = False
        self.calls: set[int] = set()

    def poll(self, timeout: float) -> bool:
        answered = {m.call for m in self.sent if isinstance(m, (protocol.Result, protocol.Failure))}
        if self.incoming and self.calls <= answered:
            return True
        if self.done(self.sent):
            raise EOFError
        return False  # nothing yet: the server checks its engine and polls again

    def recv(self) -> Any:
        message = self.incoming.pop(0)
        if isinstance(message, protocol.Call):
            self.calls.add(message.call)
        return message

    def send(self, message: Any) -> None:
        self.sent.append(pickle.loads(pickle.dumps(message)))

    def close(self) -> None:
        self.closed = True


class ToolEchoingScriptedDouble(ScriptedEngineDouble):
    """A scripted double whose answer is the tools it was given, as JSON; "die" makes its engine stop."""

    def __init__(self) -> None:
        super().__init__()
        self.died = False

    def engine_died(self) -> bool:
        return self.ready is not None and self.died

    async def generate(self, messages: Sequence[Message], sampling: SamplingConfig, request_id: str | None = None, *,
                       ignore_eos: bool = False, resume: Resume | None = None,
                       tools: list[dict[str, Any]] | None = None,
                       tool_choice: str | dict[str, Any] | None = None) -> AsyncGenerator[EngineEvent, None]:
        if messages[-1]["content"] == "die":
            self.died = True
        if messages[-1]["content"] == "crash":
            os._exit(3)  # the engine process itself dies mid-reply
        self.scripts.append(Script([json.dumps({"tools": tools, "tool_choice": tool_choice})]))
        async for event in super().generate(messages, sampling, request_id, ignore_eos=ignore_eos, resume=resume):
            yield event


def test_the_child_runs_each_message_on_its_host_and_answers_by_name() -> None:
    """Bug caught: a reply naming the wrong call (the window resolves another call's future), the tools
    dropped on the way to the engine, or the child not closing its engine when the window's end closes."""
    rid = "r1"
    pipe = FakePipe([protocol.Start(call=7, config=CONFIG),
                     protocol.Generate(rid, (MessageSpec("user", "hi"),), SAMPLING, tools=SPECS,
                                       tool_choice=ToolChoiceSpec("auto")),
                     protocol.Abort(call=8, request_id="gone")],
                    done=lambda sent: any(isinstance(m, protocol.Event) and isinstance(m.event, Finished)
                                          for m in sent) and len(sent) > 2)
    host = ToolEchoingScriptedDouble()
    process_server.run(pipe, host)  # type: ignore[arg-type]
    replies = {m.call: m for m in pipe.sent if isinstance(m, protocol.Result)}
    assert isinstance(replies[7].value, EngineReady) and 8 in replies
    answer = "".join(m.event.text for m in pipe.sent if isinstance(m, protocol.Event)
                     and isinstance(m.event, AnswerDelta))
    assert json.loads(answer) == {"tools": TOOLS, "tool_choice": "auto"}
    assert any(isinstance(m, protocol.Status) and m.event.state == "ready" for m in pipe.sent)
    assert pipe.closed and not host.loop_thread.alive


def test_the_child_reports_a_dead_engine_once_naming_its_start() -> None:
    """Bug caught: a death report without the start it is about, so one about an engine the window has
    since restarted marked the fresh engine dead."""
    die = protocol.Generate("r1", (MessageSpec("user", "die"),), SAMPLING)
    pipe = FakePipe([protocol.Start(call=1, config=CONFIG), protocol.Start(call=2, config=CONFIG), die],
                    done=lambda sent: any(isinstance(m, protocol.EngineDied) for m in sent))
    process_server.run(pipe, ToolEchoingScriptedDouble())  # type: ignore[arg-type]
    assert [m for m in pipe.sent if isinstance(m, protocol.EngineDied)] == [protocol.EngineDied(start=2)]


# ---- the window's side: EngineProcess's table ------------------------------------------------------

def test_the_window_ignores_a_death_report_about_a_replaced_engine() -> None:
    """Bug caught: EngineDied about start 1 arriving after start 2 marked the fresh engine dead."""
    engine = EngineProcess()
    try:
        async def scenario() -> tuple[bool, bool]:
            engine.ready = READY
            engine.receive(protocol.EngineDied(start=5))  # about another start than the current one (none yet: 0)
            before = engine.engine_died()
            engine.receive(protocol.EngineDied(start=0))
            return before, engine.engine_died()

        assert engine.loop_thread.submit(scenario()).result(10) == (False, True)
    finally:
        engine.close()


# ---- both real sides over a real pipe ------------------------------------------------------------

def serve_tool_echoing_double(conn: Any) -> None:
    """The child's main for the test below: process_server's real loop over a scripted double."""
    process_server.run(conn, ToolEchoingScriptedDouble())


def test_both_real_sides_talk_over_a_real_pipe() -> None:
    """Bug caught: the two tables disagreeing on a message (the window sends what the child has no entry
    for, or a reply the window can't route), tools not reaching the engine, a stale death report taken for
    a fresh one, or the window hanging when the child dies mid-reply instead of ending it with the partial
    text and a typed failure."""
    statuses: list[Any] = []
    engine = EngineProcess(on_status=statuses.append, child_main=serve_tool_echoing_double)

    async def reply(text: str, **kwargs: Any) -> list[EngineEvent]:
        return [event async for event in engine.generate([{"role": "user", "content": text}], SAMPLING, **kwargs)]

    def run(coro: Any) -> Any:
        return engine.loop_thread.submit(coro).result(60)

    try:
        assert run(engine.start(CONFIG)).model == "scripted-double"
        assert any(event.state == "ready" for event in statuses)
        events = run(reply("hi", tools=TOOLS, tool_choice="required"))
        assert json.loads("".join(e.text for e in events if isinstance(e, AnswerDelta))) == {
            "tools": TOOLS, "tool_choice": "required"}
        assert isinstance(events[-1], Finished) and events[-1].reason == "stop"
        run(reply("die"))
        run(asyncio.wait_for(_until(engine.engine_died), 30))
        run(engine.start(CONFIG))  # a restart: the next start's engine is alive
        assert not engine.engine_died()
        events = run(reply("crash"))
        assert isinstance(events[-2], EngineErrorEvent) and events[-2].failure.kind == FailureKind.ENGINE_DIED
        assert isinstance(events[-1], Finished) and events[-1].reason == "error"
    finally:
        engine.close(timeout=10)
    assert engine.pid is not None and not _alive(engine.pid)


async def _until(condition: Any) -> None:
    while not condition():
        await asyncio.sleep(0.02)


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class SpawningScriptedDouble(ScriptedEngineDouble):
    """A scripted double whose start spawns a process (as vLLM spawns EngineCore), says its pid, then blocks
    its loop for ever."""

    async def start(self, config: EngineConfig, *, kv_block_size: int | None = None) -> EngineReady:
        import subprocess
        import sys

        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # ok-sleep: a stand-in child
        self._status("loading", f"spawned {child.pid}", 0.5)
        time.sleep(600)  # ok-sleep: blocks the engine loop, as vLLM's from_engine_args does for tens of seconds
        raise AssertionError("never loads")


def serve_spawning_double(conn: Any) -> None:
    """The engine process's start-up as process_server.serve does it: a process group, ended whole on exit
    while a start is under way."""
    os.setpgid(0, 0)
    process_server.run(conn, SpawningScriptedDouble(), abandon_start=process_server.end_process_group)


def test_closing_mid_start_ends_what_the_start_spawned_without_waiting_for_it(caplog: Any) -> None:
    """Bug caught: close() waited for a start that blocks the engine loop (the grace ran out), and ended only
    the engine process, so what its start had spawned (EngineCore) was left running, re-parented to init."""
    import psutil

    statuses: list[StatusChanged] = []
    engine = EngineProcess(on_status=statuses.append, child_main=serve_spawning_double)
    start = engine.loop_thread.submit(engine.start(CONFIG))
    engine.loop_thread.submit(asyncio.wait_for(_until(lambda: any("spawned" in s.message for s in statuses)),
                                               60)).result(70)
    grandchild = psutil.Process(int(next(s.message for s in statuses if "spawned" in s.message).split()[-1]))
    child = psutil.Process(engine.pid or 0)
    with caplog.at_level(logging.INFO, logger="app.engine.process.engine_process"):
        engine.close(timeout=30)
    assert not _alive(child.pid)
    assert not _alive(grandchild.pid), "the start's process outlived the engine process"
    assert "did not end" not in caplog.text, "the engine process waited for its start instead of ending it"
    assert start.done()


# ---- a child that dies mid-reply: what the window keeps of the reply -----------------------------------

WORDS = [f"word{i} " for i in range(300)]
PASSAGE = ["So ", "the ", "pens ", "cost ", "21 ", "dollars ", "again, ", "so "]
GUARDED = SamplingConfig(think_budget=1024, max_tokens=512)  # the default loop guard, from token 256


class DyingScriptedDouble(ScriptedEngineDouble):
    """"loop": an answer that loops (the guard cuts it), and the process dies right after the cut is sent.
    "resume": a reply that goes on after kept text, and the process dies after its first new words."""

    async def generate(self, messages: Sequence[Message], sampling: SamplingConfig, request_id: str | None = None, *,
                       ignore_eos: bool = False, resume: Resume | None = None,
                       tools: list[dict[str, Any]] | None = None,
                       tool_choice: str | dict[str, Any] | None = None) -> AsyncGenerator[EngineEvent, None]:
        looping = messages[-1]["content"] == "loop"
        self.scripts.append(Script([*WORDS, *PASSAGE * 40], think_start="closed", tokens_per_second=4000)
                            if looping else Script(["and ", "more ", "words."], think_start="closed"))
        async for event in super().generate(messages, sampling, request_id, ignore_eos=ignore_eos, resume=resume):
            yield event  # sent to the window before the next event is asked for
            if isinstance(event, LoopDetected) or (not looping and isinstance(event, AnswerDelta)):
                os._exit(3)


def serve_dying_double(conn: Any) -> None:
    process_server.run(conn, DyingScriptedDouble())


def test_a_reply_whose_process_dies_keeps_its_text_as_the_engine_kept_it() -> None:
    """Bug caught: the window's side kept its own copy of the reply by appending deltas, so a child that died
    after the loop guard cut the answer ended the reply with the looped copies the guard had removed, and a
    continued reply ("Continue anyway") that died lost the kept text it went on from."""
    engine = EngineProcess(child_main=serve_dying_double)

    async def reply(text: str, resume: Resume | None = None) -> list[EngineEvent]:
        return [event async for event in engine.generate([{"role": "user", "content": text}], GUARDED,
                                                          resume=resume)]

    def run(coro: Any) -> Any:
        return engine.loop_thread.submit(coro).result(60)

    try:
        run(engine.start(CONFIG))
        events = run(reply("loop"))
        cut = next(event for event in events if isinstance(event, LoopDetected))
        assert cut.outcome == "cut" and isinstance(events[-1], Finished) and events[-1].reason == "error"
        kept = "".join(WORDS + PASSAGE)
        assert events[-1].answer_text == kept, "the answer as the guard cut it, not every delta that came"
        run(engine.start(CONFIG))  # a fresh child
        events = run(reply("resume", Resume("answer", "thought", kept)))
        assert isinstance(events[-1], Finished) and events[-1].reason == "error"
        assert (events[-1].thinking_text, events[-1].answer_text) == ("thought", kept + "and ")
        assert engine.reply_so_far(events[-1].request_id) is None, "nothing kept once the reply has ended"
    finally:
        engine.close(timeout=10)
