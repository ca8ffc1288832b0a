"""The cost model: each formula on hand-computed values, the alpha estimate on simulated steps, and a run
whose draft is the target (alpha 1, tau k + 1 but for the shortened last block)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pytest_specbench.engine.cost_model import (accepted_length_histogram, alpha_mle, expected_tau_of_steps,
                                         position_acceptance, position_counts, predicted_speedup, predicted_tau,
                                         recommended_k)


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
    result = bench("--specbench-k=1,4", pairs_file=equal_pairs_file)
    result.assert_outcomes(passed=4)
    rows = json.loads((Path(pytester.path) / "spec_results.json").read_text())["results"]
    for row in rows:
        k = row["k"]
        assert row["alpha"] == 1.0 and row["predicted_tau"] == k + 1
        assert all(share == 1.0 for share in row["position_acceptance"])
        assert row["accepted_length_histogram"][-1] == sum(row["accepted_length_histogram"])
        # 12 new tokens: the prefill commits one, then blocks of k + 1 until fewer than k + 1 remain.
        assert row["tau"] == pytest.approx(expected_tau_of_steps(1.0, row["drafted_per_step"]))
        if k == 1:
            assert row["tau"] == pytest.approx(11 / 6)  # 11 decode tokens: five blocks of 2, then one of 1
        assert len(row["verify_costs_ms"]) == 5 and all(v > 0 for v in row["verify_costs_ms"])
        assert row["verify_cost_ratio"] == pytest.approx(row["verify_costs_ms"][k] / row["verify_costs_ms"][0])
        assert row["cost_ratio"] > 0 and row["draft_token_ms"] > 0
        assert 1 <= row["recommended_k"] <= 4
        assert row["efficiency"] == pytest.approx(row["decode_speedup"] / row["predicted_speedup"])
        assert row["target_params"] == row["draft_params"] > 0
        assert row["peak_memory_mb"] > 0 and row["peak_memory_kind"] == "process_rss"


def test_the_row_fields_on_hand_computed_values():
    from pytest_specbench.measure.costs import CostProfile, cost_model_fields

    # Steps (2, 2) and (2, 1): alpha = 3 / (3 + 1); v = 10, 12, 15 ms; a draft token 1 ms, so c = 0.1.
    fields = cost_model_fields(2, [0, 2, 2], [0, 2, 1], CostProfile([0.010, 0.012, 0.015], 0.001, []),
                               decode_speedup=1.7)
    assert fields["alpha"] == pytest.approx(0.75)
    assert fields["cost_ratio"] == pytest.approx(0.1) and fields["verify_cost_ratio"] == pytest.approx(1.5)
    assert fields["predicted_tau"] == pytest.approx(2.3125)  # 1 + 0.75 + 0.5625
    assert fields["predicted_speedup"] == pytest.approx(2.3125 * 0.010 / (2 * 0.1 * 0.010 + 0.015))  # 1.360
    assert fields["efficiency"] == pytest.approx(1.7 / fields["predicted_speedup"])
    assert fields["recommended_k"] == 2  # k=1: 1.75 * 10 / (1 + 12) = 1.346 < 1.360
    assert fields["verify_costs_ms"] == pytest.approx([10.0, 12.0, 15.0]) and fields["draft_token_ms"] == 1.0
    assert fields["position_acceptance"] == [1.0, 0.5] and fields["accepted_length_histogram"] == [0, 1, 1]
    # Prompt lookup that never matched: no alpha, so no prediction, but the costs are still there.
    empty = cost_model_fields(2, [0, 0], [0, 0], CostProfile([0.01, 0.02, 0.03], 0.0, []), 1.0)
    assert empty["alpha"] is None and "predicted_speedup" not in empty and empty["cost_ratio"] == 0.0


def test_parameter_counts_include_int8_linears():
    from factory import tiny_model

    from pytest_specbench.engine.cost_probe import parameter_count
    from pytest_specbench.engine.derived_models import int8_copy

    target = tiny_model("llama")
    assert parameter_count(None) == 0
    assert parameter_count(int8_copy(target)) == parameter_count(target) > 0
