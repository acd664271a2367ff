"""An answer's Markdown as the HTML subset Qt's text documents show: no raw HTML, code highlighted with
Pygments, maths and links left as numbered placeholders for the view to fill in.

Maths is cut out before Markdown sees the text, because Markdown's escapes eat LaTeX's backslashes (``\\,``
became ``,`` and a matrix's ``\\\\`` became ``\\``). Links are numbered, never written as hrefs: the view
decides on each click what opens (the model writes them, and a tool result can steer what it writes).
"""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

MATH_OPEN, MATH_CLOSE = "\ue000", "\ue001"  # private-use characters: no answer text collides with them
LINK_SCHEME = "nalar-link"  # nalar-link:N, the Nth link of the document
COPY_SCHEME = "nalar-copy"  # nalar-copy:N, the Nth code block's copy button
MATH_SCHEME = "nalar-math"  # nalar-math:KEY, a formula's image resource (Formula.key)
CITE_SCHEME = "nalar-cite"  # nalar-cite:N, the shown turn's Nth knowledge source (a cited Link's href)
SOURCE_SCHEME = "nalar-source"  # nalar-source:MESSAGE_ID/N, an earlier turn's Nth source (a cited Link's href)
_CITATION = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")  # [1], [2, 3]
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})", re.MULTILINE)  # ^ at each line: match(text, i) starts mid-text
_PLACEHOLDER = re.compile(f"{MATH_OPEN}(\\d+){MATH_CLOSE}")
_FORMATTER = HtmlFormatter(nowrap=True, noclasses=True, style="friendly")


