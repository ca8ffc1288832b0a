"""Draft-length schedules: their rules on hand-computed steps, and losslessness of the engine under each."""

from __future__ import annotations

import functools

import pytest
import torch
from factory import hf_generate, tiny_model, tiny_pair

from pytest_specbench import speculative_generate
from pytest_specbench.engine.cost_model import predicted_speedup
from pytest_specbench.engine.drafters import ModelDrafter
from pytest_specbench.engine.schedules import ConstantSchedule, CostModelSchedule, HeuristicSchedule

PROMPT = [30, 31, 32, 7, 9]
NEW_TOKENS = 37


@functools.cache
def pair():
    return tiny_pair("gpt2")


def test_constant_schedule_rejects_a_bad_k() -> None:
    for bad in (0, -1, 2.0, True, "4"):
        with pytest.raises(ValueError, match="k .draft tokens per step. must be an integer >= 1"):
            ConstantSchedule(bad)


def test_heuristic_schedule_follows_transformers_rule() -> None:
    schedule = HeuristicSchedule()
    assert schedule.next_k() == 20 and schedule.confidence_threshold == 0.4
    schedule.update(drafted=20, accepted=20)  # fully accepted: +2
    assert schedule.next_k() == 22
    schedule.update(drafted=22, accepted=3)  # otherwise: -1
    assert schedule.next_k() == 21
    schedule.update(drafted=5, accepted=5)  # a confidence stop that was fully accepted counts as full
    assert schedule.next_k() == 23
    small = HeuristicSchedule(start=1)
    small.update(drafted=1, accepted=0)
    assert small.next_k() == 1  # never below 1
    schedule.reset()
    assert schedule.next_k() == 20  # transient: every generation starts again at 20


def test_cost_model_schedule_picks_the_predicted_best_k() -> None:
    # An irregular CPU-like curve: v(3) is the costliest, long blocks are cheap.
    curve = [1.0, 2.6, 2.7, 1.8, 1.9, 2.0, 2.1, 2.2, 2.3]
    schedule = CostModelSchedule(curve, cost_ratio=0.1, prior_alpha=0.8, prior_weight=1.0)
    alpha = schedule.alpha
    assert alpha == pytest.approx(0.8)
    expected = max(range(1, len(curve)), key=lambda k: predicted_speedup(alpha, k, 0.1, curve))
    assert schedule.next_k() == expected
    # By hand at alpha 0.8: k=5 gives tau 3.689 / (0.5 + 2.0) = 1.476; k=4 3.362 / 2.3 = 1.462;
    # k=6 3.951 / 2.7 = 1.463; k=2, on the costly part of the curve, 2.44 / 2.9 = 0.841.
    assert expected == 5


def test_cost_model_schedule_stops_drafting_when_nothing_pays_and_probes_now_and_then() -> None:
    curve = [1.0, 1.2, 1.3, 1.4]
    # No decay here, so that only the probes can bring drafting back.
    schedule = CostModelSchedule(curve, cost_ratio=0.1, prior_alpha=0.6, prior_weight=1.0, decay=1.0, probe_every=3)
    assert schedule.next_k() >= 1  # at the prior, k=1 predicts 1.6 / 1.3 = 1.23
    for _ in range(6):
        schedule.update(drafted=3, accepted=0)
    assert schedule.alpha == pytest.approx(0.6 / 7)
    assert schedule.next_k() == 0  # a plain target step beats every k: k=1 predicts 1.09 / 1.3 = 0.83
    chosen = []
    for _ in range(8):
        chosen.append(schedule.next_k())
        schedule.update(drafted=chosen[-1], accepted=0)  # probes fail too
    assert chosen == [0, 0, 0, 1, 0, 0, 0, 1]  # a probe after every 3 plain steps


def test_cost_model_schedule_decay_brings_drafting_back() -> None:
    schedule = CostModelSchedule(
        [1.0, 1.2, 1.3, 1.4], cost_ratio=0.1, prior_alpha=0.6, prior_weight=1.0, decay=0.5, probe_every=100
    )
    for _ in range(6):
        schedule.update(drafted=3, accepted=0)
    assert schedule.next_k() == 0
    schedule.update(drafted=0, accepted=0)
    schedule.update(drafted=0, accepted=0)  # rejections decay 1.97 -> 0.49: alpha 0.6 / 1.49 = 0.40
    assert schedule.next_k() >= 1


