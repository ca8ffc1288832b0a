"""Suspect speedups: a decode speedup above tau, which only unequal kernels in the two runs explain
(results/invariants.py). The check alone on hand-built rows, what the answer, the leaderboard, the gate, the summary
and the report make of a suspect row, and a planted asymmetry caught through the plugin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factory import case_result, gated_case
from ranked_rows import ranked_case

from pytest_specbench.report.answer import (
    SuspectCount,
    SuspectK,
    pair_answers,
    pair_sentence,
    prompt_answers,
    prompt_table,
)
from pytest_specbench.report.formatting import SUSPECT_MARK
from pytest_specbench.report.leaderboard import leaderboards, left_out_text
from pytest_specbench.report.markdown import report_markdown
from pytest_specbench.report.summary import summary_lines
from pytest_specbench.results.gate import CompareSettings, baseline_document, compare, gate_summary_lines
from pytest_specbench.results.invariants import (
    SUSPECT_TOLERANCE,
    speedup_bound_cause,
    suspect_fields,
    verify_pass_share,
)
from pytest_specbench.results.schema import CaseResult


def _checked_row(speedup: float, low: float | None, high: float | None, tau: float = 6.2, **fields) -> CaseResult:
    """A batch-1 greedy row: 31 decode tokens at ``tau``, a baseline of 10 tokens per second, 0.24 s verifying
    (5 passes of 0.048 s against baseline steps of 0.1 s: a verify pass costs 0.48 of a step)."""
    values = dict(
        decode_speedup=speedup,
        decode_speedup_ci_low=low,
        decode_speedup_ci_high=high,
        tau=tau,
        new_tokens=32,
        prefill_tokens=1,
        verify_time_s=0.24,
        baseline_decode_tps=10.0,
        verify_cost_ratio=1.3,
        batch=1,
        temperature=0.0,
    )
    return case_result(**{**values, **fields})


# --- the check alone ------------------------------------------------------------------------------------------


def test_a_speedup_at_tau_with_a_narrow_interval_keeps_the_bound():
    row = _checked_row(6.2, 6.1, 6.3)
    assert speedup_bound_cause(row) is None
    assert suspect_fields(row) == {"suspect": False, "suspect_cause": None}


def test_an_interval_above_tau_beyond_the_tolerance_is_suspect_and_names_the_figures():
    row = _checked_row(8.86, 8.50, 9.20)
    assert verify_pass_share(row) == pytest.approx(0.48)
    fields = suspect_fields(row)
    assert fields["suspect"]
    assert fields["suspect_cause"] == (
        "decode speedup 8.86 [8.50, 9.20] exceeds tau 6.20 by more than 5%: a verify pass cost 0.48 of a "
        "baseline step; the cost probe put v(k+1)/v(1) at 1.30, so the two runs' kernels differ, or the machine's "
        "load changed between them, and the speedup is not speculation's alone"
    )
    # On a peer engine both runs keep its own kernels: the cause says only what that leaves.
    peer = suspect_fields(_checked_row(8.86, 8.50, 9.20, engine="hf"))["suspect_cause"]
    assert peer.endswith(
        "yet both runs kept the hf engine's own kernels, so the machine's load changed between them, and the "
        "speedup is not speculation's alone"
    )


def test_a_wide_interval_straddling_tau_is_not_suspect():
    assert speedup_bound_cause(_checked_row(7.0, 5.0, 9.0)) is None


def test_the_tolerance_is_on_the_low_end_against_tau():
    tau = 6.2
    inside, beyond = tau * (1 + SUSPECT_TOLERANCE) * 0.999, tau * (1 + SUSPECT_TOLERANCE) * 1.001
    assert speedup_bound_cause(_checked_row(inside * 1.02, inside, inside * 1.04)) is None
    assert speedup_bound_cause(_checked_row(beyond * 1.02, beyond, beyond * 1.04)) is not None


def test_without_an_interval_the_estimate_is_held_to_the_bound():
    cause = speedup_bound_cause(_checked_row(7.0, None, None))
    assert cause is not None and cause.startswith("decode speedup 7.00 [no interval: one round] exceeds tau 6.20")
    assert speedup_bound_cause(_checked_row(6.3, None, None)) is None


def test_what_the_cause_says_when_the_timings_do_not_show_a_cheaper_pass():
    dear = speedup_bound_cause(_checked_row(8.86, 8.5, 9.2, verify_time_s=0.6))  # 0.12 s a pass: 1.20 of a step
    assert "yet a verify pass cost 1.20 of a baseline step in the median runs" in dear
    untimed = speedup_bound_cause(_checked_row(8.86, 8.5, 9.2, verify_time_s=0.0, verify_cost_ratio=None))
    assert untimed.endswith("the row has no verify time per pass to set against a baseline step")


def test_rows_the_bound_does_not_cover_are_not_checked():
    assert speedup_bound_cause(_checked_row(8.86, 8.5, 9.2, batch=4)) is None  # the batch's speedup, rows' mean tau
    assert speedup_bound_cause(_checked_row(float("nan"), None, None)) is None  # not measured
    assert speedup_bound_cause(_checked_row(8.86, 8.5, 9.2, tau=0.0)) is None  # no decode step


def test_under_sampling_the_bound_is_the_largest_tau_of_the_requests():
    # The row's tau is its last run's; another run committed more tokens per pass.
    sampled = dict(temperature=0.7, tau=3.0, request_tau=[3.0, 5.0, None, 4.0])
    assert speedup_bound_cause(_checked_row(5.0, 4.8, 5.2, **sampled)) is None
    cause = speedup_bound_cause(_checked_row(6.0, 5.8, 6.2, **sampled))
    assert cause is not None and "exceeds tau 5.00" in cause


# --- what the reports make of a suspect row --------------------------------------------------------------------

_CAUSE = "decode speedup 2.50 [2.25, 2.75] exceeds tau 1.50 by more than 5%: a verify pass cost 0.40 of a baseline step"


def _suspect(row: CaseResult) -> CaseResult:
    return case_result(**{**row.to_row(), "suspect": True, "suspect_cause": _CAUSE})


def _prompt_rows() -> list[CaseResult]:
    """k=4 the fastest, but suspect; k=2 the fastest trusted; k=1 slower."""
    return [
        ranked_case(1, 1.1, seconds=0.018),
        ranked_case(2, 1.8, seconds=0.011),
        _suspect(ranked_case(4, 2.5, seconds=0.008)),
    ]


def test_the_answer_never_names_a_suspect_k_best_or_recommended_and_says_why():
    (answer,) = prompt_answers(_prompt_rows())
    assert answer.best_k == 2 and answer.decode_speedup == 1.8
    assert answer.suspect == (SuspectK(4, _CAUSE),)
    assert 4 not in [*answer.tied, *answer.unknown, *(s.k for s in answer.slower)]
    assert answer.recommended_k == 2  # the model's favourite, 4, is suspect
    cells, headers = prompt_table([answer], engines=False)
    not_ranked = cells[0][headers.index("not ranked")]
    assert not_ranked == "4 (suspect: a decode speedup above tau, which equal kernels on a steady machine forbid)"
    (pair,) = pair_answers([answer])
    assert pair.k == 2 and pair.suspect == (SuspectCount(4, 1),)
    sentence = pair_sentence(pair, engines=False)
    suspect = "suspect: a decode speedup above tau, which equal kernels on a steady machine forbid"
    assert f"; not ranked ({suspect}): k=4 on 1" in sentence


def test_a_prompt_whose_every_k_is_suspect_has_no_best():
    rows = [_suspect(ranked_case(k, speedup, seconds=0.01)) for k, speedup in ((1, 2.2), (4, 2.5))]
    (answer,) = prompt_answers(rows)
    assert answer.best_k is None and answer.decode_speedup is None and answer.recommended_k is None
    assert answer.not_ranked_reason.startswith("suspect") and [s.k for s in answer.suspect] == [1, 4]
    cells, headers = prompt_table([answer], engines=False)
    assert cells[0][headers.index("best k")] == "-" and cells[0][headers.index("decode speedup")] == "-"
    (pair,) = pair_answers([answer])
    assert pair.k is None and pair_sentence(pair, engines=False).startswith("Across 1 prompt(s): no k is best")
    json.dumps(answer.to_json(), allow_nan=False)
    (chat,) = prompt_answers([ranked_case(2, 1.8, prompt="chat")])
    (pair,) = pair_answers([answer, chat])
    assert pair.k == 2 and pair.unanswered_prompts == 1 and pair.undecided_prompts == 0
    assert "; on 1 prompt(s) no k is best; not ranked (suspect" in pair_sentence(pair, engines=False)


def test_the_leaderboard_leaves_a_suspect_case_out():
    rows = [ranked_case(2, 1.8, category="qa"), _suspect(ranked_case(4, 2.5, category="qa"))]
    (board,) = leaderboards(rows)
    assert [line.k for line in board.lines] == [2]
    assert left_out_text(board).endswith("1 suspect")


def test_the_summary_and_the_report_mark_and_name_a_suspect_case():
    rows = _prompt_rows()
    lines = summary_lines(rows)
    table_row = next(line for line in lines if line.startswith("code") and "2.50 [2.25, 2.75]" in line)
    assert f"2.50 [2.25, 2.75] {SUSPECT_MARK}" in table_row
    assert f"1 case(s) suspect ({SUSPECT_MARK})" in "\n".join(lines)
    assert f"  p-k4-code: {_CAUSE}" in lines
    report = report_markdown(rows, {}, {})
    assert f"- p-k4-code: {_CAUSE}" in report and f"2.50 [2.25, 2.75] {SUSPECT_MARK}" in report
    assert "Best decode speedup: **1.80" in report  # the headline's best is a trusted one


# --- the gate ----------------------------------------------------------------------------------------------------


def _gated(speedup: float, **fields) -> CaseResult:
    return gated_case("tiny-k4-natural", acceptance=0.8, drafted=100, speedup=speedup, tau=3.0, **fields)


def test_the_speed_gate_fails_a_suspect_speedup_however_high():
    baseline = baseline_document([_gated(1.5)], {"fingerprint": {}, "versions": {}}, created="2024-01-01T00:00:00")
    now = [_gated(4.0, suspect=True, suspect_cause=_CAUSE)]  # faster than the baseline: a drop check passes it
    assert compare(baseline, now).regressions == []  # speed not gated: nothing to say of it
    (regression,) = compare(baseline, now, CompareSettings(max_speedup_drop=0.1)).regressions
    assert (regression.kind, regression.old, regression.new) == ("suspect speedup", 1.5, 4.0)
    assert regression.describe() == f"tiny-k4-natural: suspect speedup 1.50 -> 4.00 (not passed as measured: {_CAUSE})"
    text = "\n".join(gate_summary_lines([regression], [], 1, "baseline.json"))
    assert "decode speedup <= tau" in text
    trusted = [_gated(4.0)]
    assert compare(baseline, trusted, CompareSettings(max_speedup_drop=0.1)).regressions == []


# --- through the plugin: a planted asymmetry ----------------------------------------------------------------------

#: every target pass sleeps, so times are sleep-bound and steady on a busy machine; the greedy baseline's steps
#: sleep 200 ms against the verify passes' 50 ms: an asymmetry no tiny model's step (well under a millisecond,
#: tens of milliseconds on a machine busy with other jobs) could hide. Restored when the run ends (pytester runs
#: in this process).
SLOW_BASELINE_CONFTEST = """
import time

