"""The session's rows are typed: a row replayed from a resumed log and a row an xdist worker reported both reach
the session as CaseResult, through the hooks, without a model loaded."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from factory import case_result

from pytest_specbench.measure.case_inputs import case_inputs
from pytest_specbench.plugin.fixtures import RESULT_KEY
from pytest_specbench.plugin.hooks import SessionHooks
from pytest_specbench.plugin.session_inputs import build_session
from pytest_specbench.results.log import ResultsLog
from pytest_specbench.results.schema import CaseResult
from pytest_specbench.results.tally import CaseRows
from pytest_specbench.settings.config import parse_settings, result_settings


def _config(tmp_path: Path, pairs_file: Path, **changes):
    outputs = {"csv_path": None, "json_path": None, "history_dir": None, "plots_dir": None, "report_path": None}
    config = dataclasses.replace(
        parse_settings({}), pairs_file=pairs_file, pairs=("tiny",), ks=(1, 4), cache_dir=tmp_path / "cache"
    )
    return dataclasses.replace(config, **{**outputs, "save_baseline": None, **changes})


def _report(case_id: str, when: str, properties: list) -> pytest.TestReport:
    """A test report as the controller gets it from an xdist worker: serialised there, read back here."""
    report = pytest.TestReport(
        f"test_speculative.py::test_speculative_decoding[{case_id}]",
        ("test_speculative.py", 0, "test_speculative_decoding"),
        {"specbench": 1},
        "passed",
        None,
        when,
        user_properties=properties,
    )
    return pytest.TestReport._from_json(json.loads(json.dumps(report._to_json())))


def test_a_replayed_row_and_a_workers_row_arrive_typed_in_the_session(tmp_path: Path, tiny_pairs_file: Path) -> None:
    earlier = _config(tmp_path, tiny_pairs_file, log_path=tmp_path / "earlier.jsonl")
    built = build_session(earlier, tmp_path)
    first, second = built.cases[:2]
    fingerprint = case_inputs(first, earlier, built.prompts)
    log = ResultsLog(earlier.log_path, result_settings(earlier), cases=[first.id, second.id])
    log.start()
    log.append(case_result(case=first.id, run_id="the-earlier-run", inputs_fingerprint=fingerprint))
    log.close()

    config = _config(tmp_path, tiny_pairs_file, log_path=tmp_path / "now.jsonl", resume=earlier.log_path)
    session = build_session(config, tmp_path)
    replayed = session.replay(first.id)
    assert isinstance(replayed, CaseResult)
    hooks = SessionHooks(session)
    session.select([first.id, second.id])
    hooks.pytest_runtest_logreport(_report(first.id, "call", [(RESULT_KEY, replayed.to_row())]))
    worker_row = case_result(case=second.id, worker="gw1", run_id="")
    hooks.pytest_runtest_logreport(_report(second.id, "call", [(RESULT_KEY, worker_row.to_row())]))

    rows = session.rows
    assert all(isinstance(row, CaseResult) for row in rows.by_case.values())
    assert [row.case for row in rows.in_order()] == [first.id, second.id]
    assert rows.by_case[first.id].run_id == "the-earlier-run"  # a replayed row keeps the run that measured it
    assert rows.by_case[second.id].run_id == rows.run_id and rows.by_case[second.id].worker == "gw1"
    assert rows.replayed == [first.id] and rows.measured_here


def test_a_rerun_replaces_its_row_and_rows_keep_the_matrix_order() -> None:
    rows = CaseRows(["a", "b", "c"], replayable={"a": case_result(case="a", run_id="earlier")})
    assert rows.add(case_result(case="c", tau=1.0)) is True
    assert rows.add(case_result(case="a", run_id="earlier")) is False  # replayed: not logged again
    assert rows.add(case_result(case="c", tau=2.0)) is True
    assert [row.case for row in rows.in_order()] == ["a", "c"] and rows.by_case["c"].tau == 2.0
    assert rows.replayed == ["a"] and rows.by_case["c"].run_id == rows.run_id
    assert not CaseRows(["a"], replayable={"a": case_result(case="a")}).measured_here
