"""A gate that knows what it compares: the settings a baseline records, refusals, compare-matching, causes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from factory import gated_case

from pytest_specbench.report.outputs import OutputPaths, write_outputs
from pytest_specbench.report.summary import run_document
from pytest_specbench.results.fingerprint import machine_fingerprint
from pytest_specbench.results.gate import (
    BASELINE_FORMAT,
    BaselineError,
    baseline_document,
    check_baseline_settings,
    load_baseline,
    run_gate,
    settings_refusal,
)
from pytest_specbench.results.schema import CaseResult
from pytest_specbench.settings.config import parse_settings, result_settings

#: the options of conftest.py's tiny run, as parse_settings takes them
TINY = {
    "pairs": "tiny",
    "prompts": "natural,code_json",
    "k": "1,4",
    "max-new-tokens": "12",
    "dtype": "float32",
    "warmup": "0",
    "min-rounds": "1",
    "max-rounds": "1",
}


def config(**changes: str):
    values = {**TINY, **{name.replace("_", "-"): value for name, value in changes.items()}}
    return parse_settings({name: (raw, f"--specbench-{name}") for name, raw in values.items()})


def row(
    case: str = "tiny-k1-natural",
    *,
    acceptance: float = 0.8,
    new_tokens: int = 12,
    temperature: float = 0.0,
    dtype: str = "float32",
    **extra: Any,
) -> CaseResult:
    return gated_case(
        case,
        acceptance=acceptance,
        drafted=100,
        speedup=1.2,
        tau=2.0,
        engine="native",
        device="cpu",
        dtype=dtype,
        new_tokens=new_tokens,
        prompt_tokens=20,
        temperature=temperature,
        top_p=1.0,
        top_k=0,
        **extra,
    )


ROWS = [row("tiny-k1-natural"), row("tiny-k4-natural"), row("tiny-k1-code_json"), row("tiny-k4-code_json")]


def baseline(rows=ROWS, settings_of=None) -> dict[str, Any]:
    """A baseline as a run with ``settings_of`` (a config; the tiny run's by default) saves it, on this machine."""
    settings = result_settings(settings_of or config())
    return json.loads(json.dumps(baseline_document(rows, {"fingerprint": machine_fingerprint(), "settings": settings})))


def gate(document, rows, run_config=None, path="b.json"):
    return run_gate(document, rows, path, config=run_config or config())


# --- what a baseline records --------------------------------------------------------------------------


def test_a_saved_baseline_records_the_result_changing_settings_and_the_fingerprint(tmp_path: Path) -> None:
    run = config(temperature="0.7")
    document = run_document(ROWS, run.raw, {"fingerprint": {"cpu_capability": "AVX2"}, "versions": {}})
    written, errors = write_outputs(OutputPaths(baseline=tmp_path / "b.json"), document)
    assert errors == [] and written == [tmp_path / "b.json"]
    saved = load_baseline(tmp_path / "b.json")
    assert saved["format"] == BASELINE_FORMAT == 3
    assert saved["settings"] == result_settings(run)  # derived from the option table, sampling included
    assert saved["settings"]["--specbench-temperature"] == 0.7 and saved["settings"]["--specbench-max-new-tokens"] == 12
    assert saved["fingerprint"] == {"cpu_capability": "AVX2"}
    assert saved["cases"]["tiny-k1-natural"]["settings"] == {
        "engine": "native",
        "new_tokens": 12,
        "prompt_tokens": 20,
        "temperature": 0.0,
        "top_p": 1.0,
        "top_k": 0,
        "dtype": "float32",
        "device": "cpu",
    }


def test_a_schedule_case_records_how_far_the_probe_measured() -> None:
    document = baseline(
        [
            row("tiny-k1-natural"),
            dataclasses.replace(
                row("tiny-k4-natural"), k="auto", case="tiny-kauto-natural", verify_costs_ms=[1.0] * 12
            ),
        ]
    )
    assert document["cases"]["tiny-kauto-natural"]["settings"]["verify_positions"] == 12
    assert "verify_positions" not in document["cases"]["tiny-k1-natural"]["settings"]


# --- other settings: refused, with the differences ----------------------------------------------------


def test_an_8_token_run_against_a_12_token_baseline_is_refused_listing_the_difference() -> None:
    document, run = baseline(), config(max_new_tokens="8")
    refusal = settings_refusal(document, run, "b.json")
    assert (
        "--specbench-baseline=b.json: the baseline was measured with other settings "
        "(--specbench-max-new-tokens 12 in the baseline, 8 now)" in refusal
    )
    assert "--specbench-gate-differing=compare-matching" in refusal
    with pytest.raises(BaselineError, match="--specbench-max-new-tokens 12 in the baseline, 8 now"):
        check_baseline_settings(document, run, "b.json")
    outcome = gate(document, [row(case, new_tokens=8) for case in document["cases"]], run)
    assert outcome.failed and not outcome.regressions
    assert any(
        "measured with other settings (--specbench-max-new-tokens 12 in the baseline, 8 now): not compared" in line
        for line in outcome.lines
    )


def test_a_sampled_run_against_a_greedy_baseline_is_refused() -> None:
    refusal = settings_refusal(baseline(), config(temperature="1.0"), "b.json")
    assert "--specbench-temperature 0.0 in the baseline, 1.0 now" in refusal


def test_the_same_settings_written_otherwise_agree() -> None:
    assert settings_refusal(baseline(), config(temperature="0.0", max_new_tokens="12"), "b.json") is None
    outcome = gate(baseline(), ROWS)
    assert not outcome.failed and outcome.lines == ["compared 4 case(s) with b.json: no regression"]


def test_a_case_measured_with_its_own_other_settings_is_a_settings_regression() -> None:
    # A pair's own dtype (pairs file) changed: the run's options agree, the case's settings do not.
    now = [row("tiny-k1-natural", dtype="bfloat16"), *ROWS[1:]]
    outcome = gate(baseline(), now)
    (regression,) = outcome.regressions
    assert (regression.case, regression.kind) == ("tiny-k1-natural", "settings")
    assert "dtype 'float32' in the baseline, 'bfloat16' now" in regression.describe()
    assert any("compared 3 case(s)" in line for line in outcome.lines)


# --- compare-matching -----------------------------------------------------------------------------------


def test_compare_matching_gates_only_the_cases_whose_settings_agree() -> None:
    now = [row("tiny-k1-natural", dtype="bfloat16", acceptance=0.1), *ROWS[1:]]
    outcome = gate(baseline(), now, config(gate_differing="compare-matching"))
    assert not outcome.failed  # the case that fell is the one measured otherwise: not compared
    text = "\n".join(outcome.lines)
    assert "compared 3 case(s) with b.json: no regression" in text
    assert "1 case(s) not compared, measured with other settings than the baseline's" in text
    assert "tiny-k1-natural (dtype 'float32' in the baseline, 'bfloat16' now)" in text


def test_compare_matching_with_other_new_tokens_compares_nothing_and_fails() -> None:
    run = config(max_new_tokens="8", gate_differing="compare-matching")
    assert settings_refusal(baseline(), run, "b.json") is None  # not refused up front: the user asked
    outcome = gate(baseline(), [row(case, new_tokens=8) for case in baseline()["cases"]], run)
    assert outcome.failed
    text = "\n".join(outcome.lines)
    assert "--specbench-max-new-tokens 12 in the baseline, 8 now" in text
    assert "compared 0 case(s) with b.json: the gate checked nothing, which fails it" in text


def test_compare_matching_with_a_run_setting_no_case_records_compares_nothing() -> None:
    run = config(seed="7", gate_differing="compare-matching")
    outcome = gate(baseline(), ROWS, run)
    assert outcome.failed and any("compared 0 case(s)" in line for line in outcome.lines)
    assert any("--specbench-seed 0 in the baseline, 7 now" in line for line in outcome.lines)


# --- nothing compared; missing cases ---------------------------------------------------------------------


def test_a_gate_that_compared_no_case_fails_even_with_allow_missing() -> None:
    other_pairs = [row(case.replace("tiny", "other")) for case in baseline()["cases"]]
    outcome = gate(baseline(), other_pairs, config(allow_missing="1"))
    assert outcome.failed and not outcome.regressions
    assert outcome.refusals == ["compared 0 case(s) with b.json: the gate checked nothing"]
    assert "compared 0 case(s) with b.json: the gate checked nothing, which fails it" in outcome.lines[0]
    assert "no regression" not in "\n".join(outcome.lines)


def test_missing_cases_name_the_cause_and_the_option() -> None:
    document = baseline([*ROWS, row("tiny-k8-natural"), row("gone-k1-natural"), row("tiny-k1-dialogue")])
    outcome = gate(document, ROWS, config(k="1,4"))
    causes = {r.case: r.cause for r in outcome.regressions if r.kind == "missing"}
    assert causes == {
        "tiny-k8-natural": "other k",
        "gone-k1-natural": "other pairs",
        "tiny-k1-dialogue": "other prompts",
    }
    text = "\n".join(outcome.lines)
    assert "k=8 is not in this run's --specbench-k" in text
    assert "pass --specbench-allow-missing to gate only the cases both runs have" in text
    table_row = next(line for line in outcome.lines if line.startswith("tiny-k8-natural"))
    assert "missing" in table_row and "other k" in table_row and "--specbench-allow-missing" in table_row
    assert "-  -" not in table_row  # no longer "missing - - present"
    assert not gate(document, ROWS, config(k="1,4", allow_missing="1")).failed


def test_a_case_that_failed_is_missing_with_no_result() -> None:
    (regression,) = gate(baseline(), ROWS[1:]).regressions
    assert (regression.case, regression.cause) == ("tiny-k1-natural", "no result")


# --- old baselines ----------------------------------------------------------------------------------------


def test_an_old_baseline_without_settings_is_accepted_with_a_warning(tmp_path: Path) -> None:
    document = baseline()
    document["format"] = 2
    del document["settings"]
    for entry in document["cases"].values():
        del entry["settings"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(document))
    loaded = load_baseline(path)
    outcome = gate(loaded, [row(case, new_tokens=8) for case in loaded["cases"]], config(max_new_tokens="8"))
    assert not outcome.failed
    assert (
        "records no settings (format 2, written by an older pytest-specbench): whether it was measured with "
        "this run's settings cannot be checked" in outcome.lines[0]
    )
    assert settings_refusal(loaded, config(max_new_tokens="8"), path) is None


def test_a_format_3_baseline_must_record_its_settings(tmp_path: Path) -> None:
    document = baseline()
    del document["settings"]
    path = tmp_path / "b.json"
    path.write_text(json.dumps(document))
    with pytest.raises(BaselineError, match='has no settings, expected "settings" to be an object'):
        load_baseline(path)


def test_the_shipped_example_baseline_still_loads() -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "specbench_baseline.json"
    assert load_baseline(example)["cases"]


# --- through pytest ----------------------------------------------------------------------------------------


def test_a_run_with_other_settings_is_refused_before_any_model_loads(bench, pytester: pytest.Pytester) -> None:
    (pytester.path / "b.json").write_text(json.dumps(baseline()))
    result = bench("--specbench-baseline=b.json", "--specbench-max-new-tokens=8")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--specbench-baseline=b.json: the baseline was measured with other settings "
            "(--specbench-max-new-tokens 12 in the baseline, 8 now)*"
        ]
    )
    result = bench("--specbench-baseline=b.json", "--specbench-temperature=1.0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--specbench-temperature 0.0 in the baseline, 1.0 now*"])


@pytest.mark.slow
def test_a_saved_baseline_gates_by_its_settings_through_pytest(bench, pytester: pytest.Pytester) -> None:
    bench("--specbench-save-baseline=b.json", "--specbench-log=").assert_outcomes(passed=4)
    saved = json.loads((pytester.path / "b.json").read_text())
    assert saved["settings"]["--specbench-max-new-tokens"] == 12 and saved["fingerprint"]["cpu_capability"]
    result = bench("--specbench-baseline=b.json", "--specbench-log=")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*compared 4 case(s) with b.json: no regression*"])
    # compare-matching with other new tokens: no case agrees, and a gate that compared nothing fails
    result = bench(
        "--specbench-baseline=b.json",
        "--specbench-max-new-tokens=8",
        "--specbench-log=",
        "--specbench-gate-differing=compare-matching",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*compared 0 case(s) with b.json: the gate checked nothing, which fails it*"])
    # other k: the missing cases say why, and name the option
    result = bench("--specbench-baseline=b.json", "--specbench-k=1,2", "--specbench-log=")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*tiny-k4-natural*missing*present*other k*--specbench-allow-missing*",
            "*2 baseline case(s) have no result in this run (other k: 2)*",
        ]
    )
