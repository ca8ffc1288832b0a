"""k=auto against the best constant k, and against transformers' default schedule: paired intervals from
hand-built rows, their planted bugs (an unpaired interval, a pairing across blocks), and where they show."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
from ranked_rows import ranked_case, round_seconds

from pytest_specbench.report.answer import prompt_table, run_answer
from pytest_specbench.report.markdown import report_markdown
from pytest_specbench.report.regret import (
    AgainstHf,
    OverPrompts,
    PairedRatio,
    over_prompts,
    paired_ratio,
    ratio_to_best,
    ratio_to_hf,
    round_times,
)
from pytest_specbench.report.regret_section import regret_markdown
from pytest_specbench.report.summary import summary_lines
from pytest_specbench.results.schema import CaseResult
from pytest_specbench.results.statistics import speedup_interval


def _row(
    k, seconds, *, prompt="code", engine="native", rounds=range(8), block=None, shift=None, wall=None, **fields
) -> CaseResult:
    """A row timed ``seconds`` per decode token in each of ``rounds`` (:func:`ranked_rows.ranked_case`): decode
    speedup 0.02 / seconds (+-5%), end to end 0.9 of it; ``wall``: its end-to-end seconds per round."""
    speedup = 0.02 / seconds
    shift = (k if isinstance(k, int) else 5) if shift is None else shift
    timed = {"block": block} if block else {}
    if wall is not None:
        timed["round_wall_s"] = round_seconds(wall, rounds, shift + 3)
    return ranked_case(
        k,
        speedup,
        prompt=prompt,
        engine=engine,
        seconds=seconds,
        rounds=rounds,
        shift=shift,
        case=f"p-k{k}-{prompt}-{engine}",
        decode_speedup_ci_low=speedup * 0.95,
        decode_speedup_ci_high=speedup * 1.05,
        speedup=speedup * 0.9,
        decode_tps=1.0 / seconds,
        **timed,
        **fields,
    )


def test_the_ratio_is_paired_over_the_rounds_both_ran_and_tighter_than_unpaired():
    best, auto = _row(4, 0.01), _row("auto", 0.0105)
    result = ratio_to_best(auto, best)
    assert result.ratio == pytest.approx(0.01 / 0.0105)  # the wiggle's rotation cancels over 8 rounds
    assert result.rounds == 8
    low, high = result.ci_low, result.ci_high
    assert low < result.ratio < high and high - low < 0.03
    # Planted bug: comparing the two cases' times unpaired keeps the rounds' drift (+-30%) in the interval.
    unpaired = speedup_interval(best.round_decode_token_s, auto.round_decode_token_s, paired=False)
    assert unpaired.high - unpaired.low > 10 * (high - low)
    # Only the rounds both ran pair up: the best raced on for all 8, the schedule ran 5.
    partial = ratio_to_best(_row("auto", 0.0105, rounds=range(5)), best)
    assert partial.rounds == 5 and partial.ci_low is not None


def test_rows_of_different_blocks_or_without_rounds_are_never_paired():
    best = _row(4, 0.01)
    # Planted bug: the same round numbers in another block are other rounds; pairing them would be wrong.
    elsewhere = _row("auto", 0.0105, block="t:other")
    assert paired_ratio(round_times(elsewhere), round_times(best)) is None
    result = ratio_to_best(elsewhere, best)
    assert result.rounds == 0
    assert result.ci_low is None and result.ci_high is None
    assert result.ratio == pytest.approx(elsewhere.decode_speedup / best.decode_speedup)
    for lacking in (
        {"block_rounds": []},
        {"round_decode_token_s": [0.01] * 7},
        {"block": ""},
        {"round_decode_token_s": [0.01] * 7 + [float("nan")]},
    ):
        assert round_times(dataclasses.replace(best, **lacking)) is None
    one_round = ratio_to_best(_row("auto", 0.0105, rounds=[3]), best)
    assert one_round.rounds == 1 and one_round.ci_low is None


def test_the_interval_covers_the_true_ratio_at_its_stated_rate():
    rng = random.Random(7)
    truth, covered, trials = 0.95, 0, 400
    for _ in range(trials):
        drift = [math.exp(rng.gauss(0, 0.1)) for _ in range(8)]
        best, auto = (
            ranked_case(
                k,
                1.0,
                block="b",
                block_rounds=list(range(8)),
                round_decode_token_s=[seconds * d * math.exp(rng.gauss(0, 0.02)) for d in drift],
            )
            for k, seconds in ((4, 0.01), ("auto", 0.01 / truth))
        )
        result = paired_ratio(round_times(auto), round_times(best))
        covered += result.ci_low <= truth <= result.ci_high
    assert 0.92 <= covered / trials <= 0.98


def test_native_auto_against_hf_auto_end_to_end():
    native, hf = _row("auto", 0.009, wall=1.0), _row("auto", 0.011, engine="hf", wall=1.2, shift=2)
    result = ratio_to_hf(native, hf)
    assert result.paired and result.rounds == 8
    assert result.ci_low < 1.2 < result.ci_high and result.ratio == pytest.approx(1.2, rel=0.01)
    # Without per-round wall times: the ratio of the rows' end-to-end speedups, said to be unpaired.
    plain = ratio_to_hf(_row("auto", 0.009), _row("auto", 0.011, engine="hf"))
    assert not plain.paired and plain.ci_low is None and plain.ratio == pytest.approx(0.011 / 0.009)
    assert ratio_to_hf(dataclasses.replace(native, speedup=None), _row("auto", 0.011, engine="hf")).ratio is None


def test_over_prompts_is_a_geometric_mean_with_a_t_interval():
    one = over_prompts([PairedRatio(0.9, 0.85, 0.95, 8)])
    assert one == OverPrompts(1, 0.9, 0.85, 0.95)
    three = over_prompts([PairedRatio(r, None, None, 0) for r in (0.9, 1.0, 1.1)])
    assert three.prompts == 3 and three.ratio == pytest.approx((0.9 * 1.0 * 1.1) ** (1 / 3))
    assert three.ci_low < 0.9 < 1.1 < three.ci_high
    assert over_prompts([AgainstHf("auto", None, None, None, 0, False)]) is None


def _run_rows() -> list[CaseResult]:
    rows = []
    for prompt, auto_s in (("code", 0.0105), ("chat", 0.0098)):
        rows += [
            _row(1, 0.018, prompt=prompt),
            _row(4, 0.01, prompt=prompt),
            _row("auto", auto_s, prompt=prompt, wall=1.0),
        ]
        rows += [
            _row(4, 0.011, prompt=prompt, engine="hf"),
            _row("auto", 0.012, prompt=prompt, engine="hf", wall=1.2, shift=2),
        ]
    return rows


def test_the_answer_json_holds_each_prompt_and_the_pair_summary():
    answer = run_answer(_run_rows())
    native = [a for a in answer.prompts if a.engine == "native"]
    assert [a.prompt for a in native] == ["code", "chat"]
    for a in native:
        (auto,) = a.schedules
        assert set(auto.to_json()) == {
            "k",
            "decode_speedup",
            "suspect",
            "ratio_to_best",
            "ratio_to_best_ci_low",
            "ratio_to_best_ci_high",
            "ratio_to_best_rounds",
        }
        assert a.against_hf.paired and a.against_hf.ratio == pytest.approx(1.2, rel=0.01)
    pair = next(p for p in answer.pairs if p.engine == "native")
    (summary,) = pair.schedules
    assert summary.k == "auto" and summary.prompts == 2
    assert summary.ratio == pytest.approx(math.sqrt(0.01 / 0.0105 * 0.01 / 0.0098))
    assert pair.against_hf.prompts == 2 and pair.against_hf.paired_prompts == 2
    hf_pair = next(p for p in answer.pairs if p.engine == "hf")
    assert hf_pair.against_hf is None  # compared from the native side only
    json.dumps(answer.to_json(), allow_nan=False)


def test_the_table_the_terminal_and_the_report_show_the_interval():
    rows = _run_rows()
    answer = run_answer(rows)
    cells, headers = prompt_table(answer.prompts, engines=True)
    assert headers[-2:] == ["schedules / best [95% CI]", "auto / hf auto (end to end)"]
    code = next(c for c in cells if c[:2] == ["code", "native"])
    assert code[-2].startswith("auto 0.95 [") and code[-1].startswith("1.20 [")
    text = "\n".join(summary_lines(rows))
    assert "k=auto reaches 0.99 [0.64, 1.53]" in text and "against transformers' default schedule" in text
    report = report_markdown(rows, {}, {})
    assert "## k=auto against the best constant k" in report and "chosen after the fact" in report
    section = regret_markdown(answer)
    assert "\n| code     | native   | auto       | 0.95 [" in "\n".join(section)
    assert regret_markdown(run_answer([r for r in rows if r.k != "auto"])) == []


def test_the_figure_is_written_by_the_run_s_figure_writer(tmp_path):
    pytest.importorskip("matplotlib")
    from pytest_specbench.report.outputs import write_figures

    rows = _run_rows()
    write_figures(tmp_path, rows)
    assert (tmp_path / "schedule_regret_p.png").stat().st_size > 1000
    report = report_markdown(rows, {}, {}, tmp_path, tmp_path / "report.md")
    assert "](schedule_regret_p.png)" in report
