"""The answer of a run, from rows built by hand: best k, ties, slower k (eliminated or tested), regret."""

from __future__ import annotations

import dataclasses
import json

import pytest
from ranked_rows import cost_fields, ranked_case

from pytest_specbench.report.answer import (
    KCount,
    SlowerK,
    pair_answers,
    pair_sentence,
    prompt_answers,
    prompt_table,
    run_answer,
)
from pytest_specbench.report.markdown import report_markdown
from pytest_specbench.report.summary import run_document, summary_lines
from pytest_specbench.results.schema import CaseResult
from pytest_specbench.results.strict_json import strict_json

#: a row of pair p; ``seconds``: its time per decode token before the round's drift (None, the default: no round data)
_row = ranked_case


def _code_rows() -> list[CaseResult]:
    return [
        _row(1, 1.1, seconds=0.018, rounds=range(3), eliminated_by=4),  # the race stopped it after round 2
        _row(2, 1.78, seconds=0.01005),  # within noise of the best
        _row(4, 1.8, seconds=0.01),
        _row(8, 1.3, seconds=0.015, recommended_k=8),  # clearly slower, never eliminated
        _row(16, 1.5),  # an old row: no round data
        _row("auto", 2.0, seconds=0.009),  # a schedule: not raced, not the best, set beside it
    ]


def test_best_ties_slower_and_unknown_for_one_prompt():
    (answer,) = prompt_answers(_code_rows())
    assert answer.pair == "p" and answer.engine == "native" and answer.prompt == "code"
    assert answer.best_k == 4 and answer.decode_speedup == 1.8
    assert answer.decode_speedup_ci_low == 1.8 * 0.9 and answer.decode_speedup_ci_high == 1.8 * 1.1
    assert answer.tied == (2,)
    assert answer.slower == (SlowerK(1, 4), SlowerK(8, None))
    assert answer.unknown == (16,) and answer.ranking == "unknown"
    # recommended: 4, the model's best among the k run, and the measured best: no regret
    assert answer.recommended_k == 4 and answer.regret == 1.0
    (auto,) = answer.schedules
    assert auto.k == "auto" and auto.decode_speedup == 2.0
    # Paired over the 8 rounds both ran: the wiggle is a rotation of one cycle, so its geometric mean cancels.
    assert auto.ratio_to_best == pytest.approx(2.0 / 1.8) and auto.ratio_to_best_rounds == 8
    assert auto.ratio_to_best_ci_low < 2.0 / 1.8 < auto.ratio_to_best_ci_high < 1.14
    assert answer.against_hf is None  # no hf engine ran
    json.dumps(answer.to_json(), allow_nan=False)  # plain built-in types


def test_a_fully_ranked_prompt_and_regret_at_the_recommended_k():
    rows = [row for row in _code_rows() if row.k != 16]
    rows = [dataclasses.replace(row, **cost_fields(row.k, flat_until=9)) for row in rows]  # the model now favours 8
    (answer,) = prompt_answers(rows)
    assert answer.ranking == "tested" and answer.unknown == ()
    assert answer.recommended_k == 8 and answer.recommended_decode_speedup == 1.3
    assert answer.regret == 1.3 / 1.8
    # The model's best overall would be 10 (11 cheap positions), which did not run: the best of the k run counts.
    (answer,) = prompt_answers([dataclasses.replace(row, **cost_fields(row.k, flat_until=11)) for row in rows])
    assert answer.recommended_k == 8
    no_costs = [dataclasses.replace(row, verify_costs_ms=[]) for row in rows]
    (answer,) = prompt_answers(no_costs)
    assert answer.recommended_k is None and answer.regret is None


def test_rows_without_round_data_are_never_called_tied():
    rows = [_row(k, speedup) for k, speedup in ((1, 1.2), (2, 1.6), (4, 1.5))]  # files from before rounds
    (answer,) = prompt_answers(rows)
    assert answer.best_k == 2 and answer.tied == () and answer.slower == ()
    assert answer.unknown == (1, 4) and answer.ranking == "unknown"
    # The best's round data missing: none of the others can be tested against it.
    rows = [_row(1, 1.2, seconds=0.02), _row(2, 1.6), _row(4, 1.5, seconds=0.012)]
    (answer,) = prompt_answers(rows)
    assert answer.best_k == 2 and answer.unknown == (1, 4)


