"""Per-request statistics: each round, turn or batch row one request, counted once; their percentiles in the row,
the CSV and the JSON, the report's section and histogram, and the summary's TPOT cell."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
import torch
from factory import case_result

from pytest_specbench.cases.matrix import Case
from pytest_specbench.cases.pairs import PairSpec
from pytest_specbench.cases.prompts import Prompt
from pytest_specbench.engine.batched import BatchedGenerationResult
from pytest_specbench.engine.stats import DecodeStats, GenerationResult, joined_result, record_step
from pytest_specbench.measure.row import Measurement, build_result
from pytest_specbench.results.requests import percentiles, request_fields
from pytest_specbench.results.schema import CaseResult, csv_columns
from pytest_specbench.results.strict_json import strict_json

PAIR = PairSpec("tiny", "t", "d")
PROMPTS = [Prompt(f"natural-0{i}", "natural", f"text {i}") for i in range(1, 4)]


def _run(steps: list[tuple[int, int]], wall_s: float, prefill_s: float = 0.1, k: int = 4) -> GenerationResult:
    """A run from its decode steps ``(drafted, accepted)``, each committing its accepted tokens and a bonus."""
    stats = DecodeStats(wall_time_s=wall_s, prefill_time_s=prefill_s)
    record_step(stats, 0, 0, 1, 0)  # the prefill
    for drafted, accepted in steps:
        record_step(stats, drafted, accepted, 1, k)
    stats.new_tokens = 1 + sum(accepted + 1 for _, accepted in steps)
    return GenerationResult(torch.zeros(1, 3 + stats.new_tokens, dtype=torch.long), 3, stats)


def _row(speculative: list, k: int = 4, batch_prompt_ids: list[str] | None = None) -> CaseResult:
    from pytest_specbench.measure.batches import batch_row_fields

    batch = len(batch_prompt_ids) if batch_prompt_ids else 1
    kind_fields = None
    if batch_prompt_ids:
        kind_fields = lambda last, speed, steps, other: batch_row_fields(last, batch_prompt_ids, speed, steps, other)  # noqa: E731
    measurement = Measurement(
        input_ids=torch.zeros(1, 3, dtype=torch.long),
        reference=speculative[-1].token_ids,
        baselines=list(speculative),
        speculative=list(speculative),
        paired=True,
        verdict={"verdict": "lossless", "first_divergence": None},
        target_load_s=0.0,
        target_load_source="local",
        batch_prompt_ids=batch_prompt_ids,
        kind_fields=kind_fields,
    )
    case = Case(PAIR, k, PROMPTS[0], "natural", batch=batch)
    return build_result(case, measurement, "cpu", "float32", 0.05)


# --- the statistics of a case's requests -------------------------------------------------------------------------

#: three rounds of one prompt: (steps, wall seconds); the prefill takes 0.1 s of each
ROUNDS = [
    ([(4, 4), (4, 0)], 0.7),  # acceptance 0.5, tau 3, 6 decode tokens in 0.6 s: 100 ms each
    ([(4, 1), (4, 1), (4, 1)], 0.7),  # 0.25, tau 2, 6 tokens in 0.6 s: 100 ms
    ([(4, 4)], 0.6),  # 1.0, tau 5, 5 tokens in 0.5 s: 100 ms
]


def test_each_round_of_a_single_sequence_is_one_request():
    row = _row([_run(steps, wall) for steps, wall in ROUNDS])
    assert row.requests == 3
    assert row.request_acceptance == pytest.approx([0.5, 0.25, 1.0])
    assert row.request_tau == pytest.approx([3.0, 2.0, 5.0])
    assert row.request_tpot_ms == pytest.approx([100.0, 100.0, 100.0])
    assert row.request_mean_acceptance == pytest.approx(1.75 / 3)
    assert row.acceptance_rate == pytest.approx(1.0)  # the existing field keeps its meaning: the last run's
    assert [row.acceptance_p10, row.acceptance_p50, row.acceptance_p90] == pytest.approx(
        np.percentile([0.5, 0.25, 1.0], [10, 50, 90], method="linear")
    )
    assert [row.tau_p10, row.tau_p50, row.tau_p90] == pytest.approx([2.2, 3.0, 4.6])
    assert [row.tpot_p50_ms, row.tpot_p95_ms, row.tpot_p99_ms] == pytest.approx([100.0] * 3)


def test_each_turn_of_a_multi_turn_run_is_one_request():
    # Two rounds of a two-turn prompt: four requests, in round order, turns in order within each.
    rounds = [
        joined_result([_run([(2, 2), (2, 2)], 0.5), _run([(2, 0)], 0.3)]),  # 1.0 at 80 ms, 0.0 at 200 ms
        joined_result([_run([(2, 1)], 0.3), _run([(2, 2), (2, 1)], 0.6)]),  # 0.5 at 100 ms, 0.75 at 100 ms
    ]
    row = _row(rounds, k=2)
    assert row.requests == 4
    assert row.request_acceptance == pytest.approx([1.0, 0.0, 0.5, 0.75])
    assert row.request_tau == pytest.approx([3.0, 1.0, 2.0, 2.5])
    assert row.request_tpot_ms == pytest.approx([400 / 6 * 1, 200.0, 100.0, 100.0])
    assert row.tpot_p99_ms == pytest.approx(float(np.percentile(row.request_tpot_ms, 99)))
    # Each turn weighted once; the summed stats weight each drafted token once.
    assert row.request_mean_acceptance == pytest.approx(2.25 / 4)
    assert row.acceptance_rate == pytest.approx(4 / 6)


def _batched(rows: list[tuple[list[tuple[int, int]], float]], k: int = 2) -> BatchedGenerationResult:
    """A batched run from each row's (decode steps, seconds until it finished); the batch's prefill 0.1 s."""
    results = [_run(steps, wall, 0.1, k) for steps, wall in rows]
    batch = DecodeStats(wall_time_s=max(wall for _, wall in rows), prefill_time_s=0.1, prefill_tokens=len(rows))
    record_step(batch, 0, 0, len(rows), 0)
    for step in range(max(len(steps) for steps, _ in rows)):
        live = [steps[step] for steps, _ in rows if step < len(steps)]
        record_step(batch, sum(d for d, _ in live), sum(a for _, a in live), len(live), k)
    batch.new_tokens = sum(row.stats.new_tokens for row in results)
    return BatchedGenerationResult(results, batch)


def test_each_row_of_a_batch_is_one_request_timed_until_it_finished():
    run = _batched([([(2, 2), (2, 2)], 0.7), ([(2, 0), (2, 0), (2, 1)], 0.5), ([(2, 0)], 0.3)])
    row = _row([run, run], k=2, batch_prompt_ids=[prompt.id for prompt in PROMPTS])
    assert row.requests == 6  # two rounds of three rows
    assert row.request_acceptance == pytest.approx([1.0, 1 / 6, 0.0] * 2)
    assert row.row_acceptance == pytest.approx([1.0, 1 / 6, 0.0])  # the per-row field agrees
    assert row.request_tau == pytest.approx([3.0, 4 / 3, 1.0] * 2)
    assert row.request_tpot_ms == pytest.approx([100.0, 100.0, 200.0] * 2)
    assert row.tpot_p50_ms == pytest.approx(100.0)
    assert row.tpot_p95_ms == pytest.approx(float(np.percentile([100, 100, 200] * 2, 95)))


def test_a_request_that_drafted_nothing_or_decoded_nothing_is_left_out_of_its_percentiles():
    nothing_drafted = _run([(0, 0), (0, 0)], 0.3).stats
    one_token = _run([], 0.1).stats
    fields = request_fields([nothing_drafted, one_token, _run([(4, 2)], 0.4).stats])
    assert fields["requests"] == 3
    assert fields["request_acceptance"] == [None, None, 0.5]
    assert fields["request_tau"] == [1.0, None, 3.0]
    assert fields["request_tpot_ms"] == pytest.approx([100.0, None, 100.0])
    assert fields["acceptance_p10"] == fields["acceptance_p90"] == pytest.approx(0.5)
    assert fields["tau_p50"] == pytest.approx(2.0)
    empty = request_fields([])
    assert empty["requests"] == 0 and empty["tpot_p99_ms"] is None and empty["request_mean_acceptance"] is None


@pytest.mark.parametrize("values", [[3.0], [5.0, 1.0], [0.1, 0.9, 0.4, 0.4, 2.5, 7.0, 1.2], list(range(101))])
def test_percentiles_are_numpys_linear_ones(values):
    qs = (10, 50, 90, 95, 99)
    assert percentiles(values, qs) == pytest.approx(list(np.percentile(values, qs, method="linear")))
    assert percentiles([None, *values, None], qs) == percentiles(values, qs)
    assert percentiles([None], qs) == [None] * len(qs)


# --- the CSV and the JSON ----------------------------------------------------------------------------------------


def test_the_csv_has_the_percentiles_and_the_json_the_lists():
    from pytest_specbench.report.summary import csv_text

    row = _row([_run(steps, wall) for steps, wall in ROUNDS])
    summaries = ["requests", "request_mean_acceptance", "acceptance_p10", "acceptance_p50", "acceptance_p90"]
    summaries += ["tau_p10", "tau_p50", "tau_p90", "tpot_p50_ms", "tpot_p95_ms", "tpot_p99_ms"]
    lists = ["request_acceptance", "request_tau", "request_tpot_ms"]
    assert set(summaries) <= set(csv_columns()) and not set(lists) & set(csv_columns())
    written = next(csv.DictReader(io.StringIO(csv_text([row]))))
    assert written["requests"] == "3" and float(written["tpot_p99_ms"]) == pytest.approx(row.tpot_p99_ms)
    document = json.loads(strict_json(row.to_row()))
    assert document["request_tau"] == pytest.approx([3.0, 2.0, 5.0])
    assert CaseResult.from_row(document) == row
    older = {key: value for key, value in row.to_row().items() if key not in summaries + lists}
    read = CaseResult.from_row(older)  # a row of an older version: no requests, nothing to read
    assert read.requests == 0 and read.request_tpot_ms == [] and read.tpot_p50_ms is None


# --- the report, the histogram and the summary --------------------------------------------------------------------


def _requests_row(prompt: str, k: int, acceptance: list, drafted: list[int], tpot_ms: list, **extra) -> CaseResult:
    accepted = sum(round(a * d) for a, d in zip(acceptance, drafted) if a is not None)
    return case_result(
        case=f"p-k{k}-{prompt}",
        pair="p",
        prompt=prompt,
        k=k,
        engine="native",
        dtype="float32",
        batch=1,
        drafted_tokens=sum(drafted),
        accepted_tokens=accepted,
        requests=len(tpot_ms),
        request_acceptance=acceptance,
        request_tau=[1 + (a or 0) * k for a in acceptance],
        request_tpot_ms=tpot_ms,
        **extra,
    )


#: k=4 over two prompts: a long request accepted whole, a short one rejected, and two between
REQUEST_ROWS = [
    _requests_row("code", 4, [1.0, 0.0], [40, 4], [10.0, 30.0]),
    _requests_row("chat", 4, [0.5, 0.25], [8, 8], [12.0, 20.0]),
    _requests_row("code", 1, [1.0, 1.0], [10, 10], [15.0, 16.0]),
]


def test_the_report_pools_every_prompts_requests_per_k_with_both_means_of_acceptance(tmp_path):
    from pytest_specbench.report.markdown import report_markdown
    from pytest_specbench.report.requests import request_groups

    groups = {group.k: group for group in request_groups(REQUEST_ROWS)}
    assert list(groups) == [1, 4]
    at_4 = groups[4]
    assert (at_4.cases, at_4.requests) == (2, 4)
    assert at_4.token_weighted_acceptance == pytest.approx((40 + 4 + 2) / 60)  # the long request weighs most
    report = report_markdown(REQUEST_ROWS, {}, {}, figures_dir=tmp_path / "figures", report_path=tmp_path / "r.md")
    section = report.split("## Per-request statistics")[1]
    tpot = " / ".join(f"{v:.2f}" for v in np.percentile([10.0, 30.0, 12.0, 20.0], [50, 95, 99]))
    accept = " / ".join(f"{v:.3f}" for v in np.percentile([1.0, 0.0, 0.5, 0.25], [10, 50, 90]))
    line = next(line for line in section.splitlines() if line.startswith("| p ") and "| 4 " in line)
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    assert cells == ["p", "4", "2", "4", accept, "0.438", "0.767", cells[7], tpot]
    assert "![per-request acceptance for p](figures/request_acceptance_p.png)" in section
    assert "## Per-request statistics" not in report_markdown([case_result()], {}, {})  # an older row: none


def test_the_histogram_has_a_line_per_k_and_none_where_nothing_was_drafted(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    from pytest_specbench.report.plots import request_acceptance

    path = request_acceptance(REQUEST_ROWS, "p", tmp_path)
    assert path.name == "request_acceptance_p.png" and matplotlib.image.imread(path).shape[0] > 200
    none_drafted = [_requests_row("code", 4, [None, None], [0, 0], [10.0, 11.0])]
    assert request_acceptance(none_drafted, "p", tmp_path / "none") is None


@pytest.mark.slow
def test_the_histogram_is_written_with_the_run_s_figures(tmp_path):
    pytest.importorskip("matplotlib")
    from pytest_specbench.report.plots import figure_names, write_plots

    written = write_plots(REQUEST_ROWS, tmp_path)
    assert tmp_path / "request_acceptance_p.png" in written
    assert {path.name for path in written} <= set(figure_names(["p"]))


def test_the_summary_s_per_k_table_reads_tpot_at_p50_and_p99_over_every_prompt():
    from pytest_specbench.report.summary import summary_lines

    text = "\n".join(summary_lines(REQUEST_ROWS))
    assert "TPOT p50 / p99 ms" in text
    p50, p99 = np.percentile([10.0, 30.0, 12.0, 20.0], [50, 99])
    assert f"{p50:.1f} / {p99:.1f}" in text
