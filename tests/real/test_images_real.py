"""Images through the app's local engine (EngineProcess: vLLM's engine client in a child process, over the pipe)
on a tiny random-weight Idefics3 built by the test (tests/support/tiny_vision_model.py): no vision model is on
the machine and the hub is out of reach. Its answers are noise; what is read is what vLLM's processor made of
the prompt. Replies are of fixed length (``ignore_eos``), and waits are on results, not on time."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from app.core.chat.images import image_part, with_images
from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.events import EngineEvent, EngineReady, Finished
from app.engine.process.engine_process import EngineProcess
from tests.conftest import child_pids, require_embedded_model, vllm_processes
from tests.support.tiny_vision_model import IMAGE_SEQ_LEN, build_tiny_vlm

pytestmark = pytest.mark.real_engine
FIXED = SamplingConfig(think_budget=0, max_tokens=4)


def red_square() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 64), (220, 20, 20)).save(out, "PNG")
    return out.getvalue()


def reply(engine: EngineProcess, content: Any, rid: str) -> Finished:
    events: list[EngineEvent] = []
    finished = engine.loop_thread.submit(engine.stream_to(
        events.append, [{"role": "user", "content": content}], FIXED, rid, ignore_eos=True)).result(600)
    assert finished is not None and finished.reason == "length", (finished, events[-3:])
    return finished


def test_an_image_reaches_vllm_through_the_engine_process(tmp_path: Path) -> None:
    """Bugs caught: vLLM's registry not asked (a vision model loaded as text-only, its images refused); the image
    lost crossing the pipe, or sent without multi_modal_data, so the model reads one <image> token and never
    the picture; the prompt's count blind to the image's tokens (the context gauge then under-reads)."""
    model = build_tiny_vlm(tmp_path / "tiny-vlm", require_embedded_model())
    before = child_pids()  # the worker's shared session engine, if an earlier module started it, stays up
    engine = EngineProcess()
    try:
        ready: EngineReady = engine.loop_thread.submit(
            engine.start(EngineConfig(model=str(model), max_model_len=1024))).result(600)
        assert ready.reads_images, "vLLM runs Idefics3 as a multimodal model"
        plain = reply(engine, "What colour is this square?", "text-only")
        seen = reply(engine, with_images("What colour is this square?", [image_part(red_square(), "red.png")]),
                     "with-image")
        assert plain.metrics is not None and seen.metrics is not None
        # vLLM's Idefics3 processor puts the image's own tokens around the one placeholder the template wrote:
        # <fake_token_around_image><global-img><image>×IMAGE_SEQ_LEN<fake_token_around_image>
        assert seen.metrics.prompt_tokens - plain.metrics.prompt_tokens == IMAGE_SEQ_LEN + 3, \
            (plain.metrics.prompt_tokens, seen.metrics.prompt_tokens)
    finally:
        engine.close()
    assert vllm_processes(before) == [], "vLLM processes survived the engine's shutdown"