def test_k_timed_in_blocks_of_their_own_are_ranked_unpaired_and_marked_so():
    # A served engine runs each k on its own server, in a block of its own: no round is shared with the best.
    rows = [
        _row(1, 1.2, seconds=0.02),
        _row(2, 1.6, seconds=0.01, block="k2:code"),
        _row(4, 1.58, seconds=0.0101, block="k4:code"),
    ]
    (answer,) = prompt_answers(rows)
    assert answer.best_k == 2 and answer.unknown == () and answer.ranking == "tested unpaired"
    assert answer.slower == (SlowerK(1, None),) and answer.tied == (4,)
    cells, headers = prompt_table([answer], engines=False)
    assert cells[0][headers.index("tied")] == "4 (unpaired)"
    assert cells[0][headers.index("slower")].endswith("(unpaired)")
    # A k without round data leaves the ranking unknown; the k tested are still marked unpaired.
    (answer,) = prompt_answers([*rows, _row(8, 1.1)])
    assert answer.ranking == "unknown" and answer.unknown == (8,) and not answer.paired
    cells, headers = prompt_table([answer], engines=False)
    assert cells[0][headers.index("tied")] == "4 (unpaired)"
    # One k in the best's block: the shared rounds pair them, and a k with none in common is not ranked, saying why.
    rows[2] = _row(4, 1.58, seconds=0.0101, block="k2:code")
    (answer,) = prompt_answers(rows)
    assert answer.ranking == "unknown" and answer.unknown == (1,) and answer.tied == (4,) and answer.paired
    assert answer.not_ranked_reason.startswith("timed in blocks of their own")


def test_a_block_split_across_runs_is_not_ranked_and_says_why():
    rows = [
        _row(2, 1.78, seconds=0.01005),
        _row(4, 1.8, seconds=0.01),
        _row(8, 1.3, seconds=0.015),
        _row("auto", 2.0, seconds=0.009),
    ]
    (answer,) = prompt_answers(rows)
    assert answer.tied == (2,) and answer.slower == (SlowerK(8, None),)
    assert answer.not_ranked_reason is None and answer.schedules[0].ratio_to_best_rounds == 8
    # k=8 and k=auto replayed from the log of an earlier run: round i of that run is not round i of this one.
    rows = [
        dataclasses.replace(row, run_id="2026-12-01T09:00:00+00:00-a1" if row.k in (8, "auto") else "now")
        for row in rows
    ]
    (answer,) = prompt_answers(rows)
    assert answer.best_k == 4 and answer.tied == () and answer.slower == ()
    assert answer.unknown == (2, 8) and answer.ranking == "unknown"
    assert answer.not_ranked_reason == "its cases were measured in different runs"
    (auto,) = answer.schedules
    assert auto.ratio_to_best_rounds == 0 and auto.ratio_to_best_ci_low is None  # never paired
    cells, _ = prompt_table([answer], engines=False)
    assert cells[0][3:6] == ["-", "-", "2, 8 (its cases were measured in different runs)"]
    (pair,) = pair_answers([answer])
    assert "on 1 prompt(s) the ties are unknown (its cases were measured in different runs)" in pair_sentence(
        pair, False
    )


def test_only_schedules_give_no_answer_and_an_eliminated_k_is_never_the_best():
    assert prompt_answers([_row("auto", 2.0, seconds=0.01), _row("heuristic", 1.5)]) == []
    # k=1 has the higher speedup over the three rounds it ran, but the race found it slower than k=2.
    rows = [_row(1, 1.9, seconds=0.011, rounds=range(3), eliminated_by=2), _row(2, 1.8, seconds=0.01)]
    (answer,) = prompt_answers(rows)
    assert answer.best_k == 2 and answer.slower == (SlowerK(1, 2),)


def test_across_prompts_the_k_best_or_tied_on_most():
    chat = [
        _row(1, 1.0, prompt="chat", seconds=0.02),
        _row(2, 1.4, prompt="chat", seconds=0.0101),
        _row(4, 1.45, prompt="chat", seconds=0.01),
    ]
    prompts = prompt_answers([*_code_rows(), *chat])
    assert [(a.prompt, a.best_k, a.tied) for a in prompts] == [("code", 4, (2,)), ("chat", 4, (2,))]
    (pair,) = pair_answers(prompts)
    assert pair.pair == "p" and pair.k == 4 and pair.best_or_tied == 2 and pair.best == 2
    assert pair.prompts == 2 and pair.undecided_prompts == 1
    assert pair.counts == (KCount(4, 2, 2), KCount(2, 2, 0))
    assert pair_sentence(pair, False) == (
        "Across 2 prompt(s): k=4 is best or tied with the best on 2 (best on 2); per k, best or tied: 4: 2, 2: 2; "
        "on 1 prompt(s) the ties are unknown (no round data). k=auto reaches 1.11 [1.09, 1.13] of the best constant "
        "k's decode speedup (geometric mean over 1 prompt(s), 95% CI; the best is chosen after the fact, so this is "
        "conservative)."
    )


