"""The table of a run's files (report/outputs.py), shared by the end of a run and ``merge``."""

from __future__ import annotations

import json
import math

from factory import case_result

from pytest_specbench.report.outputs import OutputPaths, outputs, write_outputs
from pytest_specbench.report.summary import run_document
from pytest_specbench.results.run_document import RunDocument


def _document(speedup: float = 1.2, **fields) -> RunDocument:
    row = case_result(case="p-k1-x", pair="p", k=1, prompt="x", decode_speedup=speedup, acceptance_rate=0.5, **fields)
    return run_document([row], {"specbench_k": "1"}, {"fingerprint": {"cpu_model": "x"}, "versions": {}})


def test_the_table_names_each_output_once():
    assert [output.name for output in outputs(OutputPaths(), _document())] == [
        "CSV",
        "JSON",
        "baseline",
        "figures",
        "report",
    ]


def test_only_outputs_with_a_path_are_written(tmp_path):
    written, errors = write_outputs(OutputPaths(csv=tmp_path / "a.csv", json=tmp_path / "a.json"), _document())
    assert written == [tmp_path / "a.csv", tmp_path / "a.json"] and errors == []
    assert json.loads((tmp_path / "a.json").read_text())["options"] == {"specbench_k": "1"}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.csv", "a.json"]


def test_one_failed_file_does_not_cost_the_others(tmp_path):
    # The strict JSON refuses NaN and the baseline a row without its gated values; the CSV takes the row.
    paths = OutputPaths(csv=tmp_path / "a.csv", json=tmp_path / "a.json", baseline=tmp_path / "b.json")
    written, errors = write_outputs(paths, _document(speedup=math.nan, tau=None))
    assert written == [tmp_path / "a.csv"]
    json_error, baseline_error = errors
    assert json_error.startswith(f"could not write {tmp_path / 'a.json'}: ") and "not JSON compliant" in json_error
    assert baseline_error == (
        f"could not write {tmp_path / 'b.json'}: result of case p-k1-x has tau None, expected a number"
    )
    assert not (tmp_path / "a.json").exists() and (tmp_path / "a.csv").is_file()


def test_the_json_document_carries_the_answer(tmp_path):
    written, errors = write_outputs(OutputPaths(json=tmp_path / "a.json"), _document())
    answer = json.loads((tmp_path / "a.json").read_text())["answer"]
    (prompt,) = answer["prompts"]
    assert (prompt["pair"], prompt["prompt"], prompt["best_k"], prompt["decode_speedup"]) == ("p", "x", 1, 1.2)
    assert answer["pairs"][0]["k"] == 1 and answer["pairs"][0]["best_or_tied"] == 1
