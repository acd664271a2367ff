"""Where Nalar keeps its files (platformdirs, so XDG_* variables are honoured)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "nalar"


def config_dir() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))


def data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def hub_cache_dir() -> Path:
    """HF_HUB_CACHE, else HF_HOME/hub, read now (huggingface_hub froze both into its constants at import)."""
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(constants.HF_HUB_CACHE)


def log_dir() -> Path:
    return Path(platformdirs.user_log_dir(APP_NAME, appauthor=False))


def resources_dir() -> Path:
    """Nalar's icon and model configs: ``resources/`` of a source checkout (how `make` installs Nalar),
    else ``<prefix>/share/nalar`` where a wheel install puts them (pyproject's data-files)."""
    import sys

    checkout = Path(__file__).resolve().parents[3] / "resources"
    for folder in (checkout, Path(sys.prefix) / "share" / APP_NAME):
        if (folder / "nalar.svg").is_file():
            return folder
    return checkout  # the caller's missing-file error then names the checkout path


PRIVATE_DIR = 0o700  # conversations, settings, keys' names and logs are the user's alone
PRIVATE_FILE = 0o600


def private_dir(folder: Path) -> Path:
    """``folder``, created if needed, readable by its owner only (mkdir's mode is masked by the umask). The
    folders created on the way get the same mode: ``data_dir() / "engines"`` must not leave the data dir 0755."""
    created = [parent for parent in (folder, *folder.parents) if not parent.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    for made in created:
        made.chmod(PRIVATE_DIR)
    folder.chmod(PRIVATE_DIR)
    return folder


def private_opener(path: str, flags: int) -> int:
    """For ``open(..., opener=private_opener)``: a new file is created 0600, never readable by others first."""
    return os.open(path, flags, PRIVATE_FILE)


def write_private_text(path: Path, text: str) -> Path:
    """``text`` into ``path`` (its folder made private), the file readable by its owner only."""
    private_dir(path.parent)
    with open(path, "w", encoding="utf-8", opener=private_opener) as file:
        file.write(text)
    path.chmod(PRIVATE_FILE)  # an existing file keeps its old mode through open()
    return path


def make_private(path: Path) -> None:
    """An existing file of ours, made readable by its owner only (files created before 0600 included)."""
    if path.exists():
        path.chmod(PRIVATE_FILE)


class DataUnavailable(Exception):
    """A data file Nalar must not touch now (in use, or from a newer Nalar): what and how to fix it."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem} {fix}")
        self.problem = problem
        self.fix = fix
