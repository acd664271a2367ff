"""The tool loop without a window: ChatSession + ToolLoop on the ToolCallingScriptedDouble and a real MCP
server over stdio (tests/support/mcp_demo_server.py)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator

import pytest

from app.core.chat.history import HistoryStore
from app.core.settings.keystore import KeyStore
from app.core.settings.settings import EngineConfig, SamplingConfig, Settings, ToolsConfig, ToolServer, load_settings
from app.engine.events import Finished
from app.engine.scripted import Script
from app.tools.mcp_client import DENIED_TEXT
from app.ui.controllers.chat_session import ChatSession
from app.ui.controllers.engine_controller import EngineController
from app.ui.controllers.tools_controller import ToolsController
from tests.support import MCP_DEMO_SERVER
from tests.support.tool_double import CallScript, ToolCallingScriptedDouble

DEMO = ToolServer(name="demo", command=sys.executable, args=(MCP_DEMO_SERVER,))


@pytest.fixture
def make_session(qtbot, ui_loop) -> Iterator[object]:
    """A started session with the demo server connected and the chat's Tools switch on."""
    made: list[tuple[ChatSession, EngineController, ToolsController]] = []

    def factory(*scripts: Script | CallScript, tools: ToolsConfig | None = None) -> ChatSession:
        settings = Settings(engine=EngineConfig(max_model_len=2048),
                            sampling=SamplingConfig(think_budget=64, max_tokens=64),
                            tools=tools or ToolsConfig(servers=(DEMO,), call_timeout_s=2))
        controller = EngineController(ToolCallingScriptedDouble(list(scripts)), settings, KeyStore())
        tools_controller = ToolsController()
        session = ChatSession(controller, HistoryStore(), tools=tools_controller)
        made.append((session, controller, tools_controller))
        session.store.load_history()
        session.store.set_tools(True)
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


def test_a_call_to_a_tool_not_offered_is_answered_without_running(qtbot, make_session) -> None:
    """Bug caught: a model naming a tool that is switched off getting it run anyway (the switch must hold)."""
    session = make_session(CallScript("x", [("add", '{"a": 1, "b": 1}')]), Script(["fine"]),
                           tools=ToolsConfig(servers=(DEMO,), disabled=("demo/add",)))
    ask(qtbot, session, "q")
    qtbot.waitUntil(lambda: session.conversation.turns[-1].finish_reason == "stop", timeout=20_000)
    [step] = session.conversation.turns[-1].tool_rounds[0].calls
    assert step.status == "error" and "no tool named 'add'" in step.result
    assert "add" not in {t["function"]["name"] for t in engine(session).tool_requests[0]["tools"]}


def test_tools_off_sends_no_tools(qtbot, make_session) -> None:
    """Bug caught: tools offered to the model in a chat whose Tools switch is off."""
    session = make_session(Script(["plain"]))
    session.store.set_tools(False)
    with qtbot.waitSignal(session.reply_finished, timeout=20_000) as blocker:
        asyncio.ensure_future(session.send("hi"))
    assert isinstance(blocker.args[0], Finished)
    assert engine(session).tool_requests[0]["tools"] is None
    assert json.loads(json.dumps(session.conversation.messages())) == [{"role": "user", "content": "hi"}]
