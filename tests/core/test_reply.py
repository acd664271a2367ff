"""The Reply model on its own: no window, no Qt, no engine; driven as the session drives it."""

from __future__ import annotations

from app.core.chat.conversation import ToolRound, ToolStep, Turn
from app.core.chat.reply import AFTER_TOOLS, LoopNote, Reply


def recorder(reply: Reply) -> list[tuple[str, object]]:
    """Every change the reply announces, in order, as (what, value)."""
    seen: list[tuple[str, object]] = []
    for name in ("reset", "thinking_added", "answer_started", "answer_added", "loop_noted", "round_added",
                 "continued", "tokens_counted", "backend_changed", "state_changed"):
        getattr(reply, name).connect(lambda value, name=name: seen.append((name, value)))
    return seen


def test_a_reply_with_a_loop_cut_and_a_tool_round_keeps_each_text_once() -> None:
    """Bugs caught: a reply model that keeps the copies the loop guard cut (partial saves and Copy would hold
    the loop); one that keeps the first request's answer after the tool results (the answer shown twice); or
    a trace that loses the thinking before the calls."""
    reply = Reply()
    seen = recorder(reply)
    reply.begin("local")
    reply.add_thinking("I will add. ")
    reply.add_thinking("loop loop loop")
    reply.note_loop(LoopNote("looped", "thinking", "concluded", start_char=12, kept_char=11, copies=3))
    assert reply.thinking == "I will add."
    reply.add_answer("Let me call.")
    step = ToolStep("c1", "add", "{}")
    reply.add_round(ToolRound(reply.thinking, [step], reply.answer))
    assert reply.state == "tools"
    reply.continue_after_tools()
    assert (reply.thinking, reply.answer, reply.state) == ("", "", "streaming")
    reply.add_thinking("got 2")
    reply.add_answer("It is ")
    reply.add_answer("2.")
    reply.count_tokens(5)
    reply.finish("stop", "got 2", "It is 2.")
    assert reply.trace == "I will add." + AFTER_TOOLS + "got 2"
    assert (reply.answer, reply.finish_reason, reply.state, reply.thinking_tokens) == ("It is 2.", "stop",
                                                                                      "finished", 5)
    kinds = [kind for kind, _ in seen]
    assert kinds.count("answer_started") == 2, "once for each request's answer, so the trace folds each time"
    assert kinds.index("continued") < kinds.index("answer_started", kinds.index("continued"))
    assert seen[-1] == ("state_changed", "finished")


def test_continue_anyway_starts_from_the_kept_text_and_a_loaded_turn_shows_whole() -> None:
    """Bug caught: a resumed reply (Continue anyway) that starts empty, so the panes and the partial saves lose
    the kept thinking; or an opened conversation whose panes keep the previous reply."""
    reply = Reply()
    seen = recorder(reply)
    reply.begin("local", thinking="kept thoughts", answer="")
    reply.add_thinking(" and more")
    assert reply.thinking == "kept thoughts and more" and seen[0] == ("reset", None)
    stored = Turn("q", thinking="t", answer="a", finish_reason="stop", backend="remote-1", thinking_tokens=7,
                  tool_rounds=[ToolRound("before", [ToolStep("c", "add", "{}", status="ok", result="2")])])
    reply.load(stored)
    assert (reply.trace, reply.answer, reply.backend, reply.thinking_tokens, reply.state) == (
        "before" + AFTER_TOOLS + "t", "a", "remote-1", 7, "finished")
    reply.load(None)
    assert (reply.trace, reply.answer, reply.rounds, reply.state) == ("", "", [], "idle")

