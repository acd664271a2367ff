"""The thread's turns as Qt's HTML: a question with its links (its tries' navigator, Edit, New chat from here,
Delete branch), a reply with its notes, its tool calls, its answer's Markdown and its sources. Model and user text is
escaped; links are ours (``nalar-turn:INDEX/ACTION``, and an answer's [n] and sources, which open that turn's own
source)."""

from __future__ import annotations

import html
from pathlib import Path

from app.core.chat.answer_markup import SOURCE_SCHEME
from app.core.chat.conversation import Turn
from app.core.steering.kept_thinking import KeepSwitch
from app.ui.chat.answer_view import AnswerDocument
from app.ui.chat.tool_cards import STATUS_TEXT

TURN_SCHEME = "nalar-turn"  # nalar-turn:INDEX/ACTION, a link on the shown turn at INDEX (never model text)
TURN_ACTIONS = ("prev", "next", "edit", "fork", "delete", "keep")


def text_html(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


def turn_link(index: int, action: str, text: str) -> str:
    return f'<a href="{TURN_SCHEME}:{index}/{action}" style="text-decoration: none">{text}</a>'


def _navigator(index: int, place: int, count: int) -> str:
    """ "◀ 2/3 ▶" for a turn with other tries; an arrow at the end of the tries is greyed, not a link."""
    if count < 2:
        return ""
    back = turn_link(index, "prev", "◀") if place > 0 else '<span style="color: #a0a8b8">◀</span>'
    forward = turn_link(index, "next", "▶") if place < count - 1 else '<span style="color: #a0a8b8">▶</span>'
    return f"&nbsp;&nbsp;&nbsp;{back}&nbsp;{place + 1}/{count}&nbsp;{forward}"


def question_html(turn: Turn, index: int, place: tuple[int, int]) -> str:
    """The question with its links: its tries' navigator and Edit. The user's text is escaped; links are ours."""
    links = "&nbsp;&nbsp;&nbsp;<small>" + " · ".join(
        turn_link(index, action, text) for action, text in (
            ("edit", "Edit"), ("fork", "New chat from here"), ("delete", "Delete branch"))) + "</small>"
    return (f'<a name="turn-{index}"></a><table width="100%" cellpadding="6" style="margin-top: 6px"><tr>'
            f'<td bgcolor="#e3eaf6"><span style="color: #1b2a44"><b>You</b>{_navigator(index, *place)}{links}<br>'
            f'{text_html(turn.user)}'
            f'</span></td></tr></table>')


def _tool_calls(turn: Turn) -> str:
    """Each call in one escaped line: the tool, its arguments, and how it ended with the start of its result."""
    lines = []
    for tool_round in turn.tool_rounds:
        for call in tool_round.calls:
            result = " ".join(call.result.split())
            result = result[:160] + ("…" if len(result) > 160 else "")
            lines.append(f"⚙ <b>{html.escape(call.name)}</b> <code>{html.escape(call.arguments[:200])}</code> · "
                         f"{html.escape(STATUS_TEXT.get(call.status, call.status))}: {html.escape(result)}")
    return (f'<p style="color: #5b4d23"><small>{"<br>".join(lines)}</small></p>') if lines else ""


def reply_html(turn: Turn, document: AnswerDocument, switch: KeepSwitch | None = None) -> str:
    note = "" if turn.finish_reason in (None, "stop") else f" <i>({html.escape(turn.finish_reason)})</i>"
    if turn.backend:
        note = f" <small>via {html.escape(turn.backend)}</small>{note}"
    if turn.thinking_edits:
        note += f' <small style="color: #1f5f99">✎ thinking edited by you ({len(turn.thinking_edits)}×)</small>'
    if switch is not None:  # our own words and figures, not model text
        note += f"&nbsp;&nbsp;&nbsp;<small>{turn_link(switch.index, 'keep', html.escape(switch.label))}</small>"
    count = len(turn.knowledge.sources) if turn.knowledge is not None and turn.message_id is not None else 0
    answer = document.html(turn.answer, sources=(turn.message_id, count) if count else (None, 0))
    return f"{_tool_calls(turn)}<p><b>Nalar</b>{note}</p>{answer}{_sources(turn, document)}"


def _sources(turn: Turn, document: AnswerDocument) -> str:
    """An earlier answer's sources, one line each; like its [n], each opens that turn's own source
    (``nalar-source:MESSAGE_ID/N``, a link of ours made from escaped text). A turn not saved has no id: text."""
    if turn.knowledge is None or not turn.knowledge.sources:
        return ""
    lines = []
    for n, source in enumerate(turn.knowledge.sources, 1):
        line = f"[{n}] {Path(source.path).name}" + (f" · {source.place}" if source.place else "")
        lines.append(html.escape(line) if turn.message_id is None
                     else document.source_link(f"{SOURCE_SCHEME}:{turn.message_id}/{n}", line))
    return f'<p style="color: #57606a"><small>Sources: {" · ".join(lines)}</small></p>'
