"""A run's files and its tally of cases, without pytest: RunFiles claims, logs and writes from a plain config;
the tally tells the cases without a result from the skipped ones."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from factory import case_result

from pytest_specbench.report.summary import run_document
from pytest_specbench.results.run_files import Output, OutputPaths, RunFiles
from pytest_specbench.results.tally import CaseTally
from pytest_specbench.settings.config import SpecbenchConfig, parse_settings


def _config(tmp_path: Path, **changes: Any) -> SpecbenchConfig:
    paths = {
        "csv_path": tmp_path / "r.csv",
        "json_path": tmp_path / "r.json",
        "log_path": tmp_path / "r.jsonl",
        "history_dir": None,
        "plots_dir": None,
        "report_path": None,
        "save_baseline": None,
    }
    return dataclasses.replace(parse_settings({}), **{**paths, **changes})


def _full_disk(paths: OutputPaths) -> list[Output]:
    """The run's CSV, which fails as a full disk would."""

    def write(path: Path) -> None:
        raise OSError("no space left on device")

    return [Output("CSV", paths.csv, write)]


def test_a_second_run_on_the_same_files_is_refused_until_the_first_lets_them_go(tmp_path: Path) -> None:
    first = RunFiles(_config(tmp_path), "pytest first")
    first.claim()
    second = RunFiles(_config(tmp_path), "pytest second")
    with pytest.raises(ValueError, match=r"r\.csv is in use by another run .*`pytest first`"):
        second.claim()
    first.release()
    second.claim()
    second.release()


def test_the_log_holds_each_row_and_a_partial_run_saves_no_baseline(tmp_path: Path) -> None:
    files = RunFiles(_config(tmp_path, save_baseline=tmp_path / "b.json"), "pytest bench")
    files.claim()
    assert files.log_to_start
    files.start_log(["a", "b"], [], [])
    files.log_row(case_result(case="a", speedup=1.5))
    files.end_log(["b"], None)
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert lines[0]["cases"] == ["a", "b"] and lines[0]["command"] == "pytest bench"
    assert lines[1]["case"] == "a" and lines[1]["speedup"] == 1.5 and lines[2]["missing_cases"] == ["b"]
    assert files.written == [tmp_path / "r.jsonl"]

    document = run_document([case_result(case="a")], {}, {}, ["b"])
    assert files.open_history(measured_here=True) is None  # the config keeps no history
    paths = files.output_paths(document)
    assert paths.baseline is None  # refused: a partial baseline would stop gating case b
    assert files.write_outputs(_full_disk(paths)) is True
    assert files.refusals[0].startswith(f"did not save the baseline {tmp_path / 'b.json'}: 1 case(s) have no result")
    assert files.errors == [f"could not write {tmp_path / 'r.csv'}: no space left on device"]
    files.release()


def test_the_tally_tells_missing_cases_from_skipped_ones() -> None:
    tally = CaseTally(["a", "b", "c"])
    tally.select(["c", "a", "not-in-the-matrix"])
    assert tally.selected == {"a", "c"}
    tally.record("c", "setup", "skipped", True, "Skipped: tiny: no model")
    assert tally.measured_nothing([]) and tally.all_skipped is False
    tally.record("a", "setup", "passed", True, None)
    tally.record("a", "call", "failed", True, None)
    assert tally.missing([]) == ["a"] and tally.missing(["a"]) == []
    assert not tally.measured_nothing([])  # a began: its files describe this run

    skipped = CaseTally(["c"])
    skipped.select(["c"])
    skipped.record("c", "setup", "skipped", True, None)
    assert skipped.all_skipped and skipped.skipped == {"c": "no reason given"} and skipped.missing([]) == []


def test_a_run_claims_its_rounds_file_fresh_or_from_the_log_it_resumes(tmp_path: Path) -> None:
    from pytest_specbench.results.round_log import append_round, read_rounds, rounds_path

    other, mine = tmp_path / "other.jsonl", tmp_path / "r.jsonl"
    append_round(rounds_path(other), {"block": "b c", "series": "s", "round": 0})
    append_round(rounds_path(mine), {"block": "old c", "series": "t", "round": 0})
    # Resuming another log: this log's file starts as that log's rounds (so this log alone resumes the run).
    files = RunFiles(_config(tmp_path, resume=other), "pytest resume")
    files.claim()
    assert list(read_rounds(rounds_path(mine))) == ["b c"] and files.rounds_kept()
    files.release()
    # A fresh run: no earlier run's rounds beside its log.
    files = RunFiles(_config(tmp_path), "pytest fresh")
    files.claim()
    assert not rounds_path(mine).exists() and not files.rounds_kept()
    files.release()
