"""The one rule of what counts as a measured decode speedup (report/analysis.py :func:`speedup_left_out`): each of
its conditions on a hand-built row, then each place that ranks by it: the answer, the view against float32 greedy,
the leaderboard view, the serving answer, the cost model's view, the category table and the headline. A diverged
case is never ranked, recommended or averaged anywhere."""

from __future__ import annotations

import dataclasses
import math

import pytest
from ranked_rows import ranked_case

from pytest_specbench.report.analysis import (
    NO_SPEEDUP,
    SUSPECT,
    analyse_prompts,
    best_category_speedups,
    best_row,
    speedup_left_out,
)
from pytest_specbench.report.answer import prompt_answers, run_answer
from pytest_specbench.report.batch import batch_answer
from pytest_specbench.report.dtype_view import DtypeK, dtype_views
from pytest_specbench.report.leaderboard import geometric_figure, leaderboards, left_out_text
from pytest_specbench.report.markdown import report_markdown
from pytest_specbench.report.summary import run_document
from pytest_specbench.results.schema import CaseResult
from pytest_specbench.results.statistics import geometric_mean_interval

_row = ranked_case


def _diverged(row: CaseResult) -> CaseResult:
    return dataclasses.replace(row, verdict="diverged", lossless=False)


# --- the rule, condition by condition ---------------------------------------------------------------------------


def test_a_lossless_row_with_a_positive_speedup_is_measured():
    assert speedup_left_out(_row(4, 1.8)) is None


@pytest.mark.parametrize("verdict", ["tie-divergence", "not-checked"])
def test_a_tie_divergence_and_an_unchecked_run_are_measured_but_not_lossless(verdict):
    row = dataclasses.replace(_row(4, 1.8), verdict=verdict)
    assert speedup_left_out(row) is None
    # The leaderboard view asks for lossless cases only, as docs/spec-bench.md says: its verdict is why.
    assert speedup_left_out(row, lossless_only=True) == verdict
    assert speedup_left_out(_row(4, 1.8), lossless_only=True) is None


def test_a_diverged_row_is_never_measured_whatever_else_it_has():
    row = _diverged(_row(4, 1.8, seconds=0.01))  # round data, a fine speedup
    assert speedup_left_out(row) == "diverged"
    assert speedup_left_out(row, lossless_only=True) == "diverged"
    # Its verdict is the first reason: suspect, or without a speedup, it is still "diverged".
    assert speedup_left_out(dataclasses.replace(row, suspect=True)) == "diverged"
    assert speedup_left_out(dataclasses.replace(row, decode_speedup=float("nan"))) == "diverged"


@pytest.mark.parametrize("speedup", [None, float("nan"), 0.0, -1.0])
def test_no_positive_speedup_is_no_speedup(speedup):
    assert speedup_left_out(dataclasses.replace(_row(4, 1.8), decode_speedup=speedup)) == NO_SPEEDUP


def test_a_suspect_speedup_is_left_out():
    assert speedup_left_out(dataclasses.replace(_row(4, 2.5), suspect=True, suspect_cause="above tau")) == SUSPECT


def test_round_data_an_elimination_and_an_unstable_interval_are_no_reason():
    """Such rows are measured: the answer ranks them by what they have (slower, or not ranked for want of rounds)."""
    assert speedup_left_out(_row(4, 1.8)) is None  # no round data
    assert speedup_left_out(_row(1, 1.1, seconds=0.018, rounds=range(3), eliminated_by=4)) is None
    assert speedup_left_out(_row(4, 1.8, seconds=0.01, unstable=True)) is None


# --- every place that ranks reads it ------------------------------------------------------------------------------


def _code_rows() -> list[CaseResult]:
    """k=4 the fastest, diverged; k=2 the fastest measured; k=1 slower; k=auto beside them."""
    return [
        _row(1, 1.1, seconds=0.018),
        _row(2, 1.6, seconds=0.0125),
        _diverged(_row(4, 1.8, seconds=0.01)),
        _row("auto", 1.5, seconds=0.0133),
    ]


def test_the_answer_never_ranks_nor_recommends_a_diverged_k():
    """Planted bug (before): the answer read only the speedup, so the diverged k=4 was the best and recommended."""
    (answer,) = prompt_answers(_code_rows())
    assert answer.best_k == 2 and answer.decode_speedup == 1.6 and answer.recommended_k == 2
    named = [
        answer.best_k,
        *answer.tied,
        *answer.unknown,
        *(s.k for s in answer.slower),
        *(s.k for s in answer.suspect),
    ]
    assert 4 not in named and answer.slower[0].k == 1
    (auto,) = answer.schedules  # the schedule is set beside the best measured k
    assert auto.ratio_to_best == pytest.approx(0.0125 / 0.0133, rel=0.02)
    # A diverged schedule is not set beside it, and a prompt whose every constant k diverged has no answer.
    (answer,) = prompt_answers([*_code_rows()[:3], _diverged(_code_rows()[3])])
    assert answer.schedules == ()
    assert prompt_answers([_diverged(row) for row in _code_rows()]) == []
    assert run_answer([_diverged(row) for row in _code_rows()]).pairs == ()


