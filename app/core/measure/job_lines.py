"""The line protocol long jobs (`nalar bench`, `nalar kv-check`, `nalar calibrate`) speak to the app.

With ``--progress-jsonl`` a job writes one JSON object per line on stdout:
    {"event": "progress", "fraction": 0.4, "message": "fp8: depth 4096"}
    {"event": "result", "data": {...}}            (last line on success, exit 0)
    {"event": "error", "message": "...", "fix": "..."}   (last line on failure, exit 1)
The app runs jobs as child processes in their own session, so Cancel ends the job and any
engine processes it started together, and a job's GIL and memory never touch the UI.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, TextIO


@dataclass(frozen=True)
class JobLine:
    event: str  # "progress", "result" or "error"
    fraction: float | None = None
    message: str = ""
    fix: str = ""
    data: dict[str, Any] | None = None


class JobLineWriter:
    """Writes job lines (or, without the flag, plain progress text for a terminal)."""

    def __init__(self, jsonl: bool, stream: TextIO | None = None) -> None:
        self.jsonl = jsonl
        self.stream = stream or sys.stdout

    def _write(self, obj: dict[str, Any]) -> None:
        self.stream.write(json.dumps(obj) + "\n")
        self.stream.flush()

    def progress(self, fraction: float | None, message: str) -> None:
        if self.jsonl:
            self._write({"event": "progress", "fraction": fraction, "message": message})
        else:
            percent = "" if fraction is None else f"{fraction:4.0%} "
            print(f"{percent}{message}", file=sys.stderr, flush=True)

    def result(self, data: dict[str, Any]) -> None:
        if self.jsonl:
            self._write({"event": "result", "data": data})

    def error(self, message: str, fix: str = "") -> None:
        if self.jsonl:
            self._write({"event": "error", "message": message, "fix": fix})
        else:
            print(f"error: {message}" + (f"\nfix: {fix}" if fix else ""), file=sys.stderr, flush=True)


def parse_job_line(line: str) -> JobLine | None:
    """One stdout line of a job, or None for anything that is not a job line (library chatter)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return None
    event = obj.get("event") if isinstance(obj, dict) else None
    if event not in ("progress", "result", "error"):
        return None
    fraction = obj.get("fraction")
    return JobLine(event=event, fraction=float(fraction) if isinstance(fraction, (int, float)) else None,
                   message=str(obj.get("message", "")), fix=str(obj.get("fix", "")),
                   data=obj.get("data") if isinstance(obj.get("data"), dict) else None)
