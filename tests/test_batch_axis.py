"""Batch size as a benchmark axis: the option, ids and blocks, the batch a case decodes, what is refused, the verdict
per row, the serving answer (report/batch.py) and one plugin run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factory import case_result

from pytest_specbench.cases.matrix import Case, build_matrix
from pytest_specbench.cases.pairs import PairSpec
from pytest_specbench.cases.prompts import Prompt
from pytest_specbench.measure.batches import batch_prompts, batch_refusal
from pytest_specbench.measure.engines import ENGINES, HF_BATCH_REFUSAL
from pytest_specbench.report.batch import BEYOND, NONE, BreakEven, batch_answer, batch_lines, batch_markdown
from pytest_specbench.results.schema import CaseResult
from pytest_specbench.settings.config import ConfigError, parse_settings
from pytest_specbench.settings.options import MAX_BATCH

PAIR = PairSpec("tiny", "t", "d")
PROMPTS = [
    Prompt("natural-01", "natural", "a"),
    Prompt("code-01", "code", "b"),
    Prompt("natural-02", "natural", "c"),
    Prompt("natural-03", "natural", "d"),
]


def _settings(**values: str):
    return parse_settings({name.replace("_", "-"): (value, f"--specbench-{name}") for name, value in values.items()})


# --- the option ---------------------------------------------------------------------------------


def test_the_batch_option_parses_a_list_of_sizes_and_defaults_to_one():
    assert _settings().batches == (1,)
    assert _settings(batch="1, 4,16").batches == (1, 4, 16)


@pytest.mark.parametrize(
    "raw, problem",
    [
        ("0", "too small"),
        ("two", "not a whole number"),
        ("", "no value given"),
        ("4,4", "listed more than once"),
        ("4,04", "listed more than once"),
        (str(MAX_BATCH + 1), "too large"),
        ("1,-2", "too small"),
    ],
)
def test_a_bad_batch_list_is_a_usage_error_saying_what_is_accepted(raw, problem):
    with pytest.raises(ConfigError, match=problem) as error:
        _settings(batch=raw)
    assert "--specbench-batch" in str(error.value)


# --- ids, blocks and order ---------------------------------------------------------------------


def test_ids_gain_the_batch_only_when_more_than_one_batch_size_runs():
    single = build_matrix([PAIR], (1, 4), PROMPTS[:1], batches=(4,))
    assert [case.id for case in single] == ["tiny-k1-natural", "tiny-k4-natural"]
    assert {case.batch for case in single} == {4}
    several = build_matrix([PAIR], (1, 4), PROMPTS[:2], batches=(1, 3))
    assert [case.id for case in several] == [
        "tiny-k1-b1-natural",
        "tiny-k4-b1-natural",
        "tiny-k1-b3-natural",
        "tiny-k4-b3-natural",
        "tiny-k1-b1-code",
        "tiny-k4-b1-code",
        "tiny-k1-b3-code",
        "tiny-k4-b3-code",
    ]
    assert len({case.id for case in several}) == len(several)


def test_each_batch_size_is_a_block_of_its_own_and_batch_1_keeps_the_old_block():
    cases = build_matrix([PAIR], (1, 4), PROMPTS[:1], batches=(1, 3))
    blocks = [case.block for case in cases]
    assert blocks[0] == blocks[1] == "t:natural-01"
    assert blocks[2] == blocks[3] == "t:natural-01/b3"


# --- the batch ---------------------------------------------------------------------------------


def test_a_batch_holds_the_prompts_of_its_category_its_own_first_repeated_as_needed():
    own = PROMPTS[2]
    assert [p.id for p in batch_prompts(own, PROMPTS, 1)] == ["natural-02"]
    assert [p.id for p in batch_prompts(own, PROMPTS, 3)] == ["natural-02", "natural-01", "natural-03"]
    assert [p.id for p in batch_prompts(own, PROMPTS, 7)] == [
        "natural-02",
        "natural-01",
        "natural-03",
        "natural-02",
        "natural-01",
        "natural-03",
        "natural-02",
    ]
    # A category with one prompt: that prompt in every row.
    assert [p.id for p in batch_prompts(PROMPTS[1], PROMPTS, 3)] == ["code-01"] * 3


# --- what a batched case refuses -----------------------------------------------------------------


def _case(k=4, batch=3, engine="native") -> Case:
    return Case(PAIR, k, PROMPTS[0], "natural", engine=engine, batch=batch)


def test_the_hf_engine_refuses_batches_with_the_transformers_issue():
    assert ENGINES["hf"].refusal(_case(engine="hf"), None) == HF_BATCH_REFUSAL
    assert "huggingface/transformers#32165" in HF_BATCH_REFUSAL
    assert "does not support batches" in HF_BATCH_REFUSAL
    assert ENGINES["hf"].refusal(_case(engine="hf", batch=1), None) is None
    assert ENGINES["native"].refusal(_case(), None) is None


def test_the_batched_engine_refuses_sampling_schedules_and_compile_and_batch_1_refuses_nothing():
    greedy = _settings()
    assert batch_refusal(_case(), greedy) is None
    assert "greedily only" in batch_refusal(_case(), _settings(temperature="0.8"))
    assert "constant k" in batch_refusal(_case(k="auto"), greedy)
    assert "eager only" in batch_refusal(_case(), _settings(compile=True))
    assert batch_refusal(_case(batch=1), _settings(temperature="0.8")) is None


# --- the serving answer on hand-built rows -------------------------------------------------------


def _row(
    batch: int,
    k: int | str,
    speedup: float,
    low: float | None,
    high: float | None = None,
    predicted: float | None = None,
    prompt: str = "natural",
    **fields,
):
    """A typed row of pair ``tiny``; without round data (the answer ranks nothing) unless ``fields`` give it."""
    return case_result(
        **{
            "case": f"tiny-k{k}-b{batch}-{prompt}",
            "pair": "tiny",
            "prompt": prompt,
            "engine": "native",
            "k": k,
            "batch": batch,
            "decode_speedup": speedup,
            "decode_speedup_ci_low": low,
            "decode_speedup_ci_high": high if high is not None else (None if low is None else 2 * speedup - low),
            "predicted_speedup": predicted,
            "verdict": "lossless",
            "row_acceptance_min": 0.4,
            "row_acceptance_max": 0.8,
            "block_rounds": [],
            **fields,
        }
    )


GAINING_TO_4 = [
    _row(1, 1, 1.3, 1.2, predicted=1.4),
    _row(1, 4, 1.8, 1.6, predicted=1.9),
    _row(4, 1, 1.15, 1.05, predicted=1.2),
    _row(4, 4, 1.1, 0.95, predicted=1.05),
    _row(16, 1, 0.9, 0.85, predicted=0.95),
    _row(16, 4, 0.7, 0.65, predicted=0.8),
]


def test_the_best_k_per_batch_size_and_the_break_even_batch_size():
    (answer,) = batch_answer(GAINING_TO_4)
    assert answer.batches == (1, 4, 16) and answer.ks == (1, 4)
    assert [(item.batch, item.k) for item in answer.best] == [(1, 4), (4, 1), (16, 1)]
    assert [item.gains for item in answer.best] == [True, True, False]
    assert [item.predicted_best_k for item in answer.best] == [4, 1, 1]
    # k=4 at batch 4 is above 1 but its interval is not: k=1 decides that batch 4 still gains.
    assert answer.break_even == BreakEven(4, "4", False)
    assert answer.predicted_break_even.batch == 4


def test_no_gain_anywhere_is_none_and_a_gain_at_the_largest_batch_is_beyond_it():
    losing = [_row(1, 1, 0.9, 0.8), _row(8, 1, 0.5, 0.4)]
    (answer,) = batch_answer(losing)
    assert answer.break_even.text == NONE and answer.break_even.batch is None
    assert answer.predicted_break_even.text == NONE  # no prediction: nothing predicted to gain
    gaining = [_row(1, 1, 1.5, 1.4, predicted=1.6), _row(8, 1, 1.2, 1.1, predicted=1.1)]
    (answer,) = batch_answer(gaining)
    assert answer.break_even.text == f"{BEYOND} (8)" and answer.break_even.beyond_largest
    # No interval (one round): a gain not shown to hold.
    (answer,) = batch_answer([_row(1, 1, 1.5, None), _row(8, 1, 1.2, None)])
    assert answer.break_even.text == NONE


def test_the_answer_needs_more_than_one_batch_size_and_constant_k():
    assert batch_answer([_row(1, 1, 1.3, 1.2), _row(1, 4, 1.8, 1.6)]) == []
    assert batch_answer([_row(1, "auto", 1.3, 1.2), _row(4, 1, 1.1, 1.0)]) == []
    assert batch_lines([_row(1, 1, 1.3, 1.2)]) == [] and batch_markdown([_row(1, 1, 1.3, 1.2)]) == []
    # Each prompt is answered apart.
    assert len(batch_answer(GAINING_TO_4 + [_row(b, k, 1.0, 0.9, prompt="code") for b in (1, 4) for k in (1, 4)])) == 2


def test_each_batch_sizes_best_k_is_stated_as_the_answer_states_it_with_the_k_tied_with_it():
    """Per batch size the paired test over that batch's own block: at batch 1 k=4 is 40% faster in every round
    (alone best); at batch 4 the two are within noise of each other (tied)."""
    wiggle = [1.0, 1.03, 0.98, 1.02, 0.99, 1.01]

    def timed(batch, k, speedup, seconds, shift):
        return _row(
            batch,
            k,
            speedup,
            speedup * 0.95,
            predicted=speedup,
            block=f"t:natural:b{batch}",
            block_rounds=list(range(6)),
            round_decode_token_s=[seconds * wiggle[(r + shift) % 6] for r in range(6)],
            baseline_round_decode_token_s=[0.02] * 6,
        )

    rows = [
        timed(1, 1, 1.4, 0.0143, 0),
        timed(1, 4, 2.0, 0.01, 1),
        timed(4, 1, 1.2, 0.0167, 0),
        timed(4, 4, 1.19, 0.0168, 3),
    ]
    (answer,) = batch_answer(rows)
    assert [(item.batch, item.k, item.tied) for item in answer.best] == [(1, 4, ()), (4, 1, (4,))]
    markdown = "\n".join(batch_markdown(rows))
    assert "| 4 | - | 4 | 0.40-0.80 |" in markdown and "| 1 | 4 | 1 | 0.40-0.80 |" in markdown


def test_the_terminal_and_markdown_sections_show_the_table_best_k_and_break_even():
    text = "\n".join(batch_lines(GAINING_TO_4))
    assert "tiny, natural:" in text and "k=1" in text and "k=4" in text
    assert "1.80 [1.60, 2.00] (pred 1.90)" in text
    assert "break-even batch size: 4 (k=1: 1.15 [1.05, 1.25]); the cost model predicts 4" in text
    assert "1 (no gain)" in text  # batch 16's best k does not gain
    markdown = "\n".join(batch_markdown(GAINING_TO_4, {"tiny": "figs/speedup_vs_batch_tiny.png"}))
    assert markdown.startswith("## Batch size") and "### tiny, natural" in markdown
    assert "| batch | k=1 | k=4 | best k | tied | predicted best k | row accept min-max |" in markdown
    assert "![decode speedup against batch size for tiny](figs/speedup_vs_batch_tiny.png)" in markdown


def test_the_json_document_carries_the_answer_and_the_figure_is_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    from pytest_specbench.report.plots import speedup_vs_batch
    from pytest_specbench.report.summary import run_document

    document = run_document(GAINING_TO_4, {}, {}).to_json()
    assert document["batch"][0]["break_even"]["batch"] == 4
    assert run_document([_row(1, 1, 1.3, 1.2)], {}, {}).batch == []
    assert speedup_vs_batch([_row(1, 1, 1.3, 1.2)], "tiny", tmp_path) is None
    path = speedup_vs_batch(GAINING_TO_4, "tiny", tmp_path)
    assert path == tmp_path / "speedup_vs_batch_tiny.png" and path.stat().st_size > 0


# --- measured on the tiny pair -------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_batch(tmp_path_factory):
    """The tiny pair loaded, with a model draft and a prompt-lookup pair on its target."""
    from factory import torch_threads, write_tiny_pair

    from pytest_specbench.cases.pairs import load_pairs_file
    from pytest_specbench.cases.prompts import load_prompts
    from pytest_specbench.measure.shared import SharedMeasurements
    from pytest_specbench.measure.store import ModelStore

    root = tmp_path_factory.mktemp("batch_pair")
    pairs_file = write_tiny_pair(root)
    pairs_file.write_text(pairs_file.read_text() + '\n[pairs.lookup]\ntarget = "./target"\ndrafter = "prompt_lookup"\n')
    pairs = load_pairs_file(pairs_file)
    with torch_threads(1):
        yield pairs, load_prompts(None), ModelStore("cpu", "float32"), SharedMeasurements()


def _measure(tiny_batch, pair: str, batch: int, ks=(1, 4), **settings):
    from pytest_specbench.measure.case_run import MeasureContext
    from pytest_specbench.measure.runner import measure_block

    pairs, prompts, store, shared = tiny_batch
    config = _settings(max_new_tokens="12", warmup="0", min_rounds="1", max_rounds="1", **settings)
    chosen = [p for p in prompts if p.category == "natural"][:1]
    cases = build_matrix([pairs[pair]], ks, chosen, config.engines, (batch,))
    return cases, measure_block(cases, MeasureContext(store, shared, config, prompts)), store, shared, config


@pytest.mark.slow
@pytest.mark.parametrize("pair", ["tiny", "lookup"])
def test_a_batched_block_is_lossless_in_every_row_against_both_references(tiny_batch, pair):
    from pytest_specbench.measure.row import build_result
    from pytest_specbench.report.analysis import pooled_position_acceptance

    cases, outcome, *_ = _measure(tiny_batch, pair, 3)
    for case in cases:
        row = build_result(case, outcome[case.id], "cpu", "float32", 0.05)
        assert row.batch == 3 and row.verdict == "lossless" and row.lossless
        assert row.row_verdicts == ["lossless"] * 3 and row.batched_reference_matches_unbatched
        assert row.baseline_matches_reference and row.quality_score == 1.0
        assert row.batch_prompt_ids[0] == case.prompt.id and len(row.batch_prompt_ids) == 3
        assert len(row.row_acceptance) == 3 and row.batch_decode_tps == row.decode_tps > 0
        assert row.block.endswith("/b3") and row.decode_speedup > 0
        assert row.new_tokens == 12  # per row, as at batch 1
        assert row.batch_new_tokens == [12] * 3 and max(row.drafted_per_step) <= case.k
        positions = [position for position, _, _ in pooled_position_acceptance([row])]
        assert positions and max(positions) <= case.k  # per sequence: none past k
        assert len(row.verify_costs_ms) >= 2
        # a prediction, or the probe's fault that withheld it (a curve that dips under load), never neither
        assert (row.predicted_speedup is None) == bool(row.prediction_fault)


@pytest.mark.slow
def test_a_batch_row_records_rounds_and_why_and_a_native_sequence_row_interleaved(tiny_batch):
    from pytest_specbench.measure.pairing import BATCHED_RUNS
    from pytest_specbench.measure.row import build_result

    for batch, pairing, reason in ((3, "rounds", BATCHED_RUNS), (1, "interleaved", "")):
        cases, outcome, *_ = _measure(tiny_batch, "tiny", batch, ks=(4,))
        row = build_result(cases[0], outcome[cases[0].id], "cpu", "float32", 0.05)
        assert (row.batch, row.pairing, row.pairing_reason) == (batch, pairing, reason)
        assert row.verdict == "lossless"


@pytest.mark.slow
def test_a_row_that_differs_is_caught_and_a_near_tie_is_reported_as_a_tie(tiny_batch, monkeypatch):
    from pytest_specbench.measure import batches
    from pytest_specbench.measure.case_run import MeasureContext

    pairs, prompts, store, shared = tiny_batch
    case = build_matrix([pairs["tiny"]], (4,), [p for p in prompts if p.category == "natural"][:1], batches=(3,))[0]
    batch_run = batches.BatchRun(case, MeasureContext(store, shared, _settings(max_new_tokens="12"), prompts))
    setup = batch_run.setup
    tokens = [list(row) for row in setup.references]
    assert batches.batch_verdict(setup, tokens, False, 0.1)["verdict"] == "lossless"
    tokens[1][5] = (tokens[1][5] + 1) % 256  # one row's sixth token wrong
    verdict = batches.batch_verdict(setup, tokens, False, 0.1)
    assert verdict["row_verdicts"][0] == verdict["row_verdicts"][2] == "lossless"
    assert verdict["divergent_row"] == 1 and verdict["first_divergence"] == 5
    assert verdict["divergence_against"] == "batched"
    assert verdict["verdict"] == (
        "tie-divergence" if verdict["top2_margin"] < batches.FLOAT32_BATCH_TIE else "diverged"
    )
    monkeypatch.setattr(batches, "FLOAT32_BATCH_TIE", float("inf"))  # every margin within rounding: a tie
    assert batches.batch_verdict(setup, tokens, False, 0.1)["verdict"] == "tie-divergence"


@pytest.mark.slow
def test_a_batched_case_on_the_hf_engine_or_under_sampling_is_refused_not_run(tiny_batch):
    from pytest_specbench.models.base import NotApplicable

    cases, outcome, *_ = _measure(tiny_batch, "tiny", 3, ks=(4,), engine="native,hf")
    hf = next(case for case in cases if case.engine == "hf")
    assert isinstance(outcome[hf.id], NotApplicable) and str(outcome[hf.id]) == HF_BATCH_REFUSAL
    cases, outcome, *_ = _measure(tiny_batch, "tiny", 3, ks=(4,), temperature="0.7")
    assert isinstance(outcome[cases[0].id], NotApplicable)


# --- one plugin run ------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_plugin_run_over_two_batch_sizes(bench, pytester: pytest.Pytester):
    result = bench(
        "--specbench-batch=1,3",
        "--specbench-k=1,4",
        "--specbench-max-rounds=2",
        "--specbench-report=report.md",
        prompts="natural",
    )
    result.assert_outcomes(passed=4)
    document = json.loads(Path(pytester.path, "spec_results.json").read_text())
    rows = {row["case"]: row for row in document["results"]}
    assert set(rows) == {"tiny-k1-b1-natural", "tiny-k4-b1-natural", "tiny-k1-b3-natural", "tiny-k4-b3-natural"}
    assert all(row["verdict"] == "lossless" and row["lossless"] for row in rows.values())
    assert {case: row["batch"] for case, row in rows.items()} == {
        "tiny-k1-b1-natural": 1,
        "tiny-k4-b1-natural": 1,
        "tiny-k1-b3-natural": 3,
        "tiny-k4-b3-natural": 3,
    }
    assert rows["tiny-k4-b3-natural"]["row_verdicts"] == ["lossless"] * 3
    assert [answer["batches"] for answer in document["batch"]] == [[1, 3]]
    output = result.stdout.str()
    assert "break-even batch size:" in output
    assert "## Batch size" in Path(pytester.path, "report.md").read_text()


# --- a batch row's per-step counts and new tokens, on hand-built runs ------------------------------------


def _batched_run(rows: list[list[tuple[int, int]]], k: int, wall_s: float = 1.0):
    """A batched run from each row's decode steps ``(drafted, accepted)``, its batch stats kept as the engine
    keeps them: each step's counts summed over the rows still in the batch."""
    import torch

    from pytest_specbench.engine.batched import BatchedGenerationResult
    from pytest_specbench.engine.stats import DecodeStats, GenerationResult, record_step

    results, batch = [], DecodeStats(wall_time_s=wall_s, prefill_time_s=0.1)
    for steps in rows:
        stats = DecodeStats(wall_time_s=wall_s, prefill_time_s=0.1)
        record_step(stats, 0, 0, 1, 0)
        for drafted, accepted in steps:
            record_step(stats, drafted, accepted, 1, k)
        stats.new_tokens = 1 + sum(accepted + 1 for _, accepted in steps)
        results.append(GenerationResult(torch.zeros(1, 3 + stats.new_tokens, dtype=torch.long), 3, stats))
    record_step(batch, 0, 0, len(rows), 0)
    for step in range(max(len(steps) for steps in rows)):
        live = [steps[step] for steps in rows if step < len(steps)]
        record_step(batch, sum(d for d, _ in live), sum(a for _, a in live), len(live), k)
    batch.new_tokens = sum(row.stats.new_tokens for row in results)
    batch.prefill_tokens = len(rows)
    return BatchedGenerationResult(results, batch)


