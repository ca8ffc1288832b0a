"""The run's figures, one PNG each, from typed result rows (matplotlib, headless Agg backend).

Imported only when figures are asked for, so pytest start-up never imports matplotlib.
Names are predictable: ``<figure>_<pair>.png`` per pair, ``speedup_by_category.png`` for the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from ..engine.cost_model import predicted_tau  # noqa: E402
from ..results.schema import CaseResult  # noqa: E402
from ..settings.options import DTYPE_ID_SUFFIXES  # noqa: E402
from .analysis import (  # noqa: E402
    FIGURES,
    analyse_prompts,
    best_category_speedups,
    constant_k_rows,
    pooled_position_acceptance,
    rows_by_pair,
    with_further,
)

if TYPE_CHECKING:
    from .answer_types import PromptAnswer


def figure_names(pairs: Sequence[str], batched_pairs: Sequence[str] = ()) -> list[str]:
    """File names of every figure for these pairs, in the order the report shows them; ``batched_pairs``, those
    that ran more than one batch size, also have ``speedup_vs_batch_<pair>.png``."""
    return (
        [f"{figure}_{pair}.png" for pair in pairs for figure in FIGURES]
        + ["speedup_by_category.png"]
        + [f"{BATCH_FIGURE}_{pair}.png" for pair in batched_pairs]
        + [f"request_acceptance_{pair}.png" for pair in pairs]  # where a request of the pair drafted something
    )


def _save(fig: plt.Figure, directory: Path, name: str) -> Path:
    path = directory / name
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _prompts(rows: Sequence[CaseResult]) -> list[str]:
    return sorted({row.prompt for row in rows})


def _error_bars(bounds: Sequence[tuple[float, float | None, float | None]]) -> list[list[float]]:
    """Distances from each ``(value, low, high)`` to its interval's ends; none drawn where there is no interval."""
    return [
        [value - low if low is not None else 0.0 for value, low, _ in bounds],
        [high - value if high is not None else 0.0 for value, _, high in bounds],
    ]


