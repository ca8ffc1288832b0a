"""The case matrix's axes, declared once: the id, the config name, the marker, the fingerprint and cache keys
all derive from the declaration."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_specbench.cases.matrix import Case, build_matrix
from pytest_specbench.cases.pairs import PairSpec
from pytest_specbench.cases.prompts import Prompt
from pytest_specbench.settings import axes, options
from pytest_specbench.settings import config as config_module
from pytest_specbench.settings.option import Option

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


def test_a_cache_key_names_its_parts_so_two_caches_keys_never_meet() -> None:
    fp32, bf16 = _cases(dtypes=("float32", "bfloat16"))
    assert fp32.key("costs") != bf16.key("costs")
    assert fp32.key("sizes") == bf16.key("sizes")  # a cache the dtype does not change is shared
    assert fp32.key("reference") == ("reference", ("dtype", "float32"), ("target", "gpt2-large"))
    assert fp32.key("turn_lengths") == ("turn_lengths", ("prompt_id", "code_python-1"))  # the label may be a category
    assert fp32.key("sizes", rows=2) != fp32.key("sizes", seed=2)  # settings are named too
    assert fp32.key("sizes") != fp32.key("costs")[:2]
    with pytest.raises(KeyError, match="no cache"):
        fp32.key("context_length")


#: what each cache's key held when the call sites named its axes (a change here changes which cases share a cache)
KEY_PARTS = {
    "warm_up": {"pair", "dtype", "engine", "batch"},
    "served_warm_up": {"pair", "dtype", "engine", "k"},
    "sizes": {"pair"},
    "input_ids": {"target", "prompt_id", "dtype"},
    "costs": {"pair", "dtype"},
    "reference": {"target", "dtype"},
    "sampling_check": {"pair", "dtype", "prompt_id"},
    "turn_lengths": {"prompt_id"},
    "row_input_ids": {"target"},
    "batched_reference": {"target", "dtype"},
    "batched_costs": {"pair", "dtype", "batch", "prompt_id"},
    "race": {"pair", "engine", "prompt_id"},
}


@pytest.mark.parametrize("cache", list(axes.CACHES))
def test_each_cache_keys_the_axes_that_change_it(cache) -> None:
    (case,) = _cases()
    assert {name for name, _ in case.key(cache)[1:]} == KEY_PARTS[cache]


def test_a_new_axis_is_in_every_cache_key_until_it_declares_otherwise(monkeypatch) -> None:
    # A context length that truncates the prompt, declared with nothing about caches: every cache keeps it apart.
    monkeypatch.setattr(axes, "AXES", (*axes.AXES, axes.Axis("context", lambda n: f"-c{n}")))
    for cache in axes.CACHES:
        short, long = (axes.cache_key({**_cases()[0].axis_values(), "context": n}, cache) for n in (64, 512))
        assert short != long and ("context", 64) in short
    quiet = axes.Axis("context", lambda n: f"-c{n}", irrelevant_to=frozenset({"sizes"}))
    monkeypatch.setattr(axes, "AXES", (*axes.AXES[:-1], quiet))
    assert ("context", 64) not in axes.cache_key({**_cases()[0].axis_values(), "context": 64}, "sizes")


def test_the_fingerprint_holds_every_axis_not_fingerprinted_by_content() -> None:
    (case,) = _cases()
    assert axes.fingerprint_values(case.axis_values()) == {"engine": "native", "k": 8, "batch": 1, "dtype": "float32"}
    assert "k" not in axes.report_groups() and "pair" in axes.report_groups()


def _declare(monkeypatch, axis: axes.Axis, run_after: str = "engine") -> None:
    """``axis`` added to the declarations, as a new axis would be: the list, and its place in the run's order."""
    declared = tuple(a for a in axes.AXES if a.name != axis.name)  # a second declaration replaces the first
    monkeypatch.setattr(axes, "AXES", (*declared, axis))
    monkeypatch.setattr(axes, "AXIS_NAMES", tuple(a.name for a in axes.AXES))
    monkeypatch.setattr(axes, "AXES_BY_NAME", {a.name: a for a in axes.AXES})
    order = [name for name in axes.RUN_ORDER if name != axis.name]
    order.insert(order.index(run_after) + 1, axis.name)
    monkeypatch.setattr(axes, "RUN_ORDER", tuple(order))
    monkeypatch.setattr(axes, "CONFIG_ORDER", (*(name for name in axes.CONFIG_ORDER if name != axis.name), axis.name))


