"""Where Nalar keeps its files (platformdirs, so XDG_* variables are honoured)."""

from __future__ import annotations

from pathlib import Path

import platformdirs

APP_NAME = "nalar"


def config_dir() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))


def data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


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
