"""A library entry's verdict from its own folder (config.json and the safetensors headers), with no hub at all."""

from __future__ import annotations

import json
from pathlib import Path

from app.core.hub.verdicts import MachineBudget, folder_verdict
from app.core.models.planner import GIB
from tests.core.hub.conftest import GPU_16, QWEN3, sparse_model_folder

TINY = MachineBudget("cpu", 1 * GIB, 10.0, None, "tiny CPU")


def test_a_user_folder_gets_its_verdict_from_its_own_files(tmp_path: Path) -> None:
    """Catches the library's verdict asked of the hub by repo id (a folder you added, or any entry offline, showed
    "verdict unknown"), and weights sized by the files' bytes instead of the headers' tensors."""
    folder = sparse_model_folder(tmp_path / "my-qwen", int(1.2e9))
    big = folder_verdict(folder, GPU_16)
    assert big is not None and big.text() == "fits", big
    assert big.file_set.label == "bf16" and big.file_set.weight_bytes == int(1.2e9)
    assert big.max_context_fp8 >= big.max_context_bf16 > 0
    small = folder_verdict(folder, TINY)
    assert small is not None and small.text().startswith("doesn't fit (needs "), small


def test_a_broken_folder_has_no_verdict_and_a_bad_header_falls_back_to_file_sizes(tmp_path: Path) -> None:
    """Catches a verdict made up for a folder with a folder_problem (no weights), and a safetensors file whose
    first 8 bytes are not a header length making the reader allocate petabytes (MemoryError) or crash."""
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text(json.dumps(QWEN3))
    assert folder_verdict(empty, GPU_16) is None, "no .safetensors: the entry's problem says why, no verdict"
    (empty / "model.safetensors").write_bytes(b"\x01" * 4096)
    odd = folder_verdict(empty, GPU_16)
    assert odd is not None and odd.file_set.weight_bytes == 4096 and odd.fits == "fits", odd
