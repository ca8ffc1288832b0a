"""The verify pass's linear layers in their measured-fastest forms: the same outputs, chosen by measurement, lossless.

Losslessness is checked against transformers' ``generate(do_sample=False)`` on every tiny
architecture with each kernel, and a planted bug in each non-default form is shown to fail it.
"""

from __future__ import annotations

import functools
import json
import platform
import shutil

import pytest
import torch
from factory import ARCHITECTURES, hf_generate, tiny_pair
from hypothesis import given, settings
from hypothesis import strategies as st

import pytest_specbench.engine.verify_forms as verify_forms_module
from pytest_specbench import speculative_generate
from pytest_specbench.engine import few_rows
from pytest_specbench.engine.cost_probe import verify_costs
from pytest_specbench.engine.derived_models import int8_copy
from pytest_specbench.engine.names import HEAD_KERNELS
from pytest_specbench.engine.verify_forms import (
    column_head_rows,
    few_rows_rows,
    form_choices,
    settle_verify_forms,
    verify_forms,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT = [5, 17, 33, 9, 60, 2, 41, 7, 8, 11, 12, 13, 70, 71, 3, 4, 44, 45, 46, 47]
NEW_TOKENS = 29

needs_kernel = pytest.mark.skipif(
    few_rows.kernel() is None, reason=f"the few-rows kernel is not built here: {few_rows.unavailable_reason()}"
)


@functools.cache
def pair(arch: str):
    return tiny_pair(arch)


@functools.cache
def reference(arch: str) -> tuple[int, ...]:
    return tuple(hf_generate(pair(arch)[0], PROMPT, NEW_TOKENS))


class _Model(torch.nn.Module):
    """Just enough of a causal LM for the forms: a hidden layer and an output head."""

    def __init__(self, head: torch.nn.Module, hidden: torch.nn.Module | None = None) -> None:
        super().__init__()
        self.head = head
        self.hidden = hidden

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.head


@pytest.fixture
def calls(monkeypatch) -> dict[str, list[int]]:
    """Row counts of each call of the column and the few-rows forms."""
    seen: dict[str, list[int]] = {"column": [], "rows": []}
    real_column, real_rows = verify_forms_module.column_logits, few_rows.few_rows_linear

    def column(head, hidden):
        seen["column"].append(hidden.numel() // hidden.shape[-1])
        return real_column(head, hidden)

    def rows(layer, hidden):
        seen["rows"].append(hidden.numel() // hidden.shape[-1])
        return real_rows(layer, hidden)

    monkeypatch.setattr(verify_forms_module, "column_logits", column)
    monkeypatch.setattr(few_rows, "few_rows_linear", rows)
    return seen


def _linear(bias: bool, seed: int = 0, shape: tuple[int, int] = (48, 300)) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(*shape, bias=bias)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 2, 5, 17])
def test_the_column_form_computes_the_heads_logits(bias, rows):
    head = _linear(bias)
    hidden = torch.randn(1, rows, 48)
    expected = head(hidden)
    with verify_forms(_Model(head), "column"):
        logits = head(hidden)
    assert logits.shape == expected.shape == (1, rows, 300)
    assert logits.is_contiguous()
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))


@needs_kernel
@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, few_rows.MAX_ROWS),
    inputs=st.integers(1, 70),
    outputs=st.integers(1, 40),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_few_rows_kernel_computes_linear_and_each_row_alone(rows, inputs, outputs, bias, seed):
    layer = _linear(bias, seed, (inputs, outputs))
    hidden = torch.randn(1, rows, inputs + 3)[..., 3:]  # not contiguous
    result = few_rows.few_rows_linear(layer, hidden)
    assert result.shape == (1, rows, outputs)
    torch.testing.assert_close(result, layer(hidden), rtol=1e-5, atol=1e-5)
    # One dot product per output in a fixed order: a row's output does not depend on the rows beside it.
    assert torch.equal(result[:, -1:], few_rows.few_rows_linear(layer, hidden[:, -1:]))


def test_the_kernel_serves_float32_cpu_layers_of_up_to_16_rows():
    layer = _linear(False)
    assert few_rows.supports(layer, 2) and few_rows.supports(layer, few_rows.MAX_ROWS)
    assert not few_rows.supports(layer, few_rows.MAX_ROWS + 1)
    assert not few_rows.supports(layer.to(torch.bfloat16), 4)
    assert not few_rows.supports(torch.nn.Embedding(3, 4).half(), 2)


def test_the_layers_are_restored_after_the_block_even_on_an_error():
    head, hidden = _linear(False), _linear(False, shape=(48, 48))
    with pytest.raises(RuntimeError, match="inside"):
        with verify_forms(_Model(head, hidden), "rows"):
            assert "forward" in vars(head) and "forward" in vars(hidden)
            raise RuntimeError("inside")
    assert "forward" not in vars(head) and "forward" not in vars(hidden)


