"""Nalar's own secrets kept out of outside text it shows or logs.

A remote server's error text may echo the request, its API key included ("header 'Bearer sk-…' is not valid
here"); that text becomes a banner, a status line, a log line. Every secret Nalar holds (a profile's API key,
the local API server's token) is remembered here as it is read or set, and ``redact`` blanks it out of any text:
EngineFailure runs its message through it, and so does the log's formatter.
"""

from __future__ import annotations

import json
import logging
import threading
from urllib.parse import quote

REDACTED = "[redacted]"
# Shorter "keys" (a dev server's "1234") would black out ordinary words, and guard nothing worth a secret's name.
MIN_SECRET_CHARS = 6

_lock = threading.Lock()
_forms: tuple[str, ...] = ()  # every remembered secret as it may appear in text, longest first


def remember_secret(secret: str | None) -> None:
    """From now on ``redact`` blanks ``secret`` out, as written, URL-encoded or JSON-escaped."""
    global _forms
    if not secret or len(secret) < MIN_SECRET_CHARS:
        return
    forms = {secret, quote(secret, safe=""), json.dumps(secret)[1:-1]}
    with _lock:
        _forms = tuple(sorted(set(_forms) | forms, key=len, reverse=True))


def redact(text: str) -> str:
    """``text`` with every remembered secret replaced by [redacted]."""
    for form in _forms:
        if form in text:
            text = text.replace(form, REDACTED)
    return text


class RedactingFormatter(logging.Formatter):
    """A log formatter whose lines (tracebacks too) never hold a remembered secret."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
