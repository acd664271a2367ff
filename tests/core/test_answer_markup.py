"""Answer Markdown → Qt's HTML: maths cut out before Markdown, no raw HTML, links and code numbered."""

from __future__ import annotations

import re

from app.core.chat.answer_markup import LINK_SCHEME, Collected, Formula, Link, answer_html, cut_maths


def formulas(text: str, streaming: bool = False) -> list[Formula]:
    collected = Collected()
    cut_maths(text, collected, streaming)
    return collected.formulas


def test_every_delimiter_keeps_the_latex_exactly() -> None:
    """Bug caught: Markdown's escapes ate LaTeX's backslashes (``\\,`` became ``,``, ``\\(`` lost its backslash,
    a matrix's ``\\\\`` became ``\\``), so every maths answer looked broken."""
    text = (r"Inline $a\,b$ and \(x^2\), display $$\boxed{42}$$ and"
            "\n\\[\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}\\]")
    assert formulas(text) == [Formula(r"a\,b", False), Formula("x^2", False), Formula(r"\boxed{42}", True),
                              Formula(r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", True)]


def test_prices_escaped_dollars_and_code_are_not_maths() -> None:
    """Bugs caught: "$5 and $10" turned into a formula; a dollar inside code or written as \\$ became maths."""
    assert formulas("It costs $5 and $10 now.") == []
    assert formulas(r"Escaped \$x\$ here") == []
    assert formulas("Code `echo $HOME $PATH` and\n```sh\nx=$a$b\n```\n") == []
    assert "costs $5 and $10" in answer_html("It costs $5 and $10 now.", Collected())


def test_an_unfinished_formula_is_its_source_while_streaming_and_text_once_whole() -> None:
    """Bug caught: a formula cut at the stream's edge rendered as mangled Markdown (its backslashes eaten)."""
    body, rest = cut_maths(r"So $$\frac{1}{", Collected(), streaming=True)
    assert rest == r"$$\frac{1}{" and "frac" not in body
    assert r"$$\frac{1}{" in answer_html(r"So $$\frac{1}{", Collected(), streaming=True)
    assert cut_maths(r"So $$\frac{1}{", Collected(), streaming=False)[1] == ""


def test_raw_html_is_text_and_links_are_numbered_not_written() -> None:
    """Bugs caught: Markdown with raw HTML kept ``<img width=4000>`` as markup; a link's real href reached the
    document, where a click handed any scheme to the desktop."""
    collected = Collected()
    rendered = answer_html('<img width=4000 height=4000 src="x"> [https://python.org](smb://host/share) '
                           "![chart](https://x.example/a.png) ![logo](file:///etc/passwd)", collected)
    assert "<img" not in rendered and "&lt;img width=4000" in rendered
    assert re.findall(r'href="([^"]*)"', rendered) == [f"{LINK_SCHEME}:0", f"{LINK_SCHEME}:1"]
    assert "smb://" not in rendered and "[image: chart]" in rendered  # an image is a link, never loaded
    assert collected.links == [Link("smb://host/share", "https://python.org"), Link("https://x.example/a.png", "chart")]


def test_code_is_highlighted_with_a_label_and_tables_render() -> None:
    """Bug caught: fenced code showed as plain lines with no language and no way to copy one block."""
    collected = Collected()
    rendered = answer_html("```python\ndef f():\n    return 1\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n", collected)
    assert "<span style=" in rendered and ">python<" in rendered and "Copy" in rendered
    assert collected.code_blocks == ["def f():\n    return 1\n"]
    assert "<table border=\"1\"" in rendered and "<td>1</td>" in rendered


def test_a_streamed_tail_numbers_anew_after_truncate() -> None:
    """Bug caught: re-rendering the streaming tail every frame grew the link and code lists without bound and
    sent a click to a stale entry."""
    collected = Collected()
    answer_html("[a](https://a.example)\n\n", collected)
    marks = collected.marks()
    for _ in range(5):
        collected.truncate(marks)
        answer_html("[b](https://b.example) and ```x```", collected, streaming=True)
    assert [link.href for link in collected.links] == ["https://a.example", "https://b.example"]


def test_export_writes_every_formula_as_markdown_maths() -> None:
    """Bug caught: an exported answer kept \\(…\\) and \\[…\\], which Markdown readers show as plain
    parentheses once their backslash is read as an escape."""
    from app.core.chat.conversation import Conversation, Turn
    from app.core.chat.history_import import export_markdown

    answer = "So \\(x\\,y\\) and\n\\[\\begin{pmatrix}1 \\\\ 2\\end{pmatrix}\\]\nwhile `\\(code\\)` stays, and $5 too."
    exported = export_markdown(Conversation(title="t", turns=[Turn(user="q", answer=answer)]))
    assert "So $x\\,y$ and" in exported
    assert "$$\\begin{pmatrix}1 \\\\ 2\\end{pmatrix}$$" in exported
    assert "`\\(code\\)` stays, and $5 too." in exported


def test_dollars_in_a_tilde_fence_after_the_first_line_are_code_not_maths() -> None:
    """Bug caught: ``_FENCE``'s ``^`` (no re.MULTILINE) matched only at the text's first character, so a ``~~~``
    fence anywhere later was not seen: the shell's ``$HOME $PATH`` inside it and the answer's text after it
    became one mangled formula. (A ``` fence hid the bug: the backtick rule skips it on its own.)"""
    text = "Shell:\n~~~\necho $HOME $PATH\n~~~\nand $x$ after it"
    assert formulas(text) == [Formula("x", False)]
    assert formulas("Shell:\n  ~~~~ sh\nx=$a$b\n  ~~~~\n") == []
