"""`nalar models search|list|rm`: app/core/hub for a terminal. `nalar download REPO` downloads (resumable).

Text from the hub is printed as plain text; --json gives the same facts for scripts.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from app.commands.jobs import EXIT_FAILED, EXIT_OK
from app.core.hub.library import LibraryEntry, ModelLibrary, default_state_file
from app.core.hub.search import HubGated, HubModel, HubOffline, SortKey, search_models
from app.core.hub.verdicts import FitVerdict, MachineBudget, folder_verdict, this_machine, verdicts_for
from app.core.models.hub_download import format_bytes
from app.core.models.planner import GIB


def run_search(query: str, *, as_json: bool = False, sort: SortKey = "downloads", only_fits: bool = False,
               limit: int = 20, budget: MachineBudget | None = None) -> int:
    """One result a line (each file set's weights and verdict), or JSON. Exit 1 when the hub can't be reached."""
    budget = budget or this_machine()
    print(f"nalar: verdicts for {budget.describe()}", file=sys.stderr)
    rows = []
    try:
        for model in search_models(query, sort=sort, limit=limit):
            verdicts, problem = _verdicts(model, budget)
            if only_fits and not any(v.fits != "no" and v.file_set.loadable for v in verdicts):
                continue
            rows.append(_row(model, verdicts, problem))
            if not as_json:
                print(_line(model, verdicts, problem), flush=True)
    except HubOffline as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if as_json:
        print(json.dumps(rows, indent=1))
    elif not rows:
        print(f"nalar: no text-generation model matches {query!r}" + (" and fits" if only_fits else ""),
              file=sys.stderr)
    return EXIT_OK


def _verdicts(model: HubModel, budget: MachineBudget) -> tuple[list[FitVerdict], str]:
    try:
        return verdicts_for(model.repo_id, budget, commit=model.commit or None), ""
    except (HubGated, HubOffline, RuntimeError) as exc:
        return [], str(exc)


def _row(model: HubModel, verdicts: list[FitVerdict], problem: str) -> dict[str, Any]:
    return {"repo_id": model.repo_id, "downloads": model.downloads, "likes": model.likes,
            "last_modified": model.last_modified.isoformat() if model.last_modified else None,
            "parameters": model.parameters, "license": model.license, "gated": model.gated, "think": model.think,
            "problem": problem or None,
            "file_sets": [{"label": v.file_set.label, "weights_bytes": v.file_set.weight_bytes,
                           "loadable": v.file_set.loadable, "note": v.file_set.note or None, "fits": v.fits,
                           "verdict": v.text(), "max_context_fp8": v.max_context_fp8,
                           "max_context_bf16": v.max_context_bf16,
                           "ms_per_token_floor": None if v.ms_per_token_floor is None
                           else round(v.ms_per_token_floor, 2)} for v in verdicts]}


def _line(model: HubModel, verdicts: list[FitVerdict], problem: str) -> str:
    facts = [model.repo_id, f"{model.downloads:,} downloads", model.think]
    if model.gated:
        facts.append("gated")
    sets = [f"{v.file_set.label} {v.file_set.weight_bytes / GIB:.1f} GiB: {v.text()}"
            + (f" (fp8 {v.max_context_fp8:,} / bf16 {v.max_context_bf16:,} tokens)" if v.fits != "no" else "")
            + ("" if v.file_set.loadable else " [not loadable here]") for v in verdicts]
    return " · ".join(facts) + " | " + ("; ".join(sets) if sets else problem)


def run_list(*, as_json: bool = False, budget: MachineBudget | None = None) -> int:
    """The library, each entry with its verdict on ``budget`` (this machine) from its own folder: no hub."""
    budget = budget or this_machine()
    entries = ModelLibrary(default_state_file()).entries()
    verdicts = [folder_verdict(e.path, budget) for e in entries]
    if as_json:
        print(json.dumps([{"model_id": e.model_id, "path": str(e.path), "source": e.source,
                           "size_bytes": e.size_bytes, "last_used": e.last_used.isoformat() if e.last_used else None,
                           "problem": e.problem, "verdict": _verdict_json(v)} for e, v in zip(entries, verdicts)],
                         indent=1))
        return EXIT_OK
    print(f"nalar: verdicts for {budget.describe()}", file=sys.stderr)
    for e, v in zip(entries, verdicts):
        used = e.last_used.strftime("%Y-%m-%d %H:%M") if e.last_used else "never used"
        problem = f" · problem: {e.problem}" if e.problem else ""
        fit = v.text() if v else "verdict unknown"
        print(f"{e.model_id} · {e.source} · {format_bytes(e.size_bytes)} · {used} · {fit} · {e.path}{problem}")
    if not entries:
        print("nalar: no models yet. `nalar models search QUERY` finds one, `nalar download REPO` gets it.",
              file=sys.stderr)
    return EXIT_OK


def _verdict_json(v: FitVerdict | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {"fits": v.fits, "max_context_fp8": v.max_context_fp8, "max_context_bf16": v.max_context_bf16,
            "text": v.text(), "label": v.file_set.label, "weights_bytes": v.file_set.weight_bytes}


def run_rm(model_id: str, *, yes: bool = False) -> int:
    """Deletes a model Nalar downloaded or the hub cache holds, after asking (unless ``yes``); says the bytes
    freed. A folder the user added is only forgotten, never deleted."""
    library = ModelLibrary(default_state_file())
    matches = [e for e in library.entries() if e.model_id == model_id or str(e.path) == model_id]
    if not matches:
        print(f"error: no model {model_id!r} in the library. `nalar models list` shows what is there.",
              file=sys.stderr)
        return EXIT_FAILED
    freed = 0
    for entry in matches:
        if entry.source == "folder":
            library.remove_folder(entry.path)
            print(f"nalar: {entry.path} is your folder: removed from the library, its files kept.", file=sys.stderr)
            continue
        if not yes and not _confirm(entry):
            print(f"nalar: {entry.path} kept.", file=sys.stderr)
            continue
        try:
            freed += library.delete(entry)
        except (ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED
    print(f"nalar: freed {format_bytes(freed)}.", file=sys.stderr)
    return EXIT_OK


def _confirm(entry: LibraryEntry) -> bool:
    where = "the Hugging Face cache" if entry.source == "hf-cache" else "Nalar's downloads"
    print(f"Delete {entry.model_id} from {where} ({format_bytes(entry.size_bytes)}, {entry.path})? [y/N] ",
          end="", file=sys.stderr, flush=True)
    try:
        answer = input()
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")
