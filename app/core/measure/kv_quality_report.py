"""What `nalar kv-check` and `nalar calibrate` report: typed, a dict only at the JSON / job-line edge, and
the one row builder that both the terminal and the Measure dialog's quality tables show."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from app.core.measure.kv_engine_report import EngineCheck, format_engine_check
from app.core.measure.kv_quality import Advice, QualityReport, VariantResult
from app.core.measure.tables import fmt, text_table

HEADERS = ["KV cache", "scales", "top-1 agreement", "mean KL per token", "tokens"]


def report_from_dict(data: dict[str, Any]) -> QualityReport:
    prompts = data.get("prompts") or 0  # a count; an older report may list the prompts
    calibrated_from = data.get("calibrated_from")
    return QualityReport(str(data.get("model", "")), prompts if isinstance(prompts, int) else len(prompts),
                         int(data.get("tokens_per_prompt") or 0), float(data.get("seconds") or 0.0),
                         [VariantResult(**r) for r in data.get("results", [])],
                         calibrated_from if isinstance(calibrated_from, int) else 0)


def advice_from_dict(data: dict[str, Any] | None) -> Advice | None:
    return Advice(**data) if data else None


@dataclass(frozen=True)
class QualityCheck:
    """The measurements and the advice on them (the advice is about the scales vLLM will load); with
    ``engine``, the same question asked of the real engine next to them (`nalar kv-check --engine`)."""

    report: QualityReport
    advice: Advice | None
    saved: str = ""
    engine: EngineCheck | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {**self.report.to_dict(), "advice": asdict(self.advice) if self.advice else None}
        if self.engine is not None:
            data["engine"] = self.engine.to_dict()
        return {**data, "saved": self.saved} if self.saved else data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> QualityCheck:
        engine = EngineCheck.from_dict(data["engine"]) if data.get("engine") else None
        return QualityCheck(report_from_dict(data), advice_from_dict(data.get("advice")), data.get("saved", ""),
                            engine)


@dataclass(frozen=True)
class Calibration:
    """A calibrated model folder, with the check before (scale 1.0) and after (its scales)."""

    calibrated_model: str
    before: QualityCheck
    after: QualityCheck
    advice: Advice | None
    k_amax: tuple[float, ...] = ()
    v_amax: tuple[float, ...] = ()
    saved: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = {"calibrated_model": self.calibrated_model, "before": self.before.to_dict(),
                "after": self.after.to_dict(), "advice": asdict(self.advice) if self.advice else None,
                "layer_amax": {"k": [round(a, 4) for a in self.k_amax], "v": [round(a, 4) for a in self.v_amax]}}
        return {**data, "saved": self.saved} if self.saved else data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Calibration:
        amax = data.get("layer_amax") or {}
        return Calibration(data["calibrated_model"], QualityCheck.from_dict(data["before"]),
                           QualityCheck.from_dict(data["after"]), advice_from_dict(data.get("advice")),
                           tuple(amax.get("k", ())), tuple(amax.get("v", ())), data.get("saved", ""))


def table_rows(report: QualityReport) -> list[list[str]]:
    """The unrounded reference first (by definition 100% and 0), then each FP8 variant."""
    tokens = report.tokens_per_prompt * report.prompts
    rows = [["unrounded", "–", "100.0%", "0", str(tokens or "–")]]
    for row in report.results:
        rows.append([row.kv_dtype, row.scales, fmt(row.top1_agreement, ".1%"), fmt(row.mean_kl, ".4f"),
                     str(row.tokens)])
    return rows


def advice_text(advice: Advice | None) -> str:
    if advice is None:
        return ""
    return f"Advice: use {advice.kv_dtype} (confidence: {advice.confidence}). {advice.reason}"


def format_check(check: QualityCheck) -> str:
    report = check.report
    return "\n".join([f"KV quality check: {report.model}",
                      f"{report.prompts} prompts × {report.tokens_per_prompt} tokens, teacher-forced, "
                      f"{report.seconds:.0f} s", text_table(HEADERS, table_rows(report)), "",
                      *([format_engine_check(check.engine), ""] if check.engine else []),
                      advice_text(check.advice), f"saved: {check.saved}"])


def format_calibration(calibration: Calibration) -> str:
    return "\n".join(["Before calibration:", text_table(HEADERS, table_rows(calibration.before.report)),
                      "After calibration:", text_table(HEADERS, table_rows(calibration.after.report)), "",
                      advice_text(calibration.advice), f"calibrated model: {calibration.calibrated_model}",
                      "use it: choose that folder in Settings (KV cache dtype fp8_e4m3)",
                      f"saved: {calibration.saved}"])
