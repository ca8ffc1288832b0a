"""The GPU check's judging (pytest_specbench/tools/gpu_check/judge.py) on typed rows, without running a part:
what a benchmark part left (its JSON, or its results log when it was killed) read as :class:`CaseResult`, and
the checks decided from them. The command itself runs in tests/test_gpu_check.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

from factory import case_result

from pytest_specbench.results.log import LOG_FORMAT
from pytest_specbench.tools.gpu_check.judge import Cases, case_key, judge_memory, judge_rows, native_over_hf
from pytest_specbench.tools.gpu_check.legs import Leg, result_rows
from pytest_specbench.tools.gpu_check.plan import CPU_FORM
from pytest_specbench.tools.gpu_check.run import Run

CASES = Cases(("gemma3_int8",), ("native",), (1, 4), ("natural",))


def _leg(tmp_path: Path, rows, rc: int = 0) -> Leg:
    log = tmp_path / "output.log"
    log.write_text("the part's output\n", encoding="utf-8")
    return Leg("matrix", ["pytest"], 60.0, log, rc=rc, seconds=1.0, rows=list(rows))


def _row(k: int, **fields):
    return case_result(case=f"gemma3_int8-k{k}-natural", k=k, **fields)


def test_a_part_with_every_case_lossless_passes(tmp_path) -> None:
    check = judge_rows("bench_matrix", _leg(tmp_path, [_row(1), _row(4, verdict="tie-divergence")]), CASES, "matrix")
    assert check.name == "bench_matrix" and check.status == "pass", check.summary
    assert "2 cases lossless (1 near-tie)" in check.summary
    assert [row["case"] for row in check.details["rows"]] == ["gemma3_int8-k1-natural", "gemma3_int8-k4-natural"]


def test_a_missing_or_diverged_case_fails_naming_it(tmp_path) -> None:
    check = judge_rows("bench_matrix", _leg(tmp_path, [_row(1, verdict="diverged")]), CASES, "matrix")
    assert check.status == "fail"
    assert "1 of 2 cases have no row" in check.summary and "1 not lossless (gemma3_int8-k1-natural)" in check.summary
    assert check.details["missing_cases"] == ["gemma3_int8-native-4-natural"]
    assert check.details["output_tail"] == "the part's output\n"


def test_a_part_that_exited_non_zero_fails(tmp_path) -> None:
    check = judge_rows("bench_matrix", _leg(tmp_path, [_row(1), _row(4)], rc=1), CASES, "matrix")
    assert check.status == "fail" and "pytest exit status 1" in check.summary


def test_case_ids_key_as_rows_do() -> None:
    assert case_key("gemma3_int8-hf-k4-code_python") == ("gemma3_int8", "hf", "4", "code_python")
    assert case_key("gemma3_int8-k4-natural") == ("gemma3_int8", "native", "4", "natural")
    assert case_key("not a case") is None


def test_native_over_hf_pairs_the_engines_of_a_case() -> None:
    rows = [
        case_result(case="p-native-k4-natural", engine="native", speedup=1.5),
        case_result(case="p-hf-k4-natural", engine="hf", speedup=1.2),
    ]
    (entry,) = native_over_hf(rows)
    assert entry["case"] == "p-k4-natural" and entry["native_over_hf"] == 1.5 / 1.2


def test_cpu_rows_need_a_positive_process_peak(tmp_path) -> None:
    run = Run(tmp_path, "cpu", CPU_FORM, set(), "auto", False, time.monotonic() + 60, 60)
    run.legs["matrix"] = _leg(tmp_path, [_row(1), _row(4)])
    assert judge_memory(run).status == "skip"
    run.legs["matrix"] = _leg(tmp_path, [_row(1), _row(4, peak_memory_mb=None)])
    check = judge_memory(run)
    assert check.status == "fail" and "gemma3_int8-k4-natural" in check.summary


def test_rows_are_read_typed_from_the_json_or_else_the_log(tmp_path) -> None:
    good, refused = _row(1).to_row(), {**_row(4).to_row(), "tau": "not a number"}
    (tmp_path / "spec_results.json").write_text(json.dumps({"results": [good, refused]}), encoding="utf-8")
    assert [row.case for row in result_rows(tmp_path)] == ["gemma3_int8-k1-natural"]  # the refused row left out
    (tmp_path / "spec_results.json").unlink()
    # Killed before writing its JSON: the results log's rows, the last line cut short by the kill left out.
    run_line = {"specbench_log": LOG_FORMAT, "settings": {}}
    log = "\n".join(json.dumps(record) for record in (run_line, good)) + "\n" + json.dumps(_row(4).to_row())[:40]
    (tmp_path / "spec_results.jsonl").write_text(log, encoding="utf-8")
    assert [row.case for row in result_rows(tmp_path)] == ["gemma3_int8-k1-natural"]
    assert result_rows(tmp_path / "nothing") == []
