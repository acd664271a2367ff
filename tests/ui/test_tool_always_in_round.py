""""Always" for one tool while another tool's call waits in the same round (issue 39, item 12).

Through ChatSession and ToolLoop's public API, on the ToolCallingScriptedDouble (a scripted engine double,
not a model) and the real demo MCP server over stdio; the session factory is test_tool_loop's.
"""

from __future__ import annotations

from tests.support.tool_double import CallScript
from tests.ui import test_tool_loop as tool_loop_tests

make_session = tool_loop_tests.make_session  # the fixtures, shared rather than copied
demo = tool_loop_tests.demo


def test_always_for_one_tool_runs_its_waiting_calls_but_not_another_tools(qtbot, make_session) -> None:
    """Bug caught: "Always for this tool" starting every waiting call of the round (the same-tool check
    dropped or inverted), so another tool's call ran without the user's Run; or the same tool's second call
    still asking for a second click."""
    session = make_session(CallScript("Three calls.", [("add", '{"a": 1, "b": 2}'), ("markup", "{}"),
                                                       ("add", '{"a": 3, "b": 4}')]))
    tool_loop_tests.ask(qtbot, session, "go")
    first, other, second = session.conversation.turns[-1].tool_rounds[0].calls
    assert [s.status for s in (first, other, second)] == ["pending"] * 3
    session.tool_loop.approve(first, always=True)
    qtbot.waitUntil(lambda: first.status == "ok" and second.status == "ok", timeout=20_000)
    assert (first.result, second.result) == ("3", "7"), "the same tool's waiting call ran without a click"
    assert (other.status, other.result) == ("pending", ""), "another tool's call ran without approval"
    assert session.tool_loop.waiting == [other] and session.awaiting_tools
    session.stop()
    qtbot.waitUntil(lambda: not session.streaming, timeout=10_000)
    assert other.status == "stopped"
