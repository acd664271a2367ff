"""The gauges under a remote backend: what the server can't report is said to be unreported."""

from __future__ import annotations

from app.engine.events import EngineReady, Metrics
from app.ui.chat.gauges import GaugeBar

# What RemoteEngine.start reports for a server whose /v1/models gives no max_model_len (app/engine/remote)
REMOTE = EngineReady(model="box: qwen", kv_cache_dtype="remote", max_model_len=0, kv_capacity_tokens=0,
                     max_concurrency=0.0, load_seconds=0.1)


def remote_metrics(context_tokens: int) -> Metrics:
    return Metrics("r1", "answer", 0, 10, 0.0, 20.0, 0.0, 50.0, 0.3, 100, context_tokens, 0, 0.0, 0)


def test_a_remote_backend_gauges_say_what_it_does_not_report(qtbot) -> None:
    """Bug caught: with a remote backend the gauges read "Context 110 / 0" and "KV cache (remote) 0.0 % of
    0 tokens", figures the server never gave."""
    gauges = GaugeBar()
    qtbot.addWidget(gauges)
    gauges.set_engine(REMOTE)
    assert gauges.kv_bar.format() == "not reported by the server"
    gauges.update_metrics(remote_metrics(110))
    assert gauges.kv_bar.format() == "not reported by the server"
    assert gauges.context_bar.format() == "110 tokens (the server reports no limit)"
    assert "/ 0" not in gauges.context_bar.format() and "of 0 tokens" not in gauges.kv_bar.format()


def test_a_local_engine_still_shows_its_figures(qtbot) -> None:
    """Bug caught: the remote wording leaking onto a local engine that does report its pool and context."""
    gauges = GaugeBar()
    qtbot.addWidget(gauges)
    gauges.set_engine(EngineReady("m", "fp8_e4m3", 4096, 46_592, 11.4, 1.5))
    gauges.update_metrics(Metrics("r1", "answer", 0, 10, 0.0, 20.0, 0.0, 50.0, 0.3, 100, 110, 4096, 0.25, 46_592))
    assert gauges.kv_bar.format() == "25.0% of 46,592 tokens"
    assert gauges.context_bar.format() == "110 / 4,096"


def test_the_speculation_gauge_shows_vllms_acceptance_only_when_the_engine_speculates(qtbot) -> None:
    """Bug caught: the acceptance figures missing next to tok/s while n-gram speculation runs, or a
    'Speculation' gauge reading 0% on an engine that doesn't speculate."""
    from dataclasses import replace

    from app.core.settings.settings import EngineConfig
    from app.engine.events import SpecDecodeFigures, StartPlan

    gauges = GaugeBar()
    qtbot.addWidget(gauges)
    gauges.show()
    plain = EngineReady("m", "auto", 4096, 46_592, 11.4, 1.5, plan=StartPlan(EngineConfig()))
    gauges.set_engine(plain)
    assert not gauges.speculation.isVisible()
    gauges.set_engine(replace(plain, plan=StartPlan(EngineConfig(speculative_method="ngram"))))
    assert gauges.speculation.isVisible() and gauges.speculation_title.isVisible()
    metrics = Metrics("r1", "answer", 0, 10, 0.0, 20.0, 0.0, 50.0, 0.3, 100, 110, 4096, 0.25, 46_592,
                      speculation=SpecDecodeFigures(drafts=10, draft_tokens=40, accepted_tokens=14))
    gauges.update_metrics(metrics)
    assert gauges.speculation.text() == "35% accepted, 2.40 tok/step"
    gauges.update_metrics(replace(metrics, speculation=SpecDecodeFigures()))
    assert gauges.speculation.text() == "no drafts yet"
