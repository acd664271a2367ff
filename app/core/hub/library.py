"""Everything Nalar can load: its own downloads, the Hugging Face cache, and folders the user adds.

The hub cache is read with ``huggingface_hub.scan_cache_dir`` where HF_HUB_CACHE (else HF_HOME/hub) says
now, and deleted through its ``delete_revisions``. Delete removes only a folder directly inside Nalar's
models folder or a repo of the hub cache (checked with safe_files' rules: no link, nothing outside the root),
never a folder the user added, and returns the bytes freed.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from app.core.models.hub_download import COMPLETE_MARKER, PARTIAL_DIR, is_complete, models_dir
from app.core.models.model_folder import folder_problem
from app.core.safe_files import UnsafeName, safe_child
from app.core.settings import paths
from app.core.settings.paths import hub_cache_dir

log = logging.getLogger(__name__)

Source = Literal["nalar", "hf-cache", "folder"]


@dataclass(frozen=True)
class LibraryEntry:
    model_id: str  # repo id or folder path
    path: Path  # the folder vLLM loads (a hub cache entry: its newest snapshot)
    source: Source
    size_bytes: int
    last_used: datetime | None
    problem: str | None  # model_folder.folder_problem's text when incomplete or broken


def default_state_file() -> Path:
    """The user's added folders and each model's last use."""
    return paths.data_dir() / "model-library.json"


def size_on_disk(folder: Path) -> int:
    """Bytes of the files below ``folder``, links not followed (the hub cache's snapshots link to its blobs)."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if not os.path.islink(os.path.join(root, name)):
                total += info.st_size
    return total


def model_folder_of(folder: Path) -> Path:
    """The folder that holds config.json: the download itself, or the one subfolder a FileSet put it in."""
    if (folder / "config.json").is_file():
        return folder
    inner = [p.parent for p in folder.glob("*/config.json") if not p.parent.name.startswith(".")]
    return inner[0] if len(inner) == 1 else folder


class ModelLibrary:
    def __init__(self, state_file: Path) -> None:
        self.state_file = state_file
        self._folders: list[str] = []
        self._last_used: dict[str, str] = {}
        self._load()

    def entries(self) -> list[LibraryEntry]:
        """Nalar's downloads + scan_cache_dir (HF_HUB_CACHE / HF_HOME respected) + the user's folders."""
        found = [*self._nalar_entries(), *self._cache_entries()]
        for folder in self._folders:
            path = Path(folder)
            found.append(LibraryEntry(folder, path, "folder", size_on_disk(path) if path.is_dir() else 0,
                                      self._used(folder), self._problem(path)))
        return found

    def add_folder(self, folder: Path) -> None:
        text = str(folder.expanduser().resolve())
        if text not in self._folders:
            self._folders.append(text)
            self._save()

    def remove_folder(self, folder: Path) -> None:
        """Forgets a user folder (its files stay)."""
        text = str(folder.expanduser().resolve())
        if text in self._folders:
            self._folders.remove(text)
            self._save()

    def mark_used(self, model_id: str) -> None:
        self._last_used[model_id] = datetime.now(UTC).isoformat()
        self._save()

    def delete(self, entry: LibraryEntry) -> int:
        """Bytes freed. Only Nalar and hf-cache entries, never anything outside those roots (ValueError)."""
        if entry.source == "folder":
            raise ValueError(f"{entry.path} is your folder: Nalar never deletes it. Remove it from the library "
                             "instead, or delete it yourself.")
        if entry.source == "nalar":
            return self._delete_download(entry)
        return self._delete_cached(entry)

    # ---- inside -----------------------------------------------------------------------------------

    def _nalar_entries(self) -> list[LibraryEntry]:
        root = models_dir()
        if not root.is_dir():
            return []
        found = []
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()
                             and not p.name.startswith(".")):
            model_id = _marker_repo(folder) or folder.name.replace("--", "/", 1)
            problem = self._problem(model_folder_of(folder))
            if not is_complete(folder):
                problem = (f"{folder} is an unfinished download (its partial files are in {PARTIAL_DIR}). "
                           "Resume it in the download queue, or delete it.")
            found.append(LibraryEntry(model_id, model_folder_of(folder), "nalar", size_on_disk(folder),
                                      self._used(model_id), problem))
        return found

    def _cache_entries(self) -> list[LibraryEntry]:
        from huggingface_hub import scan_cache_dir
        from huggingface_hub.errors import CacheNotFound

        try:
            info = scan_cache_dir(hub_cache_dir())
        except CacheNotFound:
            return []
        except OSError as exc:
            log.warning("the Hugging Face cache at %s can't be read: %s", hub_cache_dir(), exc)
            return []
        found = []
        for repo in sorted(info.repos, key=lambda r: r.repo_id):
            if repo.repo_type != "model" or not repo.revisions:
                continue
            newest = max(repo.revisions, key=lambda rev: rev.last_modified)
            found.append(LibraryEntry(repo.repo_id, Path(newest.snapshot_path), "hf-cache", int(repo.size_on_disk),
                                      self._used(repo.repo_id), self._problem(Path(newest.snapshot_path))))
        return found

    def _problem(self, folder: Path) -> str | None:
        problem = folder_problem(folder, need_weights=True)
        return None if problem is None else str(problem)

    def _used(self, model_id: str) -> datetime | None:
        text = self._last_used.get(model_id)
        try:
            return datetime.fromisoformat(text) if text else None
        except ValueError:
            return None

    def _delete_download(self, entry: LibraryEntry) -> int:
        root = models_dir()
        folder = entry.path if entry.path.parent == root else entry.path.parent
        try:
            checked = safe_child(root, folder.name)
        except UnsafeName as exc:
            raise ValueError(f"{folder} is not deleted: {exc}") from None
        if checked.parent != root or folder.resolve() != checked.resolve() or not checked.is_dir():
            raise ValueError(f"{folder} is not a download in {root}: Nalar deletes nothing else.")
        freed = size_on_disk(checked)
        shutil.rmtree(checked)
        return freed

    def _delete_cached(self, entry: LibraryEntry) -> int:
        from huggingface_hub import scan_cache_dir

        cache = hub_cache_dir()
        info = scan_cache_dir(cache)
        repo = next((r for r in info.repos if r.repo_id == entry.model_id and r.repo_type == "model"), None)
        if repo is None:
            raise ValueError(f"{entry.model_id} is no longer in the Hugging Face cache at {cache}.")
        try:
            checked = safe_child(cache, Path(repo.repo_path).name)
        except UnsafeName as exc:
            raise ValueError(f"{repo.repo_path} is not deleted: {exc}") from None
        if Path(repo.repo_path).resolve() != checked.resolve():
            raise ValueError(f"{repo.repo_path} is outside the Hugging Face cache at {cache}: not deleted.")
        freed = size_on_disk(checked)
        info.delete_revisions(*(rev.commit_hash for rev in repo.revisions)).execute()
        if checked.exists():  # refs and the folder itself, when every revision went
            shutil.rmtree(checked, ignore_errors=True)
        return freed

    def _load(self) -> None:
        try:
            raw: dict[str, Any] = json.loads(self.state_file.read_text(encoding="utf-8"))
            self._folders = [str(f) for f in raw.get("folders", [])]
            self._last_used = {str(k): str(v) for k, v in raw.get("last_used", {}).items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("the model library's file %s is unreadable (%s); starting empty", self.state_file, exc)

    def _save(self) -> None:
        paths.write_private_text(self.state_file, json.dumps({"version": 1, "folders": self._folders,
                                                              "last_used": self._last_used}, indent=1))


def _marker_repo(folder: Path) -> str | None:
    try:
        repo = json.loads((folder / COMPLETE_MARKER).read_text())["repo_id"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return str(repo) if isinstance(repo, str) else None
