"""The leaderboard view (report/leaderboard.py), from rows built by hand: groups, geometric means and their t
intervals against hand computation, lossy cases left out, tau pooled over steps, the columns' order, the report's
section and the terminal's rule."""

from __future__ import annotations

import math

import pytest
from factory import case_result

from pytest_specbench.report.leaderboard import (
    DIFFERENCE,
    OVERALL,
    TAU,
    geometric_figure,
    group_columns,
    leaderboard_lines,
    leaderboard_markdown,
    leaderboard_table,
    leaderboards,
    pooled_tau,
    shows_in_terminal,
)
from pytest_specbench.report.markdown import report_markdown
from pytest_specbench.report.summary import summary_lines
from pytest_specbench.results.schema import CaseResult

#: t(0.975) at 1 and 2 degrees of freedom, in closed form: tan(pi (p - 1/2)) and a sqrt(2 / (1 - a^2)), a = 2p - 1
T_1, T_2 = math.tan(math.pi * 0.475), 0.95 * math.sqrt(2 / (1 - 0.95**2))


def _row(category: str, speedup: float, k: int | str = 4, index: int = 0, **fields) -> CaseResult:
    prompt = f"{category}-{index:02}"
    return case_result(
        case=f"p-k{k}-{prompt}",
        pair="p",
        k=k,
        prompt=prompt,
        prompt_id=prompt,
        category=category,
        decode_speedup=speedup,
        **fields,
    )


def _by_hand(values: list[float], t: float) -> tuple[float, float, float]:
    logs = [math.log(v) for v in values]
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    half = t * sd / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def test_geometric_mean_and_interval_against_hand_computation() -> None:
    figure = geometric_figure([1.2, 1.5, 2.0])
    mean, low, high = _by_hand([1.2, 1.5, 2.0], T_2)
    assert figure.cases == 3 and figure.speedup == pytest.approx((1.2 * 1.5 * 2.0) ** (1 / 3))
    assert figure.speedup == pytest.approx(mean)
    assert (figure.low, figure.high) == (pytest.approx(low), pytest.approx(high))
    one = geometric_figure([1.7])  # one case: no spread between cases, so no interval
    assert (one.speedup, one.low, one.high, one.cases) == (pytest.approx(1.7), None, None, 1)


def test_mt_bench_categories_form_one_group_and_columns_follow_spec_bench() -> None:
    rows = [
        _row("natural", 1.1),
        _row("rag", 1.3),
        _row("writing", 1.2),
        _row("translation", 1.4),
        _row("coding", 1.8),
        _row("code", 1.6),
    ]
    assert group_columns(rows) == ["mt_bench", "translation", "rag", "natural", "code"]
    assert group_columns(rows, "category") == ["translation", "rag", "natural", "writing", "coding", "code"]
    (board,) = leaderboards(rows)
    (line,) = board.lines
    mean, low, high = _by_hand([1.2, 1.8], T_1)
    mt_bench = line.groups["mt_bench"]
    assert mt_bench.cases == 2 and mt_bench.speedup == pytest.approx(mean)
    assert (mt_bench.low, mt_bench.high) == (pytest.approx(low), pytest.approx(high))
    assert line.overall.cases == 6
    assert line.overall.speedup == pytest.approx(math.prod([1.1, 1.3, 1.2, 1.4, 1.8, 1.6]) ** (1 / 6))
    header = leaderboard_table(board).splitlines()[0].split()
    assert header == ["k", "mt_bench", "translation", "rag", "natural", "code", TAU, OVERALL]


