"""Everything Nalar can load: its own downloads, the Hugging Face cache, and folders the user adds.

Delete removes only inside Nalar's models folder or the hub cache (safe_files rules), and returns the bytes freed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

Source = Literal["nalar", "hf-cache", "folder"]


@dataclass(frozen=True)
class LibraryEntry:
    model_id: str  # repo id or folder path
    path: Path
    source: Source
    size_bytes: int
    last_used: datetime | None
    problem: str | None  # model_folder.folder_problem's text when incomplete or broken


class ModelLibrary:
    def __init__(self, state_file: Path) -> None:
        raise NotImplementedError

    def entries(self) -> list[LibraryEntry]:
        """Nalar's downloads + scan_cache_dir (HF_HUB_CACHE / HF_HOME respected) + the user's folders."""
        raise NotImplementedError

    def add_folder(self, folder: Path) -> None:
        raise NotImplementedError

    def remove_folder(self, folder: Path) -> None:
        """Forgets a user folder (its files stay)."""
        raise NotImplementedError

    def mark_used(self, model_id: str) -> None:
        raise NotImplementedError

    def delete(self, entry: LibraryEntry) -> int:
        """Bytes freed. Only Nalar and hf-cache entries, never anything outside those roots (ValueError)."""
        raise NotImplementedError
