"""Hostile answers for the Markdown view: maths openers that never close. ``cut_maths`` runs on the GUI thread
for every answer shown (a reopened chat, each streamed frame), so its work must grow linearly with the text.

Work is counted, not timed: ``CountingText`` is a str that adds up the characters each ``find`` passes over
and each slice copies, the scans that were quadratic. A hang guard in a child process covers the whole
``answer_html`` (Markdown included) on 200 KB of each mix, with a deadline far above any machine's time.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.core.chat.answer_markup import Collected, cut_maths

# Each mix, repeated: every opener in it never closes.
MIXES = {
    "price-list": "$5 ",  # each $ opens inline maths; every later $ follows a space, so none closes
    "escaped-dollars": "$\\$ ",  # every later $ is escaped or follows a space
    "unclosed-paren": "\\( x ",
    "unclosed-bracket": "\\[ x ",
    "backslashes-and-dollars": "$\\\\\\$ ",  # every later $ has a backslash before it
    "code-spans": "`a` ",  # copied the rest of the text to count each span's backticks
}


class CountingText(str):
    """A str that counts the characters its searches pass over and its slices copy."""

    work = 0

    def find(self, sub, start=None, end=None):  # type: ignore[override]
        found = super().find(sub, start, end)
        begin = 0 if start is None else start
        CountingText.work += (len(self) if found == -1 else found) - begin
        return found

    def __getitem__(self, key):  # type: ignore[override]
        part = super().__getitem__(key)
        CountingText.work += len(part)
        return part


def work_for(unit: str, repeats: int, streaming: bool) -> tuple[int, int]:
    CountingText.work = 0
    text = CountingText(unit * repeats)
    cut_maths(text, Collected(), streaming)
    return CountingText.work, len(text)


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "streaming"])
@pytest.mark.parametrize("mix", list(MIXES))
def test_unclosed_maths_openers_cost_linear_work(mix: str, streaming: bool) -> None:
    """Bug caught: ``_find_close`` scanned every later ``$`` (or the rest of the text for ``\\)``) for each opener
    that never closes, a backtick copied the rest of the text, and a streamed ``$`` copied it again to look for
    another ``$``: 30 KB of ``$5 `` took 31.7 s on the GUI thread."""
    small_work, small = work_for(MIXES[mix], 2_000, streaming)
    large_work, large = work_for(MIXES[mix], 4_000, streaming)
    assert small_work <= 4 * small and large_work <= 4 * large, (small_work, large_work)
    assert large_work <= 2.5 * max(small_work, 1), "work doubles (at most) when the text doubles"


def test_unclosed_openers_stay_text_exactly_as_before() -> None:
    """Bug caught (the fix itself): an opener that never closes turned into maths, or lost its backslash."""
    collected = Collected()
    assert cut_maths("$5 " * 1000, collected) == ("$5 " * 1000, "") and collected.formulas == []
    assert cut_maths("\\( x " * 3, collected)[0] == "\\\\( x " * 3
    assert cut_maths("\\( x " * 3, collected, for_markdown=False)[0] == "\\( x " * 3
    assert cut_maths("a $x$ then $5 and $$y$$", collected)[0].count("\ue000") == 2


HANG_GUARD = r"""
from app.core.chat.answer_markup import Collected, answer_html
SIZE = 60_000
for head, unit in (("", "$5 "), ("$$ x ", "$5 "), ("", "\\( x "), ("", "\\" * 7 + "$ "), ("", "$\\$ ")):
    text = head + (unit * (SIZE // len(unit) + 1))[:SIZE]
    answer_html(text, Collected())
    answer_html(text, Collected(), streaming=True)
print("done")
"""


def test_60_kb_of_unclosed_maths_renders_within_a_hang_guard() -> None:
    """Bug caught: ``answer_html`` of 60 KB of ``$5 `` (after an unclosed ``$$`` too), unclosed ``\\(``, runs of
    backslashes before ``$`` or escaped dollars took minutes on the GUI thread (30 KB: 31.7 s, and the cost was
    quadratic). The deadline only guards against a hang, far above any machine's time; the linear-work test above
    holds the cost. (200 KB here took 5 s of CPU for the same guard.)"""
    done = subprocess.run([sys.executable, "-c", HANG_GUARD], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]


def test_a_long_answer_is_committed_a_budget_at_a_time_and_a_long_line_not_rendered_at_every_refresh(
        qtbot, monkeypatch) -> None:
    """Bugs caught: a streamed answer of one long line (a price list with no line break) was never committed, so
    every refresh (ten a second) ran the whole line through Markdown again; and a reopened 1 MB answer was
    rendered in one refresh, holding the window for seconds. Counted in characters given to the renderer in
    each refresh, not timed."""
    from app.ui.chat import answer_view

    rendered: list[int] = []
    real_answer_html = answer_view.answer_html

    def counting(text: str, *args: object, **kwargs: object) -> str:
        rendered.append(len(text))
        return real_answer_html(text, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(answer_view, "answer_html", counting)
    pane = answer_view.AnswerPane()
    qtbot.addWidget(pane)
    per_refresh = answer_view.COMMIT_BUDGET + 3 * answer_view.MAX_MARKDOWN_TAIL
    pane.append("$5 " * 100_000)  # 300 KB, one line
    pane.render_markdown()
    assert 0 < sum(rendered) <= per_refresh, rendered
    qtbot.waitUntil(lambda: pane.view.toPlainText().count("$5") == 100_000, timeout=60_000)  # the next refreshes
    rendered.clear()
    for _ in range(5):  # the line goes on streaming
        pane.append("$5 " * 300)
        pane.render_markdown()
    assert sum(rendered) < 5 * (2 * answer_view.MAX_MARKDOWN_TAIL + 900), rendered
    assert pane.view.toPlainText().count("$5") == 100_000 + 5 * 300


def test_a_long_line_that_ends_in_a_line_break_is_committed_in_chunks_too(qtbot, monkeypatch) -> None:
    """Bug caught: the long-line cut was checked after the "huge paragraph: commit at the line break" rule, so a
    1 MB line that ended with a newline went to Markdown as one chunk, in one refresh."""
    from app.ui.chat import answer_view

    rendered: list[int] = []
    real_answer_html = answer_view.answer_html
    monkeypatch.setattr(answer_view, "answer_html", lambda text, *a, **k: rendered.append(len(text))
                        or real_answer_html(text, *a, **k))
    pane = answer_view.AnswerPane()
    qtbot.addWidget(pane)
    pane.append("$5 " * 100_000 + "\n\nThe end.")
    pane.render_markdown()
    assert 0 < max(rendered) <= 2 * answer_view.MAX_MARKDOWN_TAIL, max(rendered)
