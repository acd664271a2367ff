"""Streaming panes render the same as rendering the whole text at once, wherever chunks fall."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.ui.chat.answer_view import AnswerPane
from app.ui.chat.panes import MAX_DISPLAY_BLOCK, ThinkingPane

MARKDOWN = (
    "First we add.\n\n"
    "- item one\n- item **two**\n\n"
    "```python\nx = 1\n\ny = 2\n```\n\n"
    "Then *we* answer: `5`.\n"
    "A second line of the same paragraph.\n\n"
    "1. one\n2. two\n"
)


def whole_render(text: str) -> str:
    """The same renderer given the whole text at once."""
    pane = AnswerPane()
    pane.append(text)
    pane.finish()
    return pane.view.toPlainText()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(min_value=1, max_value=len(MARKDOWN) - 1), max_size=12, unique=True))
def test_answer_pane_streaming_render_matches_whole_render(qtbot, cuts: list[int]) -> None:
    pane = AnswerPane()
    qtbot.addWidget(pane)
    bounds = [0, *sorted(cuts), len(MARKDOWN)]
    for start, end in zip(bounds, bounds[1:]):
        pane.append(MARKDOWN[start:end])
        pane.render_markdown()  # a refresh between every chunk: the worst case for incremental rendering
    assert pane.text() == MARKDOWN
    assert pane.view.toPlainText().split() == whole_render(MARKDOWN).split()
    assert "```" not in pane.view.toPlainText() and "**" not in pane.view.toPlainText()


def test_thinking_pane_keeps_text_and_breaks_only_huge_display_lines(qtbot) -> None:
    pane = ThinkingPane()
    qtbot.addWidget(pane)
    words = " ".join(f"w{i}" for i in range(2000))
    for start in range(0, len(words), 37):
        pane.append(words[start:start + 37])
    pane.append("\nnext line")
    assert pane.text() == words + "\nnext line"
    document = pane.view.document()
    assert document.blockCount() > 2
    assert all(len(document.findBlockByNumber(i).text()) <= MAX_DISPLAY_BLOCK + 40
               for i in range(document.blockCount()))
    assert pane.view.toPlainText().split() == pane.text().split()


def test_the_chat_view_draws_the_reply_model_and_a_loop_after_tool_results_collapses_in_place(qtbot) -> None:
    """Bug caught: a thinking loop cut in the request after the tool results was collapsed at its offset in
    that request's text, counted from the start of the whole trace: the pane lost the thinking before the
    calls and kept the loop."""
    from app.core.chat.conversation import ToolRound, ToolStep
    from app.core.chat.reply import AFTER_TOOLS, LoopNote, Reply
    from app.ui.chat.chat_view import ChatView

    view, reply = ChatView(), Reply()
    qtbot.addWidget(view)
    view.observe(reply)
    reply.begin("local")
    reply.add_thinking("Before the calls, a long enough thought.")
    reply.add_round(ToolRound(reply.thinking, [ToolStep("c1", "add", "{}")]))
    assert list(view.tool_panel.cards) == ["c1"]
    reply.continue_after_tools()
    reply.add_thinking("After. ")
    reply.add_thinking("again " * 20)
    reply.note_loop(LoopNote("looped: again", "thinking", "concluded", start_char=7, kept_char=6, copies=20))
    assert reply.trace == "Before the calls, a long enough thought." + AFTER_TOOLS + "After."
    assert view.thinking_pane.text() == reply.trace, "the pane reads the model's text, no copy of its own"
    shown = view.thinking_pane.view.toPlainText()
    assert shown.startswith("Before the calls, a long enough thought.") and "After." in shown
    assert "collapsed by the loop guard" in shown and "again" not in shown
    assert view.thinking_pane.loop_note.text() == "looped: again"
    reply.add_answer("Done.")
    reply.finish("stop", "After.", "Done.")
    assert view.thinking_pane.folded and view.answer_pane.text() == "Done."
