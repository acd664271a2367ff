"""Waiting for a process to end on its pidfd (an event), not on a clock."""

from __future__ import annotations

import os
import select


def gone(pid: int, timeout: float) -> bool:
    """Whether ``pid`` ends within ``timeout`` (its pidfd turns readable; a zombie counts, since PID 1 here does not
    reap), or has ended and been reaped already. ``timeout`` is a hang guard: the wait ends when the process does."""
    try:
        descriptor = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([descriptor], [], [], timeout)[0])
    finally:
        os.close(descriptor)
