"""`nalar kv-check` and `nalar calibrate`: FP8 KV quality on the user's own model, and calibrated scales.

Both run transformers on the CPU (no engine), print a table or JSON, speak the job-line protocol
with ``--progress-jsonl`` (the app runs them as child processes), and save their report under the
data dir's kv-quality/ folder.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from app.core import paths
from app.core.job_lines import JobLineWriter
from app.core.kv_quality import (
    CALIBRATION_EXCHANGES,
    REASONING_PROMPTS,
    Advice,
    CheckCancelled,
    KvQualityModel,
    LayerScales,
    QualityReport,
    advise,
    format_report,
    run_quality_check,
)
from app.core.model_folder import folder_problem


class ModelFolderError(ValueError):
    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


def resolve_model_folder(model: str | None) -> tuple[Path, bool]:
    """(folder, trust_remote_code) for --model, else the configured model, else the embedded one."""
    from app.core.settings import load_settings

    settings, _ = load_settings()
    trust = settings.engine.trust_remote_code
    name = model if model is not None else settings.engine.model
    if not name:
        from app.core.embedded_model import ensure_embedded_model

        return ensure_embedded_model(), False
    folder = Path(name).expanduser()
    if not folder.exists() and "/" in name and not name.startswith(("/", ".", "~")):
        from app.core.hub_download import download_dir, is_complete

        if is_complete(download_dir(name)):
            folder = download_dir(name)
        else:
            raise ModelFolderError(f"{name} is a Hugging Face id, and it has not been downloaded.",
                                   f"Download it first: nalar download {name}")
    problem = folder_problem(folder)
    if problem is not None:
        raise ModelFolderError(problem.message,
                               "Pass --model with a Hugging Face model folder, or choose one in Settings.")
    # trust_remote_code is per model: it holds only for the configured one.
    return folder, trust and model is None


def _advice(report: QualityReport, scales_in_folder: bool) -> Advice:
    from app.engine.capability import kv_dtype_unsupported_reason, probe_hardware

    reason = kv_dtype_unsupported_reason("fp8_e4m3", probe_hardware())
    return advise(report, reason is None, reason, scales_in_folder=scales_in_folder)


def _save(kind: str, folder: Path, data: dict[str, Any]) -> Path:
    out_dir = paths.data_dir() / "kv-quality"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{kind}-{folder.name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(data, indent=2))
    return out


def _finish(kind: str, folder: Path, data: dict[str, Any], *, as_json: bool, jsonl: bool,
            text: str) -> dict[str, Any]:
    """Save the report, and print it for a terminal (job lines carry it to the app instead)."""
    data["saved"] = str(_save(kind, folder, data))
    if not jsonl:
        print(json.dumps(data, indent=2) if as_json else f"{text}\nsaved: {data['saved']}")
    return data


def _cancel_on_signals() -> threading.Event:
    """SIGTERM (the app's Cancel) and SIGINT (Ctrl-C) stop the job between steps."""
    cancel = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        cancel.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return cancel


def _run_job(writer: JobLineWriter, job: Any) -> int:
    try:
        data = job()
    except ModelFolderError as exc:
        writer.error(str(exc), exc.fix)
        return 1
    except CheckCancelled:
        writer.error("Cancelled.", "")
        return 130
    except Exception as exc:  # a library error on the user's model: name it, don't lose it
        from app.core.kv_calibration import CalibrationError

        fix = "" if isinstance(exc, CalibrationError) else \
            "The check loads the model with transformers on the CPU; it needs about 4 bytes of RAM per parameter."
        writer.error(f"{type(exc).__name__}: {exc}", fix)
        return 1
    writer.result(data)
    return 0


def _report_dict(report: QualityReport, scales_in_folder: bool = False) -> dict[str, Any]:
    advice = _advice(report, scales_in_folder)
    return {**report.to_dict(), "advice": {"kv_dtype": advice.kv_dtype, "confidence": advice.confidence,
                                           "reason": advice.reason}}


def run_kv_check(model: str | None, *, prompts: int, tokens: int, as_json: bool, jsonl: bool) -> int:
    from app.core.kv_calibration import read_calibrated_scales

    writer = JobLineWriter(jsonl)
    cancel = _cancel_on_signals()

    def job() -> dict[str, Any]:
        folder, trust = resolve_model_folder(model)
        stored = read_calibrated_scales(folder)
        # A calibrated folder is checked with the scales vLLM will load from it.
        report = run_quality_check(folder, prompts=REASONING_PROMPTS[:prompts], tokens=tokens,
                                   calibrated={"fp8_e4m3": stored} if stored else None,
                                   trust_remote_code=trust, progress=writer.progress, cancel=cancel)
        data = _report_dict(report, scales_in_folder=stored is not None)
        advice = data["advice"]
        return _finish("check", folder, data, as_json=as_json, jsonl=jsonl, text=(
            f"{format_report(report)}\n\nadvice: {advice['kv_dtype']} ({advice['confidence']} confidence): "
            f"{advice['reason']}"))

    return _run_job(writer, job)


def run_calibrate(model: str | None, out: str | None, *, prompts: int, tokens: int, as_json: bool,
                  jsonl: bool) -> int:
    from app.core.kv_calibration import read_calibrated_scales, write_calibrated_model

    writer = JobLineWriter(jsonl)
    cancel = _cancel_on_signals()

    def job() -> dict[str, Any]:
        folder, trust = resolve_model_folder(model)
        if read_calibrated_scales(folder) is not None:
            raise ModelFolderError(f"{folder} is already a calibrated folder.",
                                   "Calibrate the original model folder instead.")
        writer.progress(0.0, "loading the model in transformers")
        quality_model = KvQualityModel(folder, trust_remote_code=trust)

        def part(start: float, span: float) -> Any:
            return lambda fraction, message: writer.progress(start + span * (fraction or 0.0), message)

        k_amax, v_amax = quality_model.calibrate(progress=part(0.05, 0.2), cancel=cancel)
        scales = LayerScales.from_amax("fp8_e4m3", k_amax, v_amax)
        report = run_quality_check(folder, prompts=REASONING_PROMPTS[:prompts], tokens=tokens,
                                   variants=("fp8_e4m3",), calibrated={"fp8_e4m3": scales},
                                   quality_model=quality_model, progress=part(0.25, 0.7), cancel=cancel)
        report.calibrated_from = len(CALIBRATION_EXCHANGES)
        if cancel.is_set():
            raise CheckCancelled("cancelled")
        writer.progress(0.97, "writing the calibrated model folder")
        before = QualityReport(report.model, report.prompts, report.tokens_per_prompt, report.seconds,
                               [r for r in report.results if r.scales == "1.0"])
        after = QualityReport(report.model, report.prompts, report.tokens_per_prompt, report.seconds,
                              [r for r in report.results if r.scales == "calibrated"], report.calibrated_from)
        calibrated = write_calibrated_model(
            folder, scales, quality_model.attention_names, Path(out).expanduser() if out else None,
            extra={"quality_before": before.to_dict()["results"], "quality_after": after.to_dict()["results"]})
        # The advice is about running the calibrated folder, whose scales vLLM will load.
        data = {"calibrated_model": str(calibrated), "before": _report_dict(before),
                "after": _report_dict(after, scales_in_folder=True),
                "advice": _report_dict(report, scales_in_folder=True)["advice"],
                "layer_amax": {"k": [round(a, 4) for a in k_amax], "v": [round(a, 4) for a in v_amax]}}
        return _finish("calibration", folder, data, as_json=as_json, jsonl=jsonl, text=(
            f"{format_report(report)}\n\ncalibrated model: {calibrated}\n"
            "use it: choose that folder in Settings (KV cache dtype fp8_e4m3)"))

    return _run_job(writer, job)

