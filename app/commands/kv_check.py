"""`nalar kv-check` and `nalar calibrate`: FP8 KV quality on the user's own model, and calibrated scales.

Both run transformers on the CPU (no engine) as jobs (app/commands/jobs.py): a table or JSON on a
terminal, the job-line protocol with ``--progress-jsonl`` (the app runs them as child processes), and
the report saved under the data dir's kv-quality/ folder. ``kv-check --engine`` adds the same question
asked of the real engine, per KV dtype (app/commands/kv_engine_check.py), to the same report. Cancel stops
them between steps (exit 130).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from app.commands.jobs import (
    EXIT_INTERRUPTED,
    Job,
    JobCancelled,
    JobContext,
    JobFailed,
    report_stem,
    run_job,
    save_json,
    sibling,
)
from app.core.measure.kv_quality import (
    CALIBRATION_EXCHANGES,
    REASONING_PROMPTS,
    Advice,
    CheckCancelled,
    KvQualityModel,
    LayerScales,
    QualityReport,
    advise,
    run_quality_check,
)
from app.core.measure.kv_quality_report import Calibration, QualityCheck, format_calibration, format_check
from app.core.models.model_folder import folder_problem

Outcome = TypeVar("Outcome", QualityCheck, Calibration)
RAM_FIX = "The check loads the model with transformers on the CPU; it needs about 4 bytes of RAM per parameter."


def resolve_model_folder(model: str | None) -> tuple[Path, bool]:
    """(folder, trust_remote_code) for --model, else the configured model, else the embedded one."""
    from app.core.settings.settings import load_settings

    settings, _ = load_settings()
    trust = settings.engine.trust_remote_code
    name = model if model is not None else settings.engine.model
    if not name:
        from app.core.models.embedded_model import ensure_embedded_model

        return ensure_embedded_model(), False
    folder = Path(name).expanduser()
    if not folder.exists() and "/" in name and not name.startswith(("/", ".", "~")):
        from app.core.models.hub_download import download_dir, is_complete

        if is_complete(download_dir(name)):
            folder = download_dir(name)
        else:
            raise JobFailed(f"{name} is a Hugging Face id, and it has not been downloaded.",
                            f"Download it first: nalar download {name}")
    problem = folder_problem(folder)
    if problem is not None:
        raise JobFailed(problem.message, "Pass --model with a Hugging Face model folder, or choose one in Settings.")
    # trust_remote_code is per model: it holds only for the configured one.
    return folder, trust and model is None


def _advice(report: QualityReport, scales_in_folder: bool) -> Advice:
    from app.engine.machine.capability import kv_dtype_unsupported_reason, probe_hardware

    reason = kv_dtype_unsupported_reason("fp8_e4m3", probe_hardware())
    return advise(report, reason is None, reason, scales_in_folder=scales_in_folder)


def _checked(report: QualityReport, scales_in_folder: bool = False) -> QualityCheck:
    return QualityCheck(report, _advice(report, scales_in_folder))


def _saved(kind: str, folder: Path, outcome: Outcome) -> Outcome:
    """The outcome saved under kv-quality/, and the path it was saved to recorded in it."""
    target = save_json(sibling(report_stem("kv-quality", f"{kind}-{folder.name}"), ".json"), outcome.to_dict())
    return dataclasses.replace(outcome, saved=str(target))


def _run(title: str, work: Callable[[JobContext], Outcome], render: Callable[[Outcome], str], *, as_json: bool,
         jsonl: bool) -> int:
    """Both commands' job: a cancel is seen between steps; a library error on the user's model is named."""
    def guarded(job: JobContext) -> Outcome:
        from app.core.measure.kv_calibration import CalibrationError

        try:
            return work(job)
        except CheckCancelled:
            raise JobCancelled("cancelled") from None
        except CalibrationError as exc:
            raise JobFailed(f"{type(exc).__name__}: {exc}") from None

    job = Job(title, guarded, lambda outcome: outcome.to_dict(), render, interrupt=False,
              cancelled_message="Cancelled.", cancelled_fix="", cancelled_exit=EXIT_INTERRUPTED,
              unexpected=lambda exc: (f"{type(exc).__name__}: {exc}", RAM_FIX))
    return run_job(job, jsonl=jsonl, as_json=as_json)


def run_kv_check(model: str | None, *, prompts: int, tokens: int, as_json: bool, jsonl: bool, engine: bool = False,
                 engine_tokens: int = 512, seeds: int = 3, engine_prompts: int = 8) -> int:
    def work(job: JobContext) -> QualityCheck:
        from app.core.measure.kv_calibration import read_calibrated_scales

        folder, trust = resolve_model_folder(model)
        stored = read_calibrated_scales(folder)
        emulated = job.writer.progress if not engine else lambda fraction, message: job.writer.progress(
            0.3 * (fraction or 0.0), message)
        # A calibrated folder is checked with the scales vLLM will load from it.
        report = run_quality_check(folder, prompts=REASONING_PROMPTS[:prompts], tokens=tokens,
                                   calibrated={"fp8_e4m3": stored} if stored else None,
                                   trust_remote_code=trust, progress=emulated, cancel=job.cancel)
        check = _checked(report, scales_in_folder=stored is not None)
        if engine:
            from app.commands.kv_engine_check import run_engine_check
            from app.core.measure.kv_engine_report import ENGINE_PROMPTS
            from app.core.settings.settings import changed, load_settings

            config = changed(load_settings()[0].engine, model=str(folder), trust_remote_code=trust)
            check = dataclasses.replace(check, engine=run_engine_check(
                config, ENGINE_PROMPTS[:engine_prompts], seeds=seeds, max_tokens=engine_tokens, cancel=job.cancel,
                progress=lambda fraction, message: job.writer.progress(0.3 + 0.7 * fraction, message)))
            if job.cancel.is_set():
                raise CheckCancelled("cancelled")
        return _saved("check", folder, check)

    return _run("The KV quality check", work, format_check, as_json=as_json, jsonl=jsonl)


def run_calibrate(model: str | None, out: str | None, *, prompts: int, tokens: int, as_json: bool,
                  jsonl: bool) -> int:
    def work(job: JobContext) -> Calibration:
        from app.core.measure.kv_calibration import read_calibrated_scales, write_calibrated_model

        writer, cancel = job.writer, job.cancel
        folder, trust = resolve_model_folder(model)
        if read_calibrated_scales(folder) is not None:
            raise JobFailed(f"{folder} is already a calibrated folder.", "Calibrate the original model folder instead.")
        writer.progress(0.0, "loading the model in transformers")
        quality_model = KvQualityModel(folder, trust_remote_code=trust)

        def part(start: float, span: float) -> Callable[[float, str], None]:
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
        return _saved("calibration", folder, Calibration(
            str(calibrated), _checked(before), _checked(after, scales_in_folder=True),
            _advice(report, scales_in_folder=True), tuple(k_amax), tuple(v_amax)))

    return _run("The calibration", work, format_calibration, as_json=as_json, jsonl=jsonl)
