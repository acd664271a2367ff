"""The settings dialog's "What fits" table: the planner's verdict per KV dtype, before anything loads."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QTextBrowser

from app.core.measure.fp8_scales import fp8_scales_text
from app.core.models.embedded_model import embedded_model_dir
from app.core.models.model_catalog import DraftPairing, draft_pairing
from app.core.models.model_folder import folder_problem
from app.core.models.planner import (
    GIB,
    DraftCost,
    Plan,
    PlannerError,
    bandwidth_for,
    draft_cost,
    draft_cost_for,
    plan_for_folder,
    utilization_for_free_vram,
)
from app.engine.machine.capability import HardwareProbe
from app.engine.machine.gpu_start import held_by_others


def speculation_note(engine: dict[str, Any], folder: Path) -> str:
    """What the chosen speculative method costs in memory: a draft model's weights and KV, else nothing."""
    method = engine.get("speculative_method", "off")
    if method in ("ngram", "suffix"):
        return f"<br>Speculative {method}: no extra weights or KV (it proposes from the text so far)."
    if method != "draft_model":
        return ""
    pairing = draft_pairing(engine["model"]) if not engine.get("draft_model") else None
    if pairing is not None:
        return "<br>" + html.escape(paired_draft_note(pairing, engine["max_model_len"], engine["kv_cache_dtype"]))
    draft = Path(engine["draft_model"]).expanduser() if engine.get("draft_model") else folder
    if folder_problem(draft) is not None:
        return "<br>Draft model: not a local model folder; its memory is planned once it is downloaded."
    try:
        cost = draft_cost(draft, engine["max_model_len"], engine["kv_cache_dtype"])
    except (PlannerError, OSError, ValueError) as exc:
        return f"<br>Draft model: can't plan it: {html.escape(str(exc))}"
    same = " (the model drafts for itself: a smoke test, never faster)" if draft == folder else ""
    return "<br>" + html.escape(f"Draft model{same}: {cost_text(cost)}")


def cost_text(cost: DraftCost) -> str:
    return (f"weights {cost.weight_bytes / GIB:.2f} GiB, KV {cost.kv_bytes_per_token:,} bytes/token more "
            f"({cost.kv_bytes_per_sequence / GIB:.2f} GiB per sequence), from the same KV pool.")


def paired_draft_note(pairing: DraftPairing, max_model_len: int, kv_cache_dtype: str) -> str:
    """The catalog's draft, planned from its shipped config before it is downloaded."""
    draft = pairing.draft
    cost = draft_cost_for(draft.config(), draft.weight_bytes, draft.repo_id, max_model_len, kv_cache_dtype)
    where = ("downloaded" if pairing.folder is not None else
             f"not downloaded yet: Engine → Choose model… gets it ({draft.repo_id}); until then the model "
             "drafts for itself")
    vocab = (" Its vocabulary is sized differently for the same tokenizer, so vLLM maps the tokens "
             "(use_heterogeneous_vocab)." if pairing.heterogeneous_vocab else "")
    return f"Draft model {draft.label}, the catalog's pair ({where}): {cost_text(cost)}{vocab}"


class PlannerView(QTextBrowser):
    """Shows the last plan; ``plan`` keeps it for the dialog and the tests."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("PlannerView")
        self.setMinimumHeight(170)
        self.plan: Plan | None = None

    def show_plan(self, engine: dict[str, Any], probe: HardwareProbe) -> None:
        folder = Path(engine["model"]).expanduser() if engine["model"] else embedded_model_dir()
        if folder_problem(folder) is not None:
            self.setHtml("<i>The planner needs a local model folder; a hub model is planned "
                                      "once it has been downloaded.</i>")
            return
        dtypes = ("auto", "fp8_e4m3", "fp8_e5m2")
        vram_note = ""
        try:
            if probe.engine_kind == "cuda" and probe.gpus:
                gpu = probe.gpus[0]
                share = utilization_for_free_vram(engine["gpu_memory_utilization"], gpu.vram_free_bytes,
                                                  gpu.vram_total_bytes)  # what a start now would get
                result = plan_for_folder(folder, max_model_len=engine["max_model_len"], kv_dtypes=dtypes,
                                         vram_total_bytes=gpu.vram_total_bytes, gpu_memory_utilization=share,
                                         bandwidth_gbps=bandwidth_for(gpu.name))
                vram_note = f"<br>VRAM now{held_by_others(gpu)}." if held_by_others(gpu) else ""
            else:
                result = plan_for_folder(folder, max_model_len=engine["max_model_len"], kv_dtypes=dtypes,
                                         cpu_kv_pool_bytes=int(engine["cpu_kv_cache_gib"] * GIB))
        except (PlannerError, OSError, ValueError) as exc:
            self.setHtml(f"<b>Can't plan this model:</b> {html.escape(str(exc))}")
            return
        self.plan = result
        header = "".join(f"<th>{'bf16 (auto)' if r.kv_cache_dtype == 'auto' else r.kv_cache_dtype}</th>"
                         for r in result.rows)

        def cells(fn: Any) -> str:
            return "".join(f"<td align='right'>{fn(r)}</td>" for r in result.rows)

        rows = [
            ("KV bytes / token", cells(lambda r: f"{r.kv_bytes_per_token:,}")),
            ("KV per sequence", cells(lambda r: f"{r.kv_bytes_per_sequence / GIB:.2f} GiB")),
            ("KV capacity", cells(lambda r: f"{r.capacity_tokens:,} tokens")),
            ("Sequences that fit", cells(lambda r: f"{r.max_concurrency:.1f}")),
            ("Fits", cells(lambda r: "yes" if r.fits else "<b style='color:#b00020'>no</b>")),
            ("Floor ms/token", cells(lambda r: f"{r.floor_ms_per_token:.1f}" if r.floor_ms_per_token else "–")),
        ]
        body = "".join(f"<tr><td>{name}</td>{values}</tr>" for name, values in rows)
        weights = f"{result.weight_bytes / GIB:.2f} GiB{' (estimated)' if result.weights_estimated else ''}"
        note = f"<br><i>{html.escape(result.shape.note)}</i>" if result.shape.note else ""
        note += vram_note
        if scales := fp8_scales_text(engine["kv_cache_dtype"], folder):
            note += f"<br>KV cache: {html.escape(scales)}"
        note += speculation_note(engine, folder)
        self.setHtml(
            f"<table cellspacing=6><tr><th></th>{header}</tr>{body}</table>"
            f"<small>Weights {weights}. {result.assumption}{note}</small>")
