"""The results log: one fsynced JSON line per finished case, and --specbench-resume, which reruns only the rest."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from factory import case_result

from pytest_specbench.results.log import ResultsLog, ResultsLogError, read_log, settings_differences
from pytest_specbench.results.schema import CaseResult

SETTINGS = {"--specbench-max-new-tokens": 12, "--specbench-dtype": "float32"}
#: a real result row (the default CPU run's first), so that rows pass the schema check of read_log
TEMPLATE = json.loads((Path(__file__).resolve().parents[1] / "docs" / "default_run.json").read_text())["results"][0]


def row(case: str, **fields) -> dict:
    """A result row as a log line holds it."""
    return {**TEMPLATE, "case": case, "acceptance_rate": 0.5, **fields}


def result(case: str, **fields) -> CaseResult:
    """The same row typed, as the session hands it to the log."""
    return case_result(case=case, acceptance_rate=0.5, **fields)


# --- the file ---------------------------------------------------------------------------------------


def test_each_row_is_on_disk_when_append_returns(tmp_path: Path) -> None:
    log = ResultsLog(tmp_path / "run.jsonl", SETTINGS)
    log.start()
    log.append(result("a-k1-x"))
    # Read through another handle while the log is still open: nothing waits in a buffer.
    assert read_log(tmp_path / "run.jsonl").rows == {"a-k1-x": result("a-k1-x")}
    log.append(result("a-k2-x", speedup=float("nan")))
    log.close()
    logged = read_log(tmp_path / "run.jsonl")
    assert logged.settings == SETTINGS and list(logged.rows) == ["a-k1-x", "a-k2-x"]


def test_starting_carries_the_resumed_rows_into_a_new_log(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text("an earlier run's log\n")
    log = ResultsLog(path, SETTINGS)
    log.start([result("a-k1-x")])
    log.append(result("a-k2-x"))
    log.close()
    assert list(read_log(path).rows) == ["a-k1-x", "a-k2-x"]


def test_a_line_cut_short_by_a_kill_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    log = ResultsLog(path, SETTINGS)
    log.start([result("a-k1-x")])
    log.close()
    with open(path, "a") as handle:
        handle.write('{"case": "a-k2-x", "accep')
    assert list(read_log(path).rows) == ["a-k1-x"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"specbench_log": 1, "settings": {}}\n{not json}\n{"case": "a"}\n', ":2: not JSON"),
        ('{"case": "a-k1-x"}\n', ":1: a result before the run line"),
        ('{"specbench_log": 1, "settings": {}}\n{"acceptance_rate": 1}\n', ":2: a result without a case id"),
        ('{"specbench_log": 9, "settings": {}}\n', ":1: a run line of another format"),
        ("[1, 2]\n", ":1: a list, not an object"),
        ("", ": no run line"),
    ],
)
def test_a_bad_log_names_the_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(content)
    with pytest.raises(ResultsLogError, match="accepted|written by pytest-specbench") as caught:
        read_log(path)
    assert str(caught.value).startswith(f"{path}{message}")


def test_settings_differences_name_each_option() -> None:
    assert settings_differences(SETTINGS, dict(SETTINGS)) == []
    assert settings_differences(SETTINGS, {**SETTINGS, "--specbench-max-new-tokens": 32}) == [
        "--specbench-max-new-tokens=12 in the log, 32 now"
    ]


def test_a_batch_list_in_another_order_is_the_same_setting() -> None:
    logged = {**SETTINGS, "--specbench-batch": [1, 4]}
    assert settings_differences(logged, {**SETTINGS, "--specbench-batch": [4, 1]}) == []
    assert settings_differences(logged, {**SETTINGS, "--specbench-batch": [1, 2]}) == [
        "--specbench-batch=[1, 4] in the log, [1, 2] now"
    ]


# --- through pytest ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_finished_case_is_logged_beside_the_csv(bench, pytester: pytest.Pytester) -> None:
    bench("--specbench-csv=out/results.csv").assert_outcomes(passed=4)
    logged = read_log(pytester.path / "out" / "results.jsonl")
    document = json.loads((pytester.path / "spec_results.json").read_text())
    assert [row.to_row() for row in logged.rows.values()] == document["results"]
    assert logged.settings["--specbench-max-new-tokens"] == 12


@pytest.mark.slow
def test_the_log_can_be_turned_off_and_is_not_started_by_collect_only(bench, pytester: pytest.Pytester) -> None:
    bench("--specbench-log=", "-k", "k1 and natural").assert_outcomes(passed=1, deselected=3)
    assert not (pytester.path / "spec_results.jsonl").exists()
    (pytester.path / "spec_results.jsonl").write_text("an interrupted run's log\n")
    bench("--collect-only")
    assert (pytester.path / "spec_results.jsonl").read_text() == "an interrupted run's log\n"


COMPARED = ("case", "k", "prompt", "acceptance_rate", "tau", "drafted_tokens", "accepted_tokens", "verdict")


def csv_rows(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return [{name: row[name] for name in COMPARED} for row in csv.DictReader(handle)]


@pytest.mark.slow
def test_a_run_that_finished_no_case_leaves_a_finished_log_intact(
    bench, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    bench("-k", "k1 and natural", "--specbench-history=").assert_outcomes(passed=1, deselected=3)
    log = pytester.path / "spec_results.jsonl"
    before = log.read_bytes()
    assert list(read_log(log).rows) == ["tiny-k1-natural"]
    missing_model = tmp_path / "pairs.toml"  # a pair whose target folder does not exist: its cases fail
    missing_model.write_text('[pairs.t3]\ntarget = "./modles/target"\ndraft = "./models/draft"\n')
    result = bench("--specbench-pairs=t3", "--specbench-history=", pairs_file=missing_model)
    result.assert_outcomes(failed=4)
    assert log.read_bytes() == before  # no row to log: the earlier log stays, not an empty one
    assert f"results written to {log.name}" not in result.stdout.str()


@pytest.mark.slow
def test_resume_after_sigkill_completes_the_run(bench, held_run, pytester: pytest.Pytester) -> None:
    bench("--specbench-csv=whole.csv", "--specbench-json=whole.json", prompts=held_run.PROMPTS).assert_outcomes(
        passed=6
    )

    process = held_run.start()
    process.kill()
    process.wait(held_run.PATIENCE_S)
    assert held_run.logged_cases() == held_run.FINISHED

    held_run.release()
    result = bench("--specbench-resume=spec_results.jsonl", prompts=held_run.PROMPTS)
    result.assert_outcomes(passed=6)  # the two finished cases report their logged rows; four run
    result.stdout.fnmatch_lines(["*2 case(s) taken from spec_results.jsonl, not run again*"])
    assert csv_rows(pytester.path / "spec_results.csv") == csv_rows(pytester.path / "whole.csv")
    document = json.loads((pytester.path / "spec_results.json").read_text())
    assert document["resumed_cases"] == held_run.FINISHED and document["missing_cases"] == []
    # The log now holds the whole run: it alone could resume a second interruption.
    assert held_run.logged_cases() == [row["case"] for row in csv_rows(pytester.path / "whole.csv")]


@pytest.mark.slow
def test_resume_refuses_a_log_measured_with_other_settings(bench, pytester: pytest.Pytester) -> None:
    bench("-k", "k1 and natural").assert_outcomes(passed=1, deselected=3)
    result = bench("--specbench-resume=spec_results.jsonl", "--specbench-max-new-tokens=16")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--specbench-resume=spec_results.jsonl: the log was measured with other settings "
            "(--specbench-max-new-tokens=12 in the log, 16 now)*"
        ]
    )


# --- rows checked against the schema, the run's first and last lines -------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            '{"case": "a-k1-x"}',
            ":2: not a result row: 41 required field(s) missing (config, pair, target, draft, "
            "drafter, k and 35 more) (case 'a-k1-x')",
        ),
        (json.dumps(row("a-k1-x", k=[1])), ":2: not a result row: k is [1], not int | str (case 'a-k1-x')"),
        (json.dumps(row("a-k1-x", unstable=1)), ":2: not a result row: unstable is 1, not bool (case 'a-k1-x')"),
        (json.dumps(row("a-k1-x", rounds=3.5)), ":2: not a result row: rounds is 3.5, not int (case 'a-k1-x')"),
    ],
)
def test_a_line_that_is_json_but_not_a_row_is_refused(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"specbench_log": 1, "settings": {}}\n' + line + "\n")
    with pytest.raises(ResultsLogError) as caught:
        read_log(path)
    assert str(caught.value).startswith(f"{path}{message}")


def test_a_row_may_lack_fields_with_a_default_and_hold_nan(tmp_path: Path) -> None:
    from pytest_specbench.results.log import row_problem

    old_row = {name: value for name, value in row("a-k1-x").items() if name not in ("engine", "column_head_rows")}
    assert row_problem(old_row) is None
    assert row_problem(row("a-k1-x", speedup=float("nan"), latency_ms=3, decode_speedup_ci_low=None)) is None


def test_the_first_line_records_the_machine_cases_and_command_and_the_last_how_the_run_ended(tmp_path: Path) -> None:
    from pytest_specbench.results.log import unfinished_reason

    path = tmp_path / "run.jsonl"
    log = ResultsLog(
        path, SETTINGS, fingerprint={"cpu_capability": "AVX2"}, cases=["a-k1-x", "a-k2-x"], command="pytest bench_cases"
    )
    log.start()
    log.append(result("a-k1-x"))
    logged = read_log(path)
    assert logged.fingerprint == {"cpu_capability": "AVX2"} and logged.header["cases"] == ["a-k1-x", "a-k2-x"]
    assert logged.header["command"] == "pytest bench_cases" and logged.end is None
    assert unfinished_reason(logged) == "it holds 1 of 2 case(s) and no end (the run was killed, or is running)"
    log.end(["a-k2-x"], "SIGTERM")
    assert unfinished_reason(read_log(path)) == "the run was interrupted (SIGTERM) with 1 of 2 case(s) finished"
    log.append(result("a-k2-x"))  # a later run went on in this log
    log.end([], None)
    log.close()
    logged = read_log(path)
    assert logged.end["rows"] == 2 and logged.end["missing_cases"] == [] and unfinished_reason(logged) is None
    assert logged.origins() == [
        {
            "log": str(path),
            "started": logged.header["started"],
            "fingerprint": {"cpu_capability": "AVX2"},
            "cases": ["a-k1-x", "a-k2-x"],
        }
    ]


def test_a_finished_run_whose_other_cases_were_skipped_is_finished(tmp_path: Path) -> None:
    # The main job: 40 cases run, 80 GPT-2 cases skipped (no weights); its end line lists none missing.
    from pytest_specbench.results.log import unfinished_reason

    log = ResultsLog(tmp_path / "run.jsonl", SETTINGS, cases=["a-k1-x", "gpt2-k1-x"])
    log.start()
    log.append(result("a-k1-x"))
    log.end([], None)
    log.close()
    assert unfinished_reason(read_log(tmp_path / "run.jsonl")) is None


def test_a_log_without_a_finished_case_is_nothing_to_lose(tmp_path: Path) -> None:
    from pytest_specbench.results.log import unfinished_reason

    log = ResultsLog(tmp_path / "run.jsonl", SETTINGS, cases=["a-k1-x"])
    log.start()
    log.close()
    assert unfinished_reason(read_log(tmp_path / "run.jsonl")) is None


def test_carried_rows_keep_the_run_that_measured_them(tmp_path: Path) -> None:
    first = ResultsLog(tmp_path / "first.jsonl", SETTINGS, fingerprint={"cpu_capability": "AVX512"})
    first.start()
    first.append(result("a-k1-x"))
    first.close()
    earlier = read_log(tmp_path / "first.jsonl")
    second = ResultsLog(
        tmp_path / "second.jsonl", SETTINGS, fingerprint={"cpu_capability": "AVX2"}, carried_from=earlier.origins()
    )
    second.start(earlier.rows.values())
    second.append(result("a-k2-x"))
    second.close()
    origins = read_log(tmp_path / "second.jsonl").origins()
    assert [(group["fingerprint"]["cpu_capability"], group["cases"]) for group in origins] == [
        ("AVX512", ["a-k1-x"]),
        ("AVX2", ["a-k2-x"]),
    ]
    assert origins[0]["log"] == str(tmp_path / "first.jsonl")


def test_a_full_disk_fails_the_write_that_hit_it_and_not_the_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import os

    log = ResultsLog(tmp_path / "run.jsonl", SETTINGS)
    log.start()

    write = os.write

    def full(fd: int, data: bytes) -> int:
        if os.path.realpath(f"/proc/self/fd/{fd}") == str((tmp_path / "run.jsonl").resolve()):
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(fd, data)

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space left"):
        log.append(result("a-k1-x"))
    log.close()  # nothing buffered is left to fail again
    monkeypatch.undo()
    assert read_log(tmp_path / "run.jsonl").rows == {}