def speedup_vs_k(rows: Sequence[CaseResult], pair: str, directory: Path) -> Path:
    """Per prompt, the measured decode speedup at each k with its interval, and the cost model's curve."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    analyses = {a.prompt: a for a in analyse_prompts(rows)}
    for i, prompt in enumerate(_prompts(rows)):
        color = f"C{i % 10}"
        points = sorted((row for row in rows if row.prompt == prompt), key=lambda row: row.k)
        # Each prompt's points nudged sideways so their intervals do not hide each other.
        dodge = 2 ** (0.06 * (i - (len(_prompts(rows)) - 1) / 2))
        ax.errorbar(
            [row.k * dodge for row in points],
            [row.decode_speedup for row in points],
            yerr=_error_bars(
                [(row.decode_speedup, row.decode_speedup_ci_low, row.decode_speedup_ci_high) for row in points]
            ),
            fmt="o",
            color=color,
            capsize=3,
            label=f"{prompt} measured (95% CI)",
        )
        curve = analyses[prompt].predicted_curve
        if curve:
            ax.plot(
                [k for k, _ in curve], [s for _, s in curve], "--", color=color, alpha=0.8, label=f"{prompt} predicted"
            )
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    # Labels on the measured k only: every k of the predicted curve on a log axis would overlap.
    ks = sorted({row.k for row in rows})
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("k (draft tokens per step, log scale; the dashed curves run over every k with a measured v(k+1))")
    ax.set_ylabel("decode speedup (x, prefill excluded)")
    ax.set_title(f"{pair}: decode speedup against k,\nmeasured and predicted by the cost model")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, directory, f"speedup_vs_k_{pair}.png")


def acceptance_heatmap(rows: Sequence[CaseResult], pair: str, directory: Path) -> Path:
    """The acceptance rate of each (prompt, k), as a grid of colours with the values written in."""
    prompts, ks = _prompts(rows), sorted({row.k for row in rows})
    by_cell = {(row.prompt, row.k): row.acceptance_rate for row in rows}
    grid = [[by_cell.get((prompt, k), float("nan")) for k in ks] for prompt in prompts]
    fig, ax = plt.subplots(figsize=(1.2 * len(ks) + 3, 0.5 * len(prompts) + 2))
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    for i, line in enumerate(grid):
        for j, value in enumerate(line):
            ax.text(
                j, i, f"{value:.2f}", ha="center", va="center", color="white" if value < 0.6 else "black", fontsize=8
            )
    ax.set_xticks(range(len(ks)), [str(k) for k in ks])
    ax.set_yticks(range(len(prompts)), prompts)
    ax.set_xlabel("k (draft tokens per step)")
    ax.set_ylabel("prompt type")
    ax.set_title(f"{pair}: acceptance rate (accepted / drafted)")
    fig.colorbar(image, ax=ax, label="acceptance rate")
    return _save(fig, directory, f"acceptance_heatmap_{pair}.png")


def tau_vs_k(rows: Sequence[CaseResult], pair: str, directory: Path) -> Path:
    """Per prompt, the measured tokens per verify pass at each k beside the cost model's tau at the pooled alpha."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    analyses = {a.prompt: a for a in analyse_prompts(rows)}
    for i, prompt in enumerate(_prompts(rows)):
        color = f"C{i % 10}"
        points = sorted((row for row in rows if row.prompt == prompt), key=lambda row: row.k)
        ks = [row.k for row in points]
        ax.plot(ks, [row.tau for row in points], "o-", color=color, label=f"{prompt} measured")
        alpha = analyses[prompt].alpha
        if alpha is not None:
            ax.plot(
                ks,
                [predicted_tau(alpha, k) for k in ks],
                "--",
                color=color,
                alpha=0.8,
                label=f"{prompt} predicted (alpha {alpha:.2f})",
            )
    ks = sorted({row.k for row in rows})
    ax.plot(ks, [k + 1 for k in ks], ":", color="grey", label="k + 1 (every draft accepted)")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("k (draft tokens per step)")
    ax.set_ylabel("tau (tokens per verify pass)")
    ax.set_title(f"{pair}: tokens committed per verify pass against k")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, directory, f"tau_vs_k_{pair}.png")


def position_acceptance(rows: Sequence[CaseResult], pair: str, directory: Path) -> Path:
    """The share accepted at each draft position, per prompt and over all of them."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, prompt in enumerate(_prompts(rows)):
        pooled = pooled_position_acceptance([row for row in rows if row.prompt == prompt])
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


def verify_cost(rows: Sequence[CaseResult], pair: str, directory: Path) -> Path:
    """The measured cost of a verify pass against its length, beside the textbook's one step and m steps."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    curve = next((row.verify_costs_ms for row in rows if row.verify_costs_ms), [])
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


def speedup_by_category(results: Sequence[CaseResult], directory: Path, suffix: str = "") -> Path:
    """Per pair and prompt category, the decode speedup at the category's best k: the geometric mean over its
    prompts, each weighted equally, with a 95% t interval over them (:func:`analysis.category_speedups`)."""
    best = best_category_speedups(results)
    pairs = list(dict.fromkeys(with_further(item.pair, item.further) for item in best))
    categories = sorted({item.category for item in best})
    width = 0.8 / max(len(pairs), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(categories) + 2), 4.8))
    for i, pair in enumerate(pairs):
        by_category = {item.category: item for item in best if with_further(item.pair, item.further) == pair}
        xs = [
            j + (i - (len(pairs) - 1) / 2) * width for j, category in enumerate(categories) if category in by_category
        ]
        items = [by_category[category] for category in categories if category in by_category]
        errors = _error_bars([(item.speedup, item.low, item.high) for item in items])
        ax.bar(xs, [item.speedup for item in items], width, yerr=errors, capsize=3, label=pair, color=f"C{i % 10}")
        for x, item in zip(xs, items):
            label = f"k={item.k}" + (f"\n{item.prompts} prompts" if item.prompts > 1 else "")
            ax.text(x, item.high or item.speedup, label, ha="center", va="bottom", fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(categories)), categories, rotation=20)
    ax.set_xlabel("prompt category")
    ax.set_ylabel("decode speedup at the best k (x, 95% CI;\nseveral prompts: geometric mean, t over prompts)")
    ax.set_title("Decode speedup by prompt category at each pair's best k")
    ax.legend(fontsize=8)
    return _save(fig, directory, f"speedup_by_category{suffix}.png")