def test_engines_answer_apart_and_the_table_names_them():
    rows = [*_code_rows(), *(dataclasses.replace(row, engine="hf") for row in _code_rows() if row.k in (1, 2))]
    answers = prompt_answers(rows)
    assert [(a.engine, a.best_k) for a in answers] == [("native", 4), ("hf", 2)]
    hf = answers[1]
    assert hf.slower == (SlowerK(1, 4),)  # as its row says (4 was not run by hf)
    cells, headers = prompt_table(answers, engines=True)
    assert headers[:3] == ["prompt", "engine", "best k"] and cells[1][:3] == ["code", "hf", "2"]
    cells, headers = prompt_table(answers[:1], engines=False)
    assert cells[0][:6] == ["code", "4", "1.80 [1.62, 1.98]", "2", "1 (eliminated by 4), 8", "16 (no round data)"]
    assert cells[0][6:] == ["4", "1.00", "auto 1.11 [1.09, 1.13]"]
    assert [p.engine for p in pair_answers(answers)] == ["native", "hf"]


def test_the_answer_is_in_the_terminal_summary_the_report_and_the_json():
    rows = _code_rows()
    text = "\n".join(summary_lines(rows))
    assert "the answer (best constant k per prompt" in text and "1 (eliminated by 4), 8" in text
    assert "Across 1 prompt(s): k=4 is best or tied with the best on 1" in text
    report = report_markdown(rows, {}, {})
    assert "The answer. Per prompt" in report and "| 1 (eliminated by 4), 8 |" in report
    assert "Across 1 prompt(s): k=4" in report
    document = json.loads(strict_json(run_document(rows, {}, {}).to_json()))
    assert document["answer"] == json.loads(json.dumps(run_answer(rows).to_json()))
    assert document["answer"]["prompts"][0]["best_k"] == 4 and document["answer"]["pairs"][0]["k"] == 4


def test_the_ranking_reads_each_run_over_its_own_paired_baseline_so_drift_between_cases_cancels():
    """Two k run at different moments of each round, the machine's speed moving by up to 2x between them; each
    run's paired baseline moved with it. Over those baselines k=4 is 25% faster in every round: ranked slower.
    The planted bug, ranking the raw times, cannot tell them apart."""
    import random

    rng = random.Random(3)  # a seed whose raw times alone leave the two within noise (t = 1.0)
    drift = {k: [rng.uniform(0.6, 1.4) for _ in range(8)] for k in (2, 4)}

    def row(k, seconds):
        return _row(
            k,
            0.02 / seconds,
            seconds=seconds,
            round_decode_token_s=[seconds * d for d in drift[k]],
            baseline_round_decode_token_s=[0.02 * d for d in drift[k]],
        )

    rows = [row(2, 0.0125), row(4, 0.01)]
    (answer,) = prompt_answers(rows)
    assert answer.best_k == 4 and answer.slower == (SlowerK(2, None),)
    (planted,) = prompt_answers([dataclasses.replace(row, baseline_round_decode_token_s=[]) for row in rows])
    assert planted.tied == (2,)


def test_the_engines_side_by_side_name_the_native_engines_kernels():
    from factory import case_result

    native = case_result(engine="native", k=4, few_rows_rows=[2, 3, 5], column_head_rows=[5])
    hf = case_result(engine="hf", k=4, few_rows_rows=[], column_head_rows=[])
    text = "\n".join(summary_lines([native, hf]))
    assert "engines side by side" in text
    assert "block sizes with the few-rows kernel: 2, 3, 5; with the head as weight @ hidden.T: 5" in text
    assert "the hf engine runs transformers' own" in text
    assert "few-rows kernel" not in "\n".join(summary_lines([native]))  # one engine: nothing to explain


