"""The results log: one fsynced JSON line per finished case, and --specbench-resume, which reruns only the rest."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from pytest_specbench.results.log import ResultsLog, ResultsLogError, read_log, settings_differences

SETTINGS = {"--specbench-max-new-tokens": 12, "--specbench-dtype": "float32"}


def row(case: str, **fields) -> dict:
    return {"case": case, "acceptance_rate": 0.5, **fields}


# --- the file ---------------------------------------------------------------------------------------


def test_each_row_is_on_disk_when_append_returns(tmp_path: Path) -> None:
    log = ResultsLog(tmp_path / "run.jsonl", SETTINGS)
    log.start()
    log.append(row("a-k1-x"))
    # Read through another handle while the log is still open: nothing waits in a buffer.
    assert read_log(tmp_path / "run.jsonl").rows == {"a-k1-x": row("a-k1-x")}
    log.append(row("a-k2-x", speedup=float("nan")))
    log.close()
    logged = read_log(tmp_path / "run.jsonl")
    assert logged.settings == SETTINGS and list(logged.rows) == ["a-k1-x", "a-k2-x"]


def test_starting_carries_the_resumed_rows_into_a_new_log(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text("an earlier run's log\n")
    log = ResultsLog(path, SETTINGS)
    log.start([row("a-k1-x")])
    log.append(row("a-k2-x"))
    log.close()
    assert list(read_log(path).rows) == ["a-k1-x", "a-k2-x"]


def test_a_line_cut_short_by_a_kill_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    log = ResultsLog(path, SETTINGS)
    log.start([row("a-k1-x")])
    log.close()
    with open(path, "a") as handle:
        handle.write('{"case": "a-k2-x", "accep')
    assert list(read_log(path).rows) == ["a-k1-x"]


@pytest.mark.parametrize(("content", "message"), [
    ('{"specbench_log": 1, "settings": {}}\n{not json}\n{"case": "a"}\n', ":2: not JSON"),
    ('{"case": "a-k1-x"}\n', ":1: a result before the run line"),
    ('{"specbench_log": 1, "settings": {}}\n{"acceptance_rate": 1}\n', ":2: a result without a case id"),
    ('{"specbench_log": 9, "settings": {}}\n', ":1: a run line of another format"),
    ('[1, 2]\n', ":1: a list, not an object"),
    ("", ": no run line"),
])
def test_a_bad_log_names_the_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(content)
    with pytest.raises(ResultsLogError, match="accepted|written by pytest-specbench") as caught:
        read_log(path)
    assert str(caught.value).startswith(f"{path}{message}")


def test_settings_differences_name_each_option() -> None:
    assert settings_differences(SETTINGS, dict(SETTINGS)) == []
    assert settings_differences(SETTINGS, {**SETTINGS, "--specbench-max-new-tokens": 32}) == [
        "--specbench-max-new-tokens=12 in the log, 32 now"]


# --- through pytest ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_finished_case_is_logged_beside_the_csv(bench, pytester: pytest.Pytester) -> None:
    bench("--specbench-csv=out/results.csv").assert_outcomes(passed=4)
    logged = read_log(pytester.path / "out" / "results.jsonl")
    document = json.loads((pytester.path / "spec_results.json").read_text())
    assert list(logged.rows.values()) == document["results"]
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
def test_resume_after_sigkill_completes_the_run(bench, held_run, pytester: pytest.Pytester) -> None:
    bench("--specbench-csv=whole.csv", "--specbench-json=whole.json", prompts=held_run.PROMPTS
          ).assert_outcomes(passed=6)

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
    result.stderr.fnmatch_lines(["*--specbench-resume=spec_results.jsonl: the log was measured with other settings "
                                 "(--specbench-max-new-tokens=12 in the log, 16 now)*"])
