"""Blocked rounds: one baseline per round for every case of a block, rotating order, racing, budgets."""

from __future__ import annotations

import random
import time
from types import SimpleNamespace

import pytest
import torch

from pytest_specbench.engine.stats import DecodeStats, GenerationResult
from pytest_specbench.measure import blocks
from pytest_specbench.measure.blocks import TimedCase, time_block
from pytest_specbench.measure.budget import RunBudget, describe_duration
from pytest_specbench.measure.matrix import Case, build_matrix
from pytest_specbench.measure.pairs import PairSpec
from pytest_specbench.measure.prompts import Prompt

PROMPT = Prompt("natural-01", "natural", "text")


def _config(**settings):
    defaults = dict(min_rounds=3, max_rounds=12, ci_target=0.05, case_budget=None, baseline_once=False, race=True)
    return SimpleNamespace(**{**defaults, **settings})


def _run(seconds: float, new_tokens: int = 11) -> GenerationResult:
    stats = DecodeStats(new_tokens=new_tokens, wall_time_s=seconds + 0.01, prefill_time_s=0.01,
                        target_forward_passes=new_tokens, drafted_per_step=[0] * new_tokens,
                        accepted_per_step=[0] * new_tokens)
    return GenerationResult(sequences=torch.zeros(1, 3 + new_tokens, dtype=torch.long), prompt_length=3, stats=stats)


class Noise:
    """Multiplicative noise: a drift common to the whole round and each run's own."""

    def __init__(self, seed: int = 0, round_sd: float = 0.0, run_sd: float = 0.0) -> None:
        self.rng = random.Random(seed)
        self.round_sd, self.run_sd, self.drift = round_sd, run_sd, 1.0

    def new_round(self) -> None:
        self.drift = self.rng.lognormvariate(0, self.round_sd) if self.round_sd else 1.0

    def __call__(self, seconds: float) -> float:
        own = self.rng.lognormvariate(0, self.run_sd) if self.run_sd else 1.0
        return seconds * self.drift * own


def _block(times: dict, noise: Noise | None = None, calls: list | None = None, pair: str = "p",
           baseline_s: float = 1.0):
    """TimedCases of one (pair, prompt), k -> seconds of a speculative run; and the baseline's runner."""
    noise = noise or Noise()
    calls = calls if calls is not None else []
    spec = PairSpec(pair, "t", "d")

    def runner(k, seconds):
        def run():
            calls.append(k)
            return _run(noise(seconds))
        return run

    def baseline():
        noise.new_round()  # the baseline runs once per round: a new round's drift starts with it
        calls.append("base")
        return _run(noise(baseline_s))

    cases = [TimedCase(Case(spec, k, PROMPT, "natural"), runner(k, seconds)) for k, seconds in times.items()]
    return cases, baseline, calls


def test_every_case_of_a_block_shares_one_baseline_per_round_and_the_order_rotates():
    cases, baseline, calls = _block({1: 0.5, 2: 0.5})
    block = time_block(cases, baseline, _config(min_rounds=3, race=False), None)
    # Noise-free runs are tight from the first rounds on: min rounds, then stop.
    assert block.rounds == 3 and all(case.stop == blocks.TIGHT for case in cases)
    assert calls == ["base", 1, 2, 1, 2, "base", 2, "base", 1]
    assert sorted(block.baselines) == [0, 1, 2]
    assert all(case.rounds == [0, 1, 2] for case in cases)


def test_a_wide_case_runs_to_max_rounds_while_a_tight_one_stops_and_pairs_with_its_own_rounds():
    noise = Noise(seed=1, run_sd=0.3)
    steady, _, _ = _block({1: 0.5})
    cases, baseline, calls = _block({4: 0.4}, noise)
    steady[0].run = lambda: _run(0.5)
    # The steady case's speedup still varies with the noisy baseline: give it a generous target.
    block = time_block([steady[0], cases[0]], baseline, _config(max_rounds=8, race=False, ci_target=0.9), None)
    assert cases[0].stop in (blocks.TIGHT, blocks.MAX_ROUNDS)
    assert block.rounds == max(len(steady[0].rounds), len(cases[0].rounds))
    paired = block.case_baselines(steady[0], paired=True)
    assert [id(run) for run in paired] == [id(block.baselines[index]) for index in steady[0].rounds]


