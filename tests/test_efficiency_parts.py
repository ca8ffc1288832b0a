"""benchmarks/efficiency_parts.py: the cost model's efficiency split into measured over predicted per part."""

from __future__ import annotations

import pytest
from factory import benchmark_script, case_result


@pytest.fixture(scope="module")
def parts():
    return benchmark_script("efficiency_parts")


def _row(**changes):
    # Two decode steps of 2 drafted tokens, the first accepted whole: one catch-up before the second.
    fields = dict(
        engine="native",
        k=2,
        drafted_per_step=[0, 2, 2],
        accepted_per_step=[0, 2, 1],
        verify_costs_ms=[100.0, 110.0, 120.0],
        draft_token_ms=10.0,
        draft_catch_up_ms=15.0,
        verify_time_s=0.36,  # 1.5 x the predicted 2 x v(3)
        draft_time_s=0.045,  # the predicted 4 x 10 ms + one catch-up's extra 5 ms
        baseline_decode_tps=8.0,  # 125 ms a token against v(1) = 100 ms
        tau=2.0,
        predicted_tau=2.5,
        efficiency=0.9,
    )
    return case_result(**{**fields, **changes})


def test_each_part_is_measured_over_predicted(parts) -> None:
    split = parts.row_parts(_row())
    assert split["verify"] == pytest.approx(1.5)
    assert split["draft"] == pytest.approx(1.0)
    assert split["baseline"] == pytest.approx(0.8)
    assert split["tokens"] == pytest.approx(0.8)
    assert split["efficiency"] == 0.9


def test_rows_the_model_does_not_price_are_left_out(parts) -> None:
    assert parts.row_parts(_row(engine="hf")) is None
    assert parts.row_parts(_row(efficiency=None)) is None
    lines = parts.summarise([_row(), _row(engine="hf")])
    assert len(lines) == 1 and lines[0][2] == 1  # one (pair, dtype), one row priced
