"""The browser's lines, as plain text (no Qt): a hub result, a file set's verdict, a queued download, a library entry.

Everything here quotes the hub or the disk (names, licences, file names, problems): the views show it as plain
text, never as markup.
"""

from __future__ import annotations

from datetime import datetime

from app.core.hub.library import LibraryEntry
from app.core.hub.queue import QueueItem
from app.core.hub.search import HubModel
from app.core.hub.verdicts import FitVerdict
from app.core.models.hub_download import format_bytes, format_eta
from app.core.models.planner import GIB
from app.ui.model_browser.search_state import ResultRow

STATE_WORDS = {"queued": "queued", "running": "downloading", "paused": "paused", "done": "done",
               "cancelled": "cancelled", "failed": "failed"}


def parameters_text(count: int | None) -> str:
    if not count:
        return "parameters unknown"
    if count >= 1e9:
        return f"{count / 1e9:.1f} B parameters"
    return f"{count / 1e6:.0f} M parameters"


def date_text(when: datetime | None) -> str:
    return when.strftime("%Y-%m-%d") if when else "unknown"


def model_line(model: HubModel) -> str:
    """The result's first two lines: name, then downloads, last update, parameters, quantizations, licence,
    gated state and the family's Think behaviour."""
    quant = ", ".join(model.quantizations) or "quantization unknown"
    gated = "gated: needs `hf auth login` and the licence accepted" if model.gated else "open"
    return (f"{model.repo_id}\n{model.downloads:,} downloads · updated {date_text(model.last_modified)} · "
            f"{parameters_text(model.parameters)} · {quant} · licence {model.license or 'unknown'} · {gated} · "
            f"Think: {model.think}")


def verdict_line(verdict: FitVerdict) -> str:
    """One file set: weights in GiB, the longest context at fp8 and bf16 KV, the ms/token floor, the verdict."""
    file_set = verdict.file_set
    if not file_set.loadable:
        why = f": {file_set.note}" if file_set.note else ""
        return f"{file_set.label}: {file_set.weight_bytes / GIB:.1f} GiB · vLLM can't load it here{why}"
    note = f" ({file_set.note})" if file_set.note else ""
    if verdict.fits == "no":  # no context and no speed to give: what it needs against what this machine has
        return f"{file_set.label}: {file_set.weight_bytes / GIB:.1f} GiB weights · {verdict.text()}{note}"
    floor = verdict.ms_per_token_floor
    floor_text = "ms/token unknown" if not floor else f"≥ {floor:,.0f} ms/token" if floor >= 100 else \
        f"≥ {floor:.1f} ms/token"
    return (f"{file_set.label}: {file_set.weight_bytes / GIB:.1f} GiB weights · context {verdict.max_context_fp8:,} "
            f"at fp8 KV, {verdict.max_context_bf16:,} at bf16 · {floor_text} · {verdict.text()}{note}")


def row_text(row: ResultRow) -> str:
    """A result as the list shows it: the model's lines, then one line per file set (or why there is none yet)."""
    if row.verdicts is None:
        tail = f"no verdict: {row.verdict_error}" if row.verdict_error else "working out what fits this machine…"
        return f"{model_line(row.model)}\n   {tail}"
    sets = "\n".join(f"   {verdict_line(v)}" for v in row.verdicts) or "   no file set vLLM loads was found"
    return f"{model_line(row.model)}\n{sets}"


def queue_line(item: QueueItem) -> str:
    """A download: what, its state, bytes, speed, time left and the file it is on (or its error)."""
    label = f"{item.repo_id} ({item.file_set})" if item.file_set else item.repo_id
    total = format_bytes(item.total_bytes) if item.total_bytes else "size unknown"
    line = f"{label} · {STATE_WORDS.get(item.state, item.state)} · {format_bytes(item.done_bytes)} of {total}"
    if item.state == "running":
        line += f" · {format_bytes(item.bytes_per_s)}/s · {format_eta(item.eta_s)}"
        if item.current_file:
            of = f" ({format_bytes(item.file_done_bytes)} of {format_bytes(item.file_total_bytes)})" \
                if item.file_total_bytes else ""
            line += f"\n   {item.current_file}{of}"
    if item.error:
        line += f"\n   {item.error}"
    return line


def library_line(entry: LibraryEntry, verdict: str | None) -> str:
    """A library entry: name, where it is from, size on disk, its verdict, when it was last used, its problem."""
    source = {"nalar": "downloaded by Nalar", "hf-cache": "Hugging Face cache", "folder": "your folder"}
    used = entry.last_used.strftime("%Y-%m-%d %H:%M") if entry.last_used else "never"
    line = (f"{entry.model_id}\n{source.get(entry.source, entry.source)} · {format_bytes(entry.size_bytes)} on disk · "
            f"last used {used} · {verdict or 'verdict unknown'}\n   {entry.path}")
    if entry.problem:
        line += f"\n   Can't load: {entry.problem}"
    return line


def delete_question(entry: LibraryEntry) -> str:
    """What Delete asks, naming the bytes it frees."""
    return (f"Delete {entry.model_id}?\n\n{entry.path}\n\nThis frees {format_bytes(entry.size_bytes)} "
            f"({entry.size_bytes:,} bytes). A later download gets it again.")
