"""Kept for venvs installed before the commands moved: their `nalar` script imports ``app.cli:main``
(a reinstall, which `make` runs when pyproject.toml changes, points it at app/commands/cli.py)."""

from app.commands.cli import main

__all__ = ["main"]