def test_rows_of_one_round_are_unranked_for_too_few_rounds_not_for_missing_round_data():
    rows = [_row(k, speedup, seconds=0.02 / speedup, rounds=range(1)) for k, speedup in [(1, 1.2), (2, 1.5), (4, 1.4)]]
    (answer,) = prompt_answers(rows)
    assert answer.best_k == 2 and answer.unknown == (1, 4)
    assert answer.not_ranked_reason == "too few rounds in common: a tie needs 2 or more (--specbench-min-rounds)"
    (pair,) = pair_answers([answer])
    assert pair.undecided_reasons == (answer.not_ranked_reason,)


def test_the_engines_side_by_side_set_every_engine_with_intervals_over_the_prompts_all_measured():
    import math

    from factory import case_result

    from pytest_specbench.report.engine_comparison import compare_engines

    decode = {"native": (2.0, 1.5, 3.0), "hf": (1.6, 1.2, 2.7), "vllm": (2.2, 1.4, 3.3)}
    end_to_end = {"native": (1.5, 1.1, 2.0), "hf": (1.4, 1.0, 1.6), "vllm": (1.0, 0.9, 1.2)}
    prompts = ("natural", "code_python", "repetitive")
    rows = [
        case_result(engine=engine, k=4, prompt=prompt, decode_speedup=d, speedup=e, tau=9.0, suspect=False)
        for engine in ("vllm", "hf", "native")  # the table orders them as --specbench-engine lists them
        for prompt, d, e in zip(prompts, decode[engine], end_to_end[engine])
    ]
    # a diverged row drops its prompt from every engine's mean: the means compare the same prompts
    rows.append(case_result(engine="vllm", k=4, prompt="list_items", decode_speedup=5.0, verdict="diverged"))
    rows += [case_result(engine=e, k=4, prompt="list_items", decode_speedup=5.0, speedup=5.0) for e in ("native", "hf")]
    (comparison,) = compare_engines(rows)
    assert comparison.engines == ("native", "hf", "vllm") and comparison.prompts == prompts
    vllm = comparison.means["decode_speedup", "vllm"]
    assert math.isclose(vllm.estimate, (2.2 * 1.4 * 3.3) ** (1 / 3)) and vllm.low < vllm.estimate < vllm.high
    assert math.isclose(comparison.means["speedup", "vllm"].estimate, (1.0 * 0.9 * 1.2) ** (1 / 3))
    assert math.isclose(comparison.ratios["speedup", "hf"].estimate, (1.4 / 1.5 * 1.0 / 1.1 * 1.6 / 2.0) ** (1 / 3))
    assert math.isclose(comparison.ratios["decode_speedup", "hf"].estimate, (0.8 * 0.8 * 0.9) ** (1 / 3))
    text = "\n".join(summary_lines(rows))
    assert "vllm / native" in text and "hf / native" in text
    assert f"{vllm.estimate:.2f} [{vllm.low:.2f}, {vllm.high:.2f}]" in text


def test_an_engine_sharing_no_prompt_is_left_out_of_the_side_by_side_not_the_others():
    from factory import case_result

    from pytest_specbench.report.engine_comparison import compare_engines

    rows = [
        case_result(engine=engine, k=2, prompt=prompt, decode_speedup=1.5, speedup=1.2, suspect=False)
        for engine, prompt in (("native", "natural"), ("hf", "natural"), ("vllm", "code_python"))
    ]
    (comparison,) = compare_engines(rows)
    assert comparison.engines == ("native", "hf") and comparison.prompts == ("natural",)
    assert comparison.means["decode_speedup", "hf"].low is None  # one prompt: no interval, and the table says so
    assert "1.50 [no interval]" in "\n".join(summary_lines(rows))
    assert compare_engines([row for row in rows if row.engine != "hf"]) == []  # nothing shared: no comparison


