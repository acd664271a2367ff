"""`nalar bench history` at a small size: it runs end to end on a temporary database and reports every figure.
Speed goals live in docs/BENCHMARKS.md, never here."""

from __future__ import annotations

from app.commands.history.history_bench import GOALS_MS, bench_history
from app.core.chat.history import history_path


def test_the_history_bench_reports_each_figure_and_leaves_the_users_history_alone() -> None:
    """Bugs caught: the bench writing into the user's history (or leaving its own XDG dirs set); a figure
    missing; `nalar` never showing its window on the generated history; the index costing nothing per token
    (its triggers not firing on partial saves)."""
    before = history_path()
    result = bench_history(conversations=20, turns_each=3, searches=10, startups=1)
    assert result["turns"] == 500 + 19 * 3 and not history_path().exists() and history_path() == before
    assert all(isinstance(result[key], float) and result[key] > 0 for key in GOALS_MS)
    assert result["open the store and list every conversation (start-up's data part): ms"] > 0
    assert result["of which the index"] > 0
    assert result["bytes written per streamed token, with the index"] > result["of which the index"]
