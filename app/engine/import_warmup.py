"""Loading torch and vLLM on the engine thread without freezing the window.

The UI thread needs the GIL for every Qt event, and two things held it for 0.3–0.5 s at a time
while the engine thread imported torch and vLLM (measured with an audit hook and gc callbacks):
- CPython loads an extension module with ``dlopen`` while it holds the GIL, and torch's ``_C``
  pulls in libtorch_cpu (hundreds of MB, with long static initialisers). ``dlopen`` called through
  ctypes runs with the GIL released; opening each extension module's file that way just before
  CPython does leaves CPython's own ``dlopen`` only a reference count to add.
- The cyclic garbage collector: the imports create millions of objects, and each full collection
  walks all of them in one C call. It is paused while the engine loads; the loaded modules are
  then frozen (``gc.freeze``), so later full collections, while a reply streams, skip them too.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib.machinery
import sys
from collections.abc import Iterator
from typing import Any


def _libc_dlopen() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        dlopen = ctypes.CDLL(None).dlopen  # a CDLL call releases the GIL for its duration
    except (OSError, AttributeError):
        return None
    dlopen.restype = ctypes.c_void_p
    dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return dlopen


@contextlib.contextmanager
def native_loads_outside_gil() -> Iterator[None]:
    """Within this block, every extension module imported (on any thread) is first opened by a
    GIL-free ``dlopen`` with CPython's own flags. A library that fails to open is left to CPython,
    which then raises its usual ImportError."""
    dlopen = _libc_dlopen()
    if dlopen is None:
        yield
        return
    loader = importlib.machinery.ExtensionFileLoader
    original = loader.create_module

    def create_module(self: Any, spec: Any) -> Any:
        with contextlib.suppress(Exception):
            dlopen(str(spec.origin).encode(), sys.getdlopenflags())  # handle kept: CPython reopens it
        return original(self, spec)

    loader.create_module = create_module  # type: ignore[method-assign]
    try:
        yield
    finally:
        loader.create_module = original  # type: ignore[method-assign]


@contextlib.contextmanager
def engine_loading() -> Iterator[None]:
    """Around the engine's imports and start: GIL-free library loads and no full collections; the
    objects built meanwhile (modules, config, tokenizer) are long-lived, so they are frozen after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with native_loads_outside_gil():
            yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
