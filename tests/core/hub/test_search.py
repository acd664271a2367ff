"""Hub search and fit verdicts against the fake hub over real HTTP (tests/support/hub_server.py)."""

from __future__ import annotations

import time

import pytest

from app.core.hub.search import HubGated, HubOffline, search_models
from app.core.hub.verdicts import MachineBudget, VerdictCache, catalog_models, verdicts_for
from app.core.models.planner import GIB
from tests.core.hub.conftest import GPU_16
from tests.support.hub_server import LocalHub


def test_search_sends_what_list_models_sends_and_reads_every_field(hub: LocalHub) -> None:
    """Catches a search that parses fields the hub doesn't send in a listing (downloads, licence, gated, the
    safetensors count) or that forgets the text-generation filter, and a sort that isn't passed on."""
    found = list(search_models("r1-distill", endpoint=hub.endpoint))
    assert [m.repo_id.removeprefix("acme/R1-Distill-7B-") for m in found] == ["fits", "tight", "huge", "multi"]
    fits = found[0]
    assert (fits.downloads, fits.likes, fits.parameters, fits.license, fits.gated) == (900, 9, 2_500_000_000,
                                                                                      "apache-2.0", False)
    assert fits.last_modified is not None and fits.last_modified.year == 2025
    assert fits.think == "always · DeepSeek-R1 distill"
    assert found[1].license == "mit"
    assert found[3].quantizations == ("FP8", "GGUF")
    query = hub.searches[-1]
    assert query["search"] == ["r1-distill"] and query["filter"] == ["text-generation"]
    assert query["sort"] == ["downloads"] and "safetensors" in query["expand"] and "cardData" in query["expand"]
    trending = list(search_models("r1-distill", sort="trending", endpoint=hub.endpoint))
    assert trending[0].repo_id == "acme/R1-Distill-7B-huge"
    assert hub.searches[-1]["sort"] == ["trendingScore"]


def test_search_follows_pages_and_stops_at_the_limit(hub: LocalHub) -> None:
    """Catches a search that reads only the first page of a hub that pages (the real one pages by 1000) or
    that asks for every page when the limit was reached."""
    hub.page_size = 2
    found = list(search_models("acme", limit=5, endpoint=hub.endpoint))
    assert len(found) == 5
    assert len(hub.searches) == 3  # pages of 2, 2 and 1


def test_gated_model_is_marked_in_search_and_its_verdict_names_hf_auth_login(hub: LocalHub, tmp_path) -> None:
    """Catches a gated repo's 401 on config.json shown as 'offline' or a crash, instead of naming the fix."""
    gated = next(m for m in search_models("gated", endpoint=hub.endpoint))
    assert gated.gated
    with pytest.raises(HubGated, match="hf auth login"):
        verdicts_for("acme/gated-model", GPU_16, cache=VerdictCache(tmp_path / "cache"), endpoint=hub.endpoint)


def test_offline_hub_is_said_at_once(closed_port: str, tmp_path) -> None:
    """Catches a search or a verdict left to huggingface_hub's retries (about 30 s of backoff) when the hub
    can't be reached: the browser must say 'offline' at once and name the endpoint."""
    started = time.monotonic()
    with pytest.raises(HubOffline, match=closed_port):
        next(search_models("qwen3", endpoint=closed_port))
    with pytest.raises(HubOffline, match="offline"):
        verdicts_for("acme/R1-Distill-7B-fits", GPU_16, cache=VerdictCache(tmp_path / "cache"), endpoint=closed_port)
    assert time.monotonic() - started < 2.0


def test_verdicts_fit_shorter_and_too_big_on_a_fixed_budget(hub: LocalHub, tmp_path) -> None:
    """Catches verdicts that depend on this machine (a fixed 16 GiB budget is used), that ignore the listing's
    sizes, or that call a model with only a short context left 'fits' (or a too-big one anything but 'no')."""
    cache = VerdictCache(tmp_path / "cache")
    fits, = verdicts_for("acme/R1-Distill-7B-fits", GPU_16, cache=cache, endpoint=hub.endpoint)
    tight, = verdicts_for("acme/R1-Distill-7B-tight", GPU_16, cache=cache, endpoint=hub.endpoint)
    huge, = verdicts_for("acme/R1-Distill-7B-huge", GPU_16, cache=cache, endpoint=hub.endpoint)
    assert fits.fits == "fits" and fits.text() == "fits" and fits.file_set.weight_bytes == int(5e9)
    assert fits.max_context_fp8 > fits.max_context_bf16 >= 32768
    assert fits.ms_per_token_floor is not None and fits.ms_per_token_floor > 5
    assert tight.fits == "shorter" and 2048 <= tight.max_context_fp8 < 32768
    assert tight.text() == f"fits with context {tight.max_context_fp8:,}"
    assert huge.fits == "no" and huge.max_context_fp8 == 0
    assert huge.text() == f"doesn't fit (needs {huge.needs_bytes / GIB:.1f} GiB, you have 14.3 GiB)"
    assert huge.needs_bytes > int(20e9)


