"""The leaderboard view: a run's decode speedups laid out as Spec-Bench's leaderboard, to set beside it.

Per (pair, engine, dtype) a table: a line per k (and schedule), a column per category group
(:func:`..cases.prompts.category_group`; Spec-Bench's six first, in the order its ``speed.py`` prints them, then
the run's other groups in run order), tau and Overall. A group's figure is the geometric mean of its cases' paired
``decode_speedup`` with a 95% t interval over their logs (two cases or more), which holds the spread between
prompts as well as the timing noise. Spec-Bench averages otherwise (docs/spec-bench.md): the mean of per-question
tokens per second over the baseline's mean, wall time with prefill. Only lossless cases count: a speedup bought
with different output is no speedup, nor is a suspect one (results/invariants.py: above tau, the two runs' kernels
differed): :func:`.analysis.speedup_left_out` with ``lossless_only``, the rule the answers read, made strict. The
table says how many it left out and why. Like the answers against k, it reads the
smallest batch size (:func:`.batch.per_k_rows`): Spec-Bench runs at batch 1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from tabulate import tabulate

from ..cases.prompts import MT_BENCH_CATEGORIES, MT_BENCH_GROUP, category_group
from ..results.schema import CaseResult
from ..results.statistics import geometric_mean_interval
from .analysis import Further, further_values, k_order, several_engines, speedup_left_out, with_further
from .batch import per_k_rows
from .dtype_view import dtype_order

#: Spec-Bench's groups in the order its ``speed.py`` prints them (then "overall")
SPEC_BENCH_GROUPS: tuple[str, ...] = (MT_BENCH_GROUP, "translation", "summarization", "qa", "math_reasoning", "rag")
#: the categories of Spec-Bench's question file: MT-bench's eight and the five others
SPEC_BENCH_CATEGORIES: tuple[str, ...] = MT_BENCH_CATEGORIES + SPEC_BENCH_GROUPS[1:]
OVERALL, TAU = "Overall", "tau"

#: how the report says where Spec-Bench's averages differ (docs/spec-bench.md has the whole of it)
DIFFERENCE = (
    "Spec-Bench averages otherwise: its speed.py divides the mean over a group's questions of tokens per second "
    "(wall time, prefill included) by the baseline's same mean, and its leaderboard gives the mean of that ratio "
    "over 3 runs. Here each case's decode speedup is a ratio paired round by round (machine drift shared by both "
    "runs of a round cancels), and a group's figure is the geometric mean of those ratios, in which every case "
    "weighs the same. Compare the two as the same kind of figure measured differently, not digit for "
    "digit (docs/spec-bench.md in pytest-specbench)."
)


@dataclass(frozen=True)
class GroupFigure:
    """The geometric mean decode speedup of some cases, with its 95% t interval over their logs (None: one case)."""

    speedup: float
    low: float | None
    high: float | None
    cases: int


@dataclass(frozen=True)
class LeaderboardLine:
    """One k (or schedule): a figure per group that has lossless cases, over all of them, and the pooled tau."""

    k: int | str
    groups: dict[str, GroupFigure]
    overall: GroupFigure
    tau: float | None


@dataclass(frozen=True)
class Leaderboard:
    """One (pair, engine, dtype) at one batch size: its groups in column order, its lines, what it left out."""

    pair: str
    engine: str
    dtype: str
    batch: int
    groups: list[str]
    lines: list[LeaderboardLine] = field(default_factory=list)
    # why (:func:`.analysis.speedup_left_out`: a verdict, "no speedup", "suspect") -> cases
    left_out: Counter = field(default_factory=Counter)
    further: Further = ()  # its value on each further axis the report groups by


def geometric_figure(speedups: Sequence[float]) -> GroupFigure:
    """Geometric mean of ``speedups`` (each > 0); from two on, exp(mean log +/- t(0.975, n-1) sd / sqrt(n)): the
    t interval of :func:`..results.statistics.geometric_mean_interval`, the package's one."""
    interval = geometric_mean_interval(speedups)
    return GroupFigure(interval.estimate, interval.low, interval.high, len(speedups))


def pooled_tau(rows: Sequence[CaseResult]) -> float | None:
    """Tokens committed per decode step over every decode step of ``rows``: their decode tokens (new tokens less
    the prefill's) over their decode steps (decode tokens / tau), as Spec-Bench's mean over every step's accepted
    length; a long case counts by its steps, not once. None when no row decoded past its prefill."""
    tokens = steps = 0.0
    for row in rows:
        decoded = row.new_tokens - row.prefill_tokens
        if decoded > 0 and row.tau > 0:
            tokens, steps = tokens + decoded, steps + decoded / row.tau
    return tokens / steps if steps else None


def group_columns(rows: Sequence[CaseResult], grouping: str = "spec_bench") -> list[str]:
    """The rows' groups in column order: Spec-Bench's that occur, in its order, then the others in run order."""
    present = list(dict.fromkeys(category_group(row.category, grouping) for row in rows))
    return [group for group in SPEC_BENCH_GROUPS if group in present] + [
        group for group in present if group not in SPEC_BENCH_GROUPS
    ]


def _board(rows: Sequence[CaseResult], grouping: str) -> Leaderboard:
    """The board of one (pair, engine, dtype): only lossless cases with a measured speedup count
    (:func:`.analysis.speedup_left_out` with ``lossless_only``, as the module docstring says); the others are
    counted by why."""
    judged = [(row, speedup_left_out(row, lossless_only=True)) for row in rows]
    counted = [row for row, reason in judged if reason is None]
    lines = []
    for k in sorted({row.k for row in counted}, key=k_order):
        at_k = [row for row in counted if row.k == k]
        by_group: dict[str, list[float]] = {}
        for row in at_k:
            by_group.setdefault(category_group(row.category, grouping), []).append(row.decode_speedup)
        groups = {group: geometric_figure(values) for group, values in by_group.items()}
        overall = geometric_figure([row.decode_speedup for row in at_k])
        lines.append(LeaderboardLine(k, groups, overall, pooled_tau(at_k)))
    first = rows[0]
    left_out = Counter(reason for _, reason in judged if reason is not None)
    return Leaderboard(
        first.pair,
        first.engine,
        first.dtype,
        first.batch,
        group_columns(rows, grouping),
        lines,
        left_out,
        further_values(first),
    )