def test_cost_model_schedule_probes_first_even_when_the_prior_says_nothing_pays() -> None:
    # A CPU-like curve where one drafted token costs 1.9 steps: at the prior alpha 0.6 nothing pays.
    curve = [1.0, 1.9, 2.5, 2.1, 2.0, 2.1, 2.6, 2.1, 2.2]
    schedule = CostModelSchedule(curve, cost_ratio=0.28, prior_alpha=0.6)
    first = schedule.next_k()
    assert first >= 1
    schedule.update(drafted=first, accepted=first)  # the draft is better than the prior thought
    assert schedule.next_k() >= 1 and schedule.alpha > 0.8


def test_cost_model_schedule_rejects_bad_costs() -> None:
    with pytest.raises(ValueError, match="verify_costs"):
        CostModelSchedule([1.0], 0.1)
    with pytest.raises(ValueError, match="cost_ratio"):
        CostModelSchedule([1.0, 2.0], -1.0)


@pytest.mark.slow
@torch.inference_mode()
def test_confidence_threshold_ends_a_block_after_the_unsure_token() -> None:
    target, draft = pair()
    drafter = ModelDrafter(draft)
    ids = torch.tensor([PROMPT])
    drafter.reset()
    assert drafter.propose(ids, 5, min_confidence=1.01).numel() == 1  # every token is below 101%
    drafter.reset()
    assert drafter.propose(ids, 5, min_confidence=0.0).numel() == 5
    assert drafter.propose(ids, 5).numel() == 5


@pytest.mark.slow
@pytest.mark.parametrize(
    "schedule",
    [
        HeuristicSchedule(),
        HeuristicSchedule(start=2, confidence_threshold=None),
        CostModelSchedule([1.0, 2.6, 2.7, 1.8, 1.9, 2.0, 2.1, 2.2, 2.3], cost_ratio=0.1),
        CostModelSchedule([1.0, 3.0, 5.0], cost_ratio=2.0),  # predicts no gain: plain steps, still lossless
        CostModelSchedule.tuned([1.0, 2.6, 2.7, 1.8, 1.9, 2.0, 2.1, 2.2, 2.3], 0.1, confidence_stop=True),  # k=auto's
    ],
    ids=["heuristic", "heuristic-no-threshold", "cost-model", "cost-model-never-drafts", "cost-model-tuned"],
)
def test_engine_is_lossless_under_every_schedule_and_records_its_choices(schedule) -> None:
    target, draft = pair()
    result = speculative_generate(target, draft, PROMPT, schedule, NEW_TOKENS)
    assert result.token_ids == hf_generate(target, PROMPT, NEW_TOKENS)
    stats = result.stats
    assert len(stats.k_per_step) == stats.steps and stats.k_per_step[0] == 0
    assert all(drafted <= chosen for drafted, chosen in zip(stats.drafted_per_step, stats.k_per_step))
    assert sum(stats.accepted_per_step) + stats.steps == stats.new_tokens == NEW_TOKENS


@pytest.mark.slow
def test_heuristic_schedule_grows_k_on_a_perfect_draft() -> None:
    target = tiny_model("gpt2")
    result = speculative_generate(
        target, target, PROMPT, HeuristicSchedule(start=2, confidence_threshold=None), NEW_TOKENS
    )
    assert result.stats.k_per_step[1:4] == [2, 4, 6]  # every block fully accepted: +2 each step


def test_cost_model_schedule_lengthens_blocks_for_a_draft_that_keeps_being_right() -> None:
    # v(m)/v(1) of Gemma 3 270M with the column head on a 2-core CPU, and its int8 copy's cost.
    curve = [1.0, 1.10, 1.35, 1.13, 1.25, 1.60, 1.59, 1.59, 1.80, 1.95, 2.02, 2.14, 2.18, 2.21, 2.66, 2.15, 2.39]
    schedule = CostModelSchedule(curve, cost_ratio=0.389)
    chosen = []
    for _ in range(12):
        chosen.append(schedule.next_k())
        schedule.update(drafted=chosen[-1], accepted=chosen[-1])
    assert schedule.alpha > 0.97
    # Near alpha 1 long blocks pay; a prior worth 2 observations held alpha at 0.95 and k at 3 here
    # (the cheap v(4) = 1.13 v(1) wins at that alpha).
    assert chosen[-1] >= 7


