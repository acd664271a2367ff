"""The answer pane as a reader sees it: maths drawn while it streams, code highlighted and copied per block,
and links that open only over http(s), after the real address is shown when the text says another."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtGui import QGuiApplication, QImage, QTextDocument
from PySide6.QtWidgets import QMessageBox

from app.core.chat.answer_markup import MATH_SCHEME, Formula
from app.ui.chat import answer_view
from app.ui.chat.answer import formulas
from app.ui.chat.answer_view import AnswerPane

ANSWER = (
    "Integrate by parts with $u = x$ and $dv = e^x\\,dx$:\n\n"
    "$$\\int_0^1 x e^x\\,dx = \\left[x e^x\\right]_0^1 - \\int_0^1 e^x\\,dx = 1$$\n\n"
    "The matrix \\[A = \\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}\\] has $\\det A = -2$.\n\n"
    "```python\ndef area():\n    return 1  # the integral\n```\n\n"
    "| step | value |\n|---|---|\n| parts | 1 |\n\n"
    "So the answer is $\\boxed{1}$.\n"
)


def stream(pane: AnswerPane, text: str, chunk: int = 7) -> None:
    for start in range(0, len(text), chunk):
        pane.append(text[start:start + chunk])
        pane.render_markdown()


def images_in(document: QTextDocument) -> list[str]:
    names = []
    block = document.begin()
    while block.isValid():
        iterator = block.begin()
        while not iterator.atEnd():
            fmt = iterator.fragment().charFormat()
            if fmt.isImageFormat():
                names.append(fmt.toImageFormat().name())
            iterator += 1
        block = block.next()
    return names


def test_a_streamed_maths_answer_renders_formulas_code_and_a_table(qtbot, tmp_path: Path) -> None:
    """Bug caught: the answer pane showed LaTeX as raw source, fenced code as plain lines and tables as pipes.
    Checked on the document (an image per formula, coloured code, a table) and on a screenshot."""
    pane = AnswerPane()
    qtbot.addWidget(pane)
    pane.resize(760, 640)
    stream(pane, ANSWER)
    pane.finish()
    document = pane.view.document()
    qtbot.waitUntil(lambda: not pane.drawing and len(images_in(document)) == 6, timeout=60_000)
    sources = [r"u = x", r"dv = e^x\,dx", r"\det A = -2", r"\boxed{1}"]
    names = images_in(document)  # four inline formulas, two displayed
    for name in names:
        image = document.resource(QTextDocument.ResourceType.ImageResource, QUrl(name))
        assert isinstance(image, QImage) and not image.isNull() and image.width() > 4, name
    boxed = Formula(r"\boxed{1}", False)
    assert f"{MATH_SCHEME}:{boxed.key}" in names
    plain = pane.view.toPlainText()
    assert all(source not in plain for source in sources) and "$" not in plain and "```" not in plain
    assert "def area():" in plain and "python · Copy" in plain
    html = document.toHtml()
    assert "color:#" in html.replace(" ", "")  # Pygments' colours on the code
    assert document.rootFrame().childFrames(), "the table is a Qt table frame"
    assert pane.text() == ANSWER, "Copy answer keeps the LaTeX source"
    pane.show()
    qtbot.waitExposed(pane)
    shot = pane.grab()
    path = Path(os.environ.get("NALAR_SHOT_DIR", tmp_path)) / "answer-maths.png"
    assert shot.save(str(path)) and path.stat().st_size > 10_000


def test_a_half_streamed_formula_shows_as_its_source_until_it_closes(qtbot) -> None:
    """Bug caught: a display formula cut mid-stream showed as Markdown with its backslashes eaten."""
    pane = AnswerPane()
    qtbot.addWidget(pane)
    stream(pane, "So the value is $$\\frac{1}{2} + \\sqrt{")
    assert "$$\\frac{1}{2} + \\sqrt{" in pane.view.toPlainText()
    assert images_in(pane.view.document()) == []
    stream(pane, "x}$$ and done.")
    qtbot.waitUntil(lambda: len(images_in(pane.view.document())) == 1, timeout=60_000)
    assert "\\frac" not in pane.view.toPlainText()


def test_a_formula_ziamath_cannot_draw_shows_its_source(qtbot) -> None:
    """Bug caught: a formula outside the renderer's coverage showed as a broken-image icon."""
    pane = AnswerPane()
    qtbot.addWidget(pane)
    stream(pane, "Bad: $\\frac{1}{$ and good: $x^2$.")  # an unbalanced group: ziamath raises
    pane.finish()
    qtbot.waitUntil(lambda: not pane.drawing, timeout=60_000)
    pane.render_markdown()
    assert "\\frac{1}{" in pane.view.toPlainText() and len(images_in(pane.view.document())) == 1