def test_the_view_against_float32_leaves_a_diverged_dtype_and_k_out():
    def row(dtype, k, speedup, **fields):
        return _row(k, speedup, seconds=0.02 / speedup, dtype=dtype, block=f"t/{dtype}:code", **fields)

    rows = [row("float32", 2, 1.5), row("bfloat16", 2, 2.6), row("bfloat16", 4, 2.4)]
    (view,) = dtype_views(rows, prompt_answers(rows))
    assert (view.fastest.dtype, view.fastest.k) == ("bfloat16", 2)
    rows[1] = _diverged(rows[1])
    (view,) = dtype_views(rows, prompt_answers(rows))
    assert (view.fastest.dtype, view.fastest.k) == ("bfloat16", 4)
    assert ("bfloat16", 2) not in [(e.dtype, e.k) for e in view.entries]
    assert DtypeK("bfloat16", 2) not in view.tied + view.slower + view.unknown + view.suspect


def test_the_leaderboard_counts_lossless_cases_only_and_says_why_it_left_the_others_out():
    rows = [
        _row(2, 1.5, category="qa"),
        _diverged(_row(2, 3.0, category="qa", prompt="qa2")),
        dataclasses.replace(_row(2, 2.0, category="qa", prompt="qa3"), verdict="tie-divergence"),
        dataclasses.replace(_row(2, 2.5, category="qa", prompt="qa4"), suspect=True),
    ]
    (board,) = leaderboards(rows)
    (line,) = board.lines
    assert line.overall.cases == 1 and line.overall.speedup == 1.5
    assert board.left_out == {"diverged": 1, "tie-divergence": 1, SUSPECT: 1}
    assert left_out_text(board).endswith("1 diverged, 1 suspect, 1 tie-divergence")


def test_the_cost_model_view_the_categories_and_the_headline_skip_a_diverged_case():
    rows = _code_rows()
    assert best_row(rows).k == 2
    assert best_row([_diverged(row) for row in rows]).k == 4  # none measured: the fastest, marked by its verdict
    (analysis,) = analyse_prompts(rows)
    assert analysis.best_k == 2 and analysis.recommended_k != 4
    (category,) = best_category_speedups(rows)
    assert (category.k, category.speedup) == (2, 1.6)
    assert "Best decode speedup: **1.60" in report_markdown(rows, {}, {})


def test_the_serving_answer_never_names_a_diverged_k_best_nor_lets_it_decide_the_break_even():
    def row(batch, k, speedup, **fields):
        return _row(k, speedup, case=f"p-k{k}-b{batch}", batch=batch, **fields)

    rows = [row(1, 1, 1.3), row(1, 4, 1.8), row(4, 1, 0.9), _diverged(row(4, 4, 1.2))]
    (answer,) = batch_answer(rows)
    assert [(item.batch, item.k) for item in answer.best] == [(1, 4), (4, 1)]
    assert answer.break_even.batch == 1  # batch 4 gains only where its output diverged
    document = run_document(rows, {}, {}).to_json()
    assert document["batch"][0]["break_even"]["batch"] == 1 and document["answer"]["prompts"][0]["best_k"] == 4


# --- the one t interval -----------------------------------------------------------------------------------------


def test_the_geometric_mean_interval_is_students_t_over_the_logs():
    from scipy import stats

    values = [1.2, 1.5, 2.0, 1.1]
    logs = [math.log(v) for v in values]
    mean = sum(logs) / len(logs)
    half = stats.t.ppf(0.975, len(logs) - 1) * stats.tstd(logs) / math.sqrt(len(logs))
    got = geometric_mean_interval(values)
    assert got.estimate == pytest.approx(math.exp(mean))
    assert (got.low, got.high) == (pytest.approx(math.exp(mean - half)), pytest.approx(math.exp(mean + half)))
    one = geometric_mean_interval([1.7])  # one value: no interval
    assert one.estimate == pytest.approx(1.7) and one.low is None and one.high is None
    # The leaderboard's figure is this interval, not a second one beside it.
    figure = geometric_figure(values)
    assert (figure.speedup, figure.low, figure.high, figure.cases) == (got.estimate, got.low, got.high, 4)
    with pytest.raises(ValueError):
        geometric_mean_interval([])
    with pytest.raises(ValueError):
        geometric_mean_interval([1.0, 0.0])
