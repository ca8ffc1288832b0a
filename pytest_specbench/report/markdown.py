"""The Markdown report of a run: what was measured, the headline, per-pair tables and figures, findings.

Built from the same rows, options and environment as the JSON, so a merged run (``python -m
pytest_specbench merge``) gets the same report as a single one. Findings are sentences generated
from the numbers, never written by hand.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from ..results.schema import CaseResult
from ..settings.engines import runs_own_loop
from .analysis import (
    FIGURES,
    PromptAnalysis,
    analyse_prompts,
    best_category_speedups,
    best_row,
    constant_k_rows,
    geometric_mean,
    median,
    pooled_position_acceptance,
    row_order,
    rows_by_pair,
    several_engines,
    with_further,
)
from .answer import RunAnswer, pair_sentence, prompt_table, run_answer
from .batch import per_k_rows
from .dtype_view import dtype_order, not_shown_lines, several_dtypes, speed_table
from .engine_comparison import compare_engines, engine_table
from .formatting import (
    SUSPECT_MARK,
    new_tokens_text,
    number,
    suspect_lines,
    value_with_interval,
    with_interval,
)
from .leaderboard import leaderboard_markdown
from .requests import requests_section
from .summary import cross_tokenizer_line

#: efficiency below this is called low in the findings
LOW_EFFICIENCY = 0.8


def _marked(row: CaseResult, name: str = "decode_speedup") -> str:
    """The row's speedup with its interval, and :data:`.formatting.SUSPECT_MARK` where it is suspect."""
    return with_interval(row, name) + (f" {SUSPECT_MARK}" if row.suspect else "")


def _verdict(row: CaseResult) -> str:
    """Gain, loss or undecided, from the decode speedup's 95% interval."""
    low, high = row.decode_speedup_ci_low, row.decode_speedup_ci_high
    if low is not None and low > 1:
        return "gain"
    if high is not None and high < 1:
        return "loss"
    return "undecided"


