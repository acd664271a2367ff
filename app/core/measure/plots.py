"""The benchmarks' plots, saved as PNG beside their JSON (matplotlib's Agg backend: no display, no Qt).

- the FP8 benchmark: decode ms/token by context depth per KV dtype, against the planner's floor;
- the saturation heatmap: context × concurrency coloured by p95 ms/token, one panel per KV dtype, knees marked.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.core.measure.fp8_bench import Fp8Report
    from app.core.measure.saturation_report import SaturationReport


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def render_fp8_plot(report: Fp8Report, target: Path) -> Path:
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 4.2), dpi=110)
    for run in report.runs:
        if not run.supported or not run.depths:
            continue
        depths = [row.depth for row in run.depths]
        line, = axis.plot(depths, [row.ms_per_token for row in run.depths], marker="o",
                          label=f"{run.kv_cache_dtype} measured")
        floors = [row.floor_ms_per_token for row in run.depths]
        if all(f is not None for f in floors):
            axis.plot(depths, floors, linestyle="--", color=line.get_color(), label=f"{run.kv_cache_dtype} floor")
    for run in report.runs:
        if not run.supported:
            axis.text(0.02, 0.02, f"{run.kv_cache_dtype}: not run here", transform=axis.transAxes, fontsize=8)
    axis.set_xlabel("context depth (tokens)")
    axis.set_ylabel("decode ms/token")
    axis.set_title(f"{Path(report.model).name}: KV cache dtype vs decode speed", fontsize=10)
    axis.grid(True, alpha=0.3)
    axis.set_ylim(bottom=0)
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(target)
    plt.close(figure)
    return target


def render_heatmap(report: SaturationReport, target: Path) -> Path:
    import numpy as np
    from matplotlib.colors import Normalize

    plt = _pyplot()
    runs = report.sweeps
    contexts = list(report.contexts)
    levels = list(report.concurrency)
    grids = {}
    for run in runs:
        grid = np.full((len(contexts), len(levels)), np.nan)
        for row in run.rows:
            for cell in row.cells:
                grid[contexts.index(row.context_tokens), levels.index(cell.concurrency)] = cell.ms_per_token_p95
        grids[run.kv_cache_dtype] = grid
    measured = [v for g in grids.values() for v in g[~np.isnan(g)]]
    norm = Normalize(vmin=min(measured), vmax=max(measured) * 1.0001) if measured else None
    figure, axes = plt.subplots(1, max(1, len(runs)), figsize=(5.2 * max(1, len(runs)), 0.9 * len(contexts) + 2.4),
                                dpi=110, squeeze=False)
    image = None
    for axis, run in zip(axes[0], runs):
        dtype = run.kv_cache_dtype
        axis.set_title(f"KV {dtype}" + ("" if run.supported else " (not run here)"), fontsize=10)
        axis.set_xticks(range(len(levels)), [str(c) for c in levels])
        axis.set_yticks(range(len(contexts)), [f"{c:,}" for c in contexts])
        axis.set_xlabel("concurrent chats")
        axis.set_ylabel("context tokens")
        axis.set_xlim(-0.5, len(levels) - 0.5)
        axis.set_ylim(-0.5, len(contexts) - 0.5)
        if not run.supported:
            axis.text(0.5, 0.5, "\n".join(_wrap(run.reason or "", 48)), ha="center", va="center",
                      transform=axis.transAxes, fontsize=7)
            continue
        image = axis.imshow(grids[dtype], cmap="viridis", norm=norm, aspect="auto", origin="lower")
        for row in run.rows:
            y = contexts.index(row.context_tokens)
            for cell in row.cells:
                x = levels.index(cell.concurrency)
                light = norm is not None and norm(cell.ms_per_token_p95) > 0.6  # viridis turns yellow
                axis.text(x, y, f"{cell.ms_per_token_p95:.0f}", ha="center", va="center", fontsize=7,
                          color="black" if light else "white")
            if row.kv_knee is not None:
                axis.plot(levels.index(row.kv_knee), y, marker="s", markersize=22, markerfacecolor="none",
                          markeredgecolor="#ff5252", markeredgewidth=2)
            if row.predicted_kv_knee in levels:
                axis.plot(levels.index(row.predicted_kv_knee), y, marker="x", markersize=9, color="#ff5252")
            knee = row.latency_knee(row.targets_ms[0]) if row.targets_ms else None
            if knee is not None:
                axis.plot(levels.index(knee), y, marker="o", markersize=24, markerfacecolor="none",
                          markeredgecolor="white", markeredgewidth=2, linestyle="none")
    if image is not None:
        bar = figure.colorbar(image, ax=axes[0].tolist(), shrink=0.9)
        bar.set_label("p95 ms/token")
    figure.suptitle(f"{Path(report.model).name}: red square = KV knee (x = planner's prediction), "
                    f"white circle = p95 passes {report.target_label}", fontsize=8)
    figure.savefig(target, bbox_inches="tight")
    plt.close(figure)
    return target


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width) or [""]