def test_linear_kernel_and_quantised_layers_are_left_alone():
    target, _ = pair("llama")
    with verify_forms(target, "linear"):
        assert not any("forward" in vars(module) for module in target.modules())
    quantised = int8_copy(target)
    assert type(quantised.get_output_embeddings()) is not torch.nn.Linear
    with verify_forms(quantised, "column"):
        assert "forward" not in vars(quantised.get_output_embeddings())
    assert column_head_rows(quantised, "column", 9) == []
    assert column_head_rows(target, "linear", 9) == []
    assert column_head_rows(target, "column", 5) == [2, 3, 4, 5]
    assert few_rows_rows(target, "linear", 5) == []


@needs_kernel
def test_forced_rows_serve_float32_layers_only():
    target, _ = pair("llama")
    assert few_rows_rows(target, "rows", 5) == [2, 3, 4, 5]
    assert few_rows_rows(target, "rows", 40) == list(range(2, few_rows.MAX_ROWS + 1))
    half = int8_copy(target)  # its head is int8; no float32 linear layer is left
    assert few_rows_rows(half, "rows", 5) == []


def test_an_inner_block_leaves_the_outer_one_in_place():
    head = _linear(False)
    model = _Model(head)
    with verify_forms(model, "column"):
        outer = vars(head)["forward"]
        with verify_forms(model, "auto"):
            assert vars(head)["forward"] is outer
        assert vars(head)["forward"] is outer
    assert "forward" not in vars(head)


def test_suspended_restores_the_models_own_layers_for_its_duration():
    head = _linear(False)
    with verify_forms(_Model(head), "column") as forms:
        with forms.suspended():
            assert "forward" not in vars(head)
        assert "forward" in vars(head)


def test_auto_settles_each_group_and_row_count_once_and_keeps_the_fastest(monkeypatch, calls):
    head, hidden = _linear(True, seed=1), _linear(False, shape=(48, 48))
    model = _Model(head, hidden)
    measured = []

    def fake_fastest(layers, forms, rows):
        measured.append((layers[0] is head, rows, tuple(forms)))
        return "column" if "column" in forms and rows >= 4 else "own"  # the column form "wins" from 4 rows on

    monkeypatch.setattr(verify_forms_module, "_fastest", fake_fastest)
    settle_verify_forms(model, 5)
    settle_verify_forms(model, 5)  # settled: nothing measured again
    assert sorted(rows for is_head, rows, _ in measured if is_head) == [2, 3, 4, 5]
    assert len(measured) == 8  # two groups (the head, the hidden layer), four row counts each
    assert all(("column" in forms) == is_head for is_head, _, forms in measured)
    with verify_forms(model, "auto"):
        for rows in (1, 3, 5, 5, 7):  # 7 rows: not settled, the model's own
            head(torch.randn(1, rows, 48))
    assert calls["column"] == [5, 5]
    chosen = form_choices(model, "auto", 5)
    assert chosen[((300, 48), "float32", True)] == {2: "own", 3: "own", 4: "column", 5: "column"}
    assert column_head_rows(model, "auto", 17) == [4, 5]
    assert column_head_rows(model, "auto", 3) == []


@needs_kernel
def test_the_real_measurement_chooses_among_the_applicable_forms():
    layer = _linear(False)
    assert verify_forms_module._fastest([layer, _linear(False, 1)], ["own", "rows", "column"], 4) in (
        "own",
        "rows",
        "column",
    )


def test_an_unknown_kernel_is_refused():
    with pytest.raises(ValueError, match="verify kernel must be one of auto, rows, column, linear, got 'fast'"):
        with verify_forms(_Model(_linear(False)), "fast"):
            pass


@pytest.mark.parametrize("k", [2, 8])
@pytest.mark.parametrize("head_kernel", HEAD_KERNELS)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_kernel_is_lossless(arch, head_kernel, k, calls):
    target, draft = pair(arch)
    settle_verify_forms(target, k + 1, head_kernel)
    result = speculative_generate(target, draft, PROMPT, k, NEW_TOKENS, head_kernel=head_kernel)
    assert result.token_ids == list(reference(arch))
    assert not any("forward" in vars(module) for module in target.modules())
    verify_passes = sum(1 for drafted in result.stats.drafted_per_step if drafted > 0)
    if head_kernel == "column":  # every verify pass of a drafted block (2 rows or more) went through it
        assert len(calls["column"]) == verify_passes
    elif head_kernel == "rows" and few_rows.kernel() is not None:  # and through every linear layer
        layers = sum(1 for module in target.modules() if type(module) is torch.nn.Linear)
        assert len([rows for rows in calls["rows"] if rows <= k + 1]) >= verify_passes * layers
    elif head_kernel == "linear":
        assert calls == {"column": [], "rows": []}


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gpt2", "gemma3"])
@pytest.mark.parametrize("kernel", ["column", "rows"])
def test_a_wrong_form_is_caught(arch, kernel, monkeypatch):
    if kernel == "rows" and few_rows.kernel() is None:
        pytest.skip(f"the few-rows kernel is not built here: {few_rows.unavailable_reason()}")
    target, draft = pair(arch)
    expected = list(reference(arch))
    # Planted bug: each position gets the output of the position before it.
    if kernel == "column":
        real = verify_forms_module.column_logits
        monkeypatch.setattr(verify_forms_module, "column_logits", lambda h, x: torch.roll(real(h, x), 1, dims=-2))
    else:
        real = few_rows.few_rows_linear
        monkeypatch.setattr(few_rows, "few_rows_linear", lambda h, x: torch.roll(real(h, x), 1, dims=-2))
    assert speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, head_kernel="linear").token_ids == expected
    assert speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, head_kernel=kernel).token_ids != expected


