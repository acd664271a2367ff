"""A catalog model's finished download as Nalar leaves it, without its weights (tests that read configs only)."""

from __future__ import annotations

import json
from pathlib import Path

from app.core.models.hub_download import COMPLETE_MARKER, download_dir
from app.core.models.model_catalog import catalog_entry

R1_7B = "casperhansen/deepseek-r1-distill-qwen-7b-awq"


def fake_download(repo_id: str) -> Path:
    """config.json (the catalog's shipped one) and the completion marker, in the XDG cache of the test."""
    entry = catalog_entry(repo_id)
    assert entry is not None
    folder = download_dir(repo_id)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(entry.config()))
    marker = {"repo_id": repo_id, "files": {"config.json": (folder / "config.json").stat().st_size}}
    (folder / COMPLETE_MARKER).write_text(json.dumps(marker))
    return folder