@dataclass(frozen=True)
class Formula:
    source: str  # the LaTeX between the delimiters
    display: bool  # $$…$$ or \[…\] (a block), else $…$ or \(…\) (inline)

    @cached_property  # asked for at every render of every document that shows the formula
    def key(self) -> str:
        """Names the formula's image: the same formula is drawn once per document, a changed one anew."""
        return hashlib.sha1(f"{self.display}:{self.source}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Link:
    href: str  # where the model's link points
    text: str  # what the reader sees
    cited: bool = False  # ours: a citation or a source of the turn (a model's link never is, whatever its href)


def cited_source(href: str) -> tuple[int | None, int] | None:
    """(the turn's message id, or None for the turn shown; the source's number) of a cited Link's href."""
    scheme, _, rest = href.partition(":")
    turn, _, number = rest.rpartition("/")
    if scheme == CITE_SCHEME and not turn and number.isdigit():
        return None, int(number)
    if scheme == SOURCE_SCHEME and turn.isdigit() and number.isdigit():
        return int(turn), int(number)
    return None


@dataclass
class Collected:
    """What a document's rendered parts refer to by number, kept across the blocks of one document."""

    formulas: list[Formula] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    code_blocks: list[str] = field(default_factory=list)

    def marks(self) -> tuple[int, int, int]:
        return len(self.formulas), len(self.links), len(self.code_blocks)

    def upto(self, marks: tuple[int, int, int]) -> Collected:
        """A copy of what was collected before ``marks`` (a committed chunk rendered again in its place)."""
        return Collected(self.formulas[:marks[0]], self.links[:marks[1]], self.code_blocks[:marks[2]])

    def truncate(self, marks: tuple[int, int, int]) -> None:
        """Forget what was collected after ``marks`` (a streaming tail rendered again)."""
        del self.formulas[marks[0]:], self.links[marks[1]:], self.code_blocks[marks[2]:]


def _dollar_closes(text: str, end: int) -> bool:
    """A single ``$`` closes maths unless a space comes before it or a digit after it ("$5 and $10")."""
    return not text[end - 1].isspace() and not (end + 1 < len(text) and text[end + 1].isdigit())


class _Closers:
    """Where each closer next appears in one text, each search resuming where the last one for it stopped.

    ``cut_maths`` only moves forward, so an earlier search that found nothing (or found a closer further on)
    still answers: each stretch of text is scanned once per closer, not once per opener. Searching the rest of
    the text anew for every opener that never closes was quadratic: 30 KB of ``$5 `` (a price list) took 31.7 s.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self._last: dict[tuple[str, bool], tuple[int, int]] = {}  # (closer, maths $) -> (from, found or -1)

    def find(self, closer: str, start: int, *, maths_dollar: bool = False) -> int:
        """Where ``closer`` next appears at or after ``start`` (with ``maths_dollar``, a ``$`` that closes
        maths: unescaped, see ``_dollar_closes``), or -1."""
        key = (closer, maths_dollar)
        last = self._last.get(key)
        if last is not None and last[0] <= start and (last[1] == -1 or last[1] >= start):
            return last[1]
        found = self._scan(closer, start, maths_dollar)
        self._last[key] = (start, found)
        return found

    def _scan(self, closer: str, start: int, maths_dollar: bool) -> int:
        text, at = self.text, start
        while (at := text.find(closer, at)) != -1:
            if not maths_dollar or (text[at - 1] != "\\" and _dollar_closes(text, at)):
                return at
            at += 1
        return -1


_SPECIAL = re.compile(r"[`\\$\n]")  # where cut_maths has anything to decide; the text between is copied as it is
_TICKS = re.compile("`+")


def cut_maths(text: str, collected: Collected, streaming: bool = False, for_markdown: bool = True) -> tuple[str, str]:
    """The text with each formula replaced by a placeholder, and, while ``streaming``, the unfinished rest from
    a formula that opens but does not close yet (shown as source until it does). Code is left alone.

    Linear in the text: plain stretches are copied whole, and each closer's search resumes where its last stopped."""
    closers = _Closers(text)
    out: list[str] = []
    i, n = 0, len(text)
    in_fence: str | None = None
    line_start = True
    while i < n:
        if line_start:
            fence = _FENCE.match(text, i)
            if fence and (in_fence is None or fence.group(1)[0] == in_fence[0]):
                in_fence = None if in_fence else fence.group(1)
        if in_fence:
            end = text.find("\n", i)
            end = n if end == -1 else end + 1
            out.append(text[i:end])
            i, line_start = end, True
            continue
        special = _SPECIAL.search(text, i)
        plain_end = n if special is None else special.start()
        if plain_end > i:
            out.append(text[i:plain_end])
            i, line_start = plain_end, False
            continue
        char = text[i]
        line_start = char == "\n"
        if char == "`":
            ticks = len(_TICKS.match(text, i).group())  # type: ignore[union-attr]  # text[i] is a backtick
            close = text.find("`" * ticks, i + ticks)  # scanned once: an unclosed run copies the rest as code
            end = n if close == -1 else close + ticks
            out.append(text[i:end])
            i = end
            continue
        if char == "\\" and text.startswith(("\\(", "\\["), i):
            opener, closer, display = text[i:i + 2], "\\)" if text[i + 1] == "(" else "\\]", text[i + 1] == "["
        elif char == "\\" and i + 1 < n:
            out.append(text[i:i + 2])  # an escape: \$ stays a dollar for Markdown to unescape
            i += 2
            continue
        elif text.startswith("$$", i):
            opener, closer, display = "$$", "$$", True
        elif char == "$" and i + 1 < n and not text[i + 1].isspace():
            opener, closer, display = "$", "$", False
        else:
            out.append(char)
            i += 1
            continue
        close = closers.find(closer, i + len(opener), maths_dollar=closer == "$")
        if close == -1:
            if streaming and (opener != "$" or closers.find("$", i + 1) == -1):
                return "".join(out), text[i:]
            # Never closes: text. Markdown would read \( as an escaped "(", so the backslash is doubled for it.
            out.append("\\" + opener if opener.startswith("\\") and for_markdown else opener)
            i += len(opener)
            continue
        collected.formulas.append(Formula(text[i + len(opener):close].strip(), display))
        number = len(collected.formulas) - 1
        placeholder = f"{MATH_OPEN}{number}{MATH_CLOSE}"
        out.append(f"\n\n{placeholder}\n\n" if display else placeholder)
        i = close + len(closer)
    return "".join(out), ""


def _highlighted(code: str, language: str) -> str:
    try:
        lexer = get_lexer_by_name(language) if language else None
    except ClassNotFound:
        lexer = None
    return highlight(code, lexer, _FORMATTER).rstrip("\n") if lexer else html.escape(code.rstrip("\n"))


def _markdown() -> MarkdownIt:
    """The parser with Nalar's rules; what they number goes to the ``Collected`` passed as ``env``."""
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])

    def fence(_renderer: Any, tokens: Any, idx: int, _options: Any, env: Any) -> str:
        collected: Collected = env["collected"]
        token = tokens[idx]
        language = (token.info or "").split()[0] if token.info else ""
        collected.code_blocks.append(token.content)
        number = len(collected.code_blocks) - 1
        label = html.escape(language) if language else "code"
        return (f'<p style="margin-bottom: 0"><small><span style="color: #57606a">{label}</span> · '
                f'<a href="{COPY_SCHEME}:{number}">Copy</a></small></p>'
                f'<pre style="background-color: #f6f8fa; font-family: monospace">'
                f'{_highlighted(token.content, language)}</pre>')

    def link_open(_renderer: Any, tokens: Any, idx: int, _options: Any, env: Any) -> str:
        collected: Collected = env["collected"]
        text = []
        for token in tokens[idx + 1:]:
            if token.type == "link_close":
                break
            text.append(token.content)
        collected.links.append(Link(str(tokens[idx].attrGet("href") or ""), "".join(text)))
        return f'<a href="{LINK_SCHEME}:{len(collected.links) - 1}">'

    def image(_renderer: Any, tokens: Any, idx: int, _options: Any, env: Any) -> str:
        collected: Collected = env["collected"]
        # Shown as a link, never loaded: a file:// image would read this machine's files into the answer.
        token = tokens[idx]
        alt = token.content or "image"
        collected.links.append(Link(str(token.attrGet("src") or ""), alt))
        return f'<a href="{LINK_SCHEME}:{len(collected.links) - 1}">[image: {html.escape(alt)}]</a>'

    def text(_renderer: Any, tokens: Any, idx: int, _options: Any, env: Any) -> str:
        """Prose (never code): each [n] of the turn's sources becomes a numbered link to source n."""
        escaped = escapeHtml(tokens[idx].content)
        sources: int = env.get("citations", 0)
        if not sources or idx and tokens[idx - 1].type == "link_open":
            return escaped
        collected: Collected = env["collected"]

        turn: int | None = env.get("turn")

        def cite(number: str) -> str:
            if not 1 <= int(number) <= sources:
                return number
            href = f"{CITE_SCHEME}:{int(number)}" if turn is None else f"{SOURCE_SCHEME}:{turn}/{int(number)}"
            collected.links.append(Link(href, f"[{int(number)}]", cited=True))
            return f'<a href="{LINK_SCHEME}:{len(collected.links) - 1}">{number}</a>'

        return _CITATION.sub(lambda m: "[" + re.sub(r"\d+", lambda n: cite(n.group(0)), m.group(1)) + "]", escaped)

    md.add_render_rule("text", text)
    md.add_render_rule("fence", fence)
    md.add_render_rule("code_block", fence)
    md.add_render_rule("link_open", link_open)
    md.add_render_rule("image", image)
    return md


