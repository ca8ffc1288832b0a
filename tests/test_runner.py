"""A measured case as its row: intervals around every speedup, noise marked unstable, prefill apart (the rounds
themselves: test_blocks.py)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from factory import tiny_pair, write_tiny_pair

from pytest_specbench import greedy_generate, speculative_generate
from pytest_specbench.cases.matrix import Case
from pytest_specbench.cases.pairs import PairSpec
from pytest_specbench.cases.prompts import Prompt
from pytest_specbench.engine.stats import DecodeStats, GenerationResult
from pytest_specbench.measure.pairing import COMPILED_STEPS, Pairing, choose_pairing
from pytest_specbench.measure.row import Measurement, build_result
from pytest_specbench.settings.config import parse_settings

# --- the row: intervals and the unstable flag ---------------------------------------------------


def _run(wall_s: float, prefill_s: float = 0.01, new_tokens: int = 11) -> GenerationResult:
    stats = DecodeStats(
        new_tokens=new_tokens,
        wall_time_s=wall_s,
        prefill_time_s=prefill_s,
        target_forward_passes=new_tokens,
        drafted_per_step=[0] * new_tokens,
        accepted_per_step=[0] * new_tokens,
    )
    return GenerationResult(sequences=torch.zeros(1, 3 + new_tokens, dtype=torch.long), prompt_length=3, stats=stats)


def _result(baseline_s: list, speculative_s: list, paired: bool = True, pairing: Pairing | None = None):
    """A row from fabricated runs: each a wall time, or (wall time, prefill time)."""
    case = Case(PairSpec("tiny", "t", "d"), 4, Prompt("natural-01", "natural", "text"), "natural")
    measurement = Measurement(
        input_ids=torch.zeros(1, 3, dtype=torch.long),
        reference=[0] * 11,
        baselines=[_run(*_times(s)) for s in baseline_s],
        speculative=[_run(*_times(s)) for s in speculative_s],
        paired=paired,
        verdict={"verdict": "lossless", "first_divergence": None},
        target_load_s=0.0,
        target_load_source="local",
        pairing=pairing,
    )
    return build_result(case, measurement, "cpu", "float32", ci_target=0.05)


def test_steady_rounds_give_a_tight_interval_and_a_stable_row():
    row = _result([1.0, 1.01, 0.99, 1.0], [0.5, 0.505, 0.495, 0.5])
    assert row.speedup == pytest.approx(2.0, rel=1e-3) and not row.unstable and row.rounds == 4
    assert row.speedup_ci_low <= row.speedup <= row.speedup_ci_high
    assert row.decode_speedup_ci_low <= row.decode_speedup <= row.decode_speedup_ci_high


def test_noisy_rounds_give_a_wide_interval_and_an_unstable_row():
    row = _result([1.0, 1.6, 0.7, 1.3], [0.5, 0.4, 0.9, 0.45])
    assert row.unstable
    assert (row.speedup_ci_high - row.speedup_ci_low) / (2 * row.speedup) > 0.05


def test_one_round_has_no_interval_and_counts_as_unstable():
    row = _result([1.0], [0.5])
    assert row.speedup_ci_low is None and row.unstable


def test_a_compiled_block_records_rounds_and_why_it_did_not_interleave():
    config = dataclasses.replace(parse_settings({}), compile_steps=True)
    row = _result([1.0, 1.0], [0.5, 0.5], pairing=choose_pairing(config, [None]))
    assert row.pairing == "rounds" and row.pairing_reason == COMPILED_STEPS
    assert row.to_row()["pairing_reason"] == COMPILED_STEPS


def test_a_row_records_no_pairing_where_its_measurement_has_none():
    row = _result([1.0, 1.0], [0.5, 0.5])
    assert row.pairing == "" and row.pairing_reason == ""


def _times(run) -> tuple[float, ...]:
    return run if isinstance(run, tuple) else (run,)


def test_decode_speedup_leaves_the_prefill_out():
    # 0.6 s slower end to end, all of it in the speculative prefill (0.7 s against 0.1 s).
    row = _result([(1.0, 0.1), (1.02, 0.1)], [(1.6, 0.7), (1.62, 0.7)])
    assert row.speedup < 0.7
    assert row.decode_speedup == pytest.approx(1.0, rel=1e-9)
    assert row.decode_tps == pytest.approx(row.baseline_decode_tps, rel=0.03)
    assert row.ttft_ms == pytest.approx(700) and row.baseline_ttft_ms == pytest.approx(100)


# --- prefill apart from decoding ---------------------------------------------------------------


def _slow_prompt_pass(model: torch.nn.Module, seconds: float, sleeps: list[int]):
    """A forward pre-hook that sleeps on any pass over more than 8 tokens: here only the prefill."""

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[1] > 8:
            sleeps.append(ids.shape[1])
            time.sleep(seconds)

    return model.register_forward_pre_hook(hook, with_kwargs=True)


@pytest.mark.slow
@pytest.mark.parametrize("speculative", [False, True])
def test_prefill_is_timed_apart_and_left_out_of_decode_speed(speculative):
    target, draft = tiny_pair("gpt2")
    prompt = torch.arange(3, 23).unsqueeze(0)  # 20 tokens; verify passes at k=2 feed 3
    sleeps: list[int] = []
    handle = _slow_prompt_pass(target, 0.5, sleeps)
    try:
        if speculative:
            result = speculative_generate(target, draft, prompt, k=2, max_new_tokens=13)
        else:
            result = greedy_generate(target, prompt, 13)
    finally:
        handle.remove()
    stats = result.stats
    assert sleeps == [20]  # one slow pass, the prompt's
    # sleep() never returns early, so a prefill time of at least 0.5 s holds the slow pass: the
    # decode phase, timed from the end of the prefill, cannot hold it too.
    assert stats.prefill_time_s >= 0.5
    assert stats.decode_time_s == pytest.approx(stats.wall_time_s - stats.prefill_time_s)
    assert stats.decode_tokens == 12
    assert stats.decode_tokens_per_second == pytest.approx(12 / stats.decode_time_s)
    assert stats.tokens_per_second == pytest.approx(13 / stats.wall_time_s)


# --- through the plugin -------------------------------------------------------------------------


def _results(pytester: pytest.Pytester) -> dict:
    return json.loads((Path(pytester.path) / "spec_results.json").read_text())


@pytest.mark.slow
def test_rows_carry_intervals_prefill_split_and_the_fingerprint(bench, pytester: pytest.Pytester) -> None:
    result = bench("--specbench-min-rounds=3", "--specbench-max-rounds=4")
    result.assert_outcomes(passed=4)
    document = _results(pytester)
    assert document["fingerprint"]["cpu_capability"] and "quantized_engine" in document["fingerprint"]
    for row in document["results"]:
        assert 3 <= row["rounds"] <= 4
        for name in ("speedup", "decode_speedup"):
            assert row[f"{name}_ci_low"] <= row[name] <= row[f"{name}_ci_high"]
        assert row["ttft_ms"] > 0 and row["baseline_ttft_ms"] > 0
        assert row["decode_tps"] > 0 and row["baseline_decode_tps"] > 0
        assert isinstance(row["unstable"], bool)
        # The spread pooled over the block's cases, or the case's own where their spreads differ.
        assert row["interval_dof"] >= row["rounds"] - 1
        assert row["round_log_sd"] is None or row["round_log_sd"] > 0
        assert row["peak_memory_mb"] > row["weights_held_mb"] > 0  # the process holds more than its weights
    result.stdout.fnmatch_lines(["memory: peak resident memory * GiB, *x the * GiB of weights its models held at once"])
    csv_header = (Path(pytester.path) / "spec_results.csv").read_text().splitlines()[0].split(",")
    for column in (
        "ttft_ms",
        "decode_tps",
        "decode_speedup",
        "speedup_ci_low",
        "speedup_ci_high",
        "rounds",
        "unstable",
    ):
        assert column in csv_header


NOISY_CONFTEST = """
import random
import time

