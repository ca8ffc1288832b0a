"""The case matrix's axes, declared once: the id, the config name, the marker, the fingerprint and cache keys
all derive from the declaration."""

from __future__ import annotations

import pytest

from pytest_specbench.measure.matrix import build_matrix
from pytest_specbench.measure.pairs import PairSpec
from pytest_specbench.measure.prompts import Prompt
from pytest_specbench.settings import axes

PAIR = PairSpec("gpt2_large", "gpt2-large", "gpt2")
PROMPTS = [Prompt("code_python-1", "code_python", "def f():")]


def _cases(**axes_values):
    return build_matrix([PAIR], axes_values.pop("ks", (8,)), PROMPTS, **axes_values)


@pytest.mark.parametrize(
    ("several", "ids", "configs"),
    [
        ({}, ["gpt2_large-k8-code_python"], ["gpt2_large_k8"]),
        ({"engines": ("native", "hf")}, ["gpt2_large-native-k8-code_python", "gpt2_large-hf-k8-code_python"],
         ["gpt2_large_k8", "gpt2_large_k8_hf"]),
        ({"batches": (1, 4)}, ["gpt2_large-k8-b1-code_python", "gpt2_large-k8-b4-code_python"],
         ["gpt2_large_k8", "gpt2_large_k8_b4"]),
        ({"dtypes": ("float32", "bfloat16")}, ["gpt2_large-k8-code_python", "gpt2_large-k8-code_python-bf16"],
         ["gpt2_large_k8", "gpt2_large_k8_bf16"]),
    ],
)  # fmt: skip
def test_an_axis_shows_in_the_id_only_when_more_than_one_of_its_values_runs(several, ids, configs) -> None:
    cases = _cases(**several)
    assert [case.id for case in cases] == ids
    assert [case.config for case in cases] == configs


def test_the_marker_has_a_keyword_per_axis() -> None:
    (case,) = _cases()
    values = case.axis_values()
    assert set(values) == {*axes.AXIS_NAMES, *axes.DERIVED_KEY_PARTS}
    assert [values[name] for name in axes.AXIS_NAMES] == ["gpt2_large", "native", 8, 1, "code_python", "float32"]


def test_a_cache_key_names_its_axes_so_two_caches_keys_never_meet() -> None:
    fp32, bf16 = _cases(dtypes=("float32", "bfloat16"))
    assert fp32.key("pair", "dtype") != bf16.key("pair", "dtype")
    assert fp32.key("pair") == bf16.key("pair")  # a cache that does not depend on the dtype is shared
    assert fp32.key("target", "prompt") == (("prompt", "code_python"), ("target", "gpt2-large"))
    assert fp32.key("prompt_id") == (("prompt_id", "code_python-1"),)  # the label may be the category
    assert fp32.key("pair", rows=2) != fp32.key("pair", seed=2)  # settings are named too
    with pytest.raises(KeyError, match="no axis"):
        fp32.key("context_length")


def test_the_fingerprint_holds_every_axis_not_fingerprinted_by_content() -> None:
    (case,) = _cases()
    assert axes.fingerprint_values(case.axis_values()) == {"engine": "native", "k": 8, "batch": 1, "dtype": "float32"}
    assert "k" not in axes.report_groups() and "pair" in axes.report_groups()
