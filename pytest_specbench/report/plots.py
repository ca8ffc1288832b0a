"""The run's figures, one PNG each, from result rows (matplotlib, headless Agg backend).

Imported only when figures are asked for, so pytest start-up never imports matplotlib.
Names are predictable: ``<figure>_<pair>.png`` per pair, ``speedup_by_category.png`` for the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from .analysis import FIGURES, analyse_prompts, constant_k_rows, pooled_position_acceptance, rows_by_pair  # noqa: E402
from ..engine.cost_model import predicted_tau  # noqa: E402
from ..results.schema import row_value  # noqa: E402


def figure_names(pairs: Sequence[str]) -> list[str]:
    """File names of every figure for these pairs, in the order the report shows them."""
    return [f"{figure}_{pair}.png" for pair in pairs for figure in FIGURES] + ["speedup_by_category.png"]


def _save(fig, directory: Path, name: str) -> Path:
    path = directory / name
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _prompts(rows: Sequence[dict[str, Any]]) -> list[str]:
    return sorted({row["prompt"] for row in rows})


def _error_bars(rows: Sequence[dict[str, Any]], name: str) -> list[list[float]]:
    """Distances from the value to its interval's ends; none drawn for a row without an interval."""
    bounds = [(row[name], row_value(row, f"{name}_ci_low"), row_value(row, f"{name}_ci_high")) for row in rows]
    return [[value - low if low is not None else 0.0 for value, low, _ in bounds],
            [high - value if high is not None else 0.0 for value, _, high in bounds]]


def speedup_vs_k(rows: Sequence[dict[str, Any]], pair: str, directory: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    analyses = {a.prompt: a for a in analyse_prompts(rows)}
    for i, prompt in enumerate(_prompts(rows)):
        color = f"C{i % 10}"
        points = sorted((row for row in rows if row["prompt"] == prompt), key=lambda row: row["k"])
        # Each prompt's points nudged sideways so their intervals do not hide each other.
        dodge = 2 ** (0.06 * (i - (len(_prompts(rows)) - 1) / 2))
        ax.errorbar([row["k"] * dodge for row in points], [row["decode_speedup"] for row in points],
                    yerr=_error_bars(points, "decode_speedup"), fmt="o", color=color, capsize=3,
                    label=f"{prompt} measured (95% CI)")
        curve = analyses[prompt].predicted_curve
        if curve:
            ax.plot([k for k, _ in curve], [s for _, s in curve], "--", color=color, alpha=0.8,
                    label=f"{prompt} predicted")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    # Labels on the measured k only: every k of the predicted curve on a log axis would overlap.
    ks = sorted({row["k"] for row in rows})
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("k (draft tokens per step, log scale; the dashed curves run over every k with a measured v(k+1))")
    ax.set_ylabel("decode speedup (x, prefill excluded)")
    ax.set_title(f"{pair}: decode speedup against k,\nmeasured and predicted by the cost model")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, directory, f"speedup_vs_k_{pair}.png")


def acceptance_heatmap(rows: Sequence[dict[str, Any]], pair: str, directory: Path) -> Path:
    prompts, ks = _prompts(rows), sorted({row["k"] for row in rows})
    by_cell = {(row["prompt"], row["k"]): row["acceptance_rate"] for row in rows}
    grid = [[by_cell.get((prompt, k), float("nan")) for k in ks] for prompt in prompts]
    fig, ax = plt.subplots(figsize=(1.2 * len(ks) + 3, 0.5 * len(prompts) + 2))
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    for i, line in enumerate(grid):
        for j, value in enumerate(line):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", color="white" if value < 0.6 else "black",
                    fontsize=8)
    ax.set_xticks(range(len(ks)), [str(k) for k in ks])
    ax.set_yticks(range(len(prompts)), prompts)
    ax.set_xlabel("k (draft tokens per step)")
    ax.set_ylabel("prompt type")
    ax.set_title(f"{pair}: acceptance rate (accepted / drafted)")
    fig.colorbar(image, ax=ax, label="acceptance rate")
    return _save(fig, directory, f"acceptance_heatmap_{pair}.png")