def test_an_interleaved_baseline_between_steps_runs_the_models_own_layers():
    target, draft = pair("llama")
    seen = []

    def between_steps(seconds: float) -> None:
        seen.append(any("forward" in vars(module) for module in target.modules()))

    result = speculative_generate(
        target, draft, PROMPT, 4, NEW_TOKENS, head_kernel="column", between_steps=between_steps
    )
    assert result.token_ids == list(reference("llama"))
    assert seen and not any(seen)


def test_the_cost_probe_times_the_engines_forms(calls):
    target, _ = pair("gpt2")
    curve = verify_costs(target, torch.tensor([PROMPT]), 4, repeats=1, head_kernel="column")
    assert len(curve) == 4 and min(curve) > 0
    assert calls["column"] == [2, 3, 4] * 2  # m = 2, 3, 4 in the warm-up sweep and the timed one
    assert "forward" not in vars(target.get_output_embeddings())


# --- through the plugin ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("head_kernel", "column_rows", "rows_rows"),
    [("column", [2, 3, 4, 5], []), ("linear", [], []), ("rows", [], [2, 3, 4, 5])],
)
def test_the_rows_record_which_verify_blocks_ran_which_form(bench, pytester, head_kernel, column_rows, rows_rows):
    if head_kernel == "rows" and few_rows.kernel() is None:
        pytest.skip(f"the few-rows kernel is not built here: {few_rows.unavailable_reason()}")
    result = bench(
        f"--specbench-head-kernel={head_kernel}",
        "--specbench-engine=native,hf",
        "--specbench-k=1,4",
        "--specbench-prompts=natural",
        "--specbench-json=results.json",
    )
    result.assert_outcomes(passed=4)
    rows = {row["case"]: row for row in json.loads((pytester.path / "results.json").read_text())["results"]}
    for field, expected in (("column_head_rows", column_rows), ("few_rows_rows", rows_rows)):
        assert rows["tiny-native-k4-natural"][field] == expected
        assert rows["tiny-native-k1-natural"][field] == expected[:1]  # k=1 verifies 2 rows at most
        assert rows["tiny-hf-k4-natural"][field] == []  # transformers' loop keeps the model's kernels
    assert all(row["verdict"] == "lossless" for row in rows.values())


@pytest.mark.slow
def test_a_schedule_longer_than_the_probe_has_its_forms_settled_before_the_timed_rounds(bench, pytester, monkeypatch):
    measured_during_runs = []
    real_fastest = verify_forms_module._fastest
    import pytest_specbench.measure.sequence as runner

    real_runner = runner.speculative_runner

    def watched_runner(*args, **kwargs):
        run = real_runner(*args, **kwargs)

        def watched(**kwargs):
            monkeypatch.setattr(
                verify_forms_module,
                "_fastest",
                lambda *args: measured_during_runs.append(1) or real_fastest(*args),
            )
            try:
                return run(**kwargs)
            finally:
                monkeypatch.setattr(verify_forms_module, "_fastest", real_fastest)

        return watched

    monkeypatch.setattr(runner, "speculative_runner", watched_runner)
    # k=heuristic drafts from 20 tokens up: blocks far longer than the probe's 17 rows.
    result = bench(
        "--specbench-k=heuristic",
        "--specbench-prompts=repetitive",
        "--specbench-max-new-tokens=40",
        "--specbench-json=results.json",
    )
    result.assert_outcomes(passed=1)
    row = json.loads((pytester.path / "results.json").read_text())["results"][0]
    assert max(row["k_per_step"]) > 17
    assert measured_during_runs == []
    assert max(row["column_head_rows"] or [0]) <= 40 and row["verdict"] == "lossless"


@pytest.mark.parametrize(
    ("capability", "march"), [("", "-march=native"), ("avx2", "-march=x86-64-v3"), ("AVX512", "-march=native")]
)
def test_the_kernel_follows_a_cap_on_torchs_cpu_capability(monkeypatch, capability, march):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", capability)
    assert march in few_rows.compile_flags()
    assert few_rows._extension_name(few_rows.compile_flags()) != few_rows._extension_name(["-march=other"])


@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64") or not (shutil.which("c++") and shutil.which("ninja")),
    reason="the kernel builds on x86-64 with a C++ compiler and ninja",
)
def test_the_kernel_builds_where_a_compiler_and_ninja_exist():
    assert few_rows.kernel() is not None, few_rows.unavailable_reason()
    assert few_rows.unavailable_reason() is None