def _batch_row(k: int, rows: list[list[tuple[int, int]]]) -> CaseResult:
    import torch

    from pytest_specbench.measure.batches import batch_row_fields
    from pytest_specbench.measure.row import Measurement, build_result

    speculative = _batched_run(rows, k, wall_s=0.5)
    prompt_ids = [prompt.id for prompt in PROMPTS[: len(rows)]]
    baseline = _batched_run([[(0, 0)] * (len(steps) + sum(a for _, a in steps)) for steps in rows], 0)
    measurement = Measurement(
        input_ids=torch.zeros(1, 3, dtype=torch.long),
        reference=speculative.token_ids,
        baselines=[baseline],
        speculative=[speculative],
        paired=True,
        verdict={"verdict": "lossless", "first_divergence": None},
        target_load_s=0.0,
        target_load_source="local",
        batch_prompt_ids=prompt_ids,
        kind_fields=lambda last, speed, steps, other: batch_row_fields(last, prompt_ids, speed, steps, other),
    )
    case = Case(PAIR, k, PROMPTS[0], "natural", batch=len(rows))
    return build_result(case, measurement, "cpu", "float32", 0.05)


#: k=1, four sequences: each step of each sequence drafts one token
K1_ROWS = [[(1, 1), (1, 0), (1, 1)], [(1, 0), (1, 0), (1, 1)], [(1, 1), (1, 1), (1, 1)], [(1, 0), (1, 1)]]
#: k=4, two sequences
K4_ROWS = [[(4, 4), (4, 1), (4, 2)], [(4, 0), (4, 3)]]