import pytest

from pytest_specbench.measure.store import ModelStore

_target = ModelStore.target
_rng = random.Random(7)


def _noisy(module, args, kwargs):
    if kwargs["input_ids"].shape[1] > 1 or _rng.random() < 0.3:
        time.sleep(_rng.choice([0.0, 0.0, 0.03, 0.08]))  # a neighbour that steals the core now and then


def target(self, pair, dtype=None):
    loaded = _target(self, pair, dtype)
    if not getattr(loaded.model, "_noisy", False):
        loaded.model.register_forward_pre_hook(_noisy, with_kwargs=True)
        loaded.model._noisy = True
    return loaded


ModelStore.target = target
"""


@pytest.mark.slow
def test_a_noisy_machine_is_marked_unstable(bench, pytester: pytest.Pytester) -> None:
    pytester.makeconftest(NOISY_CONFTEST)
    result = bench(
        "--specbench-min-rounds=2", "--specbench-max-rounds=4", "--specbench-ci-target=0.05", "--specbench-race=off"
    )  # racing would stop (eliminate) a noisy k on purpose
    result.assert_outcomes(passed=4)
    rows = _results(pytester)["results"]
    assert all(row["unstable"] for row in rows), [
        (row["case"], row["speedup_ci_low"], row["speedup_ci_high"]) for row in rows
    ]
    result.stdout.fnmatch_lines(["*4 case(s) unstable (!)*Try a quieter machine*"])


def test_an_empty_selection_says_what_the_matrix_has(bench) -> None:
    result = bench("-k", "k8")
    result.stdout.fnmatch_lines(
        [
            "*no specbench case matched the selection*k values 1, 4*pairs tiny ready to run*",
            "*--specbench-k=1,2,4,8,16*",
        ]
    )


@pytest.mark.slow
def test_the_specbench_summary_prints_after_pytest_benchmarks_table(bench) -> None:
    result = bench("--specbench-max-rounds=2", benchmark=True)
    text = result.stdout.str()
    assert "benchmark:" in text and text.index("benchmark:") < text.index("specbench summary")


# --- context windows: a clear failure, never an IndexError inside the model ------------------------


@pytest.fixture(scope="module")
def short_target_pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pair ``tiny`` whose target has 64 positions (the draft has 4096)."""
    return write_tiny_pair(tmp_path_factory.mktemp("short_target"), target_config={"n_positions": 64})


