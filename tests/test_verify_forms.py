"""The verify pass's linear layers in their measured-fastest forms: the same outputs, chosen by measurement, lossless.

Losslessness is checked against transformers' ``generate(do_sample=False)`` on every tiny
architecture with each kernel, for the speculative run and for the greedy baseline (whose one-row steps run
the same forms), and a planted bug in each non-default form, at many rows and at one, is shown to fail it.
"""

from __future__ import annotations

import copy
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
from pytest_specbench import greedy_generate, speculative_generate
from pytest_specbench.engine import few_rows
from pytest_specbench.engine.cost_probe import verify_costs
from pytest_specbench.engine.decoding import GreedyStepper
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


#: the largest error of one bfloat16 rounding, relative to the value rounded (8 significant bits)
BF16_ROUNDING = 2**-8


@needs_kernel
@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, few_rows.MAX_ROWS),
    inputs=st.integers(1, 70),
    outputs=st.integers(1, 40),
    bias=st.booleans(),
    dtype=st.sampled_from(few_rows.DTYPES),
    seed=st.integers(0, 2**16),
)
def test_the_few_rows_kernel_computes_linear_and_each_row_alone(rows, inputs, outputs, bias, dtype, seed):
    layer = _linear(bias, seed, (inputs, outputs)).to(dtype)
    hidden = torch.randn(1, rows, inputs + 3).to(dtype)[..., 3:]  # not contiguous
    result = few_rows.few_rows_linear(layer, hidden)
    assert result.shape == (1, rows, outputs) and result.dtype == dtype
    if dtype == torch.float32:
        torch.testing.assert_close(result, layer(hidden), rtol=1e-5, atol=1e-5)
    else:
        # float32 sums of the same bfloat16 values, rounded once: within one rounding of float32's linear, and
        # equal to that linear rounded to bfloat16 but where a sum lies within float32 noise of a tie.
        exact = torch.nn.functional.linear(
            hidden.float(), layer.weight.float(), None if layer.bias is None else layer.bias.float()
        )
        torch.testing.assert_close(result.float(), exact, rtol=BF16_ROUNDING, atol=1e-5)
        assert int((result != exact.to(dtype)).sum()) <= 1 + result.numel() // 100
    # One dot product per output in a fixed order: a row's output does not depend on the rows beside it.
    assert torch.equal(result[:, -1:], few_rows.few_rows_linear(layer, hidden[:, -1:]))
    assert torch.equal(result[:, :1], few_rows.few_rows_linear(layer, hidden[:, :1]))


def test_the_kernel_serves_float32_and_bfloat16_cpu_layers_of_1_to_32_rows():
    layer = _linear(False)
    assert few_rows.supports(layer, 1) and few_rows.supports(layer, few_rows.MAX_ROWS)
    assert not few_rows.supports(layer, 0) and not few_rows.supports(layer, few_rows.MAX_ROWS + 1)
    bf16 = copy.deepcopy(layer).to(torch.bfloat16)
    assert few_rows.supports(bf16, 1) and few_rows.supports(bf16, 4) and few_rows.supports(bf16, few_rows.MAX_ROWS)
    assert not few_rows.supports(bf16, few_rows.MAX_ROWS + 1)
    for dtype in (torch.float16, torch.float64):
        assert not few_rows.supports(copy.deepcopy(layer).to(dtype), 4)
    assert not few_rows.supports(copy.deepcopy(layer).to("meta"), 4)  # CPU only
    assert not few_rows.supports(torch.nn.Embedding(3, 4).half(), 2)
    assert set(few_rows.DTYPES) == {torch.float32, torch.bfloat16}


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
    assert column_head_rows(target, "column", 5) == [1, 2, 3, 4, 5]  # one-row calls (decode steps) too
    assert few_rows_rows(target, "linear", 5) == []


@needs_kernel
def test_forced_rows_serve_float32_and_bfloat16_layers_from_one_row():
    target, _ = pair("llama")
    assert few_rows_rows(target, "rows", 5) == [1, 2, 3, 4, 5]
    assert few_rows_rows(target, "rows", 40) == list(range(1, few_rows.MAX_ROWS + 1))
    bf16 = copy.deepcopy(target).to(torch.bfloat16)
    assert few_rows_rows(bf16, "rows", 5) == [1, 2, 3, 4, 5]
    assert few_rows_rows(copy.deepcopy(target).to(torch.float16), "rows", 5) == []
    assert few_rows_rows(int8_copy(target), "rows", 5) == []  # its linear layers are int8: none is left


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_compiled_one_row_step_traces_the_kernel_in_one_graph(dtype):
    torch._dynamo.reset()
    layer = _linear(True).to(dtype)
    model = _Model(layer)
    hidden = torch.randn(1, 1, layer.in_features, dtype=dtype)
    with verify_forms(model, "rows"):
        eager = layer(hidden)
        # fullgraph=True raises on a graph break, as the bare extension call gave.
        traced = torch.compile(lambda x: layer(x), backend="eager", fullgraph=True)(hidden)
    torch.testing.assert_close(traced, eager, rtol=0, atol=0)
    torch.testing.assert_close(
        eager.float(), torch.nn.functional.linear(hidden, layer.weight, layer.bias).float(), rtol=2e-2, atol=2e-2
    )


