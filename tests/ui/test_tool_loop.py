"""The tool loop without a window: ChatSession + ToolLoop on the ToolCallingScriptedDouble and a real MCP
server (tests/support/mcp_demo_server.py), one for the file over streamable HTTP: its stdio start, 1 s of CPU
importing the MCP SDK, was most of each test's time. Its stdio transport is tested in tests/tools/ and
tests/ui/test_window_tools.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from app.core.chat.conversation import NOT_RUN, ToolStep
from app.core.chat.history import HistoryStore
from app.core.settings.keystore import KeyStore
from app.core.settings.settings import EngineConfig, SamplingConfig, Settings, ToolsConfig, ToolServer, load_settings
from app.engine.events import Finished
from app.engine.scripted import Script
from app.tools.mcp_client import DENIED_TEXT
from app.ui.controllers.chat_session import ChatSession
from app.ui.controllers.engine_controller import EngineController
from app.ui.controllers.tool_loop import CANCELLED_TEXT, MAX_CALLS_PER_ROUND, MAX_TOOL_ROUNDS, REFUSED
from app.ui.controllers.tools_controller import ToolsController
from tests.support.mcp_demo import http_demo_server
from tests.support.tool_double import CallScript, ToolCallingScriptedDouble


@pytest.fixture(scope="module")
def demo() -> Iterator[ToolServer]:
    with http_demo_server() as port:
        yield ToolServer(name="demo", url=f"http://127.0.0.1:{port}/mcp")


@pytest.fixture
def make_session(qtbot, ui_loop, demo: ToolServer) -> Iterator[object]:
    """A started session with the demo server connected and the chat's Tools switch on."""
    made: list[tuple[ChatSession, EngineController, ToolsController]] = []

    def factory(*scripts: Script | CallScript, tools: ToolsConfig | None = None) -> ChatSession:
        settings = Settings(engine=EngineConfig(max_model_len=2048),
                            sampling=SamplingConfig(think_budget=64, max_tokens=64),
                            tools=tools or ToolsConfig(servers=(demo,), call_timeout_s=2))
        controller = EngineController(ToolCallingScriptedDouble(list(scripts)), settings, KeyStore())
        tools_controller = ToolsController()
        session = ChatSession(controller, HistoryStore(), tools=tools_controller)
        made.append((session, controller, tools_controller))
        session.store.load_history()
        session.store.set_switches(tools=True)
        controller.start_engine()
        tools_controller.configure(settings.tools.servers)
        qtbot.waitUntil(lambda: controller.engine_ready and "demo" in tools_controller.states, timeout=30_000)
        assert tools_controller.states["demo"].problem is None
        return session

    yield factory
    for session, controller, tools_controller in made:
        session.close()
        controller.close()
        tools_controller.close()
        session.history.close()
        assert not controller.bridge.engine.loop_thread.alive and not tools_controller.toolbox.loop_thread.alive


def engine(session: ChatSession) -> ToolCallingScriptedDouble:
    double = session.controller.bridge.engine
    assert isinstance(double, ToolCallingScriptedDouble)
    return double


def ask(qtbot, session: ChatSession, text: str) -> None:
    """Send, and wait until the reply waits on its calls (or is done)."""
    turns = len(session.conversation.turns)
    asyncio.ensure_future(session.send(text))
    qtbot.waitUntil(lambda: len(session.conversation.turns) > turns and bool(
        session.awaiting_tools or session.conversation.turns[-1].finish_reason), timeout=20_000)


