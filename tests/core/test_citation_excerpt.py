"""The citation viewer's reading without Qt (``knowledge.excerpt``) and the citation links of an answer's markup:
a large file is scanned in chunks up to the window and read no further; our citation links are told from a model's
links with the same scheme."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.chat.answer_markup import Collected, answer_html, cited_source
from app.core.chat.conversation import Source
from app.core.knowledge import excerpt
from app.core.knowledge.reader import Unreadable


@pytest.fixture
def small_limits(monkeypatch) -> None:
    """The limits scaled down, so a 120 KB file is "large" and the chunks' edges fall inside lines."""
    monkeypatch.setattr(excerpt, "MAX_FILE_BYTES", 16_000)
    monkeypatch.setattr(excerpt, "MAX_SCAN_BYTES", 64_000)
    monkeypatch.setattr(excerpt, "CHUNK_BYTES", 1_000)
    monkeypatch.setattr(excerpt, "WINDOW_BYTES", 12_000)


def test_a_large_file_is_scanned_to_the_window_and_read_no_further(tmp_path: Path, small_limits) -> None:
    """Bugs caught: lines miscounted at a chunk's edge (the wrong lines marked); the whole file read; a line
    past the scan limit read anyway, or failing without a reason; a file cut short since said to be too long."""
    path = tmp_path / "big.log"
    lines = [f"row {n:05d} of the log" for n in range(1, 6001)]  # 21 bytes a line
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")  # 126 KB: past the index's and the scan's limits
    read = excerpt.read_excerpt(path, Source("notes", str(path), None, 1500, 1502, "\n".join(lines[1499:1502])))
    assert read.first_line == 1300 and read.marked == (200, 202), (read.first_line, read.marked)
    assert read.text.splitlines()[200] == "row 01500 of the log"
    assert read.bytes_read <= 1300 * 21 + 1_000 + 12_000, read.bytes_read
    assert read.where.startswith("showing lines 1,300–")
    with pytest.raises(Unreadable, match="past the first"):
        excerpt.read_excerpt(path, Source("notes", str(path), None, 5000, 5000, lines[4999]))
    path.write_text("\n".join(lines[:1000]) + "\n", encoding="utf-8")  # cut since: still past the index's limit
    cut = excerpt.read_excerpt(path, Source("notes", str(path), None, 2600, 2600, "row 02600"))
    assert cut.marked is None and cut.where == "the file has 1,000 lines now", cut


def test_only_our_citations_are_cited_links(tmp_path: Path) -> None:
    """Bugs caught: a model's [x](nalar-cite:1) or (nalar-source:…) treated as our citation (it would open a
    source the reader didn't click); an earlier turn's [n] pointing at the shown turn."""
    collected = Collected()
    answer_html("Sun [1], water [2], [3]. [x](nalar-cite:1) [y](nalar-source:7/1)", collected, citations=2, turn=7)
    ours = [link.href for link in collected.links if link.cited]
    theirs = [link.href for link in collected.links if not link.cited]
    assert ours == ["nalar-source:7/1", "nalar-source:7/2"] and theirs == ["nalar-cite:1", "nalar-source:7/1"]
    assert cited_source("nalar-source:7/2") == (7, 2) and cited_source("nalar-cite:3") == (None, 3)
    assert cited_source("nalar-source:x/2") is None and cited_source("nalar-cite:1/2") is None