def test_the_budget_stops_a_block_but_never_below_min_rounds():
    cases, _, _ = _block({1: 0.5})
    noise = Noise(seed=2, run_sd=0.5)
    cases, baseline, _ = _block({1: 0.5, 2: 0.6}, noise)

    def slow_baseline():
        time.sleep(0.02)
        return baseline()

    block = time_block(cases, slow_baseline, _config(min_rounds=3, race=False), 0.001, blocks.RUN_BUDGET)
    assert block.rounds == 3
    assert {case.stop for case in cases} <= {blocks.RUN_BUDGET, blocks.TIGHT}


def test_the_race_eliminates_a_clearly_slower_k_and_names_the_k_that_beat_it():
    noise = Noise(seed=3, round_sd=0.05, run_sd=0.02)
    cases, baseline, _ = _block({1: 0.60, 4: 0.40, 16: 0.80}, noise)
    time_block(cases, baseline, _config(max_rounds=20, ci_target=0.001), None)
    by_k = {case.case.k: case for case in cases}
    assert by_k[16].stop == blocks.ELIMINATED and by_k[16].eliminated_by == 4
    assert by_k[1].eliminated_by == 4
    assert by_k[4].eliminated_by is None
    assert len(by_k[16].rounds) < len(by_k[4].rounds)  # it stopped being timed


def test_with_the_race_off_no_case_is_eliminated():
    noise = Noise(seed=3, round_sd=0.05, run_sd=0.02)
    cases, baseline, _ = _block({1: 0.60, 4: 0.40, 16: 0.80}, noise)
    time_block(cases, baseline, _config(max_rounds=10, ci_target=0.001, race=False), None)
    assert all(case.eliminated_by is None and case.stop == blocks.MAX_ROUNDS for case in cases)


def test_a_schedule_is_never_raced():
    noise = Noise(seed=4, round_sd=0.05, run_sd=0.02)
    cases, baseline, _ = _block({4: 0.40, "auto": 0.80}, noise)
    time_block(cases, baseline, _config(max_rounds=10, ci_target=0.001), None)
    assert all(case.eliminated_by is None for case in cases)


def test_pairs_of_one_target_share_the_baseline_but_race_apart():
    noise = Noise(seed=5, round_sd=0.05, run_sd=0.02)
    calls: list = []
    first, baseline, _ = _block({1: 0.4, 4: 0.8}, noise, calls, pair="a")
    second, _, _ = _block({1: 0.9}, noise, calls, pair="b")  # slower than a's k=1, but alone in its race
    time_block([*first, *second], baseline, _config(max_rounds=10, ci_target=0.001), None)
    assert second[0].eliminated_by is None
    assert first[1].eliminated_by == 1
    assert calls.count("base") == 10


def test_baseline_once_times_the_baseline_in_the_first_min_rounds_only():
    cases, baseline, calls = _block({1: 0.5}, Noise(seed=6, run_sd=0.3))
    block = time_block(cases, baseline, _config(min_rounds=2, max_rounds=5, baseline_once=True, race=False), None)
    assert calls.count("base") == 2 and sorted(block.baselines) == [0, 1]
    assert len(block.case_baselines(cases[0], paired=False)) == 2


def test_a_case_budget_stops_that_case():
    cases, baseline, _ = _block({1: 0.5}, Noise(seed=7, run_sd=0.5))
    time_block(cases, baseline, _config(min_rounds=2, max_rounds=30, race=False, case_budget=3.0), None)
    assert cases[0].stop == blocks.CASE_BUDGET and len(cases[0].rounds) < 30


# --- the run's budget -------------------------------------------------------------------------


