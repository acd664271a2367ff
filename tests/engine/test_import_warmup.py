"""Extension modules imported while the engine loads are opened GIL-free first (the load stall).

Bugs these catch: the wrapper passing other dlopen flags than CPython's (the later import then
loads a second copy, or fails); the patch left in place after the block; an import failing
inside the block where it works outside it; the wrapper never reached (no GIL-free open at all).
The stall itself is a speed figure: `nalar bench ui` measures it (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="dlopen through libc is Linux-only")


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_extension_imported_in_the_block_is_opened_outside_the_gil_first_and_the_patch_is_undone() -> None:
    out = _run("""
        import importlib.machinery, sys
        from app.engine.local import import_warmup
        opened = []
        real = import_warmup._libc_dlopen()
        def spy(path, flags):
            opened.append((path.decode(), flags))
            return real(path, flags)
        import_warmup._libc_dlopen = lambda: spy
        original = importlib.machinery.ExtensionFileLoader.create_module
        assert "_decimal" not in sys.modules and "_lzma" not in sys.modules
        with import_warmup.native_loads_outside_gil():
            import _decimal
        assert importlib.machinery.ExtensionFileLoader.create_module is original
        import _lzma  # after the block: CPython alone
        print(_decimal.Decimal("1.10") + _decimal.Decimal("2.2"))
        paths = [p for p, _ in opened]
        assert paths == [_decimal.__file__], paths
        assert all(f == sys.getdlopenflags() for _, f in opened), opened
        maps = open("/proc/self/maps").read()
        assert maps.count(_decimal.__file__) >= 1
    """)
    assert out.strip() == "3.30"


def test_a_library_that_cannot_be_opened_still_fails_as_cpython_says() -> None:
    out = _run("""
        import importlib.util, sys, tempfile, pathlib
        from app.engine.local import import_warmup
        bad = pathlib.Path(tempfile.mkdtemp()) / "broken.cpython-311-x86_64-linux-gnu.so"
        bad.write_bytes(b"not an ELF file")
        spec = importlib.util.spec_from_file_location("broken", bad)
        with import_warmup.native_loads_outside_gil():
            try:
                importlib.util.module_from_spec(spec)
            except ImportError as exc:
                print("ImportError", "invalid ELF header" in str(exc) or "too short" in str(exc))
    """)
    assert out.strip() == "ImportError True"


def test_engine_loading_pauses_full_collections_and_restores_the_collector_after() -> None:
    """Bug caught: the collector left off after the engine loads (every cycle the app makes while it
    runs would then leak), or left on during the load (full collections over the imports' millions
    of objects were the 0.3-0.5 s stalls)."""
    out = _run("""
        import gc
        from app.engine.local import import_warmup
        assert gc.isenabled() and gc.get_freeze_count() == 0
        try:
            with import_warmup.engine_loading():
                inside = gc.isenabled()
                kept = [object() for _ in range(10)]
                raise RuntimeError("the engine failed to start")
        except RuntimeError:
            pass
        print(inside, gc.isenabled(), gc.get_freeze_count() > 0)
        gc.disable()
        with import_warmup.engine_loading():
            pass
        print(gc.isenabled())
    """)
    assert out.split() == ["False", "True", "True", "False"]


def test_a_process_forked_during_the_load_gets_its_collector_and_importer_back() -> None:
    """vLLM forks EngineCore from inside the load. Bug caught: EngineCore inheriting the paused
    collector (its reference cycles would then never be freed) or the patched extension loader."""
    out = _run("""
        import gc, importlib.machinery, os
        from app.engine.local import import_warmup
        original = importlib.machinery.ExtensionFileLoader.create_module
        with import_warmup.engine_loading():
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                state = f"{gc.isenabled()} {importlib.machinery.ExtensionFileLoader.create_module is original}"
                os.write(write, state.encode())
                os._exit(0)
            os.waitpid(pid, 0)
            print(os.read(read, 100).decode(), gc.isenabled())
    """)
    assert out.split() == ["True", "True", "False"]
