"""A formula drawer for the tests: the real child (app/core/formula_worker.py: its ``ready``, its loop, its protocol)
around a drawing that first appends each source it is given to a log file, one JSON string a line.

The source HANG is never drawn: the child starts a grandchild in its own process group, writes
``hanging <grandchild pid>`` to the FIFO named on the command line (so a test waits on it, not on a clock), and
waits for ever, as ziamath does, in effect, on a formula of 20 KB.

    python -m tests.support.formula_child LOG [FIFO]
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

from app.core import formula_worker

HANG = r"\hang{forever}"


def logging_drawing(log: str, fifo: str | None):  # type: ignore[no-untyped-def]
    draw = formula_worker.formula_svg

    def drawing(source: str, display: bool, pixels: int = formula_worker.MATH_PIXELS) -> tuple[bytes | None, str]:
        with open(log, "a", encoding="utf-8") as file:
            file.write(json.dumps(source) + "\n")
        if source == HANG:
            grandchild = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL)  # waits until killed, parent gone or not
            if fifo is not None:
                with open(fifo, "w", encoding="utf-8") as told:
                    told.write(f"hanging {grandchild.pid}\n")
            threading.Event().wait()
        return draw(source, display, pixels)

    return drawing


if __name__ == "__main__":
    formula_worker.formula_svg = logging_drawing(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    formula_worker.main()
