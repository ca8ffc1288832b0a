"""The baseline file and the regression gate: on hand-made result rows, then through pytest on the tiny pair."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from factory import gated_case
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_specbench.results.gate import (
    BASELINE_FORMAT,
    CROSS_MACHINE_Z,
    BaselineError,
    CompareSettings,
    Comparison,
    Regression,
    baseline_document,
    compare,
    compared_count,
    gate_summary_lines,
    load_baseline,
    new_cases,
    pair_tolerance,
    save_baseline,
)
from pytest_specbench.results.schema import CaseResult

FINGERPRINT = {
    "cpu_model": "Test CPU",
    "cpu_capability": "AVX2",
    "quantized_engine": "x86",
    "torch_threads": 2,
    "gpus": [],
    "torch": "2.x",
    "transformers": "5.x",
}
ENVIRONMENT = {"fingerprint": FINGERPRINT, "versions": {"torch": "2.x"}}


def row(
    case: str = "gpt2_large-k8-code_python",
    *,
    acceptance: float = 0.812,
    verdict: str = "lossless",
    speedup: float = 1.8,
    tau: float = 3.1,
    drafted: int = 1000,
) -> CaseResult:
    return gated_case(
        case,
        acceptance=acceptance,
        drafted=drafted,
        speedup=speedup,
        verdict=verdict,
        tau=tau,
        speculative_tps=90.0 * speedup,
        baseline_tps=90.0,
    )


RESULTS = [row("tiny-k4-natural", acceptance=0.5), row(), row("tiny-k1-natural", acceptance=0.9, speedup=1.1)]


def saved(tmp_path: Path, document: dict[str, Any] | str) -> Path:
    path = tmp_path / "baseline.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document), encoding="utf-8")
    return path


# --- the file -----------------------------------------------------------------------------


def test_save_load_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "baseline.json"
    save_baseline(path, RESULTS, ENVIRONMENT)
    loaded = load_baseline(path)
    assert loaded == baseline_document(RESULTS, ENVIRONMENT, created=loaded["created"])
    assert loaded["format"] == BASELINE_FORMAT == 3
    assert loaded["fingerprint"] == FINGERPRINT and loaded["versions"] == ENVIRONMENT["versions"]
    assert list(loaded["cases"]) == sorted(r.case for r in RESULTS)
    entry = loaded["cases"]["gpt2_large-k8-code_python"]
    assert entry == {
        "pair": "gpt2_large",
        "k": 8,
        "prompt": "code_python",
        "acceptance_rate": 0.812,
        "tau": 3.1,
        "lossless": True,
        "verdict": "lossless",
        "accepted_tokens": 812,
        "drafted_tokens": 1000,
        "speculative_tps": pytest.approx(162.0),
        "baseline_tps": 90.0,
        "speedup": 1.8,
        "decode_speedup": 1.8,
        "settings": {
            "engine": "native",
            "new_tokens": 32,
            "prompt_tokens": 22,
            "temperature": 0.0,
            "top_p": 1.0,
            "top_k": 0,
            "dtype": "float32",
            "device": "cpu",
        },
    }
    assert "device" not in entry  # only the gated and informational fields, and the case's settings, are kept
    text = path.read_text(encoding="utf-8")
    assert text.startswith('{\n  "format": 3,') and text.endswith("}\n")


def test_save_is_atomic_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    save_baseline(path, RESULTS, ENVIRONMENT)
    save_baseline(path, RESULTS[:1], ENVIRONMENT)  # overwrites in place
    assert [p.name for p in tmp_path.iterdir()] == ["baseline.json"]
    assert list(load_baseline(path)["cases"]) == ["tiny-k4-natural"]


def test_save_refuses_rows_that_would_make_a_bad_baseline(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tiny-k4-natural appears twice"):
        save_baseline(tmp_path / "b.json", [RESULTS[0], RESULTS[0]], ENVIRONMENT)
    with pytest.raises(ValueError, match="tiny-k4-natural has acceptance_rate 1.5"):
        save_baseline(tmp_path / "b.json", [row("tiny-k4-natural", acceptance=1.5)], ENVIRONMENT)
    assert not list(tmp_path.iterdir())


def test_non_finite_timings_are_stored_as_null(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    save_baseline(path, [dataclasses.replace(row(), speedup=float("inf"), baseline_tps=float("nan"))], ENVIRONMENT)
    entry = load_baseline(path)["cases"]["gpt2_large-k8-code_python"]
    assert entry["speedup"] is None and entry["baseline_tps"] is None


def good_document() -> dict[str, Any]:
    return baseline_document(RESULTS, ENVIRONMENT, created="2024-01-01T00:00:00+00:00")


def with_case(**fields: Any) -> dict[str, Any]:
    document = good_document()
    document["cases"]["tiny-k4-natural"].update(fields)
    return document


def without_case_field(name: str) -> dict[str, Any]:
    document = good_document()
    del document["cases"]["tiny-k4-natural"][name]
    return document


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "top level is list, expected an object"),
        ({**good_document(), "format": 1}, "format 1, expected format 3"),
        ({**good_document(), "format": True}, "format True, expected format 3"),
        ({k: v for k, v in good_document().items() if k != "format"}, "no format, expected format 3"),
        ({**good_document(), "cases": [1]}, 'cases of type list, expected "cases" to be an object'),
        ({k: v for k, v in good_document().items() if k != "cases"}, "no cases"),
        (
            {**good_document(), "cases": {}},
            "has no cases, so it would gate nothing; expected a baseline saved from a run with results",
        ),
    ],
)
def test_malformed_file_names_the_file(tmp_path: Path, content: dict[str, Any] | str, message: str) -> None:
    path = saved(tmp_path, content)
    with pytest.raises(BaselineError, match=message) as caught:
        load_baseline(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (without_case_field("acceptance_rate"), "has no acceptance_rate, expected a number in \\[0, 1\\]"),
        (with_case(acceptance_rate=1.2), "acceptance_rate 1.2, expected a number in \\[0, 1\\]"),
        (with_case(acceptance_rate=-0.1), "acceptance_rate -0.1"),
        (with_case(acceptance_rate="0.5"), "acceptance_rate '0.5'"),
        (with_case(acceptance_rate=True), "acceptance_rate True"),
        (without_case_field("tau"), "has no tau, expected a number"),
        (with_case(tau=None), "tau None, expected a number"),
        (without_case_field("lossless"), "has no lossless, expected true, false, or null for not checked"),
        (with_case(lossless="yes"), "lossless 'yes', expected true, false, or null for not checked"),
        (with_case(lossless=1), "lossless 1, expected true, false, or null for not checked"),
        (with_case(verdict="maybe"), "verdict 'maybe'"),
        (with_case(speedup="fast"), "speedup 'fast'"),
        (without_case_field("drafted_tokens"), "drafted_tokens None, expected a whole number"),
        (with_case(accepted_tokens=2.5), "accepted_tokens 2.5, expected a whole number"),
        (with_case(accepted_tokens=2000), "more accepted_tokens than drafted_tokens"),
    ],
)
def test_malformed_case_names_the_file_and_case(tmp_path: Path, document: dict[str, Any], message: str) -> None:
    path = saved(tmp_path, document)
    with pytest.raises(BaselineError, match=message) as caught:
        load_baseline(path)
    assert str(path) in str(caught.value) and "case tiny-k4-natural" in str(caught.value)


def test_nan_acceptance_is_refused(tmp_path: Path) -> None:
    path = saved(tmp_path, json.dumps(good_document()).replace('"acceptance_rate": 0.5', '"acceptance_rate": NaN'))
    with pytest.raises(BaselineError, match="case tiny-k4-natural has acceptance_rate nan"):
        load_baseline(path)


def test_case_that_is_not_an_object(tmp_path: Path) -> None:
    document = good_document()
    document["cases"]["tiny-k4-natural"] = 0.5
    with pytest.raises(BaselineError, match="case tiny-k4-natural is float, expected an object"):
        load_baseline(saved(tmp_path, document))


def test_missing_or_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.json"
    with pytest.raises(BaselineError, match="no such file") as caught:
        load_baseline(missing)
    assert str(missing) in str(caught.value)
    with pytest.raises(BaselineError, match="cannot be read"):
        load_baseline(tmp_path)  # a folder
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(BaselineError, match="not UTF-8"):
        load_baseline(binary)


# --- the comparison -----------------------------------------------------------------------


def test_unchanged_results_have_no_regression() -> None:
    assert compare(good_document(), RESULTS).regressions == []
    assert compare(good_document(), RESULTS, CompareSettings(max_speedup_drop=0.0)).regressions == []


def test_acceptance_drop_beyond_the_limit() -> None:
    now = [row("tiny-k4-natural", acceptance=0.47), *RESULTS[1:]]
    (regression,) = compare(good_document(), now).regressions
    assert regression == Regression("tiny-k4-natural", "acceptance", 0.5, 0.47, "drop 0.030 > allowed 0.020", 0.02)
    assert regression.describe() == "tiny-k4-natural: acceptance 0.500 -> 0.470 (drop 0.030 > allowed 0.020)"
    assert compare(good_document(), now, CompareSettings(max_acceptance_drop=0.05)).regressions == []


def test_acceptance_drop_of_exactly_the_limit_is_allowed() -> None:
    # 0.812 - 0.792 is 0.020000000000000018 in floating point.
    assert compare(good_document(), [*RESULTS[:1], row(acceptance=0.792), *RESULTS[2:]]).regressions == []
    assert compare(good_document(), [*RESULTS[:1], row(acceptance=0.7919), *RESULTS[2:]]).regressions != []


def test_acceptance_rise_is_not_a_regression() -> None:
    assert compare(good_document(), [*RESULTS[:1], row(acceptance=1.0), *RESULTS[2:]]).regressions == []


def test_describe_matches_the_documented_example() -> None:
    document = baseline_document([row()], ENVIRONMENT)
    (regression,) = compare(document, [row(acceptance=0.640)]).regressions
    assert regression.describe() == (
        "gpt2_large-k8-code_python: acceptance 0.812 -> 0.640 (drop 0.172 > allowed 0.020)"
    )


def test_lossless_to_diverged_is_a_regression() -> None:
    now = [*RESULTS[:1], row(verdict="diverged"), *RESULTS[2:]]
    (regression,) = compare(good_document(), now).regressions
    assert (regression.case, regression.kind, regression.old, regression.new) == (
        "gpt2_large-k8-code_python",
        "lossless",
        True,
        False,
    )
    assert "now diverged at token 5" in regression.describe()


def test_tie_divergence_and_known_divergence_are_not_regressions() -> None:
    assert compare(good_document(), [*RESULTS[:1], row(verdict="tie-divergence"), *RESULTS[2:]]).regressions == []
    document = baseline_document([row(verdict="diverged")], ENVIRONMENT)
    assert compare(document, [row(verdict="diverged")]).regressions == []


def test_missing_case() -> None:
    (regression,) = compare(good_document(), RESULTS[:2]).regressions
    assert (regression.case, regression.kind, regression.old, regression.new) == (
        "tiny-k1-natural",
        "missing",
        None,
        None,
    )
    assert regression.describe() == (
        "tiny-k1-natural: missing (in the baseline, not in this run: the case has no "
        "result (it failed, was skipped or deselected, or the run stopped before it))"
    )
    assert compare(good_document(), RESULTS[:2], CompareSettings(allow_missing=True)).regressions == []


def test_speedup_is_gated_only_on_request() -> None:
    now = [*RESULTS[:1], row(speedup=1.5), *RESULTS[2:]]  # 1.8 -> 1.5: a 16.7% drop
    assert compare(good_document(), now).regressions == []
    (regression,) = compare(good_document(), now, CompareSettings(max_speedup_drop=0.1)).regressions
    assert (regression.kind, regression.old, regression.new) == ("speedup", 1.8, 1.5)
    assert regression.describe() == ("gpt2_large-k8-code_python: speedup 1.80 -> 1.50 (drop 16.7% > allowed 10.0%)")
    assert compare(good_document(), now, CompareSettings(max_speedup_drop=0.2)).regressions == []


def test_regressions_are_sorted_by_case_then_kind() -> None:
    now = [row(verdict="diverged", acceptance=0.1, speedup=0.5), row("tiny-k4-natural", acceptance=0.1)]
    comparison = compare(good_document(), list(reversed(now)), CompareSettings(max_speedup_drop=0.1))
    found = [(r.case, r.kind) for r in comparison.regressions]
    assert found == [
        ("gpt2_large-k8-code_python", "lossless"),
        ("gpt2_large-k8-code_python", "acceptance"),
        ("gpt2_large-k8-code_python", "speedup"),
        ("tiny-k1-natural", "missing"),
        ("tiny-k4-natural", "acceptance"),
    ]


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="max_acceptance_drop"):
        CompareSettings(max_acceptance_drop=-0.1)
    with pytest.raises(ValueError, match="max_speedup_drop"):
        CompareSettings(max_speedup_drop=float("nan"))


def test_new_cases_are_listed_not_gated() -> None:
    now = [*RESULTS, row("tiny-k2-natural", acceptance=0.0), row("a-k1-b")]
    assert compare(good_document(), now).regressions == []
    assert new_cases(good_document(), now) == ["a-k1-b", "tiny-k2-natural"]
    assert compared_count(good_document(), now) == 3


def test_the_comparison_counts_what_it_gated_and_leaves_excluded_cases_unjudged() -> None:
    now = [row("tiny-k4-natural", acceptance=0.1), *RESULTS[1:], row("a-k1-b")]
    comparison = compare(good_document(), now, CompareSettings(excluded={"tiny-k4-natural"}))
    assert comparison == Comparison(regressions=[], compared=2, new_cases=["a-k1-b"])  # neither fallen nor missing
    assert compare(good_document(), now).compared == 3


# --- another machine: acceptance pooled per pair ---------------------------------------------


def _pair_rows(acceptances: list[float], drafted: int = 40) -> list[CaseResult]:
    return [row(f"gemma-k4-p{i}", acceptance=a, drafted=drafted) for i, a in enumerate(acceptances)]


def test_across_machines_single_cases_may_move_while_the_pair_holds() -> None:
    # Near-tie flips: one case up, one down, as a CPU with other kernels does; pooled 0.75 -> 0.725.
    old = baseline_document(_pair_rows([0.75, 0.75, 0.75, 0.75]), ENVIRONMENT)
    now = _pair_rows([0.6, 0.85, 0.7, 0.75])
    assert {r.kind for r in compare(old, now).regressions} == {"acceptance"}  # same machine: per case, it fails
    assert compare(old, now, CompareSettings(same_machine=False)).regressions == []


def test_across_machines_a_worse_draft_still_fails_per_pair() -> None:
    old = baseline_document(_pair_rows([0.75, 0.75, 0.75, 0.75]), ENVIRONMENT)
    (regression,) = compare(old, _pair_rows([0.5, 0.6, 0.55, 0.5]), CompareSettings(same_machine=False)).regressions
    assert regression.kind == "pair acceptance" and regression.case == "gemma (pair, 4 cases)"
    assert regression.old == pytest.approx(0.75) and regression.new == pytest.approx(0.5375)
    assert regression.limit == pytest.approx(pair_tolerance(0.75, 160, 0.02))


def test_pair_tolerance_is_z_standard_errors_with_a_floor() -> None:
    assert pair_tolerance(0.75, 160, 0.02) == pytest.approx(CROSS_MACHINE_Z * (0.75 * 0.25 / 160) ** 0.5)
    assert pair_tolerance(0.99, 10**6, 0.02) == 0.02
    assert pair_tolerance(0.5, 0, 0.02) == 0.02


def test_across_machines_losslessness_is_still_gated_and_speed_is_not() -> None:
    old = baseline_document(_pair_rows([0.75, 0.75]), ENVIRONMENT)
    now = [
        row("gemma-k4-p0", acceptance=0.75, drafted=40, verdict="diverged", speedup=0.1),
        row("gemma-k4-p1", acceptance=0.75, drafted=40, speedup=0.1),
    ]
    comparison = compare(old, now, CompareSettings(max_speedup_drop=0.1, same_machine=False))
    assert [r.kind for r in comparison.regressions] == ["lossless"]


def test_the_summary_says_the_machine_differs() -> None:
    lines = gate_summary_lines([], [], 4, "b.json", ["cpu_capability 'AVX512' -> 'AVX2'"])
    assert "another machine (cpu_capability 'AVX512' -> 'AVX2')" in lines[0]
    assert "per pair" in lines[0]


# --- the summary --------------------------------------------------------------------------


def test_summary_without_regression() -> None:
    lines = gate_summary_lines([], [], 3, Path("base.json"))
    assert lines == ["compared 3 case(s) with base.json: no regression"]


def test_summary_lists_regressions_and_new_cases() -> None:
    now = [row("tiny-k4-natural", acceptance=0.3), row(verdict="diverged")]
    document = good_document()
    regressions = compare(document, [*now, row("new-k1-x")]).regressions
    lines = gate_summary_lines(
        regressions, new_cases(document, [*now, row("new-k1-x")]), compared_count(document, now), "base.json"
    )
    text = "\n".join(lines)
    assert lines[0] == "compared 2 case(s) with base.json: 3 regression(s) in 3 case(s)"
    assert "case" in lines[1] and "check" in lines[1] and "allowed" in lines[1]
    acceptance = next(line for line in lines if "tiny-k4-natural" in line)
    assert "acceptance" in acceptance and "0.500" in acceptance and "0.300" in acceptance
    assert "drop <= 0.020" in acceptance
    lossless = next(line for line in lines if "gpt2_large-k8-code_python" in line)
    assert "lossless" in lossless and "yes" in lossless and "no" in lossless
    assert "tiny-k1-natural" in text and "missing" in text
    assert lines[-1] == "1 case(s) not in the baseline, not gated: new-k1-x"


def test_summary_caps_a_long_list_of_new_cases() -> None:
    lines = gate_summary_lines([], [f"c{i:02}" for i in range(12)], 0, "b.json")
    assert lines[-1].endswith("c09 and 2 more")


# --- a property ---------------------------------------------------------------------------

_names = st.text(alphabet="abcxyz_0123456789", min_size=1, max_size=8)
_rows = st.builds(
    lambda pair, k, prompt, acceptance, tau, verdict, speedup: row(
        f"{pair}-k{k}-{prompt}", acceptance=acceptance, verdict=verdict, speedup=speedup, tau=tau
    ),
    _names,
    st.integers(1, 16),
    _names,
    st.floats(0.0, 1.0),
    st.floats(0.0, 17.0),
    st.sampled_from(["lossless", "tie-divergence", "diverged"]),
    st.floats(0.0, 10.0) | st.just(float("nan")),
)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(st.lists(_rows, max_size=8, unique_by=lambda r: r.case))
def test_a_run_never_regresses_against_its_own_baseline(results: list[CaseResult]) -> None:
    # Through JSON, as the plugin would: the file must keep every value the gate reads.
    document = json.loads(json.dumps(baseline_document(results, ENVIRONMENT), allow_nan=False))
    assert compare(document, results, CompareSettings(max_acceptance_drop=0.0, max_speedup_drop=0.0)).regressions == []
    assert new_cases(document, results) == []
    assert compared_count(document, results) == len(results)


# --- through pytest, on the tiny pair -------------------------------------------------------


@pytest.mark.slow
def test_unchanged_run_passes_the_gate(six_case_bench, pytester: pytest.Pytester) -> None:
    six_case_bench("--specbench-save-baseline=baseline.json").assert_outcomes(passed=6)
    saved = json.loads((pytester.path / "baseline.json").read_text())
    assert len(saved["cases"]) == 6 and saved["versions"]["torch"]
    result = six_case_bench("--specbench-baseline=baseline.json", "-n", "2")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*specbench gate*", "*compared 6 case(s)*no regression*"])


@pytest.mark.slow
def test_weakened_draft_fails_the_gate_with_a_regression_list(
    six_case_bench, pytester: pytest.Pytester, weak_pairs_file: Path
) -> None:
    six_case_bench("--specbench-save-baseline=baseline.json").assert_outcomes(passed=6)
    result = six_case_bench("--specbench-baseline=baseline.json", pairs_file=weak_pairs_file)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=6)  # every case is still lossless; only acceptance fell
    result.stdout.fnmatch_lines(["*specbench gate*", "*regression*", "*tiny-k*acceptance*"])


@pytest.mark.slow
def test_baseline_with_extra_cases_fails_unless_missing_allowed(six_case_bench, pytester: pytest.Pytester) -> None:
    six_case_bench("--specbench-save-baseline=baseline.json").assert_outcomes(passed=6)
    result = six_case_bench("--specbench-baseline=baseline.json", "-k", "k1")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*tiny-k4-*missing*"])
    result = six_case_bench("--specbench-baseline=baseline.json", "-k", "k1", "--specbench-allow-missing")
    assert result.ret == pytest.ExitCode.OK


def test_malformed_baseline_is_a_usage_error_naming_the_file(six_case_bench, pytester: pytest.Pytester) -> None:
    (pytester.path / "broken.json").write_text("{not json")
    result = six_case_bench("--specbench-baseline=broken.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pytest-specbench:*broken.json*"])


@pytest.mark.slow
def test_baseline_from_another_cpu_is_gated_per_pair(
    six_case_bench, pytester: pytest.Pytester, weak_pairs_file: Path
) -> None:
    six_case_bench("--specbench-save-baseline=baseline.json").assert_outcomes(passed=6)
    document = json.loads((pytester.path / "baseline.json").read_text())
    assert document["fingerprint"]["cpu_capability"]
    document["fingerprint"]["cpu_capability"] = "AVX512_ELSEWHERE"
    (pytester.path / "baseline.json").write_text(json.dumps(document))
    result = six_case_bench("--specbench-baseline=baseline.json")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["*recorded on another machine (cpu_capability 'AVX512_ELSEWHERE' -> *per pair*", "*no regression*"]
    )
    result = six_case_bench("--specbench-baseline=baseline.json", pairs_file=weak_pairs_file)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*tiny (pair, 6 cases)*pair acceptance*"])


# --- partial runs never replace a baseline --------------------------------------------------

CTRL_C_AT_THE_THIRD_CASE = """
    import pytest


    @pytest.fixture(autouse=True)
    def ctrl_c(request):
        if "[tiny-k1-dialogue]" in request.node.nodeid:  # the third case, after natural's two
            raise KeyboardInterrupt
