"""The result schema: every list of fields derives from it, so a new field shows up everywhere at once."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import pytest
from factory import DEFAULT_RUN_ROW

from pytest_specbench.report import summary as report
from pytest_specbench.results import gate, schema
from pytest_specbench.results.schema import CaseResult
from pytest_specbench.results.strict_json import strict_json


def _row(**overrides) -> dict:
    values = {}
    for f in dataclasses.fields(CaseResult):
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        values[f.name] = {int: 4, float: 0.5, str: "x", bool: True}.get(
            {"int": int, "float": float, "str": str, "bool": bool}.get(str(f.type)), 0.5
        )
    values.update(
        case="tiny-k4-natural",
        config="tiny_k4",
        pair="tiny",
        k=4,
        prompt="natural",
        verdict="lossless",
        lossless=True,
        accepted_tokens=3,
        drafted_tokens=4,
        decode_speedup_ci_low=0.4,
        decode_speedup_ci_high=0.6,
        unstable=False,
    )
    values.update(overrides)
    return CaseResult(**values).to_row()


def test_every_field_has_a_meaning_and_a_group():
    groups = {
        schema.IDENTITY,
        schema.TIMING,
        schema.ACCEPTANCE,
        schema.VERDICT,
        schema.ENVIRONMENT,
        schema.COST_MODEL,
        schema.MEMORY,
    }
    for f in dataclasses.fields(CaseResult):
        assert f.metadata["meaning"] and f.metadata["group"] in groups, f.name


def test_the_seed_columns_lead_the_csv():
    assert schema.csv_columns()[:5] == ("config", "latency_ms", "throughput_tps", "acceptance_rate", "quality_score")
    assert "accepted_per_step" not in schema.csv_columns()  # lists are JSON-only


def test_a_row_is_plain_json():
    row = _row()
    assert json.loads(json.dumps(row, allow_nan=False)) == row


def test_a_field_added_to_the_schema_appears_in_the_csv_json_summary_gate_and_extra_info(monkeypatch):
    extended = dataclasses.make_dataclass(
        "Extended",
        [
            (
                "energy_j",
                float,
                schema._field(
                    "joules per generated token",
                    schema.TIMING,
                    default=0.25,
                    summary=("J/token", ".3f"),
                    gate="info",
                    extra_info=True,
                ),
            )
        ],
        bases=(CaseResult,),
        kw_only=True,
    )
    monkeypatch.setattr(schema, "CaseResult", extended)
    row = extended(**_row())
    assert row.to_row()["energy_j"] == 0.25
    header = next(csv.reader(io.StringIO(report.csv_text([row]))))
    assert "energy_j" in header
    assert json.loads(strict_json(report.run_document([row], {}, {}).to_json()))["results"][0]["energy_j"] == 0.25
    assert any("J/token" in line for line in report.summary_lines([row]))
    assert "energy_j" in schema.extra_info_fields()
    assert gate.baseline_document([row], {})["cases"][row.case]["energy_j"] == 0.25
    # and without the extension, none of them has it
    monkeypatch.undo()
    assert "energy_j" not in schema.csv_columns() and "energy_j" not in schema.extra_info_fields()


def test_summary_shows_the_interval_and_the_unstable_mark():
    lines = report.summary_lines([CaseResult.from_row(_row(decode_speedup=0.5, unstable=True))])
    assert any("0.50 [0.40, 0.60] !" in line for line in lines)
    assert any("1 case(s) unstable" in line for line in lines)


@pytest.mark.parametrize("kind", ["compared", "info"])
def test_gate_fields_come_from_the_schema(kind):
    expected = {f.name for f in dataclasses.fields(CaseResult) if f.metadata["gate"] == kind}
    assert set(schema.gate_fields(kind)) == expected and expected


def test_a_row_without_a_field_reads_the_schema_default():
    row = _row()
    del row["engine"], row["accepted_per_step"]
    assert schema.row_value(row, "engine") == "native" and schema.row_value(row, "accepted_per_step") == []
    assert schema.row_value({"engine": "hf"}, "engine") == "hf"
    with pytest.raises(KeyError, match="has no default"):
        schema.row_value({}, "decode_speedup")
    with pytest.raises(KeyError, match="no result field 'speed'"):
        schema.field_default("speed")


def test_a_row_read_back_is_typed_with_defaults_for_fields_it_lacks_and_names_a_missing_required_one():
    row = {key: value for key, value in DEFAULT_RUN_ROW.items() if key not in ("row_verdicts",)}
    result = CaseResult.from_row({**row, "a_field_since_removed": 1})
    assert result.row_verdicts == [] and result.case == DEFAULT_RUN_ROW["case"]
    assert CaseResult.from_row(result.to_row()) == result
    with pytest.raises(KeyError, match="'pair'"):
        CaseResult.from_row({key: value for key, value in row.items() if key != "pair"})