def tau_vs_k(rows: Sequence[dict[str, Any]], pair: str, directory: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    analyses = {a.prompt: a for a in analyse_prompts(rows)}
    for i, prompt in enumerate(_prompts(rows)):
        color = f"C{i % 10}"
        points = sorted((row for row in rows if row["prompt"] == prompt), key=lambda row: row["k"])
        ks = [row["k"] for row in points]
        ax.plot(ks, [row["tau"] for row in points], "o-", color=color, label=f"{prompt} measured")
        alpha = analyses[prompt].alpha
        if alpha is not None:
            ax.plot(ks, [predicted_tau(alpha, k) for k in ks], "--", color=color, alpha=0.8,
                    label=f"{prompt} predicted (alpha {alpha:.2f})")
    ks = sorted({row["k"] for row in rows})
    ax.plot(ks, [k + 1 for k in ks], ":", color="grey", label="k + 1 (every draft accepted)")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("k (draft tokens per step)")
    ax.set_ylabel("tau (tokens per verify pass)")
    ax.set_title(f"{pair}: tokens committed per verify pass against k")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, directory, f"tau_vs_k_{pair}.png")


def position_acceptance(rows: Sequence[dict[str, Any]], pair: str, directory: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, prompt in enumerate(_prompts(rows)):
        pooled = pooled_position_acceptance([row for row in rows if row["prompt"] == prompt])
        if pooled:
            ax.plot([p for p, _, _ in pooled], [s for _, _, s in pooled], "o-", color=f"C{i % 10}", label=prompt)
    pooled = pooled_position_acceptance(rows)
    if pooled:
        ax.plot([p for p, _, _ in pooled], [s for _, _, s in pooled], "k--", lw=2, label="all prompts")
    ax.set_ylim(-0.02, 1.02)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("draft position i")
    ax.set_ylabel("share accepted at position i")
    ax.set_title(f"{pair}: per-position acceptance (steps that drafted at least i tokens)")
    ax.legend(fontsize=7)
    return _save(fig, directory, f"position_acceptance_{pair}.png")


def verify_cost(rows: Sequence[dict[str, Any]], pair: str, directory: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    curve = next((row["verify_costs_ms"] for row in rows if row_value(row, "verify_costs_ms")), [])
    if curve:
        ms = list(range(1, len(curve) + 1))
        ax.plot(ms, [v / curve[0] for v in curve], "o-", label=f"measured, v(1) = {curve[0]:.1f} ms")
        ax.plot(ms, [1.0] * len(ms), ":", color="grey", label="textbook: a pass costs one step")
        ax.plot(ms, ms, ":", color="red", label="m separate steps")
        ax.set_ylim(0, max(2.0, 1.1 * max(v / curve[0] for v in curve)))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("m (new positions in one target pass = k + 1)")
    ax.set_ylabel("v(m) / v(1)")
    ax.set_title(f"{pair}: verify cost against block length")
    ax.legend(fontsize=8)
    return _save(fig, directory, f"verify_cost_{pair}.png")


def speedup_by_category(results: Sequence[dict[str, Any]], directory: Path) -> Path:
    analyses = analyse_prompts(results)
    pairs = list(dict.fromkeys(a.pair for a in analyses))
    prompts = sorted({a.prompt for a in analyses})
    width = 0.8 / max(len(pairs), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(prompts) + 2), 4.8))
    for i, pair in enumerate(pairs):
        best = {a.prompt: a.best_row for a in analyses if a.pair == pair}
        xs = [j + (i - (len(pairs) - 1) / 2) * width for j, prompt in enumerate(prompts) if prompt in best]
        rows = [best[prompt] for prompt in prompts if prompt in best]
        ax.bar(xs, [row["decode_speedup"] for row in rows], width, yerr=_error_bars(rows, "decode_speedup"),
               capsize=3, label=pair, color=f"C{i % 10}")
        for x, row in zip(xs, rows):
            top = row_value(row, "decode_speedup_ci_high") or row["decode_speedup"]
            ax.text(x, top, f"k={row['k']}", ha="center", va="bottom", fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(prompts)), prompts, rotation=20)
    ax.set_xlabel("prompt category")
    ax.set_ylabel("decode speedup at the best k (x, 95% CI)")
    ax.set_title("Decode speedup by prompt category at each pair's best k")
    ax.legend(fontsize=8)
    return _save(fig, directory, "speedup_by_category.png")


def write_plots(results: Sequence[dict[str, Any]], directory: Path) -> list[Path]:
    """Every figure of the run under ``directory`` (created); returns the files written.

    The figures plot against k, so they show this package's engine at constant k; the report's
    tables hold the schedules and the hf engine.
    """
    directory.mkdir(parents=True, exist_ok=True)
    results = constant_k_rows(results)
    written = []
    for pair, rows in rows_by_pair(results).items():
        for figure in (speedup_vs_k, acceptance_heatmap, tau_vs_k, position_acceptance, verify_cost):
            written.append(figure(rows, pair, directory))
    if results:
        written.append(speedup_by_category(results, directory))
    return written