def test_cost_model_schedule_remembers_across_generations_what_carry_keeps() -> None:
    curve = [1.0, 1.2, 1.3, 1.4]
    schedule = CostModelSchedule(curve, cost_ratio=0.1, prior_alpha=0.6, prior_weight=1.0, decay=1.0, carry=0.5)
    for _ in range(4):
        schedule.update(drafted=3, accepted=3)
    assert schedule.alpha == pytest.approx((12 + 0.6) / 13)
    schedule.reset()  # a new generation starts from half the counts, not from the prior alone
    assert schedule.alpha == pytest.approx((6 + 0.6) / 7)
    forgetful = CostModelSchedule(curve, cost_ratio=0.1, prior_alpha=0.6, prior_weight=1.0, carry=0.0)
    forgetful.update(drafted=3, accepted=3)
    forgetful.reset()
    assert forgetful.alpha == pytest.approx(0.6)
    with pytest.raises(ValueError, match="carry"):
        CostModelSchedule(curve, cost_ratio=0.1, carry=1.5)


def test_cost_model_schedule_probes_twice_as_long_after_a_full_block_of_a_draft_model() -> None:
    curve = [1.0, 1.10, 1.35, 1.13, 1.25, 1.60, 1.59, 1.59, 1.80, 1.95, 2.02, 2.14, 2.18, 2.21, 2.66, 2.15, 2.39]
    assert not CostModelSchedule(curve, cost_ratio=0.389).grow  # the generic rule: off (k=auto's tuned one: on)
    schedule = CostModelSchedule(curve, cost_ratio=0.389, grow=None)
    assert schedule.grow  # None: on for a draft model, whose confidence stop bounds what a long probe wastes
    k = schedule.next_k()
    schedule.update(drafted=k, accepted=k)  # every token it was asked for, accepted
    assert schedule.next_k() >= min(16, 2 * k)
    schedule.update(drafted=2, accepted=2)  # a confidence stop: fewer than asked, no doubling on that
    assert not schedule._run
    schedule.update(drafted=3, accepted=1)
    assert schedule.next_k() < 16
    assert not CostModelSchedule(curve, cost_ratio=0.0, grow=None).grow  # prompt lookup: no probe


@pytest.mark.slow
def test_engine_is_lossless_when_the_schedule_carries_over_and_probes_long_blocks() -> None:
    target, draft = pair()
    expected = hf_generate(target, PROMPT, NEW_TOKENS)
    curve = [1.0, 1.10, 1.35, 1.13, 1.25, 1.60, 1.59, 1.59, 1.80, 1.95, 2.02, 2.14, 2.18, 2.21, 2.66, 2.15, 2.39]
    schedule = CostModelSchedule(curve, cost_ratio=0.389, grow=True, carry=1.0)
    for _ in range(2):  # the second generation starts from what the first learnt
        assert speculative_generate(target, draft, PROMPT, schedule, NEW_TOKENS).token_ids == expected
    # A perfect draft: every block accepted whole, so the blocks double up to the curve's end.
    result = speculative_generate(
        target, target, PROMPT, CostModelSchedule(curve, 0.389, confidence_threshold=None, grow=True), NEW_TOKENS
    )
    assert result.token_ids == expected and max(result.stats.k_per_step) == 16