#: the figure of decode speedup against batch size (report/batch.py), one per pair that ran several batch sizes
BATCH_FIGURE = "speedup_vs_batch"


def speedup_vs_batch(results: Sequence[CaseResult], pair: str, directory: Path, suffix: str = "") -> Path | None:
    """Decode speedup against batch size, one line per k (and prompt), with 95% intervals; the cost model's
    prediction dashed beside each. None when the pair ran one batch size only."""
    from .batch import batch_answer

    answers = [answer for answer in batch_answer(results) if answer.pair == pair]
    if not answers:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    several = len(answers) > 1
    color = 0
    for answer in answers:
        for k in answer.ks:
            points = [point for point in answer.points if point.k == k]
            label = f"k={k}" + (f", {answer.prompt}" if several else "")
            errors = _error_bars(
                [(p.decode_speedup, p.decode_speedup_ci_low, p.decode_speedup_ci_high) for p in points]
            )
            ax.errorbar(
                [point.batch for point in points],
                [point.decode_speedup for point in points],
                yerr=errors,
                fmt="o-",
                color=f"C{color % 10}",
                capsize=3,
                label=f"{label} measured",
            )
            predicted = [point for point in points if point.predicted_speedup is not None]
            if predicted:
                ax.plot(
                    [point.batch for point in predicted],
                    [point.predicted_speedup for point in predicted],
                    "--",
                    color=f"C{color % 10}",
                    alpha=0.6,
                    label=f"{label} predicted",
                )
            color += 1
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.minorticks_off()
    sizes = sorted({size for answer in answers for size in answer.batches})
    ax.set_xticks(sizes, [str(size) for size in sizes])
    ax.set_xlabel("batch size (prompts decoded at once)")
    ax.set_ylabel("decode speedup over the batched target (x, 95% CI)")
    ax.set_title(f"{pair}{suffix}: decode speedup against batch size")
    ax.legend(fontsize=7)
    return _save(fig, directory, f"{BATCH_FIGURE}_{pair}{suffix}.png")


def schedule_regret(answers: Sequence[PromptAnswer], pair: str, directory: Path) -> Path:
    """Per prompt of one pair: each schedule's decode speedup as a share of the best constant k's, with its 95%
    interval paired over rounds (report/regret.py), and native k=auto over hf k=auto where both engines ran."""
    answers = [a for a in answers if a.pair == pair and a.schedules]
    prompts = sorted({a.prompt for a in answers})
    series: dict[str, list[tuple[str, float, float | None, float | None]]] = {}
    for a in answers:
        for s in a.schedules:
            series.setdefault(f"{a.engine} k={s.k} / best constant k", []).append(
                (a.prompt, s.ratio_to_best, s.ratio_to_best_ci_low, s.ratio_to_best_ci_high)
            )
        hf = a.against_hf
        if hf and hf.ratio is not None:
            series.setdefault(f"native k={hf.k} / hf k={hf.k} (end to end)", []).append(
                (a.prompt, hf.ratio, hf.ci_low, hf.ci_high)
            )
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(prompts) + 2.5), 4.8))
    for i, (label, points) in enumerate(series.items()):
        offset = 0.12 * (i - (len(series) - 1) / 2)
        ax.errorbar(
            [prompts.index(p) + offset for p, _, _, _ in points],
            [r for _, r, _, _ in points],
            yerr=_error_bars([(r, low, high) for _, r, low, high in points]),
            fmt="o" if "best" in label else "s",
            color=f"C{i % 10}",
            capsize=3,
            label=label,
        )
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(prompts)), prompts, rotation=20)
    ax.set_xlabel("prompt")
    ax.set_ylabel("ratio of speedups (x, 95% CI paired over rounds)")
    ax.set_title(
        f"{pair}: schedules against the best constant k\n(best k chosen after the fact: conservative; above 1 wins)",
        fontsize=10,
    )
    ax.legend(fontsize=7)
    return _save(fig, directory, f"schedule_regret_{pair}.png")