def _table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def _relative(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


def _schedule_findings(analyses: Sequence[PromptAnalysis], rows: Sequence[CaseResult]) -> list[str]:
    """How each schedule (k=auto, k=heuristic) of this package's engine did against the best constant k."""
    best = {a.prompt: a.best_row.decode_speedup for a in analyses}
    sentences = []
    for k in dict.fromkeys(row.k for row in rows if isinstance(row.k, str)):
        scheduled = [row for row in rows if row.k == k and runs_own_loop(row.engine) and row.prompt in best]
        if scheduled:
            steps = [row.k_per_step[1:] for row in scheduled]
            mean_k = [sum(chosen) / max(len(chosen), 1) for chosen in steps]
            sentences.append(
                f"k={k}: decode speedup {geometric_mean([row.decode_speedup for row in scheduled]):.2f} "
                f"(geometric mean over {len(scheduled)} prompts) against "
                f"{geometric_mean([best[row.prompt] for row in scheduled]):.2f} at each prompt's best constant k "
                f"chosen after the fact; mean k chosen per step {sum(mean_k) / len(mean_k):.1f}."
            )
    return sentences


#: the opening of the findings' sentence on each verdict, in the order they are told
_VERDICT_OPENINGS = {
    "gain": "Gains (the 95% interval of the decode speedup above 1 at the best k): ",
    "loss": "Losses (even the best k is slower than the target alone, interval below 1): ",
    "undecided": "Undecided (the interval at the best k straddles 1): ",
}


def _verdict_findings(analyses: Sequence[PromptAnalysis]) -> list[str]:
    """The prompts whose best k gains, loses or leaves it undecided, one sentence per verdict that occurs."""
    by_verdict: dict[str, list[str]] = {verdict: [] for verdict in _VERDICT_OPENINGS}
    for analysis in analyses:
        by_verdict[_verdict(analysis.best_row)].append(
            f"{with_further(analysis.prompt, analysis.further)} ({with_interval(analysis.best_row)} at "
            f"k={analysis.best_k})"
        )
    return [_VERDICT_OPENINGS[verdict] + ", ".join(named) + "." for verdict, named in by_verdict.items() if named]


def _agreement_findings(analyses: Sequence[PromptAnalysis]) -> list[str]:
    """How often the cost model's recommended k is the measured best, naming the prompts where it is not."""
    compared = [a for a in analyses if a.recommended_k is not None]
    if not compared:
        return []
    differ = [a for a in compared if a.recommended_k != a.best_k]
    sentence = (
        f"The cost model's recommended k equals the measured best k for {len(compared) - len(differ)} of "
        f"{len(compared)} prompt types"
    )
    if not differ:
        return [sentence + "."]
    named = ", ".join(f"{a.prompt} (best {a.best_k}, recommended {a.recommended_k})" for a in differ)
    return [f"{sentence}: {named} differ."]


def _efficiencies(rows: Sequence[CaseResult]) -> list[float]:
    """Measured over predicted decode speedup of the rows that have a prediction."""
    return [row.efficiency for row in rows if row.efficiency is not None]


def _efficiency_findings(rows: Sequence[CaseResult]) -> list[str]:
    """The median efficiency, and how many cases reach less than :data:`LOW_EFFICIENCY` of the prediction."""
    efficiencies = _efficiencies(rows)
    if not efficiencies:
        return []
    sentences = [
        f"Median efficiency (measured / predicted decode speedup): {median(efficiencies):.2f} "
        f"over {len(efficiencies)} cases."
    ]
    low = [efficiency for efficiency in efficiencies if efficiency < LOW_EFFICIENCY]
    if low:
        sentences.append(
            f"{len(low)} case(s) reach less than {LOW_EFFICIENCY:.0%} of the prediction: "
            "the model leaves out bookkeeping, cache rollback and timing noise, which weigh most "
            "where a step is cheap."
        )
    return sentences


def _verify_cost_findings(row: CaseResult) -> list[str]:
    """What a verify pass over the longest block costs against a one-token step, and what that limits."""
    curve = row.verify_costs_ms
    if len(curve) <= 1:
        return []
    worst_m = max(range(len(curve)), key=lambda i: curve[i]) + 1
    ratio = curve[-1] / curve[0]
    return [
        f"A verify pass over {len(curve)} positions costs {ratio:.2f} times a one-token step "
        f"(the costliest length is m={worst_m}, {curve[worst_m - 1] / curve[0]:.2f} times); "
        + (
            "so long blocks are cheap to verify here and k is limited by acceptance."
            if ratio < 1.5
            else "so verify cost, not acceptance alone, limits how far k pays."
        )
    ]


def _draft_cost_findings(row: CaseResult) -> list[str]:
    """What drafting a token costs against a target step, and whether a rejected token wastes much."""
    c = row.cost_ratio
    if c is None:
        return []
    return [
        f"Drafting costs c = {c:.3f} of a target step per token"
        + (
            " (no draft model: prompt lookup drafts for free)."
            if c == 0
            else "; every drafted token that is rejected costs that much for nothing."
            if c > 0.2
            else "."
        )
    ]


def pair_findings(analyses: Sequence[PromptAnalysis], rows: Sequence[CaseResult]) -> list[str]:
    """Plain sentences about one pair, from its numbers: the verdicts at the best k, the cost model's agreement
    and efficiency, the schedules, and what verifying and drafting cost (read from the pair's first row, since
    the costs are measured once per pair)."""
    return (
        _verdict_findings(analyses)
        + _agreement_findings(analyses)
        + _efficiency_findings(rows)
        + _schedule_findings(analyses, rows)
        + _verify_cost_findings(rows[0])
        + _draft_cost_findings(rows[0])
    )


_INTRODUCTION = (
    "Decode speedup is the target-only greedy time per decoded token over the speculative one, the prompt's "
    "prefill left out (geometric mean over paired rounds, with its 95% interval). The cost model (Leviathan et "
    "al. 2023, with the measured verify-cost curve v(m) in place of one target step) predicts it from alpha, the "
    "per-token acceptance estimated from every step, the draft's cost per token c, and v(k+1)/v(1): predicted "
    "speedup = tau(k) v(1) / (k c v(1) + v(k+1)), tau(k) = (1 - alpha^(k+1)) / (1 - alpha). Efficiency is "
    "measured / predicted."
)


def report_markdown(
    results: Sequence[CaseResult],
    options: dict[str, Any],
    env: dict[str, Any],
    figures_dir: Path | None = None,
    report_path: Path | None = None,
    command: str | None = None,
) -> str:
    """The whole report. Figures (from :func:`plots.figure_names`) are linked relative to the report."""
    lines = ["# Speculative decoding benchmark report", "", _INTRODUCTION, ""]
    if command:
        lines += ["Command:", "", f"```\n{command}\n```", ""]
    lines += _machine_lines(options, env) + _headline_lines(results)
    # Several batch sizes: the answers against k are of the smallest; the batch section has the rest.
    analyses = analyse_prompts(per_k_rows(results))
    answer = run_answer(per_k_rows(results))
    engines = several_engines(results)
    # Figures are linked relative to the report's folder, so the report and its figures move together.
    start = report_path.parent if report_path is not None else Path(".")
    for pair, rows in rows_by_pair(results).items():
        lines += _pair_lines(pair, rows, [a for a in analyses if a.pair == pair], engines, answer)
        if figures_dir is not None and constant_k_rows(rows):
            for figure in FIGURES:
                path = figures_dir / f"{figure}_{pair}.png"
                lines += [f"![{figure.replace('_', ' ')} for {pair}]({_relative(path, start)})", ""]
    if constant_k_rows(results):
        lines += ["## Decode speedup by prompt category", "", *_category_lines(per_k_rows(results))]
    if figures_dir is not None and constant_k_rows(results):
        lines += [
            f"![decode speedup by category at the best k]({_relative(figures_dir / 'speedup_by_category.png', start)})",
            "",
        ]
    # Spec-Bench's layout (report/leaderboard.py), grouped as the run's --specbench-category-groups.
    lines += leaderboard_markdown(results, options.get("specbench_category_groups") or "spec_bench")
    lines += _batch_section(results, figures_dir, start)
    lines += _regret_section(answer, figures_dir, start)
    lines += requests_section(results, figures_dir, start)  # report/requests.py: each request counted once
    lines += _whole_run_lines(analyses, results)
    return "\n".join(lines).rstrip() + "\n"


def _batch_section(results: Sequence[CaseResult], figures_dir: Path | None, start: Path) -> list[str]:
    """Decode speedup by batch size, best k per batch size, break-even (report/batch.py): when several ran."""
    from .batch import batch_answer, batch_markdown

    figures = {}
    if figures_dir is not None:
        for pair in dict.fromkeys(answer.pair for answer in batch_answer(results)):
            figures[pair] = _relative(figures_dir / f"speedup_vs_batch_{pair}.png", start)
    return batch_markdown(results, figures)


def _regret_section(answer: RunAnswer, figures_dir: Path | None, start: Path) -> list[str]:
    """k=auto (and k=heuristic) against the best constant k, with intervals (report/regret.py): when both ran."""
    from .regret_section import regret_markdown, regret_pairs

    figures = (
        {}
        if figures_dir is None
        else {
            pair: _relative(figures_dir / f"schedule_regret_{pair}.png", start) for pair in regret_pairs(answer.prompts)
        }
    )
    return regret_markdown(answer, figures)


def _category_lines(results: Sequence[CaseResult]) -> list[str]:
    """Per pair and category (and dtype, when several ran), the best k's decode speedup over the category's
    prompts."""
    dtypes = several_dtypes(results)
    return [
        "At each category's best k: with several prompts, the geometric mean of their decode speedups (each "
        "prompt weighted equally) and a 95% t interval over their log speedups, which holds the spread between "
        "prompts as well as the timing noise; with one prompt, its own speedup and interval.",
        "",
        _table(
            [
                [
                    with_further(item.pair, item.further),
                    item.category,
                    *([item.dtype] if dtypes else []),
                    item.prompts,
                    item.k,
                    value_with_interval(item.speedup, item.low, item.high),
                ]
                for item in best_category_speedups(results)
            ],
            ["pair", "category", *(["dtype"] if dtypes else []), "prompts", "best k", "decode speedup [95% CI]"],
        ),
        "",
    ]


def _machine_lines(options: dict[str, Any], env: dict[str, Any]) -> list[str]:
    """The machine's fingerprint and versions, then the run's options: what another run must match to compare."""
    fingerprint = env.get("fingerprint", {})
    return [
        "## Machine and options",
        "",
        _table(
            [[key, str(value)] for key, value in fingerprint.items()]
            + [[name, str(version)] for name, version in env.get("versions", {}).items() if name not in fingerprint],
            ["machine", "value"],
        ),
        "",
        _table([[key, str(value)] for key, value in sorted(options.items())], ["option", "value"]),
        "",
    ]


def _headline_lines(results: Sequence[CaseResult]) -> list[str]:
    """The run's best decode speedup (:func:`.analysis.best_row`: a diverged or suspect one only where no case's
    speedup is measured), where it was measured, and how many cases diverged."""
    best = best_row(results)
    return [
        "## Headline",
        "",
        f"Best decode speedup: **{_marked(best)}** with pair `{best.pair}` (target {best.target}, "
        f"draft {best.draft}) at k={best.k} on the `{best.prompt}` prompt; end to end, prefill "
        f"included, {with_interval(best, 'speedup')}. {len(results)} cases, "
        f"{sum(1 for row in results if row.verdict == 'diverged')} diverged from the target's greedy "
        "output.",
        "",
    ]


def _pair_lines(
    pair: str, rows: Sequence[CaseResult], analyses: Sequence[PromptAnalysis], engines: bool, answer: RunAnswer
) -> list[str]:
    """One pair's section, its figures aside: what ran, every case, the engines, the answer, the cost model's
    view of the best k, the findings."""
    return [
        *_pair_header(pair, rows),
        _case_table(rows, engines),
        "",
        *_suspect_lines(rows),
        *_cross_tokenizer_lines(rows),
        *_engine_lines(rows),
        *_answer_lines(pair, answer, engines, several_dtypes(rows)),
        *_dtype_view_lines(pair, answer),
        _best_k_table(analyses),
        "",
        *_cost_input_lines(rows[0]),
        *_position_lines(rows),
        "Findings:",
        "",
        *(f"- {sentence}" for sentence in pair_findings(analyses, rows)),
        "",
    ]


def _pair_header(pair: str, rows: Sequence[CaseResult]) -> list[str]:
    """The pair's title and what ran: the models, the device, the tokens, the sizes and the peak memory."""
    first = rows[0]
    return [
        f"## Pair `{pair}`",
        "",
        f"Target {first.target}, draft {first.draft} ({first.drafter}); {first.device}, "
        f"{', '.join(dtype_order([row.dtype for row in rows]))}, {new_tokens_text(rows, ' per run')}. "
        "Parameters: target "
        f"{number(first.target_params, ',')}, "
        f"draft {number(first.draft_params, ',')}. "
        f"Peak memory {number(first.peak_memory_mb, '.0f')} MiB "
        f"({first.peak_memory_kind or 'n/a'}).",
        "",
    ]


def _suspect_lines(rows: Sequence[CaseResult]) -> list[str]:
    """Under the case table: each suspect case (results/invariants.py) with its cause, as a list; none without."""
    named = suspect_lines(rows)
    if not named:
        return []
    return [
        f"Suspect speedups ({SUSPECT_MARK}): a decode speedup above tau, which only unequal kernels in the "
        "speculative run and its greedy baseline explain; the answer does not rank these cases.",
        "",
        *(f"- {line}" for line in named),
        "",
    ]


def _cross_tokenizer_lines(rows: Sequence[CaseResult]) -> list[str]:
    """Under the case table of a pair whose draft has another tokenizer: its vocabulary overlap and translation
    share (report/summary.py's line, as a sentence)."""
    line = cross_tokenizer_line(rows)
    return [f"{line[0].upper()}{line[1:]}.", ""] if line else []


def _engine_lines(rows: Sequence[CaseResult]) -> list[str]:
    """Every engine's speedups side by side, where two or more ran a (pair, dtype, k)."""
    comparisons = compare_engines(rows)
    if not comparisons:
        return []
    headers, table = engine_table(comparisons)
    return [
        "Engines side by side: decode and end-to-end speedups, each over a greedy baseline in its own engine "
        "(the engines split prefill and decoding differently), and each engine's own decode tokens per second, "
        "speculative and greedy (the engines' greedy baselines differ, so a ratio of speedups misleads alone); the "
        "geometric mean over the prompts every engine measured with a 95% t interval over them; the ratios are "
        "paired by prompt.",
        "",
        _table(table, headers),
        "",
    ]


def _best_k_table(analyses: Sequence[PromptAnalysis]) -> str:
    """Per prompt (and dtype, when several ran), the measured best k beside the cost model's recommended k and its
    prediction there."""
    dtypes = len({a.best_row.dtype for a in analyses}) > 1
    return _table(
        [
            [
                a.prompt,
                *([a.best_row.dtype] if dtypes else []),
                a.best_k,
                _marked(a.best_row),
                number(a.alpha, ".3f"),
                number(a.recommended_k, "d"),
                number(dict(a.predicted_curve).get(a.recommended_k)),
            ]
            for a in analyses
        ],
        [
            "prompt",
            *(["dtype"] if dtypes else []),
            "measured best k",
            "its decode speedup",
            "alpha (all k pooled)",
            "recommended k",
            "predicted speedup there",
        ],
    )


def _cost_input_lines(row: CaseResult) -> list[str]:
    """The cost model's measured inputs, read from the pair's first row: v(1), the draft's cost, c and v(m)/v(1)."""
    curve = row.verify_costs_ms
    if not curve:
        return []
    probe = row.draft_token_probe_ms
    source = "" if probe is None else f" (timed in runs after the warm-up; the probe read {probe:.2f} ms)"
    return [
        f"Cost model inputs: v(1) = {curve[0]:.2f} ms, draft token "
        f"{number(row.draft_token_ms)} ms{source}, "
        f"c = {number(row.cost_ratio, '.3f')}; "
        f"v(m)/v(1) for m = 1..{len(curve)}: " + ", ".join(f"{v / curve[0]:.2f}" for v in curve) + ".",
        "",
    ]


def _position_lines(rows: Sequence[CaseResult]) -> list[str]:
    """The share accepted at each draft position, pooled over the pair's constant-k cases."""
    positions = pooled_position_acceptance(constant_k_rows(rows))
    if not positions:
        return []
    return [
        "Per-position acceptance (of the steps that drafted at least i tokens, the share whose i-th "
        "was accepted; all cases pooled): " + ", ".join(f"{i}: {share:.2f} (n={n})" for i, n, share in positions) + ".",
        "",
    ]


def _answer_lines(pair: str, answer: RunAnswer, engines: bool, dtypes: bool = False) -> list[str]:
    """The pair's part of the run's answer (report/answer.py): per prompt the best k, its ties, and the pair's
    sentence."""
    answers = sorted((a for a in answer.prompts if a.pair == pair), key=lambda a: (a.prompt, a.engine))
    if not answers:
        return []
    cells, headers = prompt_table(answers, engines, dtypes)
    return [
        "The answer. Per prompt, the best constant k (highest decode speedup); the k tied with it and those "
        "slower, by a one-sided paired t test over the rounds of their block (family-wise 95%, a k the race "
        "eliminated named with the k that beat it; not ranked, with the reason: no round data to test "
        "with, or cases measured in different runs, whose rounds never pair; `(unpaired)`: each k ran in a block "
        "of its own, as on a served engine, and is tested over its own rounds' speedups); the cost model's "
        "recommended k (the most common among the prompt's cases) and its measured speedup over the best's.",
        "",
        _table(cells, headers),
        "",
        *(line for p in answer.pairs if p.pair == pair for line in (pair_sentence(p, engines, dtypes), "")),
    ]


def _dtype_view_lines(pair: str, answer: RunAnswer) -> list[str]:
    """When several dtypes ran: per prompt (and engine, batch) a table of every (dtype, k) against float32 greedy,
    the fastest in bold (report/dtype_view.py); one line saying why where float32 did not run."""
    views = [view for view in answer.dtypes if view.pair == pair]
    if not views:
        return []
    lines = not_shown_lines(views)
    lines += [""] if lines else []
    for view in (view for view in views if view.shown):
        cells, headers = speed_table(view)
        tied = ", ".join(f"{t.dtype} k={t.k}" for t in view.tied) or "none"
        further = "".join(f", {name} {value}" for name, value in view.further)
        lines += [
            f"Every (dtype, k) against float32 greedy, `{view.prompt}` ({view.engine} engine, batch "
            f"{view.batch}{further}): decode speedup over the float32 target's greedy decoding with its 95% interval, "
            "float32's own paired, the other dtypes' own paired times their greedy baseline's speed over "
            "float32's (the two baselines timed in other blocks: unpaired, so wider); the "
            f"fastest in bold; tied with it: {tied}.",
            "",
            _table(cells, headers),
            "",
        ]
    return lines


#: the case table's numeric columns after the decode speedup: (header, field, format)
_CASE_COLUMNS = (
    ("accept", "acceptance_rate", ".3f"),
    ("tau", "tau", ".2f"),
    ("alpha", "alpha", ".3f"),
    ("predicted tau", "predicted_tau", ".2f"),
    ("v(k+1)/v(1)", "verify_cost_ratio", ".2f"),
    ("predicted speedup", "predicted_speedup", ".2f"),
    ("efficiency", "efficiency", ".2f"),
)


def _case_table(rows: Sequence[CaseResult], engines: bool) -> str:
    """Every case of a pair, in table order; an engine column only when the run had more than one engine, a dtype
    column only when the pair ran in more than one dtype."""
    dtypes = several_dtypes(rows)
    return _table(
        [
            [
                row.prompt,
                row.k,
                *([row.dtype] if dtypes else []),
                *([row.engine] if engines else []),
                _marked(row),
                *(number(getattr(row, name), fmt) for _, name, fmt in _CASE_COLUMNS),
                row.verdict,
            ]
            for row in sorted(rows, key=row_order)
        ],
        [
            "prompt",
            "k",
            *(["dtype"] if dtypes else []),
            *(["engine"] if engines else []),
            "decode speedup [95% CI]",
            *(header for header, _, _ in _CASE_COLUMNS),
            "verdict",
        ],
    )


def _whole_run_lines(analyses: Sequence[PromptAnalysis], results: Sequence[CaseResult]) -> list[str]:
    """Over every pair: how often the recommended k was the best, and the median efficiency."""
    all_compared = [a for a in analyses if a.recommended_k is not None]
    if not all_compared:
        return []
    agree = sum(1 for a in all_compared if a.recommended_k == a.best_k)
    efficiencies = _efficiencies(results)
    return [
        "## Over the whole run",
        "",
        f"Recommended k equals the measured best k for {agree} of {len(all_compared)} (pair, prompt) "
        f"combinations; median efficiency {median(efficiencies):.2f}."
        if efficiencies
        else "",
        "",
    ]