def test_cost_model_schedule_counts_the_unsure_token_that_ended_a_block_at_half_weight() -> None:
    curve = [1.0] * 6  # verifying is free: at alpha 0.8 the longest block, 5, pays most
    schedule = CostModelSchedule(
        curve, cost_ratio=0.1, prior_alpha=0.8, prior_weight=1.0, decay=1.0, grow=False, unsure_weight=0.5
    )
    assert schedule.next_k() == 5
    schedule.update(drafted=3, accepted=2)  # the confidence stop ended it at 3: the third token was the unsure one
    # the two sure tokens accepted in full, the unsure one's rejection at half weight
    assert schedule.alpha == pytest.approx((2 + 0.8) / (2 + 0.5 + 1.0))
    schedule.update(drafted=schedule.next_k(), accepted=0)  # a full-length block rejected at once: counted in full
    assert schedule.alpha == pytest.approx((2 + 0.8) / (2 + 1.5 + 1.0))
    lookup = CostModelSchedule(curve, cost_ratio=0.0, prior_alpha=0.6, prior_weight=1.0, decay=1.0)
    lookup.next_k()
    lookup.update(drafted=2, accepted=1)  # prompt lookup ran out of match: no confidence involved, counted in full
    assert lookup.alpha == pytest.approx((1 + 0.6) / (1 + 1 + 1.0))


def test_opening_long_drafts_the_longest_block_first_then_follows_the_cost_model():
    curve = [1.0, 1.1, 1.2, 1.3, 1.4]  # v(m): k up to 4
    schedule = CostModelSchedule(curve, 0.0, open_long=True)
    assert schedule.next_k() == 4
    schedule.update(4, 0)  # all rejected: from then on it chooses as the plain schedule does with the same counts
    plain = CostModelSchedule(curve, 0.0)
    plain.next_k()
    plain.update(4, 0)
    assert schedule.next_k() == plain.next_k() < 4
    schedule.reset()
    assert schedule.next_k() == 4  # every generation opens long


CPU_CURVE = [1.0, 1.26, 1.57, 1.55, 1.73, 1.97, 2.18, 2.08, 2.45, 2.71, 2.92, 2.68, 2.61, 2.64, 3.04, 2.53, 2.76]


def test_k_auto_for_a_confident_draft_opens_long_and_counts_only_the_sure_tokens() -> None:
    schedule = CostModelSchedule.tuned(CPU_CURVE, 0.40, confidence_stop=True)
    assert schedule.next_k() == 16  # the longest block first: the confidence stop ends it where the draft is unsure
    schedule.update(drafted=5, accepted=4)  # stopped at the 5th token, unsure, which the target rejected
    # The four sure tokens count; the unsure one's rejection does not (unsure_weight 0); prior 0.9 worth 2.
    assert schedule.alpha == pytest.approx((4 + 0.9 * 2) / (4 + 2))
    k = schedule.next_k()
    schedule.update(drafted=k, accepted=1)  # a block drafted in full and rejected at a sure token: counted
    assert schedule.alpha == pytest.approx((0.9 * 4 + 1 + 1.8) / (0.9 * 4 + 1 + 1 + 2))
    schedule.reset()
    assert schedule.next_k() == 16  # every generation opens long


def test_k_auto_has_one_setting_per_kind_of_drafter() -> None:
    sampled = CostModelSchedule.tuned(CPU_CURVE, 0.40, confidence_stop=False)
    # Sampling: no confidence stop bounds a long block, so neither opening long nor ignoring unsure tokens.
    assert not sampled.open_long and sampled.unsure_weight == 1.0 and sampled.prior_alpha == 0.8
    lookup = CostModelSchedule.tuned(CPU_CURVE, 0.0, confidence_stop=True)
    assert not lookup.open_long and not lookup.grow
    assert (lookup.prior_alpha, lookup.prior_weight, lookup.probe_every) == (0.6, 0.5, 2)
    assert lookup.next_k() < 16


def test_the_native_engine_drafts_k_auto_with_the_drafters_setting() -> None:
    from pytest_specbench.measure.costs import CostProfile
    from pytest_specbench.measure.engines import case_schedule

    costs = CostProfile(verify_costs_s=[v * 0.1 for v in CPU_CURVE], draft_token_s=0.04, column_head_rows=[])
    greedy, sampled = case_schedule("auto", costs, greedy=True), case_schedule("auto", costs, greedy=False)
    assert greedy.open_long and greedy.cost_ratio == pytest.approx(0.40)
    assert not sampled.open_long
    assert case_schedule(4, costs) == 4
