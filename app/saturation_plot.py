"""The saturation heatmap: context × concurrency coloured by p95 ms/token, one panel per KV dtype, knees marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def render_heatmap(report: dict[str, Any], target: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import Normalize

    runs = report["runs"]
    contexts = list(report["contexts"])
    levels = list(report["concurrency"])
    grids = {}
    for run in runs:
        grid = np.full((len(contexts), len(levels)), np.nan)
        for row in run.get("rows", []):
            for cell in row["cells"]:
                x = levels.index(cell["concurrency"])
                grid[contexts.index(row["context_tokens"]), x] = cell["ms_per_token_p95"]
        grids[run["kv_cache_dtype"]] = grid
    measured = [v for g in grids.values() for v in g[~np.isnan(g)]]
    norm = Normalize(vmin=min(measured), vmax=max(measured) * 1.0001) if measured else None
    figure, axes = plt.subplots(1, max(1, len(runs)), figsize=(5.2 * max(1, len(runs)), 0.9 * len(contexts) + 2.4),
                                dpi=110, squeeze=False)
    image = None
    for axis, run in zip(axes[0], runs):
        dtype = run["kv_cache_dtype"]
        axis.set_title(f"KV {dtype}" + ("" if run["supported"] else " (not run here)"), fontsize=10)
        axis.set_xticks(range(len(levels)), [str(c) for c in levels])
        axis.set_yticks(range(len(contexts)), [f"{c:,}" for c in contexts])
        axis.set_xlabel("concurrent chats")
        axis.set_ylabel("context tokens")
        axis.set_xlim(-0.5, len(levels) - 0.5)
        axis.set_ylim(-0.5, len(contexts) - 0.5)
        if not run["supported"]:
            axis.text(0.5, 0.5, "\n".join(_wrap(str(run.get("reason", "")), 48)), ha="center", va="center",
                      transform=axis.transAxes, fontsize=7)
            continue
        image = axis.imshow(grids[dtype], cmap="viridis", norm=norm, aspect="auto", origin="lower")
        for row in run["rows"]:
            y = contexts.index(row["context_tokens"])
            for cell in row["cells"]:
                x = levels.index(cell["concurrency"])
                light = norm is not None and norm(cell["ms_per_token_p95"]) > 0.6  # viridis turns yellow
                axis.text(x, y, f"{cell['ms_per_token_p95']:.0f}", ha="center", va="center", fontsize=7,
                          color="black" if light else "white")
            if row["kv_knee"] is not None:
                axis.plot(levels.index(row["kv_knee"]), y, marker="s", markersize=22, markerfacecolor="none",
                          markeredgecolor="#ff5252", markeredgewidth=2)
            if row["predicted_kv_knee"] in levels:
                axis.plot(levels.index(row["predicted_kv_knee"]), y, marker="x", markersize=9, color="#ff5252")
            knee = row["latency_knees"][0] if row["latency_knees"] else None
            if knee is not None:
                axis.plot(levels.index(knee), y, marker="o", markersize=24, markerfacecolor="none",
                          markeredgecolor="white", markeredgewidth=2, linestyle="none")
    if image is not None:
        bar = figure.colorbar(image, ax=axes[0].tolist(), shrink=0.9)
        bar.set_label("p95 ms/token")
    figure.suptitle(f"{Path(report['model']).name}: red square = KV knee (x = planner's prediction), "
                    f"white circle = p95 passes {report['target_label']}", fontsize=8)
    figure.savefig(target, bbox_inches="tight")
    plt.close(figure)
    return target


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width) or [""]