def test_the_run_budget_divides_what_is_left_over_the_blocks_left():
    budget = RunBudget(100.0, blocks=4, started=time.perf_counter())
    assert budget.share_s() == pytest.approx(25.0, rel=0.01)
    budget.block_done()
    assert budget.share_s() == pytest.approx(100.0 / 3, rel=0.01)
    spent = RunBudget(10.0, blocks=2, started=time.perf_counter() - 20)
    assert spent.share_s() == 0.0 and spent.spent_at_block == 0
    assert RunBudget(None, blocks=3).share_s() is None


def test_the_estimate_lies_between_min_and_max_rounds_of_every_block():
    budget = RunBudget(None, blocks=4, started=time.perf_counter())
    assert budget.estimate_s(10.0, 3, 5) == pytest.approx(200.0, abs=1.0)
    tight = RunBudget(60.0, blocks=4, started=time.perf_counter())
    assert tight.estimate_s(10.0, 3, 30) == pytest.approx(120.0, abs=1.0)  # the budget would allow less: min rounds
    assert describe_duration(40) == "about 40 s" and describe_duration(14 * 60 + 10) == "about 14 min"


# --- blocks in the matrix ------------------------------------------------------------------------


def test_a_blocks_cases_come_together_in_the_matrix():
    pairs = [PairSpec("int8", "gemma", drafter="int8"), PairSpec("other", "qwen", "q"),
             PairSpec("lookup", "gemma", drafter="prompt_lookup")]
    prompts = [PROMPT, Prompt("code-01", "code", "def")]
    cases = build_matrix(pairs, [1, 4], prompts)
    order = [case.block for case in cases]
    assert order == sorted(order, key=order.index)  # each block contiguous
    assert [case.id for case in cases[:4]] == ["int8-k1-natural", "int8-k4-natural", "lookup-k1-natural",
                                               "lookup-k4-natural"]
    assert {case.block for case in cases} == {"gemma:natural-01", "gemma:code-01", "qwen:natural-01",
                                              "qwen:code-01"}


def test_the_race_looks_at_planned_rounds_only():
    assert blocks.race_looks(3, 30) == [3, 4, 6, 9, 14, 21, 30]
    assert blocks.race_looks(3, 3) == [3] and blocks.race_looks(1, 1) == []
    calls = []
    original = blocks.eliminations

    def counting(times, **kwargs):
        calls.append((len(next(iter(times.values()))), kwargs["max_looks"], kwargs["family"]))
        return original(times, **kwargs)

    noise = Noise(seed=8, round_sd=0.05, run_sd=0.02)
    cases, baseline, _ = _block({1: 0.5, 2: 0.5, 4: 0.5}, noise)
    blocks.eliminations = counting
    try:
        time_block(cases, baseline, _config(max_rounds=9, ci_target=0.0001), None)
    finally:
        blocks.eliminations = original
    assert calls == [(3, 4, 3), (4, 4, 3), (6, 4, 3), (9, 4, 3)]  # looks 3, 4, 6, 9 of max 9; family of three


def test_the_run_budget_counts_only_the_blocks_that_will_be_timed():
    from pytest_specbench.plugin.blocks import BlockRuns

    pairs = [PairSpec("ready", "gemma", drafter="int8"), PairSpec("missing", "gpt2", "distilgpt2")]
    cases = build_matrix(pairs, [1, 4], [PROMPT, Prompt("code-01", "code", "def")])
    session = SimpleNamespace(
        cases=cases, selected={case.id for case in cases}, replay=lambda case_id: None,
        chosen=lambda pair: False, began_at=time.perf_counter(),
        unavailable_reason=lambda pair: "no weights" if pair.name == "missing" else None,
        config=SimpleNamespace(run_budget=600.0))
    runs = BlockRuns(session, (None, 1))
    assert runs.budget.blocks == 2  # the missing pair's two blocks are skipped, not timed
    assert BlockRuns(session, ("gw0", 2)).budget.blocks == 1  # a worker's share
    assert runs.members(cases[0]) == [case for case in cases if case.block == cases[0].block]