def test_only_lossless_cases_count_and_the_rest_are_counted() -> None:
    rows = [
        _row("qa", 1.5, index=1),
        _row("qa", 9.0, index=2, verdict="diverged", lossless=False),
        _row("qa", 8.0, index=3, verdict="tie-divergence", lossless=False),
        _row("qa", float("nan"), index=4),
    ]
    (board,) = leaderboards(rows)
    (line,) = board.lines
    assert line.groups["qa"].cases == 1 and line.groups["qa"].speedup == pytest.approx(1.5)
    assert dict(board.left_out) == {"diverged": 1, "tie-divergence": 1, "no speedup": 1}
    markdown = "\n".join(leaderboard_markdown(rows))
    assert (
        "3 case(s) left out, not lossless, not measured or suspect (a speedup above tau): "
        "1 diverged, 1 no speedup, 1 tie-divergence"
    ) in markdown
    # No lossless case at all: the board says so rather than show an empty table.
    assert "No lossless case." in "\n".join(leaderboard_markdown(rows[1:2]))


def test_tau_pools_decode_tokens_over_decode_steps() -> None:
    long = _row("qa", 1.5, index=1, new_tokens=33, prefill_tokens=1, tau=4.0)  # 32 tokens in 8 steps
    short = _row("rag", 1.2, index=2, new_tokens=6, prefill_tokens=1, tau=1.25)  # 5 tokens in 4 steps
    idle = _row("rag", 1.1, index=3, new_tokens=1, prefill_tokens=1, tau=0.0)  # no decode step
    assert pooled_tau([long, short, idle]) == pytest.approx(37 / 12)  # not (4 + 1.25) / 2
    assert pooled_tau([idle]) is None
    (board,) = leaderboards([long, short, idle])
    assert board.lines[0].tau == pytest.approx(37 / 12)
    assert f"  {37 / 12:.2f}  " in leaderboard_table(board).splitlines()[2]


def test_a_line_per_k_schedules_last_and_a_board_per_engine_and_dtype() -> None:
    rows = [
        _row("qa", 1.4, k="auto"),
        _row("qa", 1.3, k=8),
        _row("qa", 1.2, k=2),
        _row("qa", 1.1, k=2, engine="hf"),
        _row("qa", 1.6, k=2, dtype="bfloat16"),
        _row("qa", 0.9, k=2, batch=4),  # a larger batch: the view reads the smallest, as Spec-Bench's batch 1
    ]
    boards = leaderboards(rows)
    assert [(b.engine, b.dtype) for b in boards] == [("native", "float32"), ("native", "bfloat16"), ("hf", "float32")]
    assert [line.k for line in boards[0].lines] == [2, 8, "auto"]
    assert boards[0].lines[0].overall.speedup == pytest.approx(1.2)
    markdown = "\n".join(leaderboard_markdown(rows))
    for title in ("**p (native engine, float32)**", "**p (native engine, bfloat16)**", "**p (hf engine, float32)**"):
        assert title in markdown


def test_the_report_has_the_section_grouped_as_the_run_asked() -> None:
    rows = [_row("writing", 1.2, index=1), _row("coding", 1.8, index=2), _row("summarization", 2.1, index=3)]
    report = report_markdown(rows, {}, {})
    section = report.split("## Leaderboard view", 1)[1]
    assert DIFFERENCE in section
    assert "| k   | mt_bench" in section and "summarization" in section and OVERALL in section
    by_category = report_markdown(rows, {"specbench_category_groups": "category"}, {})
    assert "| k   | summarization   | writing" in by_category.split("## Leaderboard view", 1)[1]


def test_the_terminal_shows_it_only_for_spec_bench_questions() -> None:
    shipped = [_row("natural", 1.2, index=1), _row("code", 1.5, index=2)]
    assert not shows_in_terminal(shipped) and leaderboard_lines(shipped) == []
    assert not any("leaderboard view" in line for line in summary_lines(shipped))
    questions = [_row("writing", 1.2, index=1), _row("translation", 1.5, index=2)]
    assert shows_in_terminal(questions)
    text = "\n".join(summary_lines(questions, category_groups="category"))
    assert "leaderboard view" in text and "--specbench-category-groups=category" in text
    # A multi-turn case is a conversation whatever its category.
    assert shows_in_terminal([_row("chat", 1.2, turns=[{"turn": 1}, {"turn": 2}])])