def test_an_axis_the_report_groups_by_splits_the_answer_by_its_declaration(monkeypatch):
    # A context length declared as an axis (and a row field): each of its values is an answer of its own, named in
    # a column of the answer's table, where the rows of both would otherwise be ranked as one prompt's.
    from pytest_specbench.settings import axes

    monkeypatch.setattr(axes, "AXES", (*axes.AXES, axes.Axis("context", lambda n: f"-c{n}")))

    @dataclasses.dataclass
    class WithContext(CaseResult):
        context: int = 0

    def at(context: int, speedups: dict[int, float]) -> list[WithContext]:
        rows = [_row(k, speedup, seconds=0.01 / speedup) for k, speedup in speedups.items()]
        return [WithContext(**dataclasses.asdict(row), context=context) for row in rows]

    short, long = prompt_answers([*at(64, {2: 1.9, 4: 1.2}), *at(512, {2: 1.1, 4: 1.6})])
    assert (short.further, short.best_k) == ((("context", 64),), 2)
    assert (long.further, long.best_k) == ((("context", 512),), 4)
    cells, headers = prompt_table([short, long], engines=False)
    assert headers[:2] == ["prompt", "context"] and [row[:3] for row in cells] == [
        ["code", "64", "2"],
        ["code", "512", "4"],
    ]
    monkeypatch.setattr(axes, "AXES", axes.AXES[:-1])
    (merged,) = prompt_answers([*at(64, {2: 1.9, 4: 1.2}), *at(512, {2: 1.1, 4: 1.6})])  # undeclared: one answer
    assert merged.further == ()


def test_an_axis_the_report_groups_by_splits_every_grouping_of_the_report(monkeypatch):
    # Beside the answer: the engines side by side, the categories' speedups, the prompts' analyses, the leaderboards
    # and the batch answer each keep a declared axis's values apart, and say which value is which.
    from factory import case_result

    from pytest_specbench.report.analysis import analyse_prompts, best_category_speedups
    from pytest_specbench.report.batch import batch_answer
    from pytest_specbench.report.engine_comparison import compare_engines, engine_table
    from pytest_specbench.report.leaderboard import leaderboards, title
    from pytest_specbench.settings import axes

    monkeypatch.setattr(axes, "AXES", (*axes.AXES, axes.Axis("context", lambda n: f"-c{n}")))

    @dataclasses.dataclass
    class WithContext(CaseResult):
        context: int = 0

    base = dict(k=2, prompt="natural", category="natural", decode_speedup=1.5, speedup=1.2, suspect=False)
    rows = [
        WithContext(**dataclasses.asdict(case_result(**base, engine=engine, batch=batch)), context=context)
        for context in (64, 512)
        for engine in ("native", "hf")
        for batch in (1, 2)
    ]
    by_context = {(("context", 64),), (("context", 512),)}
    comparisons = compare_engines(rows)
    assert {c.further for c in comparisons} == by_context
    headers, cells = engine_table(comparisons)
    assert headers[2] == "context" and {line[2] for line in cells} == {"64", "512"}
    assert {item.further for item in best_category_speedups(rows)} == by_context
    assert {analysis.further for analysis in analyse_prompts(rows)} == by_context
    boards = leaderboards(rows)
    assert {board.further for board in boards if board.engine == "native"} == by_context
    assert {title(board, False, False) for board in boards} == {
        f"{rows[0].pair} (context=64)",
        f"{rows[0].pair} (context=512)",
    }
    assert {answer.further for answer in batch_answer(rows)} == by_context
    monkeypatch.setattr(axes, "AXES", axes.AXES[:-1])  # undeclared: one group each
    assert {c.further for c in compare_engines(rows)} == {()} and len(analyse_prompts(rows)) == 1


def test_the_engines_side_by_side_give_each_engines_own_tokens_per_second_beside_its_speedup():
    # A faster greedy baseline shrinks a speedup: each engine's own tokens per second show which decodes faster.
    import math

    from factory import case_result

    from pytest_specbench.report.engine_comparison import compare_engines

    rows = [
        case_result(
            engine=engine, k=4, prompt=prompt, decode_speedup=speedup, speedup=speedup, suspect=False,
            baseline_decode_tps=greedy, decode_tps=greedy * speedup,
        )
        for engine, speedup, greedy in (("native", 1.5, 40.0), ("llamacpp", 2.0, 20.0))
        for prompt in ("natural", "code_python")
    ]  # fmt: skip
    (comparison,) = compare_engines(rows)
    assert math.isclose(comparison.means["decode_tps", "native"].estimate, 60.0)
    assert math.isclose(comparison.means["baseline_decode_tps", "llamacpp"].estimate, 20.0)
    assert math.isclose(comparison.ratios["decode_tps", "llamacpp"].estimate, 40.0 / 60.0)
    text = "\n".join(summary_lines(rows))
    assert "decode tok/s" in text and "greedy tok/s" in text and "60.00" in text