_MARKDOWN = _markdown()  # built once: a streaming tail is rendered ten times a second


def _formula_html(match: re.Match[str], collected: Collected) -> str:
    number = int(match.group(1))
    formula = collected.formulas[number]
    title = html.escape(formula.source, quote=True)
    return f'<img src="{MATH_SCHEME}:{formula.key}" title="{title}" style="vertical-align: middle">'


def answer_html(text: str, collected: Collected, streaming: bool = False, citations: int = 0,
                turn: int | None = None) -> str:
    """``text`` (Markdown with LaTeX) as HTML; what it numbers is appended to ``collected``. ``streaming``: the
    text may stop inside a formula, which then shows as its source. ``citations``: how many knowledge sources the
    turn has; [n] for each becomes a cited Link, whose href is ``nalar-cite:n``, or ``nalar-source:TURN/n`` for
    the turn whose message id is ``turn`` (an earlier one in the thread)."""
    body, unfinished = cut_maths(text, collected, streaming)
    rendered = _MARKDOWN.render(body, {"collected": collected, "citations": citations, "turn": turn})
    rendered = re.sub(f"<p>{MATH_OPEN}(\\d+){MATH_CLOSE}</p>",
                      lambda m: f'<p align="center">{_formula_html(m, collected)}</p>', rendered)
    rendered = _PLACEHOLDER.sub(lambda m: _formula_html(m, collected), rendered)
    # Qt draws a table's grid only when asked to.
    rendered = rendered.replace("<table>", '<table border="1" cellspacing="0" cellpadding="4">')
    if unfinished:  # a formula still streaming: its source, exactly as written
        rendered += f'<p style="color: #57606a">{html.escape(unfinished).replace(chr(10), "<br>")}</p>'
    return rendered


def dollar_maths(text: str) -> str:
    """``text`` with every formula written as Markdown maths (``$…$``, ``$$…$$``), the form GitHub, Obsidian
    and Jupyter read; ``\\(…\\)`` and ``\\[…\\]`` are not. The LaTeX itself is unchanged."""
    collected = Collected()
    body, unfinished = cut_maths(text, collected, for_markdown=False)

    def written(match: re.Match[str]) -> str:
        formula = collected.formulas[int(match.group(1))]
        return f"$${formula.source}$$" if formula.display else f"${formula.source}$"
    return _PLACEHOLDER.sub(written, body) + unfinished