@pytest.fixture(scope="module")
def short_draft_pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pair ``tiny`` whose draft has 64 positions (the target has 4096)."""
    return write_tiny_pair(tmp_path_factory.mktemp("short_draft"), draft_config={"n_positions": 64})


@pytest.mark.slow
def test_a_prompt_that_exactly_fills_the_window_runs(bench, short_target_pairs_file: Path) -> None:
    # 52 prompt tokens + 12 new tokens = 64 positions, whatever k is: no block runs past the last new token.
    result = bench("--specbench-context-tokens=52", "-k", "k4 and natural", pairs_file=short_target_pairs_file)
    result.assert_outcomes(passed=1, deselected=3)


@pytest.mark.slow
def test_a_prompt_past_the_targets_window_fails_naming_the_limit(fails_plainly, short_target_pairs_file: Path) -> None:
    result = fails_plainly(short_target_pairs_file, "k4 and natural", "--specbench-context-tokens=53")
    result.stdout.fnmatch_lines(
        [
            "*tiny-k4-natural: the prompt (53 tokens) and 12 new tokens need 65 positions, more than the target "
            "'*target' allows (n_positions = 64); cut the prompts with --specbench-context-tokens=52 (or fewer) "
            "or lower --specbench-max-new-tokens to 11 or less",
        ]
    )


@pytest.mark.slow
def test_a_prompt_past_the_drafts_window_fails_naming_the_draft(fails_plainly, short_draft_pairs_file: Path) -> None:
    result = fails_plainly(short_draft_pairs_file, "k1 and natural", "--specbench-context-tokens=60")
    result.stdout.fnmatch_lines(["*need 72 positions, more than the draft '*draft' allows (n_positions = 64)*"])


COUNTING_CONFTEST = """
import json
import os

import pytest_specbench.engine.interleave as interleave
import pytest_specbench.measure.sequence as runner

_greedy, _after = runner.greedy_generate, interleave.InterleavedBaseline.after_step
counts = {"whole": 0, "between": 0}


def greedy(*args, **kwargs):
    counts["whole"] += 1
    return _greedy(*args, **kwargs)


def after_step(self, seconds):
    counts["between"] += 1
    return _after(self, seconds)


runner.greedy_generate, interleave.InterleavedBaseline.after_step = greedy, after_step


def pytest_unconfigure(config):
    with open("counts.json", "w") as file:
        json.dump(counts, file)
"""


@pytest.mark.parametrize("pairing", ["interleaved", "rounds"])
def test_the_default_pairing_runs_the_baseline_between_the_steps_and_rounds_runs_it_whole(
    bench, pytester: pytest.Pytester, pairing: str
) -> None:
    pytester.makeconftest(COUNTING_CONFTEST)
    args = ("--specbench-min-rounds=2", "--specbench-max-rounds=2", "--specbench-race=off")
    result = bench(*args, *(() if pairing == "interleaved" else ("--specbench-pairing=rounds",)))
    result.assert_outcomes(passed=4)
    counts = json.loads((Path(pytester.path) / "counts.json").read_text())
    rows = _results(pytester)["results"]
    assert all(row["rounds"] == 2 and row["baseline_matches_reference"] for row in rows)
    # The warm-up's whole baseline runs (one per pair) happen either way.
    if pairing == "interleaved":
        assert counts["between"] > 0 and counts["whole"] <= 2
    else:
        assert counts["between"] == 0 and counts["whole"] > 2 * 2


def test_a_prompt_longer_than_the_window_is_named_and_not_told_to_lower_the_new_tokens() -> None:
    """A 7,200-token prompt on a 2,048-position target: no --specbench-max-new-tokens could help, so the
    message says the prompt alone is too long, names it and the window, and says what would help."""
    from pytest_specbench.measure.inputs import check_context_windows
    from pytest_specbench.models.base import UnrunnableCase

    case = Case(PairSpec("tiny", "t", "d"), 4, Prompt("long-01", "long", "text"), "long")
    target = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=2048))
    with pytest.raises(UnrunnableCase) as error:
        check_context_windows(case, 7200, 128, {"target 't'": target})
    message = str(error.value)
    assert (
        "the prompt 'long-01' alone (7200 tokens) does not fit in the target 't' context window "
        "(max_position_embeddings = 2048)" in message
    )
    assert "a shorter prompt, or cut the prompts with --specbench-context-tokens=1920 (or fewer)" in message
    assert "max-new-tokens" not in message