def leaderboards(results: Sequence[CaseResult], grouping: str = "spec_bench") -> list[Leaderboard]:
    """A leaderboard per (pair, engine, dtype) of the smallest batch size: pairs and engines in order of first
    appearance, dtypes float32 first."""
    rows = per_k_rows(results)
    pairs, engines = list(dict.fromkeys(row.pair for row in rows)), list(dict.fromkeys(row.engine for row in rows))
    dtypes = dtype_order([row.dtype for row in rows])
    keys: dict[tuple[str, str, str, Further], list[CaseResult]] = {}
    for row in rows:
        keys.setdefault((row.pair, row.engine, row.dtype, further_values(row)), []).append(row)
    order = sorted(keys, key=lambda key: (pairs.index(key[0]), engines.index(key[1]), dtypes.index(key[2])))
    return [_board(keys[key], grouping) for key in order]


def _cell(figure: GroupFigure | None) -> str:
    if figure is None:
        return "-"
    if figure.low is None or figure.high is None:
        return f"{figure.speedup:.2f}x n={figure.cases}"
    return f"{figure.speedup:.2f}x [{figure.low:.2f}, {figure.high:.2f}] n={figure.cases}"


def leaderboard_table(board: Leaderboard, tablefmt: str = "simple") -> str:
    """The board as a table: k, a column per group, tau, Overall (Spec-Bench's order); cells as text."""
    cells = [
        [
            str(line.k),
            *(_cell(line.groups.get(group)) for group in board.groups),
            "-" if line.tau is None else f"{line.tau:.2f}",
            _cell(line.overall),
        ]
        for line in board.lines
    ]
    headers = ["k", *board.groups, TAU, OVERALL]
    return tabulate(cells, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def title(board: Leaderboard, engines: bool, dtypes: bool) -> str:
    """``pair`` with the engine, dtype and batch size where they tell boards apart or differ from Spec-Bench's."""
    parts = ([f"{board.engine} engine"] if engines else []) + ([board.dtype] if dtypes else [])
    parts += [f"batch {board.batch}"] if board.batch != 1 else []
    return with_further(board.pair, board.further) + (f" ({', '.join(parts)})" if parts else "")


def left_out_text(board: Leaderboard) -> str:
    """How many cases the board left out and why; empty when none."""
    total = sum(board.left_out.values())
    if not total:
        return ""
    why = ", ".join(f"{count} {verdict}" for verdict, count in sorted(board.left_out.items()))
    return f"{total} case(s) left out, not lossless, not measured or suspect (a speedup above tau): {why}"


def shows_in_terminal(results: Sequence[CaseResult]) -> bool:
    """The rule for the terminal, where the table is wide: a run of Spec-Bench's or MT-bench's questions, told by
    a case whose category is one of Spec-Bench's question categories (:data:`SPEC_BENCH_CATEGORIES`; the shipped
    suite has none) or that ran several turns. Rows carry no conversation flag; the Markdown report always has it."""
    return any(row.category in SPEC_BENCH_CATEGORIES or row.turns for row in results)


def _boards_with_titles(results: Sequence[CaseResult], grouping: str) -> list[tuple[str, Leaderboard]]:
    rows = per_k_rows(results)
    engines, dtypes = several_engines(rows), len({row.dtype for row in rows}) > 1
    return [(title(board, engines, dtypes), board) for board in leaderboards(results, grouping)]


def _caption(grouping: str) -> str:
    grouped = "MT-bench's eight categories as mt_bench" if grouping == "spec_bench" else "each category its own"
    return (
        "decode speedup, lossless cases only, suspect ones left out: geometric mean over a group's cases with a "
        f"95% t interval over their logs (n cases), groups as --specbench-category-groups={grouping} ({grouped}); "
        "tau: tokens per decode step pooled over every decode step"
    )


def leaderboard_lines(results: Sequence[CaseResult], grouping: str = "spec_bench") -> list[str]:
    """The terminal's leaderboard view: empty unless :func:`shows_in_terminal`."""
    if not results or not shows_in_terminal(results):
        return []
    lines = [
        f"leaderboard view, laid out as Spec-Bench's ({_caption(grouping)}; Spec-Bench averages otherwise: see "
        "docs/spec-bench.md):"
    ]
    for name, board in _boards_with_titles(results, grouping):
        lines += [f"{name}:", *(leaderboard_table(board).splitlines() if board.lines else ["no lossless case"])]
        lines += [note] if (note := left_out_text(board)) else []
    return lines + [""]


def leaderboard_markdown(results: Sequence[CaseResult], grouping: str = "spec_bench") -> list[str]:
    """The report's "Leaderboard view" section: what the figures are, how Spec-Bench's differ, a table per
    board."""
    if not results:
        return []
    lines = ["## Leaderboard view", "", f"Laid out as Spec-Bench's leaderboard: {_caption(grouping)}.", "", DIFFERENCE]
    for name, board in _boards_with_titles(results, grouping):
        lines += ["", f"**{name}**", ""]
        lines += [leaderboard_table(board, "github")] if board.lines else ["No lossless case."]
        lines += ["", note] if (note := left_out_text(board)) else []
    return lines + [""]