def test_an_inner_block_leaves_the_outer_one_in_place():
    head = _linear(False)
    model = _Model(head)
    with verify_forms(model, "column"):
        outer = vars(head)["forward"]
        with verify_forms(model, "auto"):
            assert vars(head)["forward"] is outer
        assert vars(head)["forward"] is outer
    assert "forward" not in vars(head)


def test_auto_settles_each_group_and_row_count_once_and_keeps_the_fastest(monkeypatch, calls):
    head, hidden = _linear(True, seed=1), _linear(False, shape=(48, 48))
    model = _Model(head, hidden)
    measured = []

    def fake_fastest(layers, forms, rows):
        measured.append((layers[0] is head, rows, tuple(forms)))
        # the column form "wins" at one row and from 4 rows on
        return "column" if "column" in forms and (rows == 1 or rows >= 4) else "own"

    monkeypatch.setattr(verify_forms_module, "_fastest", fake_fastest)
    settle_verify_forms(model, 5)
    settle_verify_forms(model, 5)  # settled: nothing measured again
    assert sorted(rows for is_head, rows, _ in measured if is_head) == [1, 2, 3, 4, 5]
    assert len(measured) == 10  # two groups (the head, the hidden layer), five row counts each
    assert all(("column" in forms) == is_head for is_head, _, forms in measured)
    # the few-rows kernel competes from one row, where it is built
    assert all(("rows" in forms) == (few_rows.kernel() is not None) for _, _, forms in measured)
    with verify_forms(model, "auto"):
        for rows in (1, 2, 3, 5, 5, 7):  # 7 rows: not settled, the model's own
            head(torch.randn(1, rows, 48))
    assert calls["column"] == [1, 5, 5]
    chosen = form_choices(model, "auto", 5)
    assert chosen[((300, 48), "float32", True)] == {1: "column", 2: "own", 3: "own", 4: "column", 5: "column"}
    assert column_head_rows(model, "auto", 17) == [1, 4, 5]
    assert column_head_rows(model, "auto", 3) == [1]
    assert few_rows_rows(model, "auto", 5) == []


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


def _linear_layers(model) -> int:
    return sum(1 for module in model.modules() if type(module) is torch.nn.Linear)


@pytest.mark.parametrize("k", [2, 8])
@pytest.mark.parametrize("head_kernel", HEAD_KERNELS)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_kernel_is_lossless(arch, head_kernel, k, calls):
    target, draft = pair(arch)
    settle_verify_forms(target, k + 1, head_kernel)
    result = speculative_generate(target, draft, PROMPT, k, NEW_TOKENS, head_kernel=head_kernel)
    assert result.token_ids == list(reference(arch))
    assert not any("forward" in vars(module) for module in target.modules())
    passes = result.stats.target_forward_passes
    kernel_built = few_rows.kernel() is not None
    if head_kernel == "column":  # every target pass went through it, the one-row ones (the prefill's head) too
        assert calls["column"] == [drafted + 1 for drafted in result.stats.drafted_per_step]
    elif head_kernel == "rows" and kernel_built:  # and through every linear layer (no pass is over 32 rows)
        assert len(calls["rows"]) == passes * _linear_layers(target)
        assert 1 in calls["rows"]
    elif head_kernel == "linear":
        assert calls == {"column": [], "rows": []}
    # The greedy baseline runs the same forms and is lossless too.
    calls["column"].clear()
    calls["rows"].clear()
    greedy = greedy_generate(target, PROMPT, NEW_TOKENS, head_kernel=head_kernel)
    assert greedy.token_ids == list(reference(arch))
    assert not any("forward" in vars(module) for module in target.modules())
    if head_kernel == "column":
        assert calls["column"] == [1] * NEW_TOKENS  # the prefill's head and every step's: one row each
    elif head_kernel == "rows" and kernel_built:
        assert len(calls["rows"]) == NEW_TOKENS * _linear_layers(target)
    elif head_kernel == "linear":
        assert calls == {"column": [], "rows": []}


