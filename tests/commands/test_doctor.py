"""`nalar doctor` run as a real process, against this machine and the settings file."""

from __future__ import annotations

import json
import subprocess
import sys

from app.core.settings.settings import EngineConfig, Settings, save_settings


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", "doctor", *args], capture_output=True, text=True, timeout=120)


def test_json_report_says_what_runs_here_and_exits_zero() -> None:
    result = doctor("--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["problems"] == []
    assert report["engine"]["kind"] in ("cpu", "cuda") and report["packages"]["torch"]
    on_gpu = report["engine"]["kind"] == "cuda"
    assert report["kv_cache_dtypes"]["auto"] == {"supported": True, "reason": None,
                                                 "attention_backend": "FLASH_ATTN" if on_gpu else None}
    fp8 = report["kv_cache_dtypes"]["fp8_e4m3"]
    assert fp8["supported"] or "AVX-512" in fp8["reason"] or "compute capability" in fp8["reason"]
    assert report["model"]["present"] is True
    rows = {row["kv_cache_dtype"]: row for row in report["planner"]["rows"]}
    assert rows["fp8_e4m3"]["kv_bytes_per_token"] * 2 == rows["auto"]["kv_bytes_per_token"]


def test_missing_model_is_named_with_its_fix_and_exits_nonzero(tmp_path) -> None:
    missing = tmp_path / "no-such-model"
    missing.mkdir()
    save_settings(Settings(engine=EngineConfig(model=str(missing))))
    result = doctor()
    assert result.returncode == 1
    assert f"{missing} has no config.json, so it is not a model folder. Fix: Choose the folder" in result.stdout
    assert "KV cache dtypes:" in result.stdout
