"""Background work at a lower CPU priority than the window's GUI thread, so that on a machine with few cores it
runs in the time the GUI thread leaves. On 2 cores a partial save's 25 ms of indexing, next to the formula drawer,
took CPU from the GUI thread's refresh and lengthened its stalls (docs/BENCHMARKS.md, "2026-12-03, night")."""

from __future__ import annotations

import contextlib
import os
import sys
import threading

BACKGROUND_NICE = 10  # added to the caller's nice value; the most a process may have is 19


def lower_this_thread() -> None:
    """The calling thread niced (Linux keeps a nice value per thread, and a thread it starts inherits it).
    Elsewhere this does nothing: on other systems ``os.setpriority`` takes the whole process."""
    if not sys.platform.startswith("linux"):
        return
    thread = threading.get_native_id()
    with contextlib.suppress(OSError):  # a sandbox may refuse it: the work then runs at the usual priority
        os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + BACKGROUND_NICE))
