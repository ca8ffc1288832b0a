"""Between runs: an unfinished run's log is never replaced, a log line that is not a row is refused, and a
resumed row keeps the fingerprint of the machine that measured it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specbench.results.log import read_log

INTERRUPT_AT_THE_THIRD_CASE = """
    import pytest

    @pytest.fixture(autouse=True)
    def interrupt(request):
        if "[tiny-k1-code_json]" in request.node.nodeid:
            raise KeyboardInterrupt
"""


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_an_unfinished_runs_log_is_never_replaced_by_a_new_run(bench, pytester: pytest.Pytester) -> None:
    pytester.makeconftest(INTERRUPT_AT_THE_THIRD_CASE)
    assert bench(interrupted=True).ret == pytest.ExitCode.INTERRUPTED
    log = pytester.path / "spec_results.jsonl"
    interrupted = log.read_bytes()
    assert [record.get("case") for record in _records(log)][1:3] == ["tiny-k1-natural", "tiny-k4-natural"]
    (pytester.path / "conftest.py").unlink()

    result = bench("-k", "k4")  # another run on the same log
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*spec_results.jsonl is the results log of a run that did not finish (the run was interrupted "
            "(KeyboardInterrupt) with 2 of 4 case(s) finished), and this run would replace it; "
            "this run was not started. "
            "Finish that run: `pytest *--specbench-resume=spec_results.jsonl`*"
        ]
    )
    assert log.read_bytes() == interrupted

    result = bench("--specbench-resume=spec_results.jsonl")
    result.assert_outcomes(passed=4)
    document = json.loads((pytester.path / "spec_results.json").read_text())
    assert document["resumed_cases"] == ["tiny-k1-natural", "tiny-k4-natural"]
    assert read_log(log).end["missing_cases"] == []
    bench("-k", "k4").assert_outcomes(passed=2, deselected=2)  # a finished run's log may be replaced


@pytest.mark.slow
def test_a_killed_runs_log_is_not_replaced_either(bench, held_run, pytester: pytest.Pytester) -> None:
    process = held_run.start()
    process.kill()
    process.wait(held_run.PATIENCE_S)
    held_run.release()
    result = bench(prompts=held_run.PROMPTS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*spec_results.jsonl is the results log of a run that did not finish (it holds 2 of "
            "6 case(s) and no end (the run was killed, or is running))*"
        ]
    )
    assert held_run.logged_cases() == held_run.FINISHED


@pytest.mark.slow
def test_resume_refuses_a_line_that_is_json_but_not_a_row(bench, pytester: pytest.Pytester) -> None:
    bench("-k", "k1 and natural").assert_outcomes(passed=1, deselected=3)
    log = pytester.path / "spec_results.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join([lines[0], '{"case": "tiny-k4-natural"}', *lines[1:]]) + "\n")
    csv_before = (pytester.path / "spec_results.csv").read_text()

    result = bench("--specbench-resume=spec_results.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*spec_results.jsonl:2: not a result row: * required field(s) missing (config, pair, "
            "target, *) (case 'tiny-k4-natural'); a results log written by "
            "pytest-specbench*"
        ]
    )
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "KeyError" not in output
    assert (pytester.path / "spec_results.csv").read_text() == csv_before


@pytest.mark.slow
def test_a_resumed_row_keeps_the_fingerprint_it_was_measured_under(bench, pytester: pytest.Pytester) -> None:
    bench("-k", "k1 and natural").assert_outcomes(passed=1, deselected=3)
    log = pytester.path / "spec_results.jsonl"
    records = _records(log)
    here = records[0]["fingerprint"]
    assert here["cpu_capability"] and records[0]["cases"] == ["tiny-k1-natural"]  # the header records both
    elsewhere = {**here, "cpu_capability": "AVX512", "cpu_model": "another machine"}
    records[0]["fingerprint"] = elsewhere  # as if measured on another machine
    log.write_text("".join(json.dumps(record) + "\n" for record in records))

    # A case this run does not have is carried, naming the machine that measured it.
    bench("-k", "k4", "--specbench-resume=spec_results.jsonl").assert_outcomes(passed=2, deselected=2)
    document = json.loads((pytester.path / "spec_results.json").read_text())
    assert document["fingerprint"]["cpu_model"] == here["cpu_model"]  # the machine of this run's own rows
    header = _records(log)[0]
    assert header["fingerprint"]["cpu_model"] == here["cpu_model"]
    assert [group["fingerprint"]["cpu_model"] for group in header["carried"]] == ["another machine"]
    assert header["carried"][0]["cases"] == ["tiny-k1-natural"]

    # Resumed again: the other machine's row is not replayed beside this machine's; each replayed row still
    # names the machine that measured it.
    result = bench("--specbench-resume=spec_results.jsonl")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*run again*tiny-k1-natural (machine or libraries (cpu_model 'another machine' -> *"])
    document = json.loads((pytester.path / "spec_results.json").read_text())
    groups = {group["fingerprint"]["cpu_model"]: group["cases"] for group in document["resumed_from"]}
    assert groups == {here["cpu_model"]: ["tiny-k4-natural", "tiny-k4-code_json"]}


@pytest.mark.slow
def test_a_run_without_options_on_an_unfinished_log_is_a_usage_error_too(bench, pytester: pytest.Pytester) -> None:
    # No --specbench-* option: the plugin wakes while collecting, and the refusal still stops pytest with status 4.
    pytester.makeconftest(INTERRUPT_AT_THE_THIRD_CASE)
    assert bench(interrupted=True).ret == pytest.ExitCode.INTERRUPTED
    (pytester.path / "conftest.py").unlink()
    log = (pytester.path / "spec_results.jsonl").read_bytes()
    result = bench("-k", "gpt2_distil and k8", "-p", "no:randomly", "--benchmark-disable", defaults=False)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*spec_results.jsonl is the results log of a run that did not finish*--specbench-resume=spec_results.jsonl*"]
    )
    assert "error during collection" not in result.stdout.str()
    assert (pytester.path / "spec_results.jsonl").read_bytes() == log


@pytest.mark.slow
def test_resume_runs_again_the_cases_whose_pair_now_names_other_models(
    bench, weak_pairs_file: Path, pytester: pytest.Pytester
) -> None:
    bench("-k", "k1 and natural").assert_outcomes(passed=1, deselected=3)
    # The same pair name in another pairs file, with another draft: the logged row is not this pair's.
    result = bench("--specbench-resume=spec_results.jsonl", pairs_file=weak_pairs_file)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*1 case(s) of spec_results.jsonl run again, not taken from it: what they were "
            "measured with changed since it was logged: tiny-k1-natural (draft model)*"
        ]
    )
    assert "taken from spec_results.jsonl, not run again" not in result.stdout.str()
    document = json.loads((pytester.path / "spec_results.json").read_text())
    assert document["resumed_cases"] == [] and document["resumed_from"] == []
    assert {row["draft"] for row in document["results"]} == {str(weak_pairs_file.parent / "draft")}
    assert read_log(pytester.path / "spec_results.jsonl").header["carried"] == []


@pytest.mark.slow
def test_a_resume_that_matches_no_case_says_so_and_why(bench, pytester: pytest.Pytester) -> None:
    bench("-k", "k1", prompts="natural").assert_outcomes(passed=1, deselected=1)  # one per category: ...-natural
    result = bench(
        "--specbench-resume=spec_results.jsonl", "--specbench-prompts-per-category=2", "-k", "k1", prompts="natural"
    )
    result.assert_outcomes(passed=2, deselected=2)  # ids ...-natural-01: every case ran again
    warning = (
        "*none of the 1 row(s) of spec_results.jsonl is a case of this run, so none was taken from it: the log's "
        "cases are tiny-k1-natural, this run's tiny-k1-natural-*; the log ran one prompt per category (ids ending "
        "in the category), this run several: resume with --specbench-prompts-per-category=1, as the log's run"
    )
    result.stdout.fnmatch_lines([f"specbench: {warning[1:]}", warning])  # at start, and in the summary