from pytest_specbench.engine import decoding

_step = decoding.GreedyStepper.step
_verify = decoding._verify


def _slow_step(self):
    time.sleep(0.2)
    _step(self)


def _slow_verify(*args):
    time.sleep(0.05)
    return _verify(*args)


def pytest_configure(config):
    decoding.GreedyStepper.step = _slow_step
    decoding._verify = _slow_verify


def pytest_unconfigure(config):
    decoding.GreedyStepper.step = _step
    decoding._verify = _verify
"""


@pytest.mark.slow
@pytest.mark.parametrize("planted", [True, False], ids=["slow-baseline", "as-is"])
def test_a_planted_asymmetry_is_caught_and_an_honest_run_is_not(bench, pytester: pytest.Pytester, planted: bool):
    if planted:
        pytester.makeconftest(SLOW_BASELINE_CONFTEST)
    args = ("--specbench-min-rounds=3", "--specbench-max-rounds=3", "--specbench-race=off", "--specbench-threads=1")
    result = bench(*args, prompts="natural")
    result.assert_outcomes(passed=2)
    rows = json.loads((Path(pytester.path) / "spec_results.json").read_text())["results"]
    assert len(rows) == 2
    text = result.stdout.str()
    if not planted:
        assert not any(row["suspect"] for row in rows), [(r["case"], r["suspect_cause"]) for r in rows]
        assert "suspect (" not in text and all(row["suspect_cause"] is None for row in rows)
        return
    for row in rows:
        assert row["suspect"], (row["case"], row["decode_speedup"], row["tau"])
        assert row["decode_speedup_ci_low"] > row["tau"] * (1 + SUSPECT_TOLERANCE)
        assert f"exceeds tau {row['tau']:.2f}" in row["suspect_cause"]
        assert "so the two runs' kernels differ" in row["suspect_cause"]
        assert f"{row['case']}: {row['suspect_cause']}" in text
    assert f"2 case(s) suspect ({SUSPECT_MARK})" in text
    for row in rows:  # the case table's cell: the speedup, its interval, the marks
        shown = f"{row['decode_speedup']:.2f} [{row['decode_speedup_ci_low']:.2f}, {row['decode_speedup_ci_high']:.2f}]"
        (line,) = [line for line in text.splitlines() if line.startswith("natural ") and shown in line]
        assert line.split(shown)[1].split(SUSPECT_MARK)[0].strip() in ("", "!"), line