@pytest.mark.parametrize("head_kernel", HEAD_KERNELS)
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_the_greedy_baselines_one_row_steps_run_the_kernels_forms(arch, head_kernel, calls):
    if head_kernel == "rows" and few_rows.kernel() is None:
        pytest.skip(f"the few-rows kernel is not built here: {few_rows.unavailable_reason()}")
    target, _ = pair(arch)
    result = greedy_generate(target, PROMPT, NEW_TOKENS, head_kernel=head_kernel)
    assert result.token_ids == list(reference(arch)) == hf_generate(target, PROMPT, NEW_TOKENS)
    decode_steps = NEW_TOKENS - 1  # after the prefill
    linear_layers = _linear_layers(target)
    head_key = (tuple(target.get_output_embeddings().weight.shape), "float32", True)
    expected_column = {
        "column": NEW_TOKENS,
        "rows": 0,
        "linear": 0,
        # auto: what greedy_generate settled at one row, before its first step
        "auto": NEW_TOKENS if form_choices(target, "auto", 1)[head_key][1] == "column" else 0,
    }[head_kernel]
    assert calls["column"] == [1] * expected_column
    one_row = [rows for rows in calls["rows"] if rows == 1]
    if head_kernel == "rows":
        # every decode step's every linear layer, and the prefill's head (logits of its last position only)
        assert len(one_row) == decode_steps * linear_layers + 1
    elif head_kernel in ("column", "linear"):
        assert calls["rows"] == []


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("kernel", ["column", "rows"])
def test_a_wrong_one_row_form_is_caught(arch, kernel, monkeypatch):
    if kernel == "rows" and few_rows.kernel() is None:
        pytest.skip(f"the few-rows kernel is not built here: {few_rows.unavailable_reason()}")
    target, draft = pair(arch)
    expected = list(reference(arch))

    # Planted bug at one row only (a decode step): each output gets its neighbour's value.
    def planted(real):
        def wrong(layer, hidden):
            out = real(layer, hidden)
            return torch.roll(out, 1, dims=-1) if hidden.numel() // hidden.shape[-1] == 1 else out

        return wrong

    if kernel == "column":
        monkeypatch.setattr(verify_forms_module, "column_logits", planted(verify_forms_module.column_logits))
    else:
        monkeypatch.setattr(few_rows, "few_rows_linear", planted(few_rows.few_rows_linear))
    assert greedy_generate(target, PROMPT, NEW_TOKENS, head_kernel="linear").token_ids == expected
    assert greedy_generate(target, PROMPT, NEW_TOKENS, head_kernel=kernel).token_ids != expected


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


def test_an_interleaved_baseline_between_steps_runs_the_runs_forms(calls):
    target, draft = pair("llama")
    head = target.get_output_embeddings()
    baseline = GreedyStepper(target, PROMPT, NEW_TOKENS)
    seen = []

    def between_steps(seconds: float) -> None:
        before = len(calls["column"])
        patched = "forward" in vars(head)
        if not baseline.done:
            baseline.step()  # the prefill's head and each step's: one row, through the column form
            seen.append((patched, calls["column"][before:]))

    result = speculative_generate(
        target, draft, PROMPT, 4, NEW_TOKENS, head_kernel="column", between_steps=between_steps
    )
    assert result.token_ids == list(reference("llama"))
    assert seen and all(patched and rows == [1] for patched, rows in seen)
    # The baseline's tokens so far are the reference's first ones: equal kernels, still lossless.
    assert baseline.new_tokens == len(seen)
    ids = baseline.result(result.stats).token_ids
    assert ids == list(reference("llama"))[: len(ids)]
    # Every call of the head went through the column form: the run's passes and the baseline's steps.
    assert len(calls["column"]) == result.stats.target_forward_passes + len(seen)
    assert "forward" not in vars(head)


def test_the_cost_probe_times_the_engines_forms(calls):
    target, _ = pair("gpt2")
    curve = verify_costs(target, torch.tensor([PROMPT]), 4, repeats=1, head_kernel="column")
    assert len(curve) == 4 and min(curve) > 0
    assert calls["column"] == [1, 2, 3, 4] * 2  # m = 1 .. 4 in the warm-up sweep and the timed one
    assert "forward" not in vars(target.get_output_embeddings())


# --- through the plugin ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("head_kernel", "column_rows", "rows_rows"),
    [("column", [1, 2, 3, 4, 5], []), ("linear", [], []), ("rows", [], [1, 2, 3, 4, 5])],
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
        assert rows["tiny-native-k1-natural"][field] == expected[:2]  # k=1: decode steps and blocks of 2 rows
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