def test_verdicts_are_cached_by_commit_and_answer_offline(hub: LocalHub, closed_port: str, tmp_path) -> None:
    """Catches a cache that is not used (config.json fetched again for a commit already seen) or not kept on
    disk: a second budget is planned with no file request, and a dead hub still gets the last verdicts."""
    cache = VerdictCache(tmp_path / "cache")
    first = verdicts_for("acme/R1-Distill-7B-tight", GPU_16, cache=cache, endpoint=hub.endpoint)
    configs_fetched = len([r for r in hub.requests if r.filename == "config.json"])
    bigger = MachineBudget("gpu", 24 * GIB, 1000.0, None, "bigger GPU")
    again = verdicts_for("acme/R1-Distill-7B-tight", bigger, cache=VerdictCache(tmp_path / "cache"),
                         endpoint=hub.endpoint)
    assert len([r for r in hub.requests if r.filename == "config.json"]) == configs_fetched
    assert first[0].fits == "shorter" and again[0].fits == "fits"
    offline = verdicts_for("acme/R1-Distill-7B-tight", GPU_16, cache=cache, endpoint=closed_port)
    assert offline == first


def test_each_quantization_of_a_repo_is_its_own_file_set(hub: LocalHub, tmp_path) -> None:
    """Catches a repo with an FP8 subfolder and GGUF files planned as one model (the sizes summed), the
    original/ copy counted, or a GGUF offered as loadable."""
    verdicts = verdicts_for("acme/R1-Distill-7B-multi", GPU_16, cache=VerdictCache(tmp_path / "c"),
                            endpoint=hub.endpoint)
    sets = {v.file_set.label: v for v in verdicts}
    assert set(sets) == {"bf16", "FP8 (FP8)", "GGUF Q4_K_M", "GGUF Q8_0"}
    assert sets["bf16"].file_set.weight_bytes == int(15.2e9) and sets["bf16"].fits == "no"
    assert set(sets["FP8 (FP8)"].file_set.files) == {"FP8/config.json", "FP8/tokenizer.json", "FP8/model.safetensors"}
    assert sets["FP8 (FP8)"].fits == "fits" and sets["FP8 (FP8)"].file_set.loadable
    assert not sets["GGUF Q4_K_M"].file_set.loadable and "safetensors" in sets["GGUF Q4_K_M"].file_set.note
    assert not any("original/" in name for v in verdicts for name in v.file_set.files)


def test_catalog_is_offered_offline_with_verdicts() -> None:
    """Catches the welcome dialog's catalog and the browser's offline list drifting apart: every catalog entry,
    CPU ones first on a CPU machine, each with a verdict from the same arithmetic."""
    cpu = MachineBudget("cpu", 8 * GIB, 10.0, None, "CPU")
    offered = catalog_models(cpu)
    ids = [model.repo_id for model, _ in offered]
    assert ids[0] == "Qwen/Qwen3-0.6B" and "openai/gpt-oss-20b" in ids and len(ids) == len(set(ids))
    qwen = offered[0][1][0]
    assert qwen.fits == "fits" and qwen.file_set.label == "bf16"
    assert dict((m.repo_id, v[0].fits) for m, v in offered)["Qwen/QwQ-32B-AWQ"] == "no"


def test_cpu_verdicts_agree_with_the_welcome_dialogs_cpu_plan() -> None:
    """Catches the browser and the welcome dialog telling a CPU user different things for one model: the same
    RAM share, runtime overhead and bytes-per-token arithmetic (cpu_catalog) must give the same fit and speed."""
    from app.core.hub.search import FileSet
    from app.core.hub.verdicts import verdict
    from app.core.models.cpu_catalog import CPU_CATALOG, CPU_CONTEXT, MemoryBandwidth, plan_cpu_model

    for ram_gib in (4, 6, 8, 16):
        budget = MachineBudget("cpu", ram_gib * GIB, 10.0, None, "CPU")
        for model in CPU_CATALOG:
            rec = plan_cpu_model(model, ram_gib * GIB, "fp8_e4m3", MemoryBandwidth(10.0, True))
            said = verdict(model.repo_id, FileSet("bf16", (), model.weight_bytes, True), model.config(), budget)
            assert (said.fits == "fits") == (rec.fits and rec.context == CPU_CONTEXT), (ram_gib, model.repo_id)
            assert said.ms_per_token_floor is not None
            assert 1000 / said.ms_per_token_floor == pytest.approx(rec.tokens_per_s, rel=0.01)
