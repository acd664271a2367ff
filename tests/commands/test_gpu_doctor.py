"""`nalar doctor --gpu`: the first-start checklist names each missing piece and its fix."""

from __future__ import annotations

import json
import subprocess
import sys

from app.commands.gpu_doctor import checklist, render
from app.core.models.planner import GIB
from app.engine.machine.capability import GpuInfo, HardwareProbe
from app.engine.machine.gpu_start import Toolchain

RTX_3060 = GpuInfo(0, "NVIDIA GeForce RTX 3060", (8, 6), 12 * GIB, int(10.2 * GIB))
BARE = Toolchain(c_compiler=None, python_h=None, nvcc=None, ninja=None, kernels=None)
READY = Toolchain("/usr/bin/cc", "/usr/include/python3.12/Python.h", None, None, "flashinfer-cubin 0.7.0.post1")


def test_a_bare_gaming_pc_gets_every_fix_it_needs(monkeypatch) -> None:
    """Bug caught: nothing checked the driver, the compiler, Python.h, the kernels or what other programs hold;
    each was found minutes into the first start, and named as an fp8 problem."""
    monkeypatch.setattr("app.engine.machine.capability._has_flashinfer", lambda: True)
    probe = HardwareProbe("cuda", "0.32.0", frozenset(), (RTX_3060,))
    items = {item.name: item for item in checklist(probe, BARE, (12, 8), (13, 0), 0.9)}
    assert not items["NVIDIA driver"].ok and "580" in items["NVIDIA driver"].fix
    assert items["CUDA build"].ok and items["GPU"].ok and "8.6" in items["GPU"].detail
    assert not items["free VRAM"].ok and "other programs use 1.8 GiB" in items["free VRAM"].detail
    assert "starts with 80%" in items["free VRAM"].detail
    assert not items["FlashInfer kernels"].ok and items["FlashInfer kernels"].fix.endswith("vllm download-kernels")
    assert "FlashInfer" in items["FlashInfer kernels"].detail and "8.6" in items["FlashInfer kernels"].detail
    for name in ("C compiler", "Python.h"):
        assert not items[name].ok and "build-essential python3-dev" in items[name].fix
    text = render(list(items.values()))
    assert text.count("fix:") == 5
    ready = checklist(probe, READY, (13, 0), (13, 0), 0.8)
    assert all(item.ok for item in ready), render(ready)


def test_doctor_gpu_runs_as_a_command_and_says_why_it_fails_here() -> None:
    """The real command on this GPU-less machine: exit 1, every item present, JSON for scripts."""
    result = subprocess.run([sys.executable, "-m", "app", "doctor", "--gpu", "--json"], capture_output=True,
                            check=False, text=True, timeout=120)
    items = {item["name"]: item for item in json.loads(result.stdout)}
    assert set(items) == {"NVIDIA driver", "CUDA build", "GPU", "FlashInfer kernels", "C compiler", "Python.h"} \
        or "free VRAM" in items
    has_gpu = items["GPU"]["ok"]
    assert result.returncode == (0 if all(i["ok"] for i in items.values()) else 1)
    if not has_gpu:
        assert items["GPU"]["fix"] and items["NVIDIA driver"]["fix"]