def _contexts(raw: str) -> tuple[int, ...]:
    return tuple(int(part) for part in raw.split(","))


def test_a_case_holds_a_new_axis_by_its_declaration_alone(monkeypatch) -> None:
    # A context length, declared with its id part, config part and option: the option table and the run's settings
    # take it, the matrix runs each value, and the case's id, config name, block, order, fingerprint and every cache
    # key tell its values apart.
    option = Option("context", "context", "context lengths", _contexts, default="2048", changes_results=True)
    context = axes.Axis("context", lambda n: f"-c{n}", config_part=lambda n: f"_c{n}", option=option, default=2048)
    _declare(monkeypatch, context)
    monkeypatch.setattr(config_module, "OPTIONS", (*options.OPTIONS, option))
    given = {"k": ("1", "--specbench-k"), "context": ("512,64", "--specbench-context")}
    # one dtype: the default is two where the CPU has bfloat16 instructions
    settings = config_module.parse_settings({**given, "dtype": ("float32", "--specbench-dtype")})
    assert settings.axis_values == {"context": (512, 64)} and settings.context == (512, 64)  # read as any setting is
    assert config_module.result_settings(settings)["--specbench-context"] == [512, 64]  # a resume compares it
    short, long = build_matrix([PAIR], prompts=PROMPTS, **axes.values_to_run(settings))
    assert (short.value("context"), long.value("context")) == (512, 64)  # in the order given
    assert (short.id, long.id) == ("gpt2_large-k1-code_python-c512", "gpt2_large-k1-code_python-c64")
    assert (short.config, long.config) == ("gpt2_large_k1_c512", "gpt2_large_k1_c64")
    assert short.block != long.block  # each value its own baseline, unless the axis spans blocks
    assert all(short.key(cache) != long.key(cache) for cache in axes.CACHES)
    assert axes.fingerprint_values(short.axis_values())["context"] == 512
    (alone,) = build_matrix([PAIR], (8,), PROMPTS, context=(64,))
    assert alone.id == "gpt2_large-k8-code_python" and alone.value("context") == 64  # one value: the id stays short
    assert build_matrix([PAIR], (8,), PROMPTS)[0].value("context") == 2048  # none given: its default alone
    spanning = dataclasses.replace(context, spans=frozenset({axes.PROMPT_SCOPE}))
    _declare(monkeypatch, spanning)
    one, other = build_matrix([PAIR], (8,), PROMPTS, context=(512, 64))
    assert one.block == other.block  # timed on one baseline, as k is


def test_a_case_takes_only_the_declared_axes_and_replaces_as_a_dataclass() -> None:
    with pytest.raises(TypeError, match="no axis context"):
        Case(PAIR, 8, PROMPTS[0], "code_python", context=64)
    (case,) = _cases(dtypes=("bfloat16",))
    other = dataclasses.replace(case, pair=PairSpec("gpt2_other", "gpt2-large", "distilgpt2"))
    assert (other.pair.name, other.k, other.dtype, other.prompt_label) == ("gpt2_other", 8, "bfloat16", "code_python")
    assert other.id == "gpt2_other-k8-code_python"
    changed = dataclasses.replace(case, k=4, prompt_label="code", engine="hf")
    assert (changed.k, changed.prompt_label, changed.engine, changed.dtype) == (4, "code", "hf", "bfloat16")


def test_an_axis_keeps_its_own_options_values_under_its_name() -> None:
    with pytest.raises(ValueError, match="whose field is 'contexts'"):
        axes.Axis("context", str, option=Option("context", "contexts", "context lengths", _contexts))


def test_the_run_order_and_the_config_order_name_every_axis_once() -> None:
    for order in (axes.RUN_ORDER, axes.CONFIG_ORDER):
        assert sorted(order) == sorted(axes.AXIS_NAMES)
    assert all(scope in axes.BLOCK_SCOPES for axis in axes.AXES for scope in axis.spans)
