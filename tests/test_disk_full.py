"""A full disk under the results log or under another output: no INTERNALERROR, the summary, every finished case
where the disk allows, the error recorded, exit status 1. The full disk is simulated in-process (monkeypatch)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from pytest_specbench.report import outputs
from pytest_specbench.results import history
from pytest_specbench.results.log import read_log


def _no_space() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _path_of(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


@pytest.mark.slow
def test_a_full_disk_under_the_log_costs_no_case(
    bench, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = os.path.realpath(pytester.path / "spec_results.jsonl")
    write, rows = os.write, []

    def full_after_two_rows(fd: int, data: bytes) -> int:
        if _path_of(fd) == log:
            rows.append(data)
            if len(rows) > 2:
                raise _no_space()
        return write(fd, data)

    monkeypatch.setattr(os, "write", full_after_two_rows)
    result = bench()
    result.assert_outcomes(passed=4)  # the run went on
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    output = result.stdout.str()
    assert "INTERNALERROR" not in output and "Traceback" not in output
    result.stdout.fnmatch_lines(
        [
            "*specbench summary*",
            "*could not write the results log spec_results.jsonl: "
            "[[]Errno 28[]] No space left on device; it stops here, the CSV and JSON still hold "
            "every finished case*",
        ]
    )
    assert list(read_log(Path(log)).rows) == ["tiny-k1-natural", "tiny-k4-natural"]
    assert len((pytester.path / "spec_results.csv").read_text().splitlines()) == 5
    document = json.loads((pytester.path / "spec_results.json").read_text())
    assert len(document["results"]) == 4
    assert ["No space left on device" in error for error in document["errors"]] == [True]


@pytest.mark.slow
def test_a_full_disk_under_the_json_costs_neither_the_csv_nor_the_log(
    bench, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_atomic, json_path = outputs.write_atomic, (pytester.path / "spec_results.json").resolve()

    def full_under_the_json(path, text: str) -> None:
        if Path(path).resolve() == json_path:
            raise _no_space()
        write_atomic(path, text)

    monkeypatch.setattr(outputs, "write_atomic", full_under_the_json)
    result = bench()
    result.assert_outcomes(passed=4)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*specbench summary*", "*could not write spec_results.json: [[]Errno 28[]] No space left on device*"]
    )
    assert not json_path.exists()
    assert len((pytester.path / "spec_results.csv").read_text().splitlines()) == 5
    logged = read_log(pytester.path / "spec_results.jsonl")
    assert len(logged.rows) == 4 and logged.end is not None
    [entry] = history.entries(pytester.path / ".specbench" / "runs")
    saved = json.loads((entry / history.JSON).read_text())  # the history's disk had room
    assert len(saved["results"]) == 4 and any("spec_results.json" in error for error in saved["errors"])
