"""The one check of a usable number (engine/numbers.py) and what NaN means where it is used: a sampling
parameter and a gate value both refuse it, since NaN compares false with every bound."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from factory import gated_case

from pytest_specbench.engine.numbers import is_finite_number
from pytest_specbench.engine.sampling import SamplingParams
from pytest_specbench.results.gate import BaselineError, baseline_document, load_baseline

ENVIRONMENT = {"fingerprint": {"cpu_model": "Test CPU", "gpus": []}, "versions": {"torch": "2.x"}}


@pytest.mark.parametrize("value", [0, 2, 0.5, -1.5])
def test_ints_and_floats_are_numbers(value: float) -> None:
    assert is_finite_number(value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, False, "1", None])
def test_nan_infinities_bools_and_strings_are_not(value: object) -> None:
    assert not is_finite_number(value)


@pytest.mark.parametrize("parameter", ["temperature", "top_p"])
def test_a_nan_sampling_parameter_is_refused(parameter: str) -> None:
    with pytest.raises(ValueError, match=f"{parameter} must be"):
        SamplingParams(**{parameter: math.nan})


@pytest.mark.parametrize("field", ["acceptance_rate", "tau", "speedup"])
def test_a_nan_gate_value_in_a_baseline_is_refused(tmp_path: Path, field: str) -> None:
    document = baseline_document(
        [gated_case("tiny-k4-natural", acceptance=0.5, drafted=1000, speedup=1.5)], ENVIRONMENT
    )
    document["cases"]["tiny-k4-natural"][field] = math.nan
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(document), encoding="utf-8")  # json writes NaN, as a hand-edited file may hold
    with pytest.raises(BaselineError, match=f"case tiny-k4-natural has {field} nan"):
        load_baseline(path)
