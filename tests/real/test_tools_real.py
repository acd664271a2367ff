"""Tools end to end: the real window, the real engine process (embedded SmolLM2-135M) and a real MCP server
over stdio (tests/support/mcp_demo_server.py, built with the SDK's MCPServer, v1's FastMCP).

A forced call (tool_choice naming the function, through the engine's structured outputs) is approved,
runs, and its result goes back in the follow-up request; Deny and a tool timeout go back the same way.
One engine start serves the three replies; each reply is a few dozen tokens.
"""

from __future__ import annotations

import sys

import pytest
from PySide6.QtCore import Qt

from app.core.chat.history import HistoryStore
from app.core.settings.settings import EngineConfig, SamplingConfig, Settings, ToolsConfig, ToolServer
from app.engine.process.engine_process import EngineProcess
from app.tools.mcp_client import DENIED_TEXT
from tests.conftest import child_pids, require_embedded_model, vllm_processes
from tests.support import MCP_DEMO_SERVER

pytestmark = pytest.mark.real_engine

DEMO = ToolServer(name="demo", command=sys.executable, args=(MCP_DEMO_SERVER,))


def named(function: str) -> dict[str, object]:
    return {"type": "function", "function": {"name": function}}


def test_forced_call_deny_and_timeout_through_the_real_window_engine_and_server(qtbot, make_window) -> None:
    """Bugs caught: the engine offered no tools or ignored the forced choice (no card appears); a call run before
    Run is pressed; the result missing from the follow-up request (the tool message never reaches the engine,
    so the answer can't use it); Deny or a hung tool leaving the reply stuck; calls lost from the history."""
    settings = Settings(engine=EngineConfig(model=str(require_embedded_model()), max_model_len=2048),
                        sampling=SamplingConfig(think_budget=16, max_tokens=24, temperature=0.0),
                        tools=ToolsConfig(servers=(DEMO,), call_timeout_s=3))
    before = child_pids()
    engine = EngineProcess()
    sent: list[list[dict]] = []  # the messages of every request, as the engine process was given them
    generate = engine.generate

    def recording_generate(messages, *args, **kwargs):  # type: ignore[no-untyped-def]
        sent.append([dict(m) for m in messages])
        return generate(messages, *args, **kwargs)

    engine.generate = recording_generate  # type: ignore[method-assign]
    window = make_window(engine, settings)
    session, panel = window.session, window.chat_view.tool_panel
    # The prompt, not the controller: the engine is ready (its pipe thread says so) a moment before the window
    # enables the prompt, and a Return pressed on a disabled prompt is dropped.
    qtbot.waitUntil(lambda: window.prompt.isEnabled() and "demo" in window.tools.states, timeout=300_000)
    window.controls.tools_switch.setChecked(True)

    def ask(question: str, function: str) -> object:
        session.tool_choice = named(function)
        window.prompt.setPlainText(question)
        turns = len(session.conversation.turns)  # counted before the send: Return may add the turn at once
        qtbot.keyClick(window.prompt, Qt.Key.Key_Return)
        # The first forced reply also builds the structured-output grammar: minutes on a loaded 2-core CPU.
        qtbot.waitUntil(lambda: len(session.conversation.turns) > turns and bool(
            session.awaiting_tools or session.conversation.turns[-1].finish_reason), timeout=420_000)
        turn = session.conversation.turns[-1]
        assert session.awaiting_tools and panel.cards, f"no call: {turn.finish_reason} {turn.answer!r}"
        [card] = panel.cards.values()
        [step] = session.conversation.turns[-1].tool_rounds[-1].calls
        assert step.name == function and step.status == "pending", "ran before approval"
        return card, step

    card, step = ask("What is 2 plus 3? Use the add tool.", "add")
    requests_before = len(sent)
    with qtbot.waitSignal(window.reply_finished, timeout=120_000) as blocker:
        qtbot.mouseClick(card.run_button, Qt.MouseButton.LeftButton)
    assert blocker.args[0].reason in ("stop", "length")
    assert step.status == "ok" and step.result.lstrip("-").isdigit(), step.result
    follow_up = sent[requests_before]
    assert follow_up[-1] == {"role": "tool", "tool_call_id": step.call_id, "content": step.result}
    assert follow_up[-2]["tool_calls"][0]["function"]["name"] == "add"
    assert window.chat_view.answer_pane.text().strip(), "the model answered after the result"

    card, step = ask("Add 1 and 1 with the add tool.", "add")
    with qtbot.waitSignal(window.reply_finished, timeout=120_000):
        qtbot.mouseClick(card.deny_button, Qt.MouseButton.LeftButton)
    assert (step.status, step.result) == ("denied", DENIED_TEXT)
    assert sent[-1][-1] == {"role": "tool", "tool_call_id": step.call_id, "content": DENIED_TEXT}

    card, step = ask("Wait a while with the slow tool.", "slow")
    with qtbot.waitSignal(window.reply_finished, timeout=120_000):
        qtbot.mouseClick(card.run_button, Qt.MouseButton.LeftButton)
    assert step.status == "timeout" and "did not answer within 3 s" in step.result
    assert sent[-1][-1]["content"] == step.result

    stored = HistoryStore(session.history.path).conversations()[-1]
    assert [t.tool_rounds[0].calls[0].status for t in stored.turns] == ["ok", "denied", "timeout"]
    first = session.conversation.turns[0].tool_rounds[0].calls[0]
    assert stored.turns[0].tool_rounds[0].calls[0].result == first.result
    window.close()
    assert vllm_processes(before) == []
