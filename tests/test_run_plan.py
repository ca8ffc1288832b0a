"""The run's plan over its budget (measure/budget.py, plugin/block_runs.py), on a fake clock: the plan before
timing, the re-plan after each block, the message where the minimum cannot fit, and no overrun past one block's
minimum rounds. No timed assertions: the clock is a number the tests move."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_specbench.measure.blocks import round_fits
from pytest_specbench.measure.budget import BlockCost, CaseCost, RunPlan, describe_duration, fitting_options
from pytest_specbench.plugin.block_runs import BlockRuns, BudgetCannotFit


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _block(name: str, round_s: float, setup_s: float = 0.0, ks=("1", "4"), dtype="float32", prompt="natural"):
    per_case = round_s / len(ks)
    cases = tuple(CaseCost(f"{name}-k{k}", "pair", k, dtype, prompt, per_case) for k in ks)
    return BlockCost(name, setup_s, cases)


def _plan(blocks, budget_s, clock, min_rounds=3, max_rounds=30, ci_target=0.05, **kwargs) -> RunPlan:
    return RunPlan(
        budget_s,
        {block.block: block for block in blocks},
        min_rounds,
        max_rounds,
        ci_target,
        clock=clock,
        started=0.0,
        **kwargs,
    )


def _run(plan: RunPlan, clock: FakeClock, actual: dict[str, tuple[float, float]], needed: int | None = None) -> int:
    """Time every block as the plugin does, on the fake clock: its setup, its share, rounds while they fit (or
    until ``needed`` rounds made every case tight); each block's (setup, round) seconds from ``actual``.
    Returns the most rounds a block ran."""
    most = 0
    for name in list(plan.blocks):
        setup_s, round_s = actual[name]
        clock.now += setup_s
        share = plan.share_s(name)
        rounds, elapsed = 0, 0.0
        while rounds < plan.max_rounds and round_fits(elapsed, rounds, share, plan.min_rounds):
            if needed is not None and rounds >= max(needed, plan.min_rounds):
                break
            clock.now += round_s
            elapsed += round_s
            rounds += 1
        plan.record(name, setup_s, round_s)
        most = max(most, rounds)
    return most


# --- the plan before timing ---------------------------------------------------------------------------------


def test_the_plan_estimates_minimum_expected_and_full_runs_from_the_blocks():
    clock = FakeClock()
    clock.now = 20.0  # loading and probing
    plan = _plan([_block("a", 10.0, setup_s=5.0), _block("b", 20.0, setup_s=5.0)], 900.0, clock)
    assert plan.minimum_s() == pytest.approx(20 + 10 + 3 * 30)
    assert plan.fits()
    # noise 3% pooled over 2 cases at +/-5%: 3 rounds give t(4) 2.78 * 0.03 / sqrt(3) = 0.048, so the minimum suffices
    assert plan.rounds_needed(2) == 3 and plan.expected_s() == pytest.approx(plan.minimum_s())
    assert plan.rounds_needed(1) == 4  # alone: t(3) 3.18 * 0.03 / 2 = 0.048 at 4 rounds; at 3, t(2) gives 0.074
    noisy = _plan([_block("a", 10.0)], 900.0, clock, prior_noise=0.1)
    # at 17 rounds t(32) 2.04 * 0.1 / sqrt(17) = 0.049; at 16, 0.051
    assert noisy.rounds_needed(2) == 17 and noisy.expected_s() == pytest.approx(20 + 17 * 10)
    capped = _plan([_block("a", 10.0)], 100.0, clock, prior_noise=0.1)
    assert capped.expected_s() == pytest.approx(100.0)  # the budget holds it below the rounds it would like
    assert _plan([_block("a", 10.0)], None, clock, prior_noise=0.1).share_s("a") is None


def test_each_block_gets_the_slack_or_its_part_of_what_is_short_and_the_others_their_minimum_first():
    clock = FakeClock()
    plan = _plan([_block("a", 10.0), _block("b", 30.0)], 400.0, clock)
    # Enough: b is expected to need 3 rounds (noise 3%, 2 cases), 90 s kept for it, the rest a's to use if it must.
    assert plan.share_s("a") == pytest.approx(310.0)
    with_setup = _plan([_block("a", 10.0), _block("b", 30.0, setup_s=40.0)], 400.0, clock)
    assert with_setup.share_s("a") == pytest.approx(400 - 40 - 90)  # the others' setups are kept back too
    # Short: at noise 10% each needs 17 rounds (170 s and 510 s, 680 in all, over 400); each gets its minimum
    # (30 s, 90 s) and the 280 s left in proportion to its need beyond it (140 : 420).
    noisy = _plan([_block("a", 10.0), _block("b", 30.0)], 400.0, clock, prior_noise=0.1)
    assert noisy.rounds_needed(2) == 17 and noisy.share_s("a") == pytest.approx(30 + 280 * 140 / 560)
    # Shorter than the minimums: what b's minimum leaves, and 0 (a then runs its minimum: round_fits) below it.
    assert _plan([_block("a", 10.0), _block("b", 30.0)], 100.0, clock).share_s("a") == pytest.approx(10.0)
    assert _plan([_block("a", 10.0), _block("b", 30.0)], 80.0, clock).share_s("a") == 0.0
    # The noise the blocks showed replaces the prior: their root mean square.
    noisy.record("x", 0.0, None, noise=0.01)
    noisy.record("y", 0.0, None, noise=0.03)
    assert noisy.noise == pytest.approx(math.sqrt((0.01**2 + 0.03**2) / 2)) and noisy.share_s("a") == 310.0


def test_a_block_past_the_budget_still_gets_its_minimum_rounds_and_says_the_run_budget_was_spent():
    clock = FakeClock()
    plan = _plan([_block("a", 10.0), _block("b", 10.0)], 50.0, clock)
    clock.now = 60.0
    assert plan.share_s("a") == 0.0 and plan.spent_at_block == 0
    assert round_fits(0.0, 0, 0.0, 3) and round_fits(20.0, 2, 0.0, 3)  # below min rounds a round always runs
    assert not round_fits(30.0, 3, 0.0, 3)


# --- the re-plan after each block ---------------------------------------------------------------------------


def test_after_a_block_the_plan_scales_the_rest_by_what_it_took():
    clock = FakeClock()
    plan = _plan([_block(name, 10.0, setup_s=4.0) for name in "abc"], 900.0, clock)
    before = plan.minimum_s()
    clock.now = 8.0 + 3 * 15.0
    plan.record("a", setup_s=8.0, first_round_s=15.0)  # setup twice, rounds 1.5 times the estimate
    assert plan.setup_scale == pytest.approx(2.0) and plan.round_scale == pytest.approx(1.5)
    assert "a" not in plan.blocks
    assert plan.minimum_s() == pytest.approx(53.0 + 2 * (8.0 + 3 * 15.0))
    assert plan.minimum_s() > before
    plan.record("b", setup_s=0.0, first_round_s=5.0, noise=0.1)  # a quieter estimate for b: the scales pool
    assert plan.round_scale == pytest.approx(20.0 / 20.0) and plan.noise == pytest.approx(0.1)
    plan.record("c", setup_s=1.0, first_round_s=None)  # no round timed: only leaves the plan
    assert not plan.blocks and len(plan.timed) == 2


def test_a_slow_first_block_leaves_less_to_the_others_and_they_still_get_their_minimum():
    clock = FakeClock()
    plan = _plan([_block(name, 10.0) for name in "abcd"], 300.0, clock)
    actual = {"a": (0.0, 25.0), "b": (0.0, 10.0), "c": (0.0, 10.0), "d": (0.0, 10.0)}
    _run(plan, clock, actual)
    assert clock.now <= 300.0 + 3 * 10.0


def test_a_probe_that_misjudged_the_speed_leaves_untimed_the_blocks_that_would_overrun_the_budget():
    # The run: a probe on a busy moment read a step 6x faster than the blocks ran; the plan said about 12 s
    # of a 20 s budget, and four blocks at their minimum rounds took 72 s.
    clock = FakeClock()
    plan = _plan([_block(name, 1.0) for name in "abcd"], 20.0, clock)
    assert plan.minimum_s() == 12.0 and plan.fits()
    assert plan.overrun_if_timed("a") is None  # nothing timed yet: the plan's estimate stands
    timed, reasons = [], {}
    for name in list(plan.blocks):
        reason = plan.overrun_if_timed(name)
        if reason:
            reasons[name] = reason
            continue
        clock.now += 3 * 6.0  # its minimum rounds, each 6 s
        plan.record(name, 0.0, 6.0)
        timed.append(name)
    assert timed == ["a", "b"] and clock.now == 36.0  # within the budget plus one block's minimum rounds (18 s)
    assert not plan.blocks
    assert reasons["c"].startswith("not timed: the run's budget (20 s) would be overrun: 36 s spent, and this block")
    assert (
        "needs about 18 s at its 3 minimum rounds (the blocks timed so far ran 6.0x their estimated rounds)"
        in (reasons["c"])
    )


def test_the_summary_counts_the_cases_left_untimed_for_the_budget():
    from types import SimpleNamespace

    from pytest_specbench.measure.budget import NOT_TIMED_FOR_BUDGET
    from pytest_specbench.report.run_summary import _budget_lines

    reason = f"Skipped: {NOT_TIMED_FOR_BUDGET} (20 s) would be overrun: ..."  # as pytest reports a skip
    run = SimpleNamespace(
        config=SimpleNamespace(run_budget=20.0, min_rounds=2),
        results=[],
        tally=SimpleNamespace(skipped={"p-k2-x": reason, "p-k4-x": reason, "q-k2-x": "Skipped: model missing"}),
    )
    assert _budget_lines(run) == [
        "the run's budget (--specbench-budget, 20 s) would have been overrun: 2 case(s) were not timed, as the "
        "blocks before them ran slower than the plan estimated (each skipped case says by how much); a longer "
        "--specbench-budget (or none), or --specbench-resume with this run's log, times them"
    ]


# --- the budget holds -------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    rounds=st.lists(st.floats(1.0, 60.0), min_size=1, max_size=12),
    setups=st.floats(0.0, 20.0),
    budget=st.floats(60.0, 3600.0),
    error=st.floats(0.9, 1.1),
    seed=st.integers(0, 1000),
)
def test_a_run_that_fits_ends_within_its_budget_plus_one_blocks_minimum_rounds(rounds, setups, budget, error, seed):
    """Where the estimates hold to 10% (each block's own error drawn around a common one), a run whose minimum
    fits ends within the budget, plus at most one block's minimum rounds."""
    clock = FakeClock()
    blocks = [_block(f"b{i}", round_s, setup_s=setups) for i, round_s in enumerate(rounds)]
    plan = _plan(blocks, budget, clock)
    if plan.minimum_s() > budget:  # past it by one block's minimum rounds at most, it fits: the next test
        return
    draw = random.Random(seed)
    actual = {
        f"b{i}": (setups * error * draw.uniform(0.95, 1.05), round_s * error * draw.uniform(0.95, 1.05))
        for i, round_s in enumerate(rounds)
    }
    _run(plan, clock, actual)
    assert clock.now <= budget + max(plan.min_rounds * round_s for _, round_s in actual.values()) + 1e-6


def test_a_run_whose_minimum_passes_the_budget_by_less_than_one_blocks_minimum_rounds_fits_and_ends_there():
    clock = FakeClock()
    plan = _plan([_block(name, 10.0) for name in "abcd"], 110.0, clock)  # minimum 120 s, one block's 30 s
    assert plan.minimum_s() == 120.0 and plan.fits()
    _run(plan, clock, {name: (0.0, 10.0) for name in "abcd"})
    assert clock.now <= 110.0 + 30.0
    assert not _plan([_block(name, 10.0) for name in "abcd"], 85.0, FakeClock()).fits()


def test_a_run_whose_cases_turn_tight_early_ends_before_its_budget_and_spends_no_block_past_its_share():
    clock = FakeClock()
    plan = _plan([_block(name, 10.0) for name in "abc"], 900.0, clock)
    assert plan.rounds_needed(2) == 3
    most = _run(plan, clock, {name: (0.0, 10.0) for name in "abc"}, needed=4)
    assert most == 4 and clock.now == pytest.approx(120.0)


# --- where the minimum cannot fit ---------------------------------------------------------------------------


def _session(given=frozenset(), budget=600.0):
    config = SimpleNamespace(run_budget=budget, given=given, min_rounds=3, max_rounds=30, ci_target=0.05)
    return SimpleNamespace(config=config, began_at=0.0)


def _too_big(clock, ks=("1", "2", "4", "8"), budget=600.0):
    """Two dtypes, four k, two prompts: a case's round 10 s times its k, 150 s a block's round; 1800 s at 3 rounds."""
    blocks = []
    for dtype in ("float32", "bfloat16"):
        for prompt in ("natural", "code"):
            cases = tuple(CaseCost(f"p-k{k}-{prompt}-{dtype}", "p", k, dtype, prompt, 10.0 * int(k)) for k in ks)
            blocks.append(BlockCost(f"{dtype}:{prompt}", 0.0, cases))
    return _plan(blocks, budget, clock)


def test_the_options_that_would_fit_are_named_with_the_budget_the_minimum_needs():
    plan = _too_big(FakeClock())
    assert not plan.fits() and plan.minimum_s() == pytest.approx(3 * 4 * 150)
    options = fitting_options(plan, ["1", "2", "4", "8"], ["float32", "bfloat16"], ["p"], ["natural", "code"])
    # A run may pass its 600 s by one block's minimum rounds. k 1, 2, 4: 3 * 4 * 70 = 840 s, past 600 + 210;
    # k 1, 2: 360 s; one dtype or one prompt: 900 s, within 600 + 450. The budget: the minimum, less the one
    # block's minimum rounds it may be passed by, and a tenth: (1800 - 450) * 1.1 s.
    assert options == ["--specbench-k=1,2", "--specbench-dtype=float32", '-k "natural"', "--specbench-budget=25m"]
    assert describe_duration(1800) == "about 30 min" and describe_duration(40) == "about 40 s"


def test_a_run_that_chose_its_matrix_stops_before_timing_saying_the_minimum_and_what_would_fit():
    runs = BlockRuns(_session(given=frozenset({"ks"})), (None, 1), clock=FakeClock())
    with pytest.raises(BudgetCannotFit) as raised:
        runs._fit(_too_big(FakeClock()))
    message = str(raised.value)
    assert "need at least 30 min at 3 rounds a block" in message
    assert "more than the budget (--specbench-budget, 10 min) with one block's minimum rounds past it" in message
    assert "nothing was timed" in message
    assert "--specbench-k=1,2" in message and "--specbench-budget=none" in message
    assert not runs.left_out


def test_a_run_on_the_default_matrix_leaves_out_its_largest_k_to_fit_and_says_so():
    said = []
    runs = BlockRuns(_session(), (None, 1), write_line=said.append, clock=FakeClock())
    plan = _too_big(FakeClock())
    runs._fit(plan)
    assert plan.fits() and {case.k for case in plan.cases()} == {"1", "2"}
    assert sorted(runs.left_out) == sorted(
        f"p-k{k}-{prompt}-{dtype}"
        for k in ("4", "8")
        for prompt in ("natural", "code")
        for dtype in ("float32", "bfloat16")
    )
    assert "timing k=1,2 and leaving out k=4,8: every k needed at least 30 min" in said[0]
    assert "name k with --specbench-k to choose" in next(iter(runs.left_out.values()))


def test_the_default_matrix_keeps_a_fifth_of_the_budget_beyond_its_minimum_and_a_chosen_one_need_not():
    # k 1, 2, 4 at 3 rounds: 4 blocks of 70 s a round, 840 s; within a 1000 s budget, not within its 800 s.
    said = []
    runs = BlockRuns(_session(budget=1000.0), (None, 1), write_line=said.append, clock=FakeClock())
    plan = _too_big(FakeClock(), ks=("1", "2", "4"), budget=1000.0)
    assert plan.fits() and not plan.fits(reserve=0.2)
    runs._fit(plan)
    assert {case.k for case in plan.cases()} == {"1", "2"} and plan.minimum_s() <= 800.0
    assert "leaving less than 20% of it for the blocks that need more" in said[0]
    chosen = BlockRuns(_session(given=frozenset({"ks"}), budget=1000.0), (None, 1), clock=FakeClock())
    plan = _too_big(FakeClock(), ks=("1", "2", "4"), budget=1000.0)
    chosen._fit(plan)
    assert {case.k for case in plan.cases()} == {"1", "2", "4"} and not chosen.left_out
    # two k (2880 s at 3 rounds) within 3000 s but not 2400: no fewer k to try, and every k fits, so both are kept
    two = BlockRuns(_session(budget=3000.0), (None, 1), clock=FakeClock())
    plan = _too_big(FakeClock(), ks=("8", "16"), budget=3000.0)
    assert plan.fits() and not plan.fits(reserve=0.2)
    two._fit(plan)
    assert not two.left_out and {case.k for case in plan.cases()} == {"8", "16"}


def test_where_no_fewer_k_leave_the_fifth_the_default_matrix_keeps_the_most_k_that_fit_the_budget():
    # 420 s: k 1, 2 need 360 s, more than its 336 s less a fifth; within 420 s and one block's 90 s, which k 1, 2, 4
    # (840 s) are not
    said = []
    runs = BlockRuns(_session(budget=420.0), (None, 1), write_line=said.append, clock=FakeClock())
    plan = _too_big(FakeClock(), budget=420.0)
    runs._fit(plan)
    assert {case.k for case in plan.cases()} == {"1", "2"} and plan.fits() and not plan.fits(reserve=0.2)
    assert "leaving out k=4,8: every k needed at least 30 min, more than the run's budget" in said[0]


def test_a_worker_under_xdist_never_stops_the_run_on_its_own():
    runs = BlockRuns(_session(given=frozenset({"ks"})), ("gw0", 2), clock=FakeClock())
    runs._fit(_too_big(FakeClock()))  # the controller, which has the whole matrix, is the one to say
    assert not runs.left_out


# --- through the plugin ---------------------------------------------------------------------------------------


def test_a_run_that_cannot_fit_stops_with_a_usage_error_naming_the_minimum_and_prints_its_plan_otherwise(bench):
    result = bench("--specbench-min-rounds=3", "--specbench-max-rounds=3", "--specbench-budget=0.01s")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(
        ["*the selected cases need at least * at 3 rounds a block*more than the budget*nothing was timed*"]
    )
    assert "passed" not in result.stdout.lines[-1]
    fits = bench("--specbench-min-rounds=1", "--specbench-max-rounds=1", "-k", "k1 and natural")
    fits.assert_outcomes(passed=1, deselected=3)
    fits.stdout.fnmatch_lines(["pytest-specbench: plan: about * for 1 cases in 1 blocks (budget 15 min; *"])
