"""A knowledge index in the test's own data dir (conftest's isolated XDG dirs), and a folder to fill."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.knowledge.db import knowledge_path
from app.core.knowledge.store import KnowledgeStore


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    return folder


@pytest.fixture
def store() -> Iterator[KnowledgeStore]:
    opened = KnowledgeStore(knowledge_path())
    yield opened
    opened.close()