"""


@pytest.mark.slow
def test_an_interrupted_run_does_not_replace_the_baseline(six_case_bench, pytester: pytest.Pytester) -> None:
    six_case_bench("--specbench-save-baseline=baseline.json").assert_outcomes(passed=6)
    whole = (pytester.path / "baseline.json").read_text()
    pytester.makeconftest(CTRL_C_AT_THE_THIRD_CASE)
    result = six_case_bench("--specbench-save-baseline=baseline.json", interrupted=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert (pytester.path / "baseline.json").read_text() == whole
    result.stdout.fnmatch_lines(
        [
            "*did not save the baseline baseline.json: 4 case(s) have no result and the run "
            "was interrupted (KeyboardInterrupt); a partial baseline would stop gating the "
            "cases it lacks*--specbench-resume=spec_results.jsonl*--specbench-allow-missing*"
        ]
    )
    document = json.loads((pytester.path / "spec_results.json").read_text())
    assert document["missing_cases"] == [
        "tiny-k1-dialogue",
        "tiny-k4-dialogue",
        "tiny-k1-code_json",
        "tiny-k4-code_json",
    ]
    assert document["interrupted"] == "KeyboardInterrupt"

    # The interrupted run's log is not replaced by a new run (a usage error): this one goes on from it.
    result = six_case_bench(
        "--specbench-save-baseline=baseline.json",
        "--specbench-allow-missing",
        "--specbench-resume=spec_results.jsonl",
        interrupted=True,
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert sorted(json.loads((pytester.path / "baseline.json").read_text())["cases"]) == [
        "tiny-k1-natural",
        "tiny-k4-natural",
    ]
