"""The model browser's search state, without Qt or a hub: stale queries refused, Only-what-fits, the status line,
and the engine update a chosen model sets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from app.core.hub.search import FileSet, HubModel
from app.core.hub.verdicts import FitVerdict
from app.ui.model_browser.models_hub import engine_update
from app.ui.model_browser.search_state import Query, SearchState

GIB = 1 << 30


def model(repo_id: str) -> HubModel:
    return HubModel(repo_id, 1000, 10, None, 8_000_000_000, ("bf16",), "apache-2.0", False, "hybrid · Qwen3")


def verdict(repo_id: str, fits: str, fp8: int = 32768, bf16: int = 16384, loadable: bool = True,
            label: str = "bf16") -> FitVerdict:
    file_set = FileSet(label, ("model.safetensors",), 16 * GIB, loadable)
    return FitVerdict(repo_id, file_set, fp8 if fits != "no" else 0, bf16 if fits != "no" else 0, 12.5,
                      fits, 18 * GIB, 24 * GIB)  # type: ignore[arg-type]


def test_a_query_typed_past_gets_none_of_its_late_results() -> None:
    """Bug caught: results of "qwe" arriving after the user typed "qwen3" mixed into the new list (or replaced
    it), because arrivals were not tied to the query they answer."""
    state = SearchState()
    old = state.begin(Query("qwe"))
    assert state.add_result(old, model("a/old")) == 0
    state.drop()  # the user typed again: the debounce runs, the old query still streams
    assert state.add_result(old, model("a/late")) is None
    assert [row.model.repo_id for row in state.rows] == ["a/old"], "the rows stay until the new query begins"
    new = state.begin(Query("qwen3"))
    assert not state.is_current(old) and state.is_current(new)
    assert state.add_result(old, model("a/later")) is None
    assert state.set_verdicts(old, "a/old", (verdict("a/old", "fits"),)) is None
    assert not state.finish(old, "offline"), "a stale search's end must not end the new one"
    assert state.add_result(new, model("q/one")) == 0
    assert state.add_result(new, model("q/one")) is None, "a repo listed twice is shown once"
    assert [row.model.repo_id for row in state.rows] == ["q/one"] and state.searching


def test_only_what_fits_hides_what_does_not_and_what_is_not_known_yet() -> None:
    """Bug caught: the filter kept rows whose verdict was "doesn't fit", or a file set vLLM can't load counted
    as fitting."""
    state = SearchState()
    gen = state.begin(Query("qwen3"))
    for name in ("fits", "shorter", "no", "unloadable", "pending", "failed"):
        state.add_result(gen, model(f"q/{name}"))
    state.set_verdicts(gen, "q/fits", (verdict("q/fits", "no"), verdict("q/fits", "fits")))
    state.set_verdicts(gen, "q/shorter", (verdict("q/shorter", "shorter", 4096, 2048),))
    state.set_verdicts(gen, "q/no", (verdict("q/no", "no"),))
    state.set_verdicts(gen, "q/unloadable", (verdict("q/unloadable", "fits", loadable=False),))
    state.set_verdicts(gen, "q/failed", None, "gated: run `hf auth login`")
    assert len(state.visible()) == 6
    state.only_fits = True
    assert [row.model.repo_id for row in state.visible()] == ["q/fits", "q/shorter"]
    state.finish(gen)
    assert state.status() == "6 results for “qwen3” (4 hidden: they don't fit) · working out 1 verdict…"


def test_the_format_filter_keeps_a_repo_by_any_file_set_and_with_only_fits_by_the_one_that_fits() -> None:
    """Bugs caught: the Format filter looked at a repo's first file set only (a bf16 repo with an FP8 folder
    hidden under FP8), a "GGUF Q4_K_M" or "FP8 (FP8)" label missed, a result hidden until its verdicts came, or
    FP8 + Only what fits kept a repo whose bf16 set fits but whose FP8 set doesn't."""
    state = SearchState()
    gen = state.begin(Query("qwen3"))
    for name in ("both", "fp8-too-big", "gguf", "pending"):
        state.add_result(gen, model(f"q/{name}"))
    state.rows[3] = replace(state.rows[3], model=replace(model("q/pending"), quantizations=("bf16", "FP8")))
    state.set_verdicts(gen, "q/both", (verdict("q/both", "no"), verdict("q/both", "fits", label="FP8 (FP8)")))
    state.set_verdicts(gen, "q/fp8-too-big", (verdict("q/fp8-too-big", "fits"),
                                              verdict("q/fp8-too-big", "no", label="FP8")))
    state.set_verdicts(gen, "q/gguf", (verdict("q/gguf", "fits", label="GGUF Q4_K_M", loadable=False),))
    state.finish(gen)

    def shown() -> list[str]:
        return [row.model.repo_id for row in state.visible()]

    state.format = "FP8"
    assert shown() == ["q/both", "q/fp8-too-big", "q/pending"]
    assert "(1 hidden: not FP8)" in state.status()
    state.format = "GGUF"
    assert shown() == ["q/gguf"]
    state.format = "bf16/fp16"
    assert shown() == ["q/both", "q/fp8-too-big", "q/pending"]
    state.only_fits = True
    assert shown() == ["q/fp8-too-big"], "q/both's bf16 set doesn't fit; its FP8 set does"
    state.format = "FP8"
    assert shown() == ["q/both"], "q/fp8-too-big's FP8 set doesn't fit; its bf16 set does"
    assert "(3 hidden: not FP8 that fits)" in state.status()
    state.format = "Any format"
    assert shown() == ["q/both", "q/fp8-too-big"]


def test_the_offline_list_shows_when_the_box_is_empty_or_the_hub_is_unreachable() -> None:
    """Bug caught: an offline hub left an empty list and no reason; the catalog is the offline list."""
    state = SearchState()
    assert state.offline_list and "Type to search" in state.status()
    gen = state.begin(Query("qwen3"))
    assert not state.offline_list
    state.finish(gen, "http://127.0.0.1:9 can't be reached: this machine is offline or the hub is down.")
    assert state.offline_list and "can't be reached" in state.status()


def test_use_sets_the_context_the_verdict_found_room_for() -> None:
    """Bug caught: a model chosen in the browser kept the previous model's context (too long: the engine failed
    to start), where the welcome dialog's choice sets the planner's."""
    shorter = verdict("q/x", "shorter", 12288, 6144)
    assert engine_update(Path("/m/x"), shorter, "fp8_e4m3") == {
        "model": "/m/x", "kv_cache_dtype": "fp8_e4m3", "max_model_len": 12288}
    assert engine_update(Path("/m/x"), shorter, "auto")["max_model_len"] == 6144
    assert engine_update(Path("/m/x"), verdict("q/x", "fits", 262144), "fp8_e4m3")["max_model_len"] == 32768
    assert "max_model_len" not in engine_update(Path("/m/x"), None, "auto"), "no verdict: the context stays"