@pytest.fixture
def desktop(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """What would have reached the desktop and the reader: opened URLs and the message boxes' texts."""
    seen: dict[str, list] = {"opened": [], "messages": [], "answer": [QMessageBox.StandardButton.No]}

    def open_url(url: QUrl) -> bool:
        seen["opened"].append(url.toString())
        return True

    def message(_parent, _icon, title: str, text: str, ask: bool = False) -> QMessageBox.StandardButton:
        seen["messages"].append((title, text))
        return seen["answer"][0] if ask else QMessageBox.StandardButton.Ok

    monkeypatch.setattr(answer_view.QDesktopServices, "openUrl", open_url)
    monkeypatch.setattr(answer_view, "_message", message)
    return seen


def click(pane: AnswerPane, number: int) -> None:
    pane.view.anchorClicked.emit(QUrl(f"nalar-link:{number}"))


def test_file_and_smb_links_are_refused_with_their_address(qtbot, desktop: dict[str, list]) -> None:
    """Bug caught: an answer showed "https://python.org" as a link's text while the click opened
    smb://host/share (or a file:// .desktop launcher) through setOpenExternalLinks."""
    pane = AnswerPane()
    qtbot.addWidget(pane)
    stream(pane, "See [https://python.org](smb://host/share) and <file:///tmp/x.desktop> and [ftp](ftp://h/f).")
    pane.finish()
    assert not pane.view.openExternalLinks() and not pane.view.openLinks()
    assert "file:///tmp/x.desktop" in pane.view.toPlainText()  # not a link at all: Markdown refuses file:
    for number in range(len(pane.document.collected.links)):
        click(pane, number)
    assert desktop["opened"] == []
    assert [text.splitlines()[-1] for _title, text in desktop["messages"]] == ["smb://host/share", "ftp://h/f"]


def test_a_link_whose_text_names_another_address_shows_it_before_opening(qtbot, desktop: dict[str, list]) -> None:
    """Bug caught: a link reading https://python.org opened https://evil.example without the reader seeing it."""
    pane = AnswerPane()
    qtbot.addWidget(pane)
    stream(pane, "[https://python.org](https://evil.example/x) then [docs](https://docs.python.org/) "
                 "then <https://python.org/>.")
    pane.finish()
    click(pane, 0)
    assert desktop["opened"] == [] and "https://evil.example/x" in desktop["messages"][0][1]
    desktop["answer"][0] = QMessageBox.StandardButton.Yes
    click(pane, 0)
    assert desktop["opened"] == ["https://evil.example/x"]
    desktop["messages"].clear()
    click(pane, 2)  # text and address agree: it opens without a question
    assert desktop["opened"][-1] == "https://python.org/" and desktop["messages"] == []


def test_each_code_block_copies_its_own_code(qtbot) -> None:
    """Bug caught: the only copy button copied the whole answer, Markdown and all."""
    pane = AnswerPane()
    qtbot.addWidget(pane)
    stream(pane, "A:\n\n```sh\necho one\n```\n\nB:\n\n```\nplain two\n```\n")
    pane.finish()
    pane.view.anchorClicked.emit(QUrl("nalar-copy:1"))
    assert QGuiApplication.clipboard().text() == "plain two\n"
    pane.view.anchorClicked.emit(QUrl("nalar-copy:0"))
    assert QGuiApplication.clipboard().text() == "echo one\n"


def test_formulas_are_drawn_in_a_child_process_and_shown_on_the_gui_thread(qtbot, monkeypatch) -> None:
    """Bugs caught: drawing formulas on the GUI thread stalled the window (one of SymPy's matrices took seconds);
    drawing them on a thread of the window's process held the GIL against every PySide call (stalls of seconds
    while formulas streamed, `nalar bench ui`); a result handed back on the reader thread touched the document."""
    threads: dict[str, str] = {}
    real_on_drawn = answer_view.AnswerDocument._on_drawn

    def on_drawn(self, key: str, image: QImage | None) -> None:
        threads["shown on"] = threading.current_thread().name
        real_on_drawn(self, key, image)

    monkeypatch.setattr(answer_view.AnswerDocument, "_on_drawn", on_drawn)
    pane = AnswerPane()
    qtbot.addWidget(pane)
    stream(pane, f"A new one: $y = \\sqrt[3]{{z + {unseen()}}}$.")
    pane.finish()
    qtbot.waitUntil(lambda: len(images_in(pane.view.document())) == 1 and "shown on" in threads, timeout=60_000)
    worker = formulas.formula_drawer().worker.pid
    assert worker is not None and worker != os.getpid() and Path(f"/proc/{worker}").exists()
    assert Path(f"/proc/{worker}/status").read_text().split("PPid:")[1].split()[0] == str(os.getpid())
    assert threads["shown on"] == threading.main_thread().name


def test_closing_the_drawer_ends_its_child_and_the_next_formula_starts_another(qtbot) -> None:
    """What `nalar bench hostile` relies on to find what a window leaves running: the drawer's child, shared by
    every window of the process, ends at ``close_formula_drawer`` as at the app's exit, and drawing goes on after.
    Bug caught: a drawer that could not start again once closed (every later formula shown as its source)."""
    pane = AnswerPane()
    qtbot.addWidget(pane)
    stream(pane, f"First $a + {unseen()}$.")
    pane.finish()
    qtbot.waitUntil(lambda: len(images_in(pane.view.document())) == 1, timeout=60_000)
    first = formulas.formula_drawer().worker.pid
    assert first is not None
    formulas.close_formula_drawer()
    qtbot.waitUntil(lambda: not Path(f"/proc/{first}").exists(), timeout=30_000)
    stream(pane, f" Then $b + {unseen()}$.")
    pane.finish()
    qtbot.waitUntil(lambda: len(images_in(pane.view.document())) == 2, timeout=60_000)
    assert formulas.formula_drawer().worker.pid not in (None, first)


def unseen() -> int:
    """A number no other test's formula holds: the drawer keeps what it drew for the whole process, so a test
    that needs a formula drawn (not found drawn already) uses one of its own."""
    return uuid.uuid4().int % 10**9


def held_drawing(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Drawn formulas reach the window only once the returned event is set: the test decides when an image
    arrives (held on the drawer's reader thread, in this process)."""
    gate, real_answer = threading.Event(), formulas.FormulaDrawer._on_answer

    def on_answer(self, key: str, svg: bytes | None, reason: str) -> None:
        gate.wait(30)
        real_answer(self, key, svg, reason)

    monkeypatch.setattr(formulas.FormulaDrawer, "_on_answer", on_answer)
    return gate


def sent_to_the_drawer(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources the window asks the drawing process for, in order."""
    sent: list[str] = []
    worker = formulas.formula_drawer().worker
    real_draw = worker.draw

    def draw(key: str, source: str, display: bool, pixels: int = formulas.MATH_PIXELS) -> None:
        sent.append(source)
        real_draw(key, source, display, pixels)

    monkeypatch.setattr(worker, "draw", draw)
    return sent


PARAGRAPHS = "".join(f"Paragraph {n} says nothing of note, at some length.\n\n" for n in range(300))


def test_a_drawn_formula_renders_again_from_its_paragraph_not_the_whole_answer(qtbot, monkeypatch) -> None:
    """Bug caught: each drawn formula re-rendered the whole answer from the top, so a long maths answer cost
    the whole text once per formula (quadratic: 0.4 s a formula at 300 KB, `nalar bench ui` synthetic-maths)."""
    gate = held_drawing(monkeypatch)
    pane = AnswerPane()
    qtbot.addWidget(pane)
    last = f"So $x^2 + {unseen()}$ is the last one.\n\n"
    stream(pane, PARAGRAPHS + last + "Tail still streaming", chunk=400)
    inserted: list[int] = []
    real_insert = pane.document.insert
    monkeypatch.setattr(pane.document, "insert", lambda cursor, markdown, streaming=False, collected=None: (
        inserted.append(len(markdown)), real_insert(cursor, markdown, streaming, collected))[1])
    gate.set()
    qtbot.waitUntil(lambda: len(images_in(pane.view.document())) == 1, timeout=60_000)
    # The formula's chunk (what one refresh committed: at most one 400-character step here) and the tail.
    assert 0 < sum(inserted) <= 400 + len("Tail still streaming") < len(PARAGRAPHS), sum(inserted)
    plain = pane.view.toPlainText()
    assert plain.count("Paragraph 299 says") == 1 and "x^2" not in plain
    assert plain.rstrip().endswith("Tail still streaming")


def test_an_early_formula_drawn_late_renders_its_chunk_alone_and_keeps_every_later_paragraph_once(qtbot,
                                                                                               monkeypatch) -> None:
    """Bugs caught: rendering again from a formula's chunk to the end (what a formula-dense answer paid for each
    image: seconds a refresh); a chunk rendered again at a stale document position (text doubled or lost after
    it); the link numbering of the chunks after it counted twice."""
    gate = held_drawing(monkeypatch)
    pane = AnswerPane()
    qtbot.addWidget(pane)
    first = "First $\\alpha$ here, see [docs](https://example.org).\n\n"
    text = first + PARAGRAPHS + "End [two](https://b.org)."
    stream(pane, text, chunk=500)
    pane.finish()
    inserted: list[int] = []
    real_insert = pane.document.insert
    monkeypatch.setattr(pane.document, "insert", lambda cursor, markdown, streaming=False, collected=None: (
        inserted.append(len(markdown)), real_insert(cursor, markdown, streaming, collected))[1])
    gate.set()
    qtbot.waitUntil(lambda: len(images_in(pane.view.document())) == 1, timeout=60_000)
    assert 0 < sum(inserted) <= 500, inserted  # the first chunk (one 500-character step), not the 16 KB after it
    plain = pane.view.toPlainText()
    assert all(plain.count(f"Paragraph {n} says") == 1 for n in (0, 150, 299)) and "\\alpha" not in plain
    assert [link.href for link in pane.document.collected.links] == ["https://example.org", "https://b.org"]
    assert pane.text() == text


def test_a_refresh_renders_again_within_its_budget_and_the_rest_follow(qtbot, monkeypatch) -> None:
    """Bug caught: every chunk whose formula was drawn rendered again in one refresh (a formula-dense answer
    whose drawings arrive together froze the window for the sum of them)."""
    gate = held_drawing(monkeypatch)
    pane = AnswerPane()
    qtbot.addWidget(pane)
    tag = unseen()
    filler = PARAGRAPHS[:3000]
    text = "".join(f"Part {n}: $x_{{{n}}} = {tag}$.\n\n" + filler for n in range(6))
    stream(pane, text, chunk=3100)
    pane.finish()
    per_refresh: list[list[int]] = []
    real_insert, real_render = pane.document.insert, pane.render_markdown
    monkeypatch.setattr(pane.document, "insert", lambda cursor, markdown, streaming=False, collected=None: (
        per_refresh[-1].append(len(markdown)) if collected is not None else None,  # a chunk, not the tail
        real_insert(cursor, markdown, streaming, collected))[1])
    monkeypatch.setattr(pane, "render_markdown", lambda: (per_refresh.append([]), real_render())[1])
    pane._render_timer.timeout.disconnect()
    pane._render_timer.timeout.connect(pane.render_markdown)
    gate.set()
    qtbot.waitUntil(lambda: len(images_in(pane.view.document())) == 6 and not pane.drawing, timeout=60_000)
    chunks = [sizes for sizes in per_refresh if sizes]
    assert all(len(sizes) == 1 or sum(sizes) <= answer_view.RENDER_BUDGET for sizes in chunks), chunks
    assert len(chunks) >= 2, chunks  # two 3 KB chunks exceed the budget: one a refresh, then the next
    assert all(pane.view.toPlainText().count(f"Part {n}:") == 1 for n in range(6))


def test_a_formula_is_drawn_once_for_the_answer_and_the_thread(qtbot, monkeypatch) -> None:
    """Bugs caught: each document drew its formulas anew, so a finished maths answer, appended to the thread,
    queued every formula a second time behind the ones still streaming; and a formula drawn already came back
    as a queued signal that rendered the document again, once per formula."""
    calls = sent_to_the_drawer(monkeypatch)
    first, second = AnswerPane(), AnswerPane()
    qtbot.addWidget(first)
    qtbot.addWidget(second)
    source = f"\\zeta(3) \\approx 1.{unseen()}"
    text = f"Once: ${source}$ only.\n\n"
    stream(first, text)
    first.finish()
    qtbot.waitUntil(lambda: len(images_in(first.view.document())) == 1, timeout=60_000)
    stream(second, text)
    second.finish()
    assert len(images_in(second.view.document())) == 1, "drawn already: shown in the same render, no round trip"
    assert calls == [source]
