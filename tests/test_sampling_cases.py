"""Benchmark cases under sampling: options, the per-case distribution check, reproducibility, the hf engine.

The statistics of the check itself (false-alarm rate, power against planted bugs) are tested in
``test_sampling.py``; here the check runs inside real cases, passes on the engine's rule and fails a
case, with a readable message, when a bug is planted in the rule the engine runs.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # plugin runs that load the pair and draw thousands of samples

SAMPLED = (
    "--specbench-temperature=0.8",
    "--specbench-top-p=0.9",
    "--specbench-k=2",
    "--specbench-sampling-check-draws=4000",
    "--specbench-prompts=natural",
)


def _rows(pytester: pytest.Pytester, name: str) -> dict[str, dict]:
    return {row["case"]: row for row in json.loads((pytester.path / name).read_text())["results"]}


def test_sampled_cases_pass_the_distribution_check_and_say_so(bench, pytester: pytest.Pytester) -> None:
    result = bench(*SAMPLED, "--specbench-engine=native,hf", "--specbench-json=sampled.json")
    result.assert_outcomes(passed=2)
    rows = _rows(pytester, "sampled.json")
    native, hf = rows["tiny-native-k2-natural"], rows["tiny-hf-k2-natural"]
    for row in (native, hf):
        assert (row["temperature"], row["top_p"], row["top_k"]) == (0.8, 0.9, 0)
        assert row["quality_score"] is None and row["baseline_matches_reference"] is None
        assert row["sampling_check_draws"] == 4000 and row["sampling_check_p_value"] >= 0.001
        assert 0.0 <= row["acceptance_rate"] <= 1.0 and row["new_tokens"] == 12
    assert native["verdict"] == "lossless" and native["lossless"] is True
    # transformers' own rule is not re-run by the check: its cases say so instead of claiming a pass.
    assert hf["verdict"] == "not-checked" and hf["lossless"] is None
    assert 0.0 < native["expected_alpha"] <= 1.0


def test_a_sampled_run_repeats_with_its_seed_and_changes_without(bench, pytester: pytest.Pytester) -> None:
    steps = []
    for name, seed in (("a.json", "7"), ("b.json", "7"), ("c.json", "8")):
        bench(*SAMPLED, f"--specbench-seed={seed}", f"--specbench-json={name}").assert_outcomes(passed=1)
        row = _rows(pytester, name)["tiny-k2-natural"]
        steps.append((row["accepted_per_step"], row["sampling_check_statistic"]))
    assert steps[0] == steps[1]
    assert steps[0] != steps[2]


def test_a_planted_bug_in_the_rule_fails_the_case_with_the_check(bench, pytester: pytest.Pytester) -> None:
    # Resample from p instead of max(p - q, 0) after a rejection: the classic silent bug.
    pytester.makeconftest("""
        import pytest
        import pytest_specbench.engine.sampling as sampling

        @pytest.fixture(autouse=True)
        def planted_bug(monkeypatch):
            monkeypatch.setattr(sampling, "residual_distribution", lambda target_probs, draft_probs: target_probs)
    """)
    result = bench(*SAMPLED, "--specbench-temperature=1.0", "--specbench-top-p=1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*tiny-k2-natural: under sampling, the tokens the engine's accept/resample rule "
            "commits do not follow the target's distribution*p = *"
        ]
    )
