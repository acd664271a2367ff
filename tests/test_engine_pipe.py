"""What crosses the engine process's pipe (multiprocessing pickles it) arrives whole."""

from __future__ import annotations

import pickle

from app.core.settings import EngineConfig, SamplingConfig
from app.engine.base import Resume
from app.engine.errors import EngineFailure, FailureKind
from app.engine.events import EngineErrorEvent, Finished


def test_an_engine_failure_keeps_its_kind_fix_and_fallback_across_the_pipe() -> None:
    """Bug caught: Exception pickles only its message, so unpickling raised TypeError in the window's reader
    thread, or the window showed a failure without its kind (the banner's action) or fix."""
    failure = EngineFailure(FailureKind.KV_DTYPE_UNSUPPORTED, "This machine can't run an FP8 KV cache.",
                            "Use KV cache dtype 'auto' (bf16).", {"kv_cache_dtype": "auto"})
    event = pickle.loads(pickle.dumps(EngineErrorEvent("r1", failure)))
    assert isinstance(event.failure, EngineFailure)
    assert (event.failure.kind, event.failure.message, event.failure.fix, event.failure.fallback) == (
        failure.kind, failure.message, failure.fix, failure.fallback)


def test_a_request_and_its_reply_round_trip() -> None:
    sampling = SamplingConfig(think_budget=64, max_tokens=32).with_loop_guard(action="stop")
    message = ("generate", "r2", [{"role": "user", "content": "hi"}], sampling, True,
               Resume("thinking", "kept thought"))
    assert pickle.loads(pickle.dumps(message)) == message
    start = ("start", 1, EngineConfig(model="/models/x", kv_cache_dtype="fp8_e4m3", max_model_len=4096), None)
    assert pickle.loads(pickle.dumps(start)) == start
    finished = Finished("r2", "loop", "kept thought", "")
    assert pickle.loads(pickle.dumps(finished)) == finished
