"""The FP8 KV quality check and calibration, on the real embedded model (transformers on the CPU) and in vLLM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from app.core.measure.job_lines import parse_job_line
from app.core.measure.kv_calibration import (
    MARK_FILE,
    SCALES_FILE,
    CalibrationError,
    read_calibrated_scales,
    write_calibrated_model,
)
from app.core.measure.kv_quality import (
    CALIBRATION_HEADROOM,
    FP8_MAX,
    REASONING_PROMPTS,
    LayerScales,
    QualityReport,
    VariantResult,
    advise,
    fp8_round,
    run_quality_check,
)
from app.engine.machine.orphans import same_process
from tests.conftest import child_pids, require_embedded_model, vllm_processes
from tests.support.bench_jobs import end_group, run_in_group

ROOT = Path(__file__).resolve().parents[2]


# ---- rounding and scales: properties -------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=2.0**-6, max_value=440.0), st.sampled_from([1.0, 0.03125, 4.0]), st.booleans())
def test_e4m3_rounding_keeps_three_mantissa_bits(value: float, scale: float, negative: bool) -> None:
    x = torch.tensor([(-value if negative else value) * scale], dtype=torch.float32)
    rounded = fp8_round(x, "fp8_e4m3", scale)
    assert abs(float(rounded) - float(x)) <= abs(float(x)) * 2.0**-4 + 1e-12
    assert torch.equal(fp8_round(rounded, "fp8_e4m3", scale), rounded)  # rounding twice changes nothing


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=2.0**-14, max_value=57000.0))
def test_e5m2_rounding_keeps_two_mantissa_bits(value: float) -> None:
    x = torch.tensor([value], dtype=torch.float32)
    assert abs(float(fp8_round(x, "fp8_e5m2", 1.0)) - value) <= value * 2.0**-3 + 1e-12


def test_values_past_the_format_saturate_like_vllms_cache_instead_of_becoming_nan() -> None:
    x = torch.tensor([1000.0, -1e6, 3.0])
    assert fp8_round(x, "fp8_e4m3", 1.0).tolist() == [448.0, -448.0, 3.0]
    assert fp8_round(x, "fp8_e4m3", 4.0).tolist() == [1024.0, -1792.0, 3.0]  # 448 × 4 is the new ceiling


def test_calibrated_scales_leave_headroom_and_never_zero() -> None:
    scales = LayerScales.from_amax("fp8_e4m3", [20.0, 0.0], [4.48, 1.0])
    assert scales.k == (20.0 * CALIBRATION_HEADROOM / FP8_MAX["fp8_e4m3"], 1.0)
    assert scales.v[0] == pytest.approx(0.02)


def _report(agreement: float, kl: float, scales: str = "1.0", tokens: int = 128) -> QualityReport:
    return QualityReport("m", 3, tokens, 1.0, [VariantResult("fp8_e4m3", scales, agreement, kl, 3 * tokens)])


@pytest.mark.parametrize(("agreement", "kl", "runs", "expected", "confidence"), [
    (0.982, 0.008, True, "fp8_e4m3", "high"),
    (0.96, 0.03, True, "fp8_e4m3", "medium"),
    (0.90, 0.20, True, "auto", "high"),
    (0.99, 0.001, False, "auto", "high"),
])
def test_advice_follows_the_measurement_and_the_machine(agreement: float, kl: float, runs: bool, expected: str,
                                                        confidence: str) -> None:
    advice = advise(_report(agreement, kl), runs, None if runs else "needs AVX-512; this CPU has neither.")
    assert (advice.kv_dtype, advice.confidence) == (expected, confidence)
    assert f"{agreement:.1%}" in advice.reason
    if not runs:  # the capability's reason is a sentence of its own: one full stop, not two
        assert advice.reason.endswith("needs AVX-512; this CPU has neither.")


def test_advice_is_about_the_scales_vllm_will_use_and_points_to_calibration() -> None:
    report = QualityReport("m", 3, 128, 1.0, [VariantResult("fp8_e4m3", "1.0", 0.844, 0.165, 384),
                                              VariantResult("fp8_e4m3", "calibrated", 0.971, 0.0065, 384)])
    plain = advise(report, True)  # an uncalibrated folder runs at scale 1.0
    assert plain.kv_dtype == "auto" and "84.4%" in plain.reason
    assert "run the calibration" in plain.reason and "97.1%" in plain.reason
    calibrated = advise(report, True, scales_in_folder=True)  # the calibrated folder itself
    assert calibrated.kv_dtype == "fp8_e4m3" and "97.1%" in calibrated.reason
    assert "run the calibration" not in calibrated.reason


def test_few_scored_tokens_lower_the_confidence() -> None:
    assert advise(_report(0.99, 0.001, tokens=16), True).confidence == "low"


# ---- the real check on the embedded model --------------------------------------------------------

@pytest.fixture(scope="module")
def embedded_report() -> QualityReport:
    """`nalar kv-check --prompts 2`: 2 reasoning prompts × 128 teacher-forced tokens, scale 1.0 and calibrated.
    Two prompts, not the default three: the third's 128-token continuation was a third of the test's 40 s, and
    two still sum across prompts. It is also where E5M2 happens to agree more than E4M3 (96.9% against 96.1%),
    which left the three-prompt order 6 tokens of 384 from a flip; the first two keep it by 7 of 256 (both with
    their continuations batched, 10 s, and one at a time, 18 s)."""
    return run_quality_check(require_embedded_model(), prompts=REASONING_PROMPTS[:2])


@pytest.mark.real_model  # the embedded model in transformers, its continuations and three KV roundings
def test_check_reproduces_the_reference_order_on_the_embedded_model(embedded_report: QualityReport) -> None:
    e4m3 = embedded_report.result("fp8_e4m3", "1.0")
    e5m2 = embedded_report.result("fp8_e5m2", "1.0")
    assert e4m3 is not None and e5m2 is not None
    assert e4m3.tokens == e5m2.tokens == 2 * 128
    # Reference on this model: E4M3 98.2% / 0.008, E5M2 91.7% / 0.033. Same order, same magnitude.
    # (Measured here on these two prompts, their continuations generated in one batch: E4M3 97.7% / 0.0071,
    # E5M2 94.9% / 0.025, calibrated E4M3 97.3%; one at a time, the first prompt's text parted at token 54, and the
    # figures were 96.9% / 0.0072, 94.1% / 0.028 and 97.7%.)
    assert e4m3.top1_agreement >= 0.95 and 0.0 < e4m3.mean_kl <= 0.02
    assert e5m2.top1_agreement < e4m3.top1_agreement
    assert e5m2.mean_kl > 2 * e4m3.mean_kl
    calibrated = embedded_report.result("fp8_e4m3", "calibrated")
    assert calibrated is not None and calibrated.top1_agreement >= 0.95


# ---- calibration: a model whose keys overflow E4M3 at scale 1.0 ---------------------------------

def _wide_key_model(target: Path) -> Path:
    """The embedded model with K projections ×64 and Q projections ÷64: the same attention scores
    (RoPE is linear, so q·k is unchanged), but keys up to ~1,300, past E4M3's 448, as some real
    models' keys are. Powers of two keep the bf16 weights exact."""
    source = require_embedded_model()
    target.mkdir()
    for item in source.iterdir():
        if item.is_file() and item.suffix != ".safetensors" and item.name != "nalar-manifest.json":
            shutil.copy2(item, target / item.name)
    weights = load_file(str(source / "model.safetensors"))
    for name in weights:
        if name.endswith("k_proj.weight"):
            weights[name] = weights[name] * 64
        elif name.endswith("q_proj.weight"):
            weights[name] = weights[name] / 64
    save_file(weights, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


def _run_job(args: list[str], timeout: float = 900) -> tuple[int, list]:
    proc = run_in_group([sys.executable, "-m", "app", *args, "--progress-jsonl"], timeout, cwd=ROOT)
    lines = [line for line in map(parse_job_line, proc.stdout.splitlines()) if line is not None]
    return proc.returncode, lines


VLLM_LOAD_SCRIPT = """
import json, os, sys
import psutil
os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # apply_model sends a function to the worker
from vllm import LLM, SamplingParams
from app.core.measure.kv_calibration import vllm_loaded_scales

if __name__ == "__main__":
    llm = LLM(model=sys.argv[1], kv_cache_dtype=sys.argv[2], max_model_len=1024, max_num_seqs=2, enforce_eager=True)
    scales = llm.apply_model(vllm_loaded_scales)[0]
    text = llm.generate(["Count to five:"], SamplingParams(max_tokens=12, temperature=0))[0].outputs[0].text
    children = [[p.pid, p.create_time()] for p in psutil.Process().children(recursive=True)]
    print("RESULT " + json.dumps({"scales": scales, "text": text, "children": children}), flush=True)
"""


@pytest.mark.real_engine
def test_calibration_rescues_overflowing_keys_and_vllm_loads_the_scales(tmp_path: Path) -> None:
    children_before = child_pids()  # the session's shared engine, when one runs
    model = _wide_key_model(tmp_path / "wide-keys")
    out = tmp_path / "wide-keys-calibrated"
    code, lines = _run_job(["calibrate", "--model", str(model), "--out", str(out), "--prompts", "1",
                            "--tokens", "64"])
    assert code == 0, lines[-1:]
    assert any(line.event == "progress" for line in lines)
    result = lines[-1]
    assert result.event == "result" and result.data is not None
    before = result.data["before"]["results"][0]
    after = result.data["after"]["results"][0]
    assert (before["scales"], after["scales"]) == ("1.0", "calibrated")
    # Scale 1.0 clips the large keys; calibrated scales fit them.
    assert before["top1_agreement"] < 0.92 and before["mean_kl"] > 0.05
    assert after["top1_agreement"] >= 0.95 and after["mean_kl"] < before["mean_kl"] / 5
    assert result.data["calibrated_model"] == str(out)

    config = json.loads((out / "config.json").read_text())
    scheme = config["quantization_config"]["kv_cache_scheme"]
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
    assert (scheme["type"], scheme["num_bits"], scheme["strategy"], scheme["symmetric"]) == ("float", 8, "tensor", True)
    written = read_calibrated_scales(out)
    assert written is not None and len(written.k) == 30 and max(written.k) > 1.0  # keys need a scale above 1
    assert (out / "model.safetensors").stat().st_ino == (model / "model.safetensors").stat().st_ino  # linked
    assert json.loads((out / MARK_FILE).read_text())["source"] == str(model.resolve())

    # vLLM accepts the folder and holds exactly these scales (where this CPU runs an FP8 cache).
    from app.engine.machine.capability import kv_dtype_unsupported_reason, probe_hardware

    if reason := kv_dtype_unsupported_reason("fp8_e4m3", probe_hardware()):
        # A kv_cache_scheme makes vLLM use an FP8 cache whatever kv_cache_dtype says ('FP8 KV cache on CPU
        # requires x86 with AVX-512 or AMX', seen on an AVX2-only EPYC): the load can't be shown here.
        pytest.skip(f"the folder is written and checked; loading it in vLLM needs FP8 here: {reason}")
    kv_dtype = "fp8"
    script = tmp_path / "load_in_vllm.py"
    script.write_text(VLLM_LOAD_SCRIPT)
    # vLLM's offline LLM with its engine in this one process (VLLM_ENABLE_V1_MULTIPROCESSING=0, as vLLM's own tests
    # run it): the loader under test is the same, and two vLLM imports fewer (EngineCore and its worker).
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", PYTHONPATH=str(ROOT), VLLM_ENABLE_V1_MULTIPROCESSING="0")
    proc = run_in_group([sys.executable, str(script), str(out), kv_dtype], 900, cwd=ROOT, env=env)
    found = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and found, proc.stderr[-3000:]
    loaded = json.loads(found[0][len("RESULT "):])
    assert loaded["text"].strip()
    if kv_dtype == "fp8":
        assert [k for k, _ in loaded["scales"]] == pytest.approx(list(written.k), rel=1e-6)
        assert [v for _, v in loaded["scales"]] == pytest.approx(list(written.v), rel=1e-6)
        assert "Using KV cache scaling factor 1.0" not in proc.stderr + proc.stdout
    assert not vllm_processes(children_before), "vLLM left processes behind"
    # The script's own engine processes would be re-parented, not ours: check them by pid and start time.
    leftover = [proc for pid, created in loaded["children"] if (proc := same_process(pid, created))]
    _, alive = psutil.wait_procs(leftover, timeout=30)
    assert not [p for p in alive if "resource_tracker" not in " ".join(p.cmdline())], "the vLLM script left processes"


# ---- bad input -----------------------------------------------------------------------------------

def test_a_missing_model_folder_is_named_with_the_fix(tmp_path: Path) -> None:
    code, lines = _run_job(["kv-check", "--model", str(tmp_path / "nowhere")], timeout=120)
    assert code == 1 and lines[-1].event == "error"
    assert str(tmp_path / "nowhere") in lines[-1].message and "--model" in lines[-1].fix


def test_an_already_quantized_model_gets_a_clear_refusal(tmp_path: Path) -> None:
    folder = tmp_path / "awq-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "awq", "bits": 4}}))
    save_file({"w": torch.zeros(1)}, str(folder / "model.safetensors"))
    scales = LayerScales("fp8_e4m3", (0.1,), (0.1,))
    with pytest.raises(CalibrationError, match="awq.*compressed-tensors"):
        write_calibrated_model(folder, scales, ["model.layers.0.self_attn"])
    assert not (tmp_path / "awq-model-fp8-kv-calibrated").exists()


def test_a_sharded_models_index_names_the_scales_file(tmp_path: Path) -> None:
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    shard = "model-00001-of-00001.safetensors"
    save_file({"a": torch.zeros(1)}, str(folder / shard))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": shard}}))
    out = write_calibrated_model(folder, LayerScales("fp8_e4m3", (0.5,), (0.25,)), ["model.layers.0.self_attn"])
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert index["model.layers.0.self_attn.k_scale"] == SCALES_FILE == index["model.layers.0.self_attn.v_scale"]
    assert read_calibrated_scales(out) == LayerScales("fp8_e4m3", (0.5,), (0.25,))


@pytest.mark.real_model  # cancelled while the child generates with the embedded model in transformers
def test_cancel_stops_a_running_check_promptly() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "app", "kv-check", "--progress-jsonl"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    assert proc.stdout is not None
    seen = []
    try:
        for raw in proc.stdout:
            line = parse_job_line(raw)
            if line is not None:
                seen.append(line)
                if line.event == "progress" and "unrounded continuations" in line.message:  # while generating
                    proc.send_signal(signal.SIGTERM)  # what the app's Cancel sends
                    break
        rest = proc.communicate(timeout=120)[0]
    finally:  # a failed wait must not leave the check (or its model) running
        end_group(proc.pid)
        proc.wait(30)
    final = [line for line in map(parse_job_line, rest.splitlines()) if line is not None]
    assert proc.returncode == 130
    assert final and final[-1].event == "error" and final[-1].message == "Cancelled."
