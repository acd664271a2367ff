"""Nalar's own log: nalar.log in the log dir, for the app, the commands and the engine process alike."""

from __future__ import annotations

import logging
from logging.handlers import RotatingFileHandler

from app.core.settings import paths
from app.core.settings.redaction import RedactingFormatter


def configure_logging(*, console: bool = True) -> None:
    """nalar.log in the log dir (the engine process writes there too), and warnings on the console; neither
    ever holds one of Nalar's secrets (a server's error text may echo a key)."""
    folder = paths.private_dir(paths.log_dir())  # 0700: rotated files are the user's alone too
    handler = RotatingFileHandler(folder / "nalar.log", maxBytes=2_000_000, backupCount=3, encoding="utf-8")
    paths.make_private(folder / "nalar.log")
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    if console:
        stream = logging.StreamHandler()
        stream.setLevel(logging.WARNING)
        stream.setFormatter(RedactingFormatter())
        root.addHandler(stream)
