"""Around the engine's imports and start in the engine process: the collector paused, then the loaded
objects frozen, and native libraries opened outside the GIL.

- The cyclic garbage collector: the imports create millions of objects, and each full collection
  walks all of them in one C call. It is paused while the engine loads; the loaded modules are
  then frozen (``gc.freeze``), so later full collections, while a reply streams, skip them. Measured in
  the engine process (CPU engine, SmolLM2-135M, 3 cold starts each on a shared 2-core machine): the
  first full collection after the start took 0.1 ms with this and 0.6-1.1 s without, a stall of the
  engine loop mid-reply; time to ready was the same within the noise (97-128 s with, 80-135 s without).
- CPython loads an extension module with ``dlopen`` while it holds the GIL, and torch's ``_C``
  pulls in libtorch_cpu (hundreds of MB, with long static initialisers). ``dlopen`` called through
  ctypes runs with the GIL released; opening each extension module's file that way just before
  CPython does leaves CPython's own ``dlopen`` only a reference count to add. The window has its own
  process and GIL now, so this no longer guards the window; it is kept for the engine process's main
  thread, which reads the pipe (status, cancel, exit) while vLLM imports (not measured on its own).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import importlib.machinery
import os
import sys
from collections.abc import Iterator
from typing import Any


@functools.cache
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


_ORIGINAL_CREATE_MODULE = importlib.machinery.ExtensionFileLoader.create_module
_gc_was_enabled: bool | None = None  # set while engine_loading() runs: what a forked child restores


def _create_module_opened_outside_gil(self: Any, spec: Any) -> Any:
    dlopen = _libc_dlopen()
    if dlopen is not None:
        with contextlib.suppress(Exception):
            dlopen(str(spec.origin).encode(), sys.getdlopenflags())  # handle kept: CPython reopens it
    return _ORIGINAL_CREATE_MODULE(self, spec)


@contextlib.contextmanager
def native_loads_outside_gil() -> Iterator[None]:
    """Within this block, every extension module imported (on any thread) is first opened by a
    GIL-free ``dlopen`` with CPython's own flags. A library that fails to open is left to CPython,
    which then raises its usual ImportError."""
    loader = importlib.machinery.ExtensionFileLoader
    loader.create_module = _create_module_opened_outside_gil  # type: ignore[method-assign]
    try:
        yield
    finally:
        loader.create_module = _ORIGINAL_CREATE_MODULE  # type: ignore[method-assign]


def _restore_in_forked_child() -> None:
    """vLLM forks EngineCore during the load: the child must not keep the collector off for good."""
    global _gc_was_enabled
    importlib.machinery.ExtensionFileLoader.create_module = _ORIGINAL_CREATE_MODULE  # type: ignore[method-assign]
    if _gc_was_enabled:
        gc.enable()
    _gc_was_enabled = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_restore_in_forked_child)


@contextlib.contextmanager
def engine_loading() -> Iterator[None]:
    """Around the engine's imports and start: GIL-free library loads and no full collections; the
    objects built meanwhile (modules, config, tokenizer) are long-lived, so they are frozen after."""
    global _gc_was_enabled
    _gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with native_loads_outside_gil():
            yield
    finally:
        gc.freeze()
        if _gc_was_enabled:
            gc.enable()
        _gc_was_enabled = None