def test_per_position_acceptance_at_batch_above_1_is_that_of_its_sequences():
    """A batch row's per-step counts are its sequences' steps, not the batch's sums read as one run's block:
    at k=1 and batch 4 there is position 1 only (four one-token blocks summed and read as one show 2 to 4)."""
    from pytest_specbench.engine.cost_model import position_counts
    from pytest_specbench.report.analysis import pooled_position_acceptance
    from pytest_specbench.report.markdown import report_markdown
    from pytest_specbench.report.summary import summary_lines

    k1 = _batch_row(1, K1_ROWS)
    assert max(k1.drafted_per_step) == 1
    assert pooled_position_acceptance([k1]) == [(1, 11, 7 / 11)]
    assert len(k1.position_acceptance) == 1 and k1.alpha == pytest.approx(7 / 11)
    k4 = _batch_row(4, K4_ROWS)
    own = [0, 0, 0, 0]
    for steps in K4_ROWS:  # each sequence's own blocks, pooled
        counts = position_counts([0] + [drafted for drafted, _ in steps], [0] + [accepted for _, accepted in steps])
        for i, (_, accepted) in enumerate(counts):
            own[i] += accepted
    pooled = pooled_position_acceptance([k4])
    assert [(position, reached) for position, reached, _ in pooled] == [(i, 5) for i in range(1, 5)]
    assert [share for _, _, share in pooled] == pytest.approx([n / 5 for n in own])
    text = "\n".join(summary_lines([k1]))
    assert "  1: 0.64" in text and " 2: " not in text.split("per-position acceptance")[1]
    report = report_markdown([k1], {}, {})
    assert "all cases pooled): 1: 0.64 (n=11)." in report


def test_a_batch_header_reports_the_batchs_new_tokens_and_each_sequences_when_they_differ():
    """Not the first row's count alone: the batch's total, and each sequence's count (one when they agree)."""
    from pytest_specbench.report.markdown import report_markdown
    from pytest_specbench.report.summary import summary_lines

    differing = _batch_row(1, K1_ROWS)  # the sequences committed 6, 5, 7 and 4 tokens
    header = summary_lines([differing])[0]
    assert "batch 4: 22 new tokens per batch (6, 5, 7, 4 per sequence)" in header
    assert differing.batch_new_tokens == [6, 5, 7, 4]
    assert "batch 4: 22 new tokens per batch (6, 5, 7, 4 per sequence)" in report_markdown([differing], {}, {})
    agreeing = _batch_row(1, [[(1, 1), (1, 0)], [(1, 0), (1, 1)]])
    assert "batch 2: 8 new tokens per batch (4 per sequence)" in summary_lines([agreeing])[0]
