"""The model library: Nalar's downloads, the Hugging Face cache (written by huggingface_hub itself from the fake
hub) and the user's folders, with sizes, problems, last use, and deletes that stay inside their roots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.hub.library import LibraryEntry, ModelLibrary
from app.core.models.hub_download import HubDownload, download_dir, models_dir
from tests.support.hub_server import LocalHub


def into_hf_cache(hub: LocalHub, repo_id: str, cache: Path) -> None:
    """The repo in the hub cache's own layout (blobs, snapshots of links, refs), written by huggingface_hub."""
    from huggingface_hub import hf_hub_download

    for name in hub.repos[repo_id].files:
        hf_hub_download(repo_id, name, endpoint=hub.endpoint, cache_dir=cache)


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf-home" / "hub"
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # read at call time, not at huggingface_hub's import
    return cache


def test_library_lists_every_source_with_size_problem_and_last_use(hub: LocalHub, hf_cache: Path,
                                                                   tmp_path: Path) -> None:
    """Catches a library that misses the hub cache (or reads HF_HOME only at import), sizes a cache entry by
    its snapshot links instead of its blobs, lists an unfinished download without saying so, or forgets
    the last use across a restart."""
    HubDownload("acme/small-a", endpoint=hub.endpoint).run()
    into_hf_cache(hub, "acme/small-b", hf_cache)
    unfinished = download_dir("acme/half")
    (unfinished / ".nalar-partial").mkdir(parents=True)
    (unfinished / ".nalar-partial" / "model.safetensors.x.incomplete").write_bytes(b"x" * 1000)
    mine = tmp_path / "my-model"
    mine.mkdir()
    (mine / "config.json").write_text(json.dumps({"model_type": "qwen3"}))

    library = ModelLibrary(tmp_path / "library.json")
    library.add_folder(mine)
    library.mark_used("acme/small-b")
    entries = {e.model_id: e for e in ModelLibrary(tmp_path / "library.json").entries()}
    assert set(entries) == {"acme/small-a", "acme/small-b", "acme/half", str(mine.resolve())}
    a, b = entries["acme/small-a"], entries["acme/small-b"]
    assert a.source == "nalar" and a.problem is None and a.size_bytes > 3_000_000
    assert b.source == "hf-cache" and b.problem is None and b.path.parent.name == "snapshots"
    assert b.path.is_relative_to(hf_cache) and b.size_bytes > 3_000_000 and b.last_used is not None
    assert "unfinished download" in (entries["acme/half"].problem or "")
    assert "no .safetensors" in (entries[str(mine.resolve())].problem or "")


def test_delete_frees_bytes_inside_its_root_only(hub: LocalHub, hf_cache: Path, tmp_path: Path) -> None:
    """Catches a delete that reports no bytes freed, leaves the hub cache's blobs behind, deletes a folder
    the user added, or follows an entry whose path points outside Nalar's models folder (a link planted
    there, or a crafted entry) and deletes something else."""
    HubDownload("acme/small-a", endpoint=hub.endpoint).run()
    into_hf_cache(hub, "acme/small-b", hf_cache)
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "config.json").write_text("{}")
    (models_dir() / "planted--link").symlink_to(outside)
    library = ModelLibrary(tmp_path / "library.json")
    library.add_folder(outside)
    entries = {e.model_id: e for e in library.entries()}
    assert "planted/link" not in entries  # a link in the models folder is not a download

    with pytest.raises(ValueError, match="never deletes"):
        library.delete(entries[str(outside.resolve())])
    crafted = LibraryEntry("acme/x", outside, "nalar", 1, None, None)
    with pytest.raises(ValueError):
        library.delete(crafted)
    with pytest.raises(ValueError):
        library.delete(LibraryEntry("planted/link", models_dir() / "planted--link", "nalar", 1, None, None))
    assert (outside / "config.json").exists()

    size_a = entries["acme/small-a"].size_bytes
    assert library.delete(entries["acme/small-a"]) == size_a > 3_000_000
    assert not download_dir("acme/small-a").exists()
    assert library.delete(entries["acme/small-b"]) > 3_000_000
    assert not any(hf_cache.glob("models--acme--small-b*"))
    assert {e.model_id for e in library.entries()} == {str(outside.resolve())}