def test_no_call_runs_before_approval_and_its_result_reaches_the_follow_up(qtbot, make_session) -> None:
    """Bug caught: a tool that runs without the user's Run, or a follow-up request that lacks the tool message
    (the model would answer without the result)."""
    session = make_session(CallScript("I need to add.", [("add", '{"a": 2, "b": 40}')]),
                           Script(["<think>got 42</think>", "It is 42."]))
    ask(qtbot, session, "What is 2+40?")
    turn = session.conversation.turns[-1]
    assert turn.tool_rounds, (turn, engine(session).tool_requests)
    [step] = turn.tool_rounds[0].calls
    assert session.streaming and session.awaiting_tools
    assert (step.name, step.status, step.result) == ("add", "pending", ""), "ran without approval"
    assert engine(session).tool_requests[0]["tools"][0]["function"]["name"] in {"add", "slow", "fails", "markup"}
    with qtbot.waitSignal(session.reply_finished, timeout=20_000) as blocker:
        session.tool_loop.approve(step)
    assert blocker.args[0].reason == "stop"
    assert (step.status, step.result) == ("ok", "42")
    assert engine(session).tool_requests[1]["tool_choice"] == "auto", "after an unforced call the model may call on"
    follow_up = engine(session).tool_requests[1]["messages"]
    assert follow_up[-1] == {"role": "tool", "tool_call_id": step.call_id, "content": "42"}
    assert follow_up[-2]["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 2, "b": 40}'}
    assert (turn.tool_rounds[0].thinking.strip(), turn.thinking, turn.answer) == ("I need to add.", "got 42",
                                                                                 "It is 42.")
    [stored] = HistoryStore(session.history.path).conversations()[-1].turns[-1].tool_rounds
    assert stored.calls[0].result == "42", "the call is in the history"


def test_deny_sends_denied_by_the_user(qtbot, make_session) -> None:
    """Bug caught: a denied call left without a tool message (template error), or run anyway; and a forced
    call forced again in the follow-up (the model could never answer)."""
    session = make_session(CallScript("Let me add.", [("add", '{"a": 1, "b": 1}')]), Script(["OK, I won't."]))
    forced = {"type": "function", "function": {"name": "add"}}
    session.tool_choice = forced
    ask(qtbot, session, "add 1 and 1")
    [step] = session.conversation.turns[-1].tool_rounds[0].calls
    with qtbot.waitSignal(session.reply_finished, timeout=20_000):
        session.tool_loop.deny(step)
    assert (step.status, step.result) == ("denied", DENIED_TEXT)
    assert engine(session).tool_requests[1]["messages"][-1]["content"] == DENIED_TEXT
    assert [r["tool_choice"] for r in engine(session).tool_requests] == [forced, "none"]


def test_a_timeout_and_an_error_go_back_to_the_model(qtbot, make_session) -> None:
    """Bug caught: a hanging tool freezing the reply forever, or a tool error ending the reply instead of
    reaching the model as the result."""
    session = make_session(CallScript("Try both.", [("slow", '{"seconds": 600}'), ("fails", '{"reason": "nope"}')]),
                           Script(["Both failed."]))
    ask(qtbot, session, "go")
    slow, fails = session.conversation.turns[-1].tool_rounds[0].calls
    with qtbot.waitSignal(session.reply_finished, timeout=30_000):
        session.tool_loop.approve(slow)
        session.tool_loop.approve(fails)
    assert slow.status == "timeout" and "did not answer within 2 s" in slow.result
    assert fails.status == "error" and "fails" in fails.result
    results = [m["content"] for m in engine(session).tool_requests[1]["messages"] if m["role"] == "tool"]
    assert results == [slow.result, fails.result]


def test_always_for_this_tool_runs_it_without_asking_next_time(qtbot, make_session) -> None:
    """Bug caught: "Always" not saved (asked again after a restart) or applied to every tool, not this one."""
    session = make_session(CallScript("add", [("add", '{"a": 1, "b": 2}')]), Script(["3"]),
                           CallScript("again", [("add", '{"a": 3, "b": 4}'), ("markup", "{}")]), Script(["7"]))
    ask(qtbot, session, "1+2")
    [step] = session.conversation.turns[-1].tool_rounds[0].calls
    with qtbot.waitSignal(session.reply_finished, timeout=20_000):
        session.tool_loop.approve(step, always=True)
    assert load_settings()[0].tools.always_allow == ("demo/add",)
    ask(qtbot, session, "3+4")
    add, markup = session.conversation.turns[-1].tool_rounds[0].calls
    qtbot.waitUntil(lambda: add.status == "ok", timeout=20_000)
    assert add.result == "7" and markup.status == "pending", "only the tool chosen runs without asking"
    session.stop()
    qtbot.waitUntil(lambda: not session.streaming, timeout=10_000)


def test_stop_regenerate_and_answer_now_during_a_call(qtbot, make_session) -> None:
    """Bug caught: the buttons doing nothing while a call waits for approval (the reply stuck), or a stopped
    call running later."""
    session = make_session(CallScript("call", [("add", '{"a": 1, "b": 1}')]),
                           CallScript("call again", [("add", '{"a": 2, "b": 2}')]), Script(["regenerated"]),
                           CallScript("and again", [("slow", "{}")]), Script(["<think>long thoughts</think>", "now"]))
    ask(qtbot, session, "q")
    [stopped] = session.conversation.turns[-1].tool_rounds[0].calls
    with qtbot.waitSignal(session.reply_finished, timeout=10_000) as blocker:
        session.stop()
    assert blocker.args[0].reason == "abort" and stopped.status == "stopped" and not session.streaming
    assert session.conversation.turns[-1].finish_reason == "abort"

    asyncio.ensure_future(session.regenerate())
    qtbot.waitUntil(lambda: session.awaiting_tools, timeout=10_000)
    with qtbot.waitSignal(session.reply_finished, timeout=20_000) as blocker:  # regenerate during the call
        asyncio.ensure_future(session.regenerate())
    assert session.conversation.turns[-1].answer == "regenerated"
    assert session.conversation.turns[-1].tool_rounds == [], "the dropped call is gone with the old reply"

    ask(qtbot, session, "slow one")
    [slow] = session.conversation.turns[-1].tool_rounds[0].calls
    session.tool_loop.approve(slow)
    qtbot.waitUntil(lambda: slow.status == "running", timeout=10_000)
    with qtbot.waitSignal(session.reply_finished, timeout=20_000) as blocker:
        session.answer_now()
    assert slow.status == "error" and "answer now" in slow.result
    assert engine(session).tool_requests[-1]["tool_choice"] == "none", "the follow-up may not call again"
    assert blocker.args[0].reason == "stop"


def test_a_call_to_a_tool_not_offered_is_answered_without_running(qtbot, make_session, demo: ToolServer) -> None:
    """Bug caught: a model naming a tool that is switched off getting it run anyway (the switch must hold)."""
    session = make_session(CallScript("x", [("add", '{"a": 1, "b": 1}')]), Script(["fine"]),
                           tools=ToolsConfig(servers=(demo,), disabled=("demo/add",)))
    ask(qtbot, session, "q")
    qtbot.waitUntil(lambda: session.conversation.turns[-1].finish_reason == "stop", timeout=20_000)
    [step] = session.conversation.turns[-1].tool_rounds[0].calls
    assert step.status == "error" and "no tool named 'add'" in step.result
    assert "add" not in {t["function"]["name"] for t in engine(session).tool_requests[0]["tools"]}


def test_tools_off_sends_no_tools(qtbot, make_session) -> None:
    """Bug caught: tools offered to the model in a chat whose Tools switch is off."""
    session = make_session(Script(["plain"]))
    session.store.set_switches(tools=False)
    with qtbot.waitSignal(session.reply_finished, timeout=20_000) as blocker:
        asyncio.ensure_future(session.send("hi"))
    assert isinstance(blocker.args[0], Finished)
    assert engine(session).tool_requests[0]["tools"] is None
    assert json.loads(json.dumps(session.conversation.messages())) == [{"role": "user", "content": "hi"}]


# ---- Nalar's bounds: whatever the backend sends (issue 39, items 1 and 2) ---------------------------

def always_add(demo: ToolServer) -> ToolsConfig:
    return ToolsConfig(servers=(demo,), call_timeout_s=60, always_allow=("demo/add",))


def notices(session: ChatSession) -> list[str]:
    said: list[str] = []
    session.notice.connect(said.append)
    return said


def test_a_backend_that_keeps_calling_an_always_tool_stops_at_nalars_round_cap(qtbot, make_session,
                                                                               demo: ToolServer) -> None:
    """Bug caught: only the model was asked to stop calling (tool_choice "none" after the last round); a
    backend that ignores it got 20 rounds and 20 runs of an "Always" tool nobody approved."""
    session = make_session(*[CallScript(f"round {n}", [("add", '{"a": 1, "b": 1}')]) for n in range(20)],
                           tools=always_add(demo))
    said = notices(session)
    with qtbot.waitSignal(session.reply_finished, timeout=60_000):
        asyncio.ensure_future(session.send("keep adding"))
    turn = session.conversation.turns[-1]
    statuses = [[step.status for step in tool_round.calls] for tool_round in turn.tool_rounds]
    assert statuses == [["ok"]] * MAX_TOOL_ROUNDS + [[REFUSED]], statuses
    requests = engine(session).tool_requests
    assert len(requests) == MAX_TOOL_ROUNDS + 1 and requests[-1]["tool_choice"] == "none"
    [refused] = turn.tool_rounds[-1].calls
    assert f"limit of {MAX_TOOL_ROUNDS} tool rounds" in refused.result, "the refused call still gets a result"
    assert any(f"limit of {MAX_TOOL_ROUNDS} tool rounds" in text for text in said), said
    assert not session.streaming and turn.finish_reason == "tool_calls"
    stored = HistoryStore(session.history.path).conversations()[-1].turns[-1]
    tool_messages = [m for m in stored.tool_rounds[-1].messages() if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == [refused.result], "history holds a result for every call"


@pytest.mark.parametrize("allowed", ["tool_choice none", "no tools offered"])
def test_calls_sent_for_a_request_that_allowed_none_never_run(qtbot, make_session, allowed: str,
                                                              demo: ToolServer) -> None:
    """Bug caught: every Finished(reason="tool_calls") began a round: calls from a backend that ignores
    tool_choice "none" ran (an "Always" tool unasked), and with the Tools switch off each answer drew
    another request, for ever."""
    session = make_session(CallScript("call anyway", [("add", '{"a": 2, "b": 2}')]), Script(["never asked"]),
                           tools=always_add(demo))
    if allowed == "tool_choice none":
        session.tool_choice = "none"
    else:
        session.store.set_switches(tools=False)
    said = notices(session)
    with qtbot.waitSignal(session.reply_finished, timeout=20_000):
        asyncio.ensure_future(session.send("no tools please"))
    [step] = session.conversation.turns[-1].tool_rounds[-1].calls
    assert step.status == REFUSED and step.result.startswith("Not run:"), step
    assert len(engine(session).tool_requests) == 1, "no follow-up request"
    assert said and "did not run" in said[-1]


def test_more_calls_in_one_round_than_the_cap_run_only_up_to_it(qtbot, make_session, demo: ToolServer) -> None:
    """Bug caught: one reply could queue any number of runs of an "Always" tool in a single round."""
    calls = [("add", f'{{"a": {n}, "b": 1}}') for n in range(MAX_CALLS_PER_ROUND + 2)]
    session = make_session(CallScript("many", calls), Script(["done"]), tools=always_add(demo))
    said = notices(session)
    with qtbot.waitSignal(session.reply_finished, timeout=30_000):
        asyncio.ensure_future(session.send("add them all"))
    steps = session.conversation.turns[-1].tool_rounds[0].calls
    assert [s.status for s in steps] == ["ok"] * MAX_CALLS_PER_ROUND + [REFUSED] * 2
    results = [m["content"] for m in engine(session).tool_requests[1]["messages"] if m["role"] == "tool"]
    assert len(results) == len(calls) and results[-1].startswith("Not run:"), "every call has a result"
    assert any(f"at most {MAX_CALLS_PER_ROUND}" in text for text in said), said


def approve_both_duplicates(qtbot, session: ChatSession) -> list[ToolStep]:
    """The reply's two calls share the id a server chose; both run."""
    ask(qtbot, session, "wait twice")
    steps = session.conversation.turns[-1].tool_rounds[0].calls
    for step in steps:
        session.tool_loop.approve(step)
    qtbot.waitUntil(lambda: [s.status for s in steps] == ["running", "running"], timeout=10_000)
    return steps


DUPLICATES = CallScript("two waits", [("slow", '{"seconds": 600}'), ("slow", '{"seconds": 600}')], ids=["dup", "dup"])


def test_duplicate_call_ids_get_fresh_ones_and_answer_now_ends_every_call(qtbot, make_session,
                                                                          demo: ToolServer) -> None:
    """Bug caught: running calls were kept by the server's call id, so with two calls sharing one, Answer now
    cancelled one and left the other "running" for ever: the round never ended."""
    session = make_session(DUPLICATES, Script(["answered"]), tools=ToolsConfig(servers=(demo,), call_timeout_s=60))
    steps = approve_both_duplicates(qtbot, session)
    assert steps[0].call_id == "dup" and steps[1].call_id not in ("dup", ""), "fresh id before it is stored"
    with qtbot.waitSignal(session.reply_finished, timeout=20_000):
        session.answer_now()
    assert [(s.status, s.result) for s in steps] == [("error", CANCELLED_TEXT)] * 2
    follow_up = engine(session).tool_requests[1]["messages"]
    sent_ids = [call["id"] for call in follow_up[-3]["tool_calls"]]
    assert sent_ids == [s.call_id for s in steps]
    assert [m["tool_call_id"] for m in follow_up[-2:]] == sent_ids, "one tool message per call, each its own id"


def test_duplicate_call_ids_with_stop_cancel_every_call_and_history_says_so(qtbot, make_session,
                                                                            monkeypatch, demo: ToolServer) -> None:
    """Bug caught: with two calls sharing an id, Stop cancelled only one; the other ran on to its end while
    the history said it did not run."""
    session = make_session(DUPLICATES, tools=ToolsConfig(servers=(demo,), call_timeout_s=60))
    calls: list[asyncio.Task[object]] = []
    real_call = session.tools.call

    async def watched_call(*args: object) -> object:  # the real call, with its task kept to check it ends
        calls.append(asyncio.current_task())  # type: ignore[arg-type]
        return await real_call(*args)

    monkeypatch.setattr(session.tools, "call", watched_call)
    steps = approve_both_duplicates(qtbot, session)
    with qtbot.waitSignal(session.reply_finished, timeout=10_000) as blocker:
        session.stop()
    assert blocker.args[0].reason == "abort"
    qtbot.waitUntil(lambda: len(calls) == 2 and all(task.done() for task in calls), timeout=10_000)
    assert [s.status for s in steps] == ["stopped", "stopped"]
    stored = HistoryStore(session.history.path).conversations()[-1].turns[-1].tool_rounds[0].calls
    assert [(c.status, c.result) for c in stored] == [("stopped", NOT_RUN)] * 2
    assert len({c.call_id for c in stored}) == 2