def request_acceptance(results: Sequence[CaseResult], pair: str, directory: Path) -> Path | None:
    """The share of a pair's requests (report/requests.py) at each acceptance, one line per (engine, dtype, k,
    batch); None where no request of the pair drafted anything."""
    from .requests import REQUEST_FIGURE, request_groups

    groups = [g for g in request_groups(results) if g.pair == pair]
    series = [(g, [v for v in g.acceptance if v is not None]) for g in groups]
    series = [(g, values) for g, values in series if values]
    if not series:
        return None
    bins = [i / 20 for i in range(21)]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    # Each line named by k and by what else differs between the lines.
    differ = [part for part in ("engine", "dtype", "batch") if len({getattr(g, part) for g, _ in series}) > 1]
    for i, (group, values) in enumerate(series):
        label = " ".join([f"k={group.k}", *(f"{part} {getattr(group, part)}" for part in differ)])
        ax.hist(
            values,
            bins=bins,
            weights=[1 / len(values)] * len(values),
            histtype="step",
            lw=1.6,
            color=f"C{i % 10}",
            label=f"{label} ({len(values)} requests, mean {sum(values) / len(values):.2f})",
        )
    ax.set_xlim(0, 1)
    ax.set_xlabel("acceptance of a request (accepted / drafted tokens)")
    ax.set_ylabel("share of requests")
    ax.set_title(f"{pair}: per-request acceptance\n(each round, turn and batch row one request; every prompt pooled)")
    ax.legend(fontsize=7)
    return _save(fig, directory, f"{REQUEST_FIGURE}_{pair}.png")


def write_plots(results: Sequence[CaseResult], directory: Path) -> list[Path]:
    """Every figure of the run under ``directory`` (created); returns the files written.

    The figures plot against k, so they show this package's engine at constant k; the report's
    tables hold the schedules and the hf engine. With several dtypes each dtype has its own figures,
    named as its case ids are (``speedup_vs_k_gemma3_int8-bf16.png``): one dtype's k never hides another's.
    """
    directory.mkdir(parents=True, exist_ok=True)
    by_dtype: dict[str, list[CaseResult]] = {}
    for row in results:
        by_dtype.setdefault(row.dtype, []).append(row)
    several = len(by_dtype) > 1
    written: list[Path] = []
    for dtype, rows in by_dtype.items():
        written += _dtype_plots(rows, directory, DTYPE_ID_SUFFIXES.get(dtype, f"-{dtype}") if several else "")
    for pair in rows_by_pair(results):  # one per pair, its dtypes, engines and every k as lines
        histogram = request_acceptance(results, pair, directory)
        written += [histogram] if histogram is not None else []
    return written


def _dtype_plots(results: Sequence[CaseResult], directory: Path, suffix: str) -> list[Path]:
    """The figures of one dtype's rows; ``suffix`` labels its pairs and names its files."""
    from .answer import prompt_answers
    from .batch import per_k_rows
    from .regret_section import regret_pairs

    # Several batch sizes: the figures against k show the smallest; speedup_vs_batch shows them all.
    # The schedules against the best constant k: before the rows are narrowed to constant k.
    answers = [replace(answer, pair=answer.pair + suffix) for answer in prompt_answers(per_k_rows(results))]
    written = [schedule_regret(answers, pair, directory) for pair in regret_pairs(answers)]
    batched = constant_k_rows(results)
    results = per_k_rows(batched)
    for pair, rows in rows_by_pair(results).items():
        for figure in (speedup_vs_k, acceptance_heatmap, tau_vs_k, position_acceptance, verify_cost):
            written.append(figure(rows, pair + suffix, directory))
    if results:
        written.append(speedup_by_category(results, directory, suffix))
    for pair, rows in rows_by_pair(batched).items():
        batch_figure = speedup_vs_batch(rows, pair, directory, suffix)
        if batch_figure is not None:
            written.append(batch_figure)
    return written
