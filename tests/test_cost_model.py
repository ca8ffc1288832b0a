"""The cost model: each formula on hand-computed values (the run's recursion over the tokens left, the
drafter's proposal lengths capped at k, the draft's catch-up pass, a per-step overhead), the alpha estimate on
simulated steps, and a run whose draft is the target (alpha 1, tau k + 1 but for the shortened last block)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pytest_specbench.engine.cost_model import (
    accepted_length_histogram,
    alpha_mle,
    decode_tokens_of_steps,
    expected_tau_of_steps,
    observed_proposals,
    position_acceptance,
    position_counts,
    predict_proposals,
    predict_steps,
    predicted_speedup,
    predicted_tau,
    proposals_at,
    recommended_k,
    recommended_k_for,
)


def test_alpha_counts_accepts_over_accepts_and_rejections_and_skips_empty_steps():
    # Steps (d, a): prefill (0, 0), (4, 2) one rejection, (4, 4) censored, (2, 2) censored, (0, 0) skipped.
    assert alpha_mle([0, 4, 4, 2, 0], [0, 2, 4, 2, 0]) == pytest.approx(8 / 9)
    assert alpha_mle([0, 3, 3], [0, 3, 3]) == 1.0
    assert alpha_mle([0, 3, 3], [0, 0, 0]) == 0.0
    assert alpha_mle([0, 0, 0], [0, 0, 0]) is None


def test_tau_on_hand_computed_values():
    assert predicted_tau(0.5, 3) == pytest.approx(1.875)  # 1 + 0.5 + 0.25 + 0.125
    assert predicted_tau(0.8, 2) == pytest.approx(2.44)
    assert predicted_tau(1.0, 4) == 5.0
    assert predicted_tau(0.0, 7) == 1.0


def test_expected_tau_of_steps_follows_the_blocks_as_they_ran():
    # Prefill, two full blocks of 4, a last step with nothing drafted: (5 + 5 + 1) / 3 at alpha 1.
    assert expected_tau_of_steps(1.0, [0, 4, 4, 0]) == pytest.approx(11 / 3)
    assert expected_tau_of_steps(0.5, [0, 2, 1]) == pytest.approx((1.75 + 1.5) / 2)


def test_predicted_speedup_on_hand_computed_values():
    # tau(2) = 1.75; cost per step 2 * 0.1 * 1.0 + v(3) = 1.7; per greedy token v(1) = 1.0.
    assert predicted_speedup(0.5, 2, 0.1, [1.0, 1.2, 1.5]) == pytest.approx(1.75 / 1.7)
    # Free drafting and a flat curve: the speedup is tau itself.
    assert predicted_speedup(0.8, 3, 0.0, [2.0] * 4) == pytest.approx(predicted_tau(0.8, 3))


def test_recommended_k_follows_the_measured_curve_not_the_textbook():
    # A 2-position pass far dearer than 3 or 4 positions (as Gemma's 262k head shows on a CPU):
    # k=1: 1.8 / 3 = 0.6, k=2: 2.44 / 1.2 = 2.03, k=3: 2.952 / 1.3 = 2.27.
    assert recommended_k(0.8, 0.0, [1.0, 3.0, 1.2, 1.3]) == 3
    # A 4-position pass that costs ten steps: k=3 loses, k=2 wins.
    assert recommended_k(0.8, 0.0, [1.0, 1.0, 1.0, 10.0]) == 2
    # With a flat curve, expensive drafting favours short blocks: k=1: 1.8/1.5, k=2: 2.44/2.0, k=3: 2.952/2.5.
    assert recommended_k(0.8, 0.5, [1.0] * 4) == 2  # 1.22 > 1.2 > 1.18
    with pytest.raises(ValueError):
        recommended_k(0.8, 0.0, [1.0])


def test_position_acceptance_and_histogram_on_hand_computed_values():
    drafted, accepted = [0, 3, 3, 1], [0, 1, 3, 0]
    assert position_acceptance(drafted, accepted) == pytest.approx([2 / 3, 1 / 2, 1 / 2])
    assert position_counts(drafted, accepted) == [(3, 2), (2, 1), (2, 1)]
    assert accepted_length_histogram(drafted, accepted) == [1, 1, 0, 1]
    assert position_acceptance([0, 0], [0, 0]) == [] and accepted_length_histogram([0], [0]) == [0]


def _simulated_steps(alpha: float, k: int, steps: int, seed: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    drafted, accepted = [0], [0]
    for _ in range(steps):
        a = 0
        while a < k and rng.random() < alpha:
            a += 1
        drafted.append(k)
        accepted.append(a)
    return drafted, accepted


def _uncensored_alpha(drafted, accepted):
    # A planted bug: every step counted as ending in a rejection, the truncation at k ignored.
    steps = [(d, a) for d, a in zip(drafted, accepted) if d]
    total = sum(a for _, a in steps)
    return total / (total + len(steps))


@pytest.mark.parametrize("alpha, k", [(0.7, 4), (0.9, 2), (0.5, 2)])
def test_the_estimate_recovers_alpha_from_censored_steps_and_the_planted_bug_does_not(alpha, k):
    drafted, accepted = _simulated_steps(alpha, k, 20000, seed=int(alpha * 100) + k)
    # Standard error sqrt(alpha (1 - alpha) / n) with n > 20000 trials is below 0.004: 0.015 is > 3.5 of them.
    assert alpha_mle(drafted, accepted) == pytest.approx(alpha, abs=0.015)
    assert _uncensored_alpha(drafted, accepted) != pytest.approx(alpha, abs=0.015)


# --- a run whose draft is the target ---------------------------------------------------------------


@pytest.fixture(scope="module")
def equal_pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from factory import write_tiny_pair

    return write_tiny_pair(tmp_path_factory.mktemp("equal_pair"), name="tiny", noise=0.0)


@pytest.mark.slow
def test_a_draft_equal_to_the_target_gives_alpha_one_and_tau_k_plus_one(bench, pytester, equal_pairs_file):
    result = bench("--specbench-k=1,4,auto", "--specbench-warmup=1", pairs_file=equal_pairs_file)
    result.assert_outcomes(passed=6)
    rows = json.loads((Path(pytester.path) / "spec_results.json").read_text())["results"]
    # One profile per pair, re-timed in untimed runs after the warm-up, for the schedule and the predictions alike.
    assert {row["draft_cost_source"] for row in rows} == {"runs"}
    assert len({(row["cost_ratio"], row["draft_token_ms"]) for row in rows}) == 1
    assert all(row["draft_token_probe_ms"] > 0 for row in rows)
    for row in (row for row in rows if row["k"] != "auto"):
        k = row["k"]
        # The prediction is the run's own: with alpha 1 its tau is the measured one, shortened last block included.
        assert row["alpha"] == 1.0 and row["predicted_tau"] == pytest.approx(row["tau"])
        assert all(share == 1.0 for share in row["position_acceptance"])
        assert row["accepted_length_histogram"][-1] == sum(row["accepted_length_histogram"])
        # 12 new tokens: the prefill commits one, then blocks of k + 1 until fewer than k + 1 remain.
        assert row["tau"] == pytest.approx(expected_tau_of_steps(1.0, row["drafted_per_step"]))
        if k == 1:
            assert row["tau"] == pytest.approx(11 / 6)  # 11 decode tokens: five blocks of 2, then one of 1
        # k=auto has the probe cover blocks up to 16, cut at the 12 new tokens a run can verify at most.
        assert len(row["verify_costs_ms"]) == 12 and all(v > 0 for v in row["verify_costs_ms"])
        assert row["verify_cost_ratio"] == pytest.approx(row["verify_costs_ms"][k] / row["verify_costs_ms"][0])
        assert row["cost_ratio"] > 0 and row["draft_token_ms"] > 0
        assert 1 <= row["recommended_k"] <= len(row["verify_costs_ms"]) - 1
        assert row["efficiency"] == pytest.approx(row["decode_speedup"] / row["predicted_speedup"])
        assert row["target_params"] == row["draft_params"] > 0
        assert row["peak_memory_mb"] > 0 and row["peak_memory_kind"] == "process_rss"


def test_the_row_fields_on_hand_computed_values():
    from pytest_specbench.measure.costs import CostProfile, cost_model_fields

    # A run at k=2 of 7 decode tokens: (2, 1) and (2, 2), then a block cut to 1 by the run's end (1, 1).
    # alpha = 4 / (4 + 1); v = 10, 12, 15 ms; a draft token 1 ms, so c = 0.1.
    drafted, accepted = [0, 2, 2, 1], [0, 1, 2, 1]
    fields = cost_model_fields(2, drafted, accepted, CostProfile([0.010, 0.012, 0.015], 0.001, []), decode_speedup=1.7)
    assert fields["alpha"] == pytest.approx(0.8)
    assert fields["cost_ratio"] == pytest.approx(0.1) and fields["verify_cost_ratio"] == pytest.approx(1.5)
    # The steps as they ran: tau(2) = 2.44 twice and tau(1) = 1.8 by alpha's model, for v(3) + 2c = 1.7 twice and
    # v(2) + c = 1.3 (no catch-up pass measured: no dearer than one position). The prediction counts the 7 tokens
    # the steps committed (2 + 3 + 2) over that time: a prediction of the time, held by speedup <= tau.
    assert fields["predicted_tau"] == pytest.approx((2.44 + 2.44 + 1.8) / 3)
    assert fields["predicted_speedup"] == pytest.approx(7 / (1.7 + 1.7 + 1.3))  # 1.489
    # The run's tau only holds the prediction to its bound: the tokens are counted over the steps priced.
    given = cost_model_fields(2, drafted, accepted, CostProfile([0.010, 0.012, 0.015], 0.001, []), 1.7, tau=7 / 3)
    assert given["predicted_speedup"] == pytest.approx(fields["predicted_speedup"])
    assert given["prediction_fault"] is None
    # Not the textbook's 2.44 / 1.7 = 1.435 per block of 2 (k every step): the shortened last block takes its share.
    assert fields["predicted_speedup"] != pytest.approx(predicted_speedup(0.8, 2, 0.1, [1.0, 1.2, 1.5]))
    assert fields["efficiency"] == pytest.approx(1.7 / fields["predicted_speedup"])
    assert fields["recommended_k"] == 2  # a draft model, k every step: k=1: 1.8 / 1.3 = 1.385 < 2.44 / 1.7 = 1.435
    assert fields["verify_costs_ms"] == pytest.approx([10.0, 12.0, 15.0]) and fields["draft_token_ms"] == 1.0
    assert fields["position_acceptance"] == [1.0, 0.5] and fields["accepted_length_histogram"] == [0, 2, 1]
    # Prompt lookup that never matched: no alpha, so no prediction, but the costs are still there.
    empty = cost_model_fields(2, [0, 0], [0, 0], CostProfile([0.01, 0.02, 0.03], 0.0, []), 1.0)
    assert empty["alpha"] is None and "predicted_speedup" not in empty and empty["cost_ratio"] == 0.0


def test_the_row_fields_take_the_catch_up_pass_and_the_runs_overhead():
    from pytest_specbench.measure.costs import CostProfile, cost_model_fields
    from pytest_specbench.results.schema import CaseResult

    # Every block accepted (alpha 1), k=2, 5 tokens: (2, 2) then a block cut to 1, which follows a full block.
    drafted, accepted = [0, 2, 1], [0, 2, 1]
    # The draft's passes were timed against a target step of 10 ms: c = 1 / 10, c2 = 2.5 / 10.
    costs = CostProfile([0.010, 0.012, 0.015], 0.001, [], draft_catch_up_s=0.0025, draft_reference_s=0.010)
    assert costs.cost_ratio == pytest.approx(0.1) and costs.catch_up_ratio == pytest.approx(0.25)
    # 1 ms of the run outside drafting and verifying, over its 2 steps: o = 0.5 ms = 0.05 v(1).
    fields = cost_model_fields(2, drafted, accepted, costs, decode_speedup=1.5, other_time_s=0.001)
    # Step 1: v(3) + 2c = 1.7; step 2: v(2) + c + (c2 - c) = 1.45 (alpha^2 = 1); plus 2 o: 3.25 v(1) for 3 + 2 tokens.
    assert fields["predicted_speedup"] == pytest.approx(5 / 3.25)
    assert fields["predicted_tau"] == pytest.approx(2.5)  # the measured tau, shortened last block included
    # Without the catch-up measured and without the overhead: 3.0 for 5 tokens.
    plain = cost_model_fields(2, drafted, accepted, CostProfile([0.010, 0.012, 0.015], 0.001, []), 1.5)
    assert plain["predicted_speedup"] == pytest.approx(5 / 3.0)
    # A row carries the catch-up pass and the overhead where the schema declares them.
    declared = set(CaseResult.__dataclass_fields__)
    for name, value in (("draft_catch_up_ms", 2.5), ("step_overhead_ms", 0.5)):
        assert (name in fields) == (name in declared)
        assert fields.get(name, value) == pytest.approx(value)


# --- what the drafter proposed, the catch-up pass, the overhead --------------------------------------


def test_the_steps_as_they_ran_on_hand_computed_values():
    curve = [1.0, 1.2, 1.5]
    # Every step drafts k: the textbook speedup, tau(2) = 1.75 per v(3) + 2c = 1.7.
    run = predict_steps(0.5, [0, 2, 2], 0.1, curve)
    assert run.tokens == pytest.approx(3.5) and run.time == pytest.approx(3.4) and run.steps == 2
    assert run.speedup == pytest.approx(predicted_speedup(0.5, 2, 0.1, curve)) and run.tau == pytest.approx(1.75)
    # A shortened last block (alpha 1): 3 + 2 tokens for 1.7 + 1.3.
    run = predict_steps(1.0, [0, 2, 1], 0.1, curve)
    assert run.speedup == pytest.approx(5 / 3.0) and run.tau == pytest.approx(2.5)
    # Prompt lookup with plain steps (nothing found: one token for v(1)): 1 + tau(3) + 1 for 1 + v(4) + 1.
    run = predict_steps(0.5, [0, 0, 3, 0], 0.0, [1.0, 1.1, 1.2, 1.3])
    assert run.tokens == pytest.approx(3.875) and run.time == pytest.approx(3.3)
    # Units: the curve may be in seconds; the time is in v(1).
    assert predict_steps(0.5, [0, 2, 2], 0.1, [0.010, 0.012, 0.015]).time == pytest.approx(3.4)
    with pytest.raises(ValueError):
        predict_steps(0.5, [0, 3], 0.0, curve)  # v(4) not measured


def test_the_catch_up_pass_costs_after_a_block_accepted_whole():
    # alpha 0.5, k=1, c = 0.2, c2 = 0.5, v(2) = 2: step 1 has nothing to catch up, 2.2; steps 2 and 3 follow a
    # block of 1 accepted whole half the time: 2.2 + 0.5 * 0.3 = 2.35 each.
    assert predict_steps(0.5, [0, 1, 1, 1], 0.2, [1.0, 2.0], catch_up_ratio=0.5).time == pytest.approx(6.9)
    assert predict_steps(0.5, [0, 1, 1, 1], 0.2, [1.0, 2.0]).time == pytest.approx(6.6)  # not measured
    # After a plain step (prompt lookup found nothing) the draft has nothing to catch up.
    assert predict_steps(1.0, [0, 0, 1], 0.2, [1.0, 2.0], catch_up_ratio=0.5).time == pytest.approx(1 + 2.2)
    # A long run: the textbook tau(k) / (v(k+1) + k c) plus alpha^k (c2 - c): 1.75 / (1.5 + 0.2 + 0.25 * 0.2) = 1.
    assert predict_proposals(0.5, [2], 0.1, [1.0, 1.2, 1.5], catch_up_ratio=0.3).speedup == pytest.approx(1.0)


def test_the_per_step_overhead_is_paid_once_per_step():
    assert predict_steps(1.0, [0, 2, 1], 0.1, [1.0, 1.2, 1.5], step_overhead=0.05).time == pytest.approx(3.1)
    # A plain step pays it too.
    assert predict_steps(0.9, [0, 0, 0], 0.0, [1.0, 1.2], step_overhead=0.05).time == pytest.approx(2.1)
    # And the long run's steps: 1.7 + 0.05 per tau(2) = 1.75.
    assert predict_proposals(0.5, [2], 0.1, [1.0, 1.2, 1.5], step_overhead=0.05).speedup == pytest.approx(1.0)


def test_a_long_run_of_proposals_mixes_plain_steps_and_blocks():
    # Proposals 0 and 4, alpha 1, c = 0.1, c2 = 0.3, flat curve: tokens (1 + 5) / 2 per step; a block follows a
    # full block half the time: cost (1 + (1 + 0.4 + 0.5 * 0.2)) / 2 = 1.25 per step.
    run = predict_proposals(1.0, [0, 4], 0.1, [1.0] * 5, catch_up_ratio=0.3)
    assert run.tau == pytest.approx(3.0) and run.speedup == pytest.approx(3.0 / 1.25)
    # Every proposal k, nothing else: the textbook formula.
    for alpha, k, c, curve in [(0.8, 3, 0.1, [1.0, 1.1, 1.3, 1.4]), (0.5, 1, 0.3, [1.0, 1.2])]:
        assert predict_proposals(alpha, [k], c, curve).speedup == pytest.approx(predicted_speedup(alpha, k, c, curve))
    # And the recommendation with it: the old hand-computed cases.
    assert recommended_k_for(0.8, 0.0, [1.0, 3.0, 1.2, 1.3]) == 3
    assert recommended_k_for(0.8, 0.5, [1.0] * 4) == 2
    with pytest.raises(ValueError):
        recommended_k_for(0.8, 0.0, [1.0])


def test_observed_proposals_keep_what_the_drafter_proposed_and_drop_the_runs_cut():
    # Prompt lookup at k=4, 11 decode tokens: (4, 4) reached k; (0, 0) found nothing; (3, 1) stopped short of
    # the 4 allowed (its match ended); (2, 2) with 3 tokens left was cut to 2 by the run's end: left out.
    drafted, accepted = [0, 4, 0, 3, 2], [0, 4, 0, 1, 2]
    assert decode_tokens_of_steps(accepted) == 11
    observed = observed_proposals(4, drafted, accepted)
    assert observed == [(4, True), (0, False), (3, False)]
    assert proposals_at(2, observed) == [2, 0, 2]  # each capped at k
    assert proposals_at(8, observed) == [8, 0, 3]  # what reached k is taken to reach any k; the rest stays
    # A draft model drafts k every step but the cut last one.
    assert observed_proposals(16, [0, 16, 13], [0, 16, 13]) == [(16, True)]
    # A run cut in every step still says something: its cut blocks.
    assert observed_proposals(8, [0, 3], [0, 3]) == [(3, True)]


def test_prompt_lookup_capped_at_its_match_predicts_the_measured_tau_and_recommends_the_longest_useful_k():
    # The repetitive prompt at k=16: a period of 6, so lookup proposed 6 each step and all were accepted; the
    # last block (2) was cut by the run's end. 31 decode tokens in 5 steps: measured tau 6.2 at k=8 and k=16.
    drafted, accepted = [0, 6, 6, 6, 6, 2], [0, 6, 6, 6, 6, 2]
    flat = [1.0] * 17
    run = predict_steps(1.0, drafted, 0.0, flat)
    assert run.tau == pytest.approx(6.2) and run.speedup == pytest.approx(6.2)  # a flat curve: tokens per pass
    assert predicted_speedup(1.0, 16, 0.0, flat) == pytest.approx(17.0)  # the textbook's, 2.7 times too high
    # At other k: the proposals (6, the cut one left out) capped at k. With v(m) = 1 + 0.1 (m - 1): k=5: 6 / 1.5 =
    # 4.0; k=6: 7 / 1.6 = 4.375; every k past 6 drafts the same 6 for the same cost, so 6 is recommended.
    observed = observed_proposals(16, drafted, accepted)
    assert observed == [(6, False)] * 4
    curve = [1.0 + 0.1 * m for m in range(17)]
    speedups = {k: predict_proposals(1.0, proposals_at(k, observed), 0.0, curve).speedup for k in (5, 6, 8, 16)}
    assert speedups[5] == pytest.approx(4.0) and speedups[6] == pytest.approx(4.375)
    assert speedups[8] == speedups[16] == speedups[6]
    assert recommended_k_for(1.0, 0.0, curve, observed) == 6
    # A draft model with the same acceptance goes on gaining with k: (k + 1) / (1 + 0.1 k) grows.
    assert recommended_k_for(1.0, 0.0, curve) == 16


@pytest.mark.usefixtures("one_torch_thread")
def test_the_draft_passes_are_timed_in_turn_with_a_target_step():
    import torch
    from factory import tiny_model

    from pytest_specbench.engine.drafters import ModelDrafter, PromptLookupDrafter
    from pytest_specbench.measure.costs import draft_pass_costs, measure_costs

    target, draft = tiny_model("llama"), tiny_model("llama", seed=1)
    for ids in (torch.tensor([[5, 17, 33, 9, 60]]), torch.tensor([[5]])):  # a one-token prompt still gives two
        one, two, reference = draft_pass_costs(target, ModelDrafter(draft), ids, repeats=1)
        assert one > 0 and two > 0 and reference > 0
    assert draft_pass_costs(target, PromptLookupDrafter(), ids) == (0.0, None, None)
    profile = measure_costs(target, ModelDrafter(draft), torch.tensor([[5, 17, 33, 9, 60]]), 1, kernels="linear")
    assert len(profile.verify_costs_s) == 1 and profile.draft_catch_up_s > 0 and profile.draft_reference_s > 0
    assert profile.cost_ratio == pytest.approx(profile.draft_token_s / profile.draft_reference_s)
    lookup = measure_costs(target, PromptLookupDrafter(), torch.tensor([[5, 17, 33, 9, 60]]), 1, kernels="linear")
    assert lookup.cost_ratio == 0.0 and lookup.catch_up_ratio is None


def test_catch_up_passes_follow_blocks_accepted_whole():
    from pytest_specbench.engine.cost_model import catch_up_passes

    # prefill, a block of 2 accepted whole (catch-up next), 3 with 1 accepted, 2 whole then a plain step (no
    # catch-up: nothing drafted next), 1 whole at the end (no next step)
    assert catch_up_passes([0, 2, 3, 2, 0, 1], [0, 2, 1, 2, 0, 1]) == 1
    assert catch_up_passes([0, 4, 4, 4], [0, 4, 4, 4]) == 2
    assert catch_up_passes([], []) == 0


def _run(draft_s: float = 0.0, passes: int = 0, drafted=(), accepted=(), decode_s: float = 0.0, new_tokens: int = 1):
    import torch

    from pytest_specbench.engine.stats import DecodeStats, GenerationResult

    stats = DecodeStats(
        new_tokens=new_tokens,
        draft_forward_passes=passes,
        draft_time_s=draft_s,
        wall_time_s=decode_s + 0.1,
        prefill_time_s=0.1,
        drafted_per_step=list(drafted),
        accepted_per_step=list(accepted),
    )
    return GenerationResult(torch.zeros(1, 1, dtype=torch.long), 0, stats)


def test_the_runs_price_a_drafted_token_on_the_timed_rounds_clock():
    from pytest_specbench.measure.costs import CostProfile, calibrated_costs

    # The probe: a draft pass 10 ms, its catch-up 20 ms, against a target pass of 50 ms: c = 0.2.
    probe = CostProfile(
        verify_costs_s=[0.05, 0.06],
        draft_token_s=0.010,
        column_head_rows=[],
        draft_catch_up_s=0.020,
        draft_reference_s=0.050,
    )
    assert probe.cost_ratio == pytest.approx(0.2) and probe.draft_cost_source == "probe"
    # A speculative run of 30 blocks of 1, 20 accepted whole with a drafting step after them: 0.5 s of drafting
    # over 10 one-position passes and 20 catch-ups at twice their cost is 10 ms a pass; a baseline run of 20
    # decode tokens in 2 s is 100 ms a step: c = 0.1.
    blocks, accepted = [0] + [1] * 30, [0] + [1, 1, 0] * 10
    pair = (_run(decode_s=2.0, new_tokens=21), _run(0.5, 30, blocks, accepted))
    measured = calibrated_costs(probe, [pair])
    assert measured.draft_token_s == pytest.approx(0.010) and measured.draft_catch_up_s == pytest.approx(0.020)
    assert measured.draft_reference_s == pytest.approx(0.1)
    assert measured.cost_ratio == pytest.approx(0.1) and measured.catch_up_ratio == pytest.approx(0.2)
    # The planted bug, draft time over every pass alike (0.5 / 30), prices a token at 1/6 of a step.
    assert measured.cost_ratio != pytest.approx(0.5 / 30 / 0.1, rel=0.05)
    assert measured.draft_cost_source == "runs" and measured.probe_draft_token_s == 0.010
    assert measured.verify_costs_s == probe.verify_costs_s  # the curve stays the probe's
    # Two pairs pool their times and counts.
    assert calibrated_costs(probe, [pair] * 2).cost_ratio == pytest.approx(measured.cost_ratio)
    # Nothing drafted, nothing decoded, or prompt lookup's zero cost: the probe's profile, unchanged.
    assert calibrated_costs(probe, [(pair[0], _run())]) is probe
    assert calibrated_costs(probe, [(_run(), pair[1])]) is probe
    lookup = CostProfile(verify_costs_s=[0.05, 0.06], draft_token_s=0.0, column_head_rows=[])
    assert calibrated_costs(lookup, [pair]) is lookup
