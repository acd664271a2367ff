"""The embedded SmolLM2 model folder: converted once, verified, never used half-written."""

from __future__ import annotations

import json
import shutil

import pytest

from app.core.models import embedded_model
from app.core.models.embedded_model import MANIFEST_NAME, ensure_embedded_model, verify
from tests.conftest import EMBEDDED_MODEL, require_embedded_model
from tests.support.tiny_gguf import tiny_smollm2_wheel


def test_prepared_folder_is_a_verified_bf16_model_with_a_chat_template() -> None:
    folder = require_embedded_model()
    assert verify(folder, deep=True)
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config
    assert config.get("dtype", config.get("torch_dtype")) == "bfloat16"
    assert (folder / "model.safetensors").stat().st_size > 200_000_000
    template = (folder / "chat_template.jinja").read_text() if (folder / "chat_template.jinja").exists() else \
        json.loads((folder / "tokenizer_config.json").read_text())["chat_template"]
    assert "im_start" in template


def test_verified_folder_is_returned_without_work(monkeypatch) -> None:
    monkeypatch.setattr(embedded_model, "_convert", lambda *a: pytest.fail("converted again"))
    assert ensure_embedded_model() == EMBEDDED_MODEL


def test_tampered_or_half_written_folders_fail_verification(tmp_path) -> None:
    copy = tmp_path / "model"
    shutil.copytree(require_embedded_model(), copy)
    assert verify(copy)
    (copy / "config.json").write_text((copy / "config.json").read_text() + " ")
    assert not verify(copy)
    (copy / MANIFEST_NAME).unlink()
    assert not verify(copy)


def test_half_written_folder_is_replaced_by_a_fresh_conversion(tmp_path, monkeypatch) -> None:
    """A crash mid-conversion leaves files but no manifest; the next start converts again.

    The wheel is a tiny one of the same shape (tests/support/tiny_gguf.py): the decision and the conversion's
    code path are the same, and the real wheel's conversion is the one `make test` prepares and the first test
    checks."""
    wheel = tiny_smollm2_wheel(tmp_path / "wheel", require_embedded_model())
    target = tmp_path / "SmolLM2"
    target.mkdir()
    (target / "model.safetensors").write_bytes(b"half")
    monkeypatch.setenv("NALAR_EMBEDDED_MODEL_DIR", str(target))
    monkeypatch.setenv("NALAR_SMOLLM2_WHEEL", str(wheel))
    messages: list[str] = []
    assert ensure_embedded_model(lambda message, fraction: messages.append(message)) == target
    assert verify(target, deep=True)
    assert (target / "model.safetensors").read_bytes()[:4] != b"half"
    config = json.loads((target / "config.json").read_text())
    assert (config["hidden_size"], config["vocab_size"], config["dtype"]) == (64, 512, "bfloat16")
    assert "quantization_config" not in config
    assert messages[-1] == "model ready"
