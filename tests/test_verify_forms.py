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
import weakref

import numpy as np
import pytest
import torch
from factory import ARCHITECTURES, hf_generate, tiny_pair, torch_threads
from hypothesis import given, settings
from hypothesis import strategies as st

import pytest_specbench.kernels.verify_forms as verify_forms_module
from pytest_specbench import greedy_generate, speculative_generate
from pytest_specbench.engine.cost_probe import verify_costs
from pytest_specbench.engine.decoding import GreedyStepper
from pytest_specbench.engine.derived_models import int8_copy
from pytest_specbench.kernels import few_rows
from pytest_specbench.kernels.names import KERNELS
from pytest_specbench.kernels.verify_forms import KernelForms, kernel_forms

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT = [5, 17, 33, 9, 60, 2, 41, 7, 8, 11, 12, 13, 70, 71, 3, 4, 44, 45, 46, 47]
NEW_TOKENS = 29

needs_kernel = pytest.mark.skipif(
    few_rows.kernel() is None, reason=f"the few-rows kernel is not built here: {few_rows.unavailable_reason()}"
)
needs_tiles = pytest.mark.skipif(
    not few_rows.tiles_available(), reason=f"no AMX tiles here: {few_rows.tiles_unavailable_reason() or 'no AMX'}"
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
    seen: dict[str, list[int]] = {"column": [], "rows": [], "rows_held": [], "rows_tiles": []}
    real_column, real_rows = verify_forms_module.column_logits, few_rows.few_rows_linear

    def column(head, hidden):
        seen["column"].append(hidden.numel() // hidden.shape[-1])
        return real_column(head, hidden)

    def rows(layer, hidden, variant="rows"):  # each call of the kernel, and its other variants' again apart
        seen["rows"].append(hidden.numel() // hidden.shape[-1])
        if variant != "rows":
            seen[f"rows_{variant}"].append(hidden.numel() // hidden.shape[-1])
        return real_rows(layer, hidden, variant)

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
    with KernelForms(_Model(head), "column").applied():
        logits = head(hidden)
    assert logits.shape == expected.shape == (1, rows, 300)
    assert logits.is_contiguous()
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))


#: the largest error of one bfloat16 rounding, relative to the value rounded (8 significant bits)
BF16_ROUNDING = 2**-8


def _assert_is_linear(result: torch.Tensor, layer: torch.nn.Linear, hidden: torch.Tensor) -> None:
    """float32: torch's linear. bfloat16: float32 sums of the same values, rounded once: within one rounding of
    float32's linear, and equal to that linear rounded to bfloat16 but where a sum lies within float32 noise of
    a tie."""
    bias = None if layer.bias is None else layer.bias.float()
    exact = torch.nn.functional.linear(hidden.float(), layer.weight.float(), bias)
    if result.dtype == torch.float32:
        torch.testing.assert_close(result, exact, rtol=1e-5, atol=1e-5)
    else:
        torch.testing.assert_close(result.float(), exact, rtol=BF16_ROUNDING, atol=1e-5)
        assert int((result != exact.to(result.dtype)).sum()) <= 1 + result.numel() // 100


@needs_kernel
@pytest.mark.parametrize("variant", ["rows", pytest.param("tiles", marks=needs_tiles)])
@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, few_rows.MAX_ROWS),
    inputs=st.integers(1, 100),
    outputs=st.integers(1, 70),
    bias=st.booleans(),
    dtype=st.sampled_from(few_rows.DTYPES),
    seed=st.integers(0, 2**16),
)
def test_the_few_rows_kernel_computes_linear_and_each_row_alone(variant, rows, inputs, outputs, bias, dtype, seed):
    # widths below, at and past a vector's and a tile's columns, and past a block's and a tile's weight rows
    if variant == "tiles":  # bfloat16 only, 1 to 16 rows
        dtype, rows = torch.bfloat16, min(rows, few_rows.TILE_ROWS)
    layer = _linear(bias, seed, (inputs, outputs)).to(dtype)
    hidden = torch.randn(1, rows, inputs + 3).to(dtype)[..., 3:]  # not contiguous
    result = few_rows.few_rows_linear(layer, hidden, variant)
    assert result.shape == (1, rows, outputs) and result.dtype == dtype
    _assert_is_linear(result, layer, hidden)
    # One dot product per output in a fixed order: a row's output does not depend on the rows beside it.
    assert torch.equal(result[:, -1:], few_rows.few_rows_linear(layer, hidden[:, -1:], variant))
    assert torch.equal(result[:, :1], few_rows.few_rows_linear(layer, hidden[:, :1], variant))
    if variant == "rows":  # holding x in registers changes where it is loaded from, not the sums
        assert torch.equal(result, few_rows.few_rows_linear(layer, hidden, "held"))


def _halving_tree(lanes: np.ndarray) -> np.ndarray:
    """The kernel's sum of each row's lanes (float32): the upper half added to the lower, down to one lane."""
    while lanes.shape[-1] > 1:
        half = lanes.shape[-1] // 2
        lanes = lanes[..., :half] + lanes[..., half:]
    return lanes[..., 0]


def _in_order(lanes: np.ndarray) -> np.ndarray:
    total = lanes[..., 0]
    for i in range(1, lanes.shape[-1]):
        total = total + lanes[..., i]
    return total


def _adjacent_pairs(lanes: np.ndarray) -> np.ndarray:
    while lanes.shape[-1] > 1:
        lanes = lanes[..., 0::2] + lanes[..., 1::2]
    return lanes[..., 0]


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 5, 9, 14, 17, few_rows.MAX_ROWS])
@pytest.mark.parametrize("variant", ["rows", "held"])
def test_each_float32_output_sums_its_lanes_by_the_halving_tree(rows, variant):
    # 16 columns, each holding one exact product (6 significant bits, 2^-24 to 63 * 2^24), so the sums round: one
    # vector with AVX-512; two of 8 lanes without, whose second multiply-add is the tree's first level. 70 outputs:
    # blocks of every size the rows take, a block's outputs summed at once, the last weight rows one at a time.
    generator = np.random.default_rng(rows)
    hidden = np.exp2(generator.integers(-12, 13, size=(rows, 16))) * generator.choice([-1, 1], size=(rows, 16))
    weight = np.exp2(generator.integers(-12, 13, size=(70, 16))) * generator.integers(1, 64, (70, 16))
    hidden, weight = hidden.astype(np.float32), weight.astype(np.float32)
    products = hidden[:, None, :] * weight[None, :, :]
    expected = _halving_tree(products)
    for other_order in (_in_order, _adjacent_pairs):  # these inputs tell the tree from other orders
        assert (other_order(products) != expected).mean() > 0.2
    layer = torch.nn.Linear(16, 70, bias=False)
    layer.weight.data = torch.from_numpy(weight)
    result = few_rows.few_rows_linear(layer, torch.from_numpy(hidden)[None], variant)[0]
    assert torch.equal(result, torch.from_numpy(expected))


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 9, 14, 17, few_rows.MAX_ROWS])
@pytest.mark.parametrize(
    "dtype, variant",
    [(torch.float32, "rows"), (torch.float32, "held"), (torch.bfloat16, "rows")],
    ids=["float32-rows", "float32-held", "bfloat16-rows"],
)
def test_each_output_is_written_to_its_own_place_whatever_is_staged_beside_it(dtype, variant, rows):
    # 599 outputs: blocks of 1, 2, 3, 4 or 6 weight rows fill the 48 columns staged per row of x many times on
    # each of two threads, and the last few pass one weight row at a time. Each output, computed with all the
    # others, on one thread, or in a slice that starts it at another staged column, is the same.
    torch.manual_seed(rows)
    layer = torch.nn.Linear(40, 599, bias=True).to(dtype)
    hidden = torch.randn(1, rows, 40).to(dtype)
    with torch_threads(2):
        result = few_rows.few_rows_linear(layer, hidden, variant)
    _assert_is_linear(result, layer, hidden)
    with torch_threads(1):
        assert torch.equal(result, few_rows.few_rows_linear(layer, hidden, variant))
    for start, stop in ((0, 1), (5, 53), (37, 101), (300, 599), (590, 599)):
        part = torch.nn.Linear(40, stop - start).to(dtype)
        part.weight.data, part.bias.data = layer.weight.data[start:stop], layer.bias.data[start:stop]
        assert torch.equal(result[..., start:stop], few_rows.few_rows_linear(part, hidden, variant))


@needs_kernel
def test_the_tiles_variant_serves_bfloat16_of_1_to_16_rows_where_amx_runs():
    layer = _linear(False).to(torch.bfloat16)
    available = few_rows.tiles_available()
    assert few_rows.supports(layer, 1, "tiles") is available
    assert few_rows.supports(layer, few_rows.TILE_ROWS, "tiles") is available
    assert not few_rows.supports(layer, few_rows.TILE_ROWS + 1, "tiles")
    assert not few_rows.supports(copy.deepcopy(layer).float(), 4, "tiles")
    if not available:
        with pytest.raises(RuntimeError, match="tiles variant takes bfloat16 on a CPU with AMX"):
            few_rows.kernel().linear(torch.randn(2, 48).bfloat16(), layer.weight, None, "tiles")
    with pytest.raises(RuntimeError, match="variant must be rows, held or tiles"):
        few_rows.kernel().linear(torch.randn(2, 48).bfloat16(), layer.weight, None, "panels")


@needs_tiles
def test_the_tiles_variant_computes_linear_over_many_blocks_on_every_thread():
    # enough blocks of 16 weight rows for each thread to take some, each configuring and releasing its tiles;
    # 165 columns: two pairs of 32-column steps, one step alone and 5 past the last
    torch.manual_seed(0)
    layer = torch.nn.Linear(165, 16 * 40 + 5, bias=True).to(torch.bfloat16)
    hidden = torch.randn(1, 9, 165).to(torch.bfloat16)
    with torch_threads(2):
        result = few_rows.few_rows_linear(layer, hidden, "tiles")
    _assert_is_linear(result, layer, hidden)
    with torch_threads(1):
        assert torch.equal(result, few_rows.few_rows_linear(layer, hidden, "tiles"))


@needs_tiles
@pytest.mark.parametrize("outputs", [16, 17, 32])
@pytest.mark.parametrize("rows", [1, 9, 16])
def test_the_tiles_put_a_threads_last_block_after_its_loop(outputs, rows):
    # a block's outputs are put after the next block's store, so the last block's after the loop: one block
    # alone (with one weight row past it, or not) and two; 69 columns, 5 past the last step, added to the
    # block put late
    torch.manual_seed(outputs * rows)
    layer = torch.nn.Linear(69, outputs, bias=True).to(torch.bfloat16)
    hidden = torch.randn(1, rows, 69).to(torch.bfloat16)
    _assert_is_linear(few_rows.few_rows_linear(layer, hidden, "tiles"), layer, hidden)


@needs_kernel
@pytest.mark.parametrize("variant", ["rows", pytest.param("tiles", marks=needs_tiles)])
@pytest.mark.parametrize("rows", [1, 2, 9, 16])
@pytest.mark.parametrize("bias", [False, True])
def test_bfloat16_outputs_are_their_float32_sums_and_bias_rounded_once_to_nearest_even(variant, rows, bias):
    # integers of -31 to 31 over 69 columns (5 past the last whole step), an even bias up to 300: every sum exact
    # in float32, most past bfloat16's 8 significant bits, some of them ties; 70 outputs: whole tiles and blocks,
    # and the last few
    generator = torch.Generator().manual_seed(rows)
    hidden = torch.randint(-31, 32, (1, rows, 69), generator=generator).float()
    layer = torch.nn.Linear(69, 70, bias=bias)
    layer.weight.data = torch.randint(-31, 32, (70, 69), generator=generator).float()
    if bias:
        layer.bias.data = 2 * torch.randint(-150, 151, (70,), generator=generator).float()
    exact = layer(hidden)
    expected = exact.to(torch.bfloat16)
    assert (expected.float() != exact).float().mean() > 0.5  # most sums round
    bits = exact.view(torch.int32)
    truncated = (bits & -65536).view(torch.float32).to(torch.bfloat16)
    assert (truncated != expected).float().mean() > 0.2  # rounding toward zero would show
    away = ((bits + 0x8000) & -65536).view(torch.float32).to(torch.bfloat16)
    assert (away != expected).any()  # ties away from zero would show
    if bias:  # the bias added after a rounding would show
        rounded_first = ((exact - layer.bias).to(torch.bfloat16).float() + layer.bias).to(torch.bfloat16)
        assert (rounded_first != expected).float().mean() > 0.05
    result = few_rows.few_rows_linear(layer.to(torch.bfloat16), hidden.to(torch.bfloat16), variant)
    assert torch.equal(result, expected)


@needs_kernel
@pytest.mark.parametrize("bias", [torch.zeros(5, 1), torch.zeros(4), torch.zeros(2, 5)])
def test_the_kernel_refuses_a_bias_that_is_not_one_value_per_output(bias):
    with pytest.raises(RuntimeError, match=r"bias must be a CPU vector of one value per output \(5\)"):
        few_rows.kernel().linear(torch.randn(2, 16), torch.randn(5, 16), bias, "rows")


@needs_kernel
@pytest.mark.parametrize(
    "rows, inputs",
    [(5, 16 * 160 + 5), (9, 16 * 160 + 5), (17, 16 * 160 + 5), (24, 16 * 160 + 5), (few_rows.MAX_ROWS, 16 * 160 + 5)]
    + [(9, 16 * 40 + 5), (14, 16 * 40 + 5), (17, 16 * 40 + 5)],
)
@pytest.mark.parametrize("variant", ["rows", "held"])
def test_many_float32_rows_run_in_chunks_of_columns_with_each_rows_own_sums(rows, inputs, variant):
    # 2,565 columns: several chunks of columns (16 KB of x each) with a remainder, and several groups of blocks
    # of weight rows with a remainder, on each of two threads; past 14 rows in 2, 3 and 4 passes. 645 columns
    # (Gemma's width): 9 rows stay whole (14 too, on a 48 KB level-1 cache), 17 take chunks.
    torch.manual_seed(rows)
    layer = torch.nn.Linear(inputs, 3 * 8 * 4 + 2, bias=True)
    hidden = torch.randn(1, rows, layer.in_features)
    with torch_threads(2):
        result = few_rows.few_rows_linear(layer, hidden, variant)
    torch.testing.assert_close(result, layer(hidden), rtol=1e-5, atol=1e-4)
    with torch_threads(1):
        assert torch.equal(result, few_rows.few_rows_linear(layer, hidden, variant))
    # one row (never chunked) sums as the many-row pass does, chunked or whole
    for row in (0, rows // 2, rows - 1):
        alone = few_rows.few_rows_linear(layer, hidden[:, row : row + 1], variant)
        assert torch.equal(result[:, row : row + 1], alone)


@needs_tiles
def test_auto_offers_the_tiles_form_to_bfloat16_up_to_16_rows_and_runs_it(monkeypatch, calls):
    target, _ = pair("llama")
    bf16 = copy.deepcopy(target).to(torch.bfloat16)
    offered: dict[int, list[str]] = {}

    def tiles_where_offered(layers, forms, rows):
        offered[rows] = forms
        return "rows_tiles" if "rows_tiles" in forms else forms[0]

    monkeypatch.setattr(verify_forms_module, "_fastest", tiles_where_offered)
    forms = KernelForms(bf16, "auto")
    forms.settle(few_rows.TILE_ROWS + 1)
    assert "rows_tiles" in offered[1] and "rows_tiles" in offered[few_rows.TILE_ROWS]
    assert "rows_tiles" not in offered[few_rows.TILE_ROWS + 1]
    assert forms.few_rows_rows(few_rows.TILE_ROWS + 1) == list(range(1, few_rows.TILE_ROWS + 1))
    with forms.applied():
        bf16(torch.randint(0, 50, (1, 9)))
    assert 9 in calls["rows_tiles"]
    # float32 is never offered the tiles
    offered.clear()
    KernelForms(target, "auto").settle(4)
    assert not any("rows_tiles" in forms for forms in offered.values())


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
        with KernelForms(_Model(head, hidden), "rows").applied():
            assert "forward" in vars(head) and "forward" in vars(hidden)
            raise RuntimeError("inside")
    assert "forward" not in vars(head) and "forward" not in vars(hidden)


def test_linear_kernel_and_quantised_layers_are_left_alone():
    target, _ = pair("llama")
    with KernelForms(target, "linear").applied():
        assert not any("forward" in vars(module) for module in target.modules())
    quantised = int8_copy(target)
    assert type(quantised.get_output_embeddings()) is not torch.nn.Linear
    with KernelForms(quantised, "column").applied():
        assert "forward" not in vars(quantised.get_output_embeddings())
    assert KernelForms(quantised, "column").column_head_rows(9) == []
    assert KernelForms(target, "linear").column_head_rows(9) == []
    assert KernelForms(target, "column").column_head_rows(5) == [1, 2, 3, 4, 5]  # one-row calls (decode steps) too
    assert KernelForms(target, "linear").few_rows_rows(5) == []


@needs_kernel
def test_forced_rows_serve_float32_and_bfloat16_layers_from_one_row():
    target, _ = pair("llama")
    assert KernelForms(target, "rows").few_rows_rows(5) == [1, 2, 3, 4, 5]
    assert KernelForms(target, "rows").few_rows_rows(40) == list(range(1, few_rows.MAX_ROWS + 1))
    bf16 = copy.deepcopy(target).to(torch.bfloat16)
    assert KernelForms(bf16, "rows").few_rows_rows(5) == [1, 2, 3, 4, 5]
    assert KernelForms(copy.deepcopy(target).to(torch.float16), "rows").few_rows_rows(5) == []
    assert KernelForms(int8_copy(target), "rows").few_rows_rows(5) == []  # its linear layers are int8: none is left


@needs_kernel
def test_forced_rows_never_run_the_held_variant_and_auto_counts_it_as_the_kernel(monkeypatch, calls):
    target, _ = pair("llama")
    with KernelForms(target, "rows").applied():
        for rows in (1, 3, 9):
            target(torch.randint(0, 50, (1, rows)))
    assert calls["rows"] and calls["rows_held"] == []
    # auto where the held variant measured fastest from 2 rows: it runs there, and counts as the few-rows kernel
    monkeypatch.setattr(
        verify_forms_module, "_fastest", lambda layers, forms, rows: "rows_held" if "rows_held" in forms else "rows"
    )
    forms = KernelForms(target, "auto")
    forms.settle(4)
    assert forms.few_rows_rows(4) == [1, 2, 3, 4]
    assert {f for group in forms.choices(4).values() for f in group.values()} == {"rows", "rows_held"}
    with forms.applied():
        target(torch.randint(0, 50, (1, 3)))
    assert 3 in calls["rows_held"]


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_compiled_one_row_step_traces_the_kernel_in_one_graph(dtype):
    torch._dynamo.reset()
    layer = _linear(True).to(dtype)
    model = _Model(layer)
    hidden = torch.randn(1, 1, layer.in_features, dtype=dtype)
    with KernelForms(model, "rows").applied():
        eager = layer(hidden)
        # fullgraph=True raises on a graph break, as the bare extension call gave.
        traced = torch.compile(lambda x: layer(x), backend="eager", fullgraph=True)(hidden)
    torch.testing.assert_close(traced, eager, rtol=0, atol=0)
    torch.testing.assert_close(
        eager.float(), torch.nn.functional.linear(hidden, layer.weight, layer.bias).float(), rtol=2e-2, atol=2e-2
    )


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inference_calls_skip_the_custom_op_and_give_its_results(monkeypatch, dtype):
    layer = _linear(True).to(dtype)
    hidden = torch.randn(1, 3, layer.in_features, dtype=dtype)
    with torch.inference_mode():
        through_op = few_rows._linear_op(hidden, layer.weight, layer.bias, "rows")

    def refuse(*args):
        raise AssertionError("an inference call went through the custom op")

    monkeypatch.setattr(few_rows, "_linear_op", refuse)
    with torch.inference_mode():
        assert torch.equal(few_rows.few_rows_linear(layer, hidden, "rows"), through_op)


@needs_kernel
def test_with_gradients_on_the_kernel_refuses_a_backward_pass():
    layer = _linear(True)
    result = few_rows.few_rows_linear(layer, torch.randn(1, 2, layer.in_features), "rows")
    with pytest.raises(RuntimeError):
        result.sum().backward()


def test_an_inner_block_leaves_the_outer_one_in_place():
    head = _linear(False)
    model = _Model(head)
    with KernelForms(model, "column").applied():
        outer = vars(head)["forward"]
        with KernelForms(model, "auto").applied():
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
    forms = KernelForms(model)
    forms.settle(5)
    forms.settle(5)  # settled: nothing measured again
    assert sorted(rows for is_head, rows, _ in measured if is_head) == [1, 2, 3, 4, 5]
    assert len(measured) == 10  # two groups (the head, the hidden layer), five row counts each
    assert all(("column" in forms) == is_head for is_head, _, forms in measured)
    # the few-rows kernel competes from one row, where it is built; its held variant from two rows, in float32
    assert all(("rows" in forms) == (few_rows.kernel() is not None) for _, _, forms in measured)
    assert all(("rows_held" in forms) == (few_rows.kernel() is not None and rows > 1) for _, rows, forms in measured)
    with forms.applied():
        for rows in (1, 2, 3, 5, 5, 7):  # 7 rows: not settled, the model's own
            head(torch.randn(1, rows, 48))
    assert calls["column"] == [1, 5, 5]
    chosen = forms.choices(5)
    assert chosen[((300, 48), "float32", True)] == {1: "column", 2: "own", 3: "own", 4: "column", 5: "column"}
    assert forms.column_head_rows(17) == [1, 4, 5]
    assert forms.column_head_rows(3) == [1]
    assert forms.few_rows_rows(5) == []


@needs_kernel
def test_the_real_measurement_chooses_among_the_applicable_forms():
    layer = _linear(False)
    forms = ["own", "rows", "rows_held", "column"]
    assert verify_forms_module._fastest([layer, _linear(False, 1)], forms, 4) in forms


def test_an_unknown_kernel_is_refused():
    with pytest.raises(ValueError, match="kernel setting must be one of auto, rows, column, linear, got 'fast'"):
        KernelForms(_Model(_linear(False)), "fast")
    with pytest.raises(ValueError, match="got 'fast'"):
        greedy_generate(pair("llama")[0], PROMPT, 2, kernels="fast")


# --- one object per model: the forms' state is on it, never in the module -------------------------------


def _twins() -> tuple[_Model, _Model]:
    """Two models of the same shapes (their layer groups are equal), different objects."""
    return _Model(_linear(True, seed=1), _linear(False, shape=(48, 48))), _Model(
        _linear(True, seed=2), _linear(False, seed=3, shape=(48, 48))
    )


def test_each_model_has_its_own_forms_and_a_shape_settles_once_per_machine(monkeypatch):
    first, second = _twins()
    measured = []

    def fake_fastest(layers, forms, rows):
        measured.append(layers[0])
        # the first model's head "measures" fastest as a column, the second's as its own linear
        return "column" if layers[0] is first.head else "own"

    monkeypatch.setattr(verify_forms_module, "_fastest", fake_fastest)
    forms_a, forms_b = KernelForms(first), KernelForms(second)
    forms_a.settle(3)
    assert forms_a.column_head_rows(3) == [1, 2, 3]
    # Settling one model measured that model only, and changed nothing of the other's object (same shapes).
    assert {id(layer) for layer in measured} == {id(first.head), id(first.hidden)}
    assert forms_b.column_head_rows(3) == [] and KernelForms(second).column_head_rows(3) == []
    # Settling the other takes what this machine settled for the same shapes (kernels/settled_forms.py): the same
    # forms, nothing timed again, so the two compute the same bits.
    forms_b.settle(3)
    assert forms_a.column_head_rows(3) == [1, 2, 3] and forms_b.column_head_rows(3) == [1, 2, 3]
    assert {id(layer) for layer in measured} == {id(first.head), id(first.hidden)}
    # A new object of the first model starts unsettled: the choices are its object's, not the model's or the module's.
    assert KernelForms(first).column_head_rows(3) == []
    with forms_a.applied(), forms_b.applied():
        assert vars(first.head)["forward"] is not vars(second.head)["forward"]
    assert "forward" not in vars(first.head) and "forward" not in vars(second.head)


def _module_state() -> dict:
    mutable = (dict, list, set, weakref.WeakKeyDictionary, weakref.WeakValueDictionary)
    return {
        name: copy.copy(value)
        for name, value in vars(verify_forms_module).items()
        if isinstance(value, mutable) and not name.startswith("__")
    }


def test_the_module_keeps_no_state_of_its_own():
    # Two constants (which form a forced setting runs, which variant of the kernel each form is), and nothing a
    # settling or a pass writes to.
    constants = {
        "_FORCED": {"rows": "rows", "column": "column"},
        "_VARIANTS": {"rows": "rows", "rows_held": "held", "rows_tiles": "tiles"},
    }
    assert _module_state() == constants
    first, second = _twins()
    forms = KernelForms(first, "column")
    with forms.applied():
        first.head(torch.randn(1, 2, 48))
    KernelForms(first).settle(2)
    assert _module_state() == constants
    # The twin, of the same shapes, is unsettled: auto keeps its own linear at every row count.
    assert all(set(by_rows.values()) == {"own"} for by_rows in KernelForms(second).choices(2).values())


def test_the_store_keeps_one_forms_object_per_loaded_model_and_setting():
    from pytest_specbench.measure.store import ModelStore
    from pytest_specbench.models.loading import LoadedModel

    store = ModelStore("cpu")
    target, draft = pair("llama")
    one, other = (LoadedModel(model, None, name, 0.0, "local") for model, name in ((target, "a"), (draft, "b")))
    forms = store.kernel_forms(one, "auto")
    assert forms.model is target and forms.kernel == "auto"
    assert store.kernel_forms(one, "auto") is forms  # what the cost probe settled serves every case of the model
    assert store.kernel_forms(other, "auto") is not forms and store.kernel_forms(other, "auto").model is draft
    assert store.kernel_forms(one, "linear") is not forms


def test_forms_of_another_model_are_refused():
    target, draft = pair("llama")
    forms = KernelForms(draft)
    assert kernel_forms(draft, forms) is forms
    assert kernel_forms(target, "column").kernel == "column"
    with pytest.raises(ValueError, match="belong to another model"):
        greedy_generate(target, PROMPT, 2, kernels=forms)


def test_a_setting_by_name_settles_the_blocks_of_its_call(monkeypatch):
    target, draft = pair("llama")
    settled = []
    real = KernelForms.settle
    monkeypatch.setattr(
        KernelForms, "settle", lambda self, rows: settled.append((self.kernel, rows)) or real(self, rows)
    )
    # blocks of up to k + 1 rows; the draft model's passes of one or two rows, in the same setting
    speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS)
    speculative_generate(target, draft, PROMPT, 4, 3, kernels="column")  # never more rows than new tokens
    greedy_generate(target, PROMPT, 3, kernels="auto")  # its one-row steps
    assert settled == [("auto", 5), ("auto", 2), ("column", 3), ("column", 2), ("auto", 1)]
    forms, draft_forms = KernelForms(target), KernelForms(draft)
    settled.clear()
    speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, kernels=forms)  # its owner settles it, not the run
    assert settled == [("auto", 2)]  # the draft's, of this call alone
    settled.clear()
    speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, kernels=forms, draft_kernels=draft_forms)
    assert settled == []


@pytest.mark.parametrize("kernel", ["column", "rows", "linear"])
def test_the_draft_model_runs_the_same_setting_in_its_own_forms(kernel, monkeypatch):
    """Every model in the loop on one kernel setting: the draft model's passes run its forms, and only while the
    run lasts; ``--specbench-kernels=linear`` keeps both on their own kernels."""
    target, draft = pair("llama")
    seen: list[tuple[str, str, int]] = []  # (model, form, rows) of each call through a form
    owners = {id(module): name for name, model in (("target", target), ("draft", draft)) for module in model.modules()}
    real = verify_forms_module._call

    def call(form, layer, hidden, own):
        seen.append((owners[id(layer)], form, hidden.numel() // hidden.shape[-1]))
        return real(form, layer, hidden, own)

    monkeypatch.setattr(verify_forms_module, "_call", call)
    result = speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, kernels=kernel)
    assert result.token_ids == list(reference("llama"))
    assert not any("forward" in vars(module) for module in draft.modules())
    draft_calls = [(form, rows) for model, form, rows in seen if model == "draft"]
    if kernel == "linear":
        assert seen == []
        return
    built = few_rows.kernel() is not None
    forced = "column" if kernel == "column" else ("rows" if built else "own")
    one_row_forms = {form for form, rows in draft_calls if rows == 1}
    assert forced in one_row_forms  # its one-token steps
    # and the draft's own forms stay its own: given apart, "linear" keeps them off
    seen.clear()
    speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, kernels=kernel, draft_kernels="linear")
    assert [model for model, _, _ in seen] and {model for model, _, _ in seen} == {"target"}


def test_a_dynamic_int8_copy_says_its_layers_ran_their_own_kernels():
    from pytest_specbench.engine.derived_models import int8_copy

    target, _ = pair("llama")
    forms = KernelForms(int8_copy(target), "auto")
    forms.settle(2)
    assert forms.described(1).startswith("own: no plain float linear layer (") and "Linear" in forms.described(1)
    assert KernelForms(target, "linear").described(1).startswith("own: --specbench-kernels=linear")
    plain = KernelForms(target, "column")
    assert plain.described(1).endswith("column in the head") and "own in " in plain.described(1)


def test_the_earlier_keyword_still_works_and_says_it_is_deprecated(calls):
    target, draft = pair("llama")
    with pytest.warns(DeprecationWarning, match="kernels="):
        result = speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, head_kernel="column")
    assert result.token_ids == list(reference("llama")) and calls["column"]
    with pytest.warns(DeprecationWarning, match="kernels="):
        greedy_generate(target, PROMPT, 3, head_kernel="linear")
    with pytest.raises(TypeError, match="both given"):
        greedy_generate(target, PROMPT, 3, kernels="rows", head_kernel="linear")


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_object_says_whether_the_few_rows_kernel_it_asks_for_fell_back(kernel, monkeypatch):
    target, _ = pair("llama")
    forms = KernelForms(target, kernel)
    asks = kernel in ("auto", "rows")
    assert forms.wants_few_rows == asks
    built = few_rows.unavailable_reason()
    assert forms.few_rows_fallback() == (built if asks else None)
    assert forms.few_rows_kernel == ((built or few_rows.identity()) if asks else "")
    # Where the kernel cannot be built, the object names why, and a forced rows setting runs the model's own.
    monkeypatch.setattr(few_rows, "_build", lambda: (None, "no compiler here"))
    assert forms.few_rows_fallback() == ("no compiler here" if asks else None)
    assert forms.few_rows_kernel == ("no compiler here" if asks else "")
    assert forms.few_rows_rows(3) == []
    assert KernelForms(copy.deepcopy(target).to(torch.float16), kernel).few_rows_fallback() is None  # nothing asks


def _linear_layers(model) -> int:
    return sum(1 for module in model.modules() if type(module) is torch.nn.Linear)


@pytest.mark.parametrize("k", [2, 8])
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_kernel_is_lossless(arch, kernel, k, calls):
    target, draft = pair(arch)
    forms = KernelForms(target, kernel)
    forms.settle(k + 1)
    calls["column"].clear()
    calls["rows"].clear()
    # The draft model on its own kernels here, so that every call counted is the target's (the draft's forms:
    # test_the_draft_model_runs_the_same_setting_in_its_own_forms).
    result = speculative_generate(target, draft, PROMPT, k, NEW_TOKENS, kernels=forms, draft_kernels="linear")
    assert result.token_ids == list(reference(arch))
    assert not any("forward" in vars(module) for module in target.modules())
    passes = result.stats.target_forward_passes
    kernel_built = few_rows.kernel() is not None
    if kernel == "column":  # every target pass went through it, the one-row ones (the prefill's head) too
        assert calls["column"] == [drafted + 1 for drafted in result.stats.drafted_per_step]
    elif kernel == "rows" and kernel_built:  # and through every linear layer (no pass is over 32 rows)
        assert len(calls["rows"]) == passes * _linear_layers(target)
        assert 1 in calls["rows"]
    elif kernel == "linear":
        assert calls == {"column": [], "rows": [], "rows_held": [], "rows_tiles": []}
    # The greedy baseline runs the same forms and is lossless too.
    calls["column"].clear()
    calls["rows"].clear()
    greedy = greedy_generate(target, PROMPT, NEW_TOKENS, kernels=forms)
    assert greedy.token_ids == list(reference(arch))
    assert not any("forward" in vars(module) for module in target.modules())
    if kernel == "column":
        assert calls["column"] == [1] * NEW_TOKENS  # the prefill's head and every step's: one row each
    elif kernel == "rows" and kernel_built:
        assert len(calls["rows"]) == NEW_TOKENS * _linear_layers(target)
    elif kernel == "linear":
        assert calls == {"column": [], "rows": [], "rows_held": [], "rows_tiles": []}


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_the_greedy_baselines_one_row_steps_run_the_kernels_forms(arch, kernel, calls):
    if kernel == "rows" and few_rows.kernel() is None:
        pytest.skip(f"the few-rows kernel is not built here: {few_rows.unavailable_reason()}")
    target, _ = pair(arch)
    forms = KernelForms(target, kernel)
    forms.settle(1)  # what greedy_generate settles before its first step, measured here so no call below is it
    calls["column"].clear()
    calls["rows"].clear()
    result = greedy_generate(target, PROMPT, NEW_TOKENS, kernels=forms)
    assert result.token_ids == list(reference(arch)) == hf_generate(target, PROMPT, NEW_TOKENS)
    decode_steps = NEW_TOKENS - 1  # after the prefill
    linear_layers = _linear_layers(target)
    head_key = (tuple(target.get_output_embeddings().weight.shape), "float32", True)
    expected_column = {
        "column": NEW_TOKENS,
        "rows": 0,
        "linear": 0,
        # auto: what was settled at one row, before the first step
        "auto": NEW_TOKENS if forms.choices(1)[head_key][1] == "column" else 0,
    }[kernel]
    assert calls["column"] == [1] * expected_column
    one_row = [rows for rows in calls["rows"] if rows == 1]
    if kernel == "rows":
        # every decode step's every linear layer, and the prefill's head (logits of its last position only)
        assert len(one_row) == decode_steps * linear_layers + 1
    elif kernel in ("column", "linear"):
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
        def wrong(layer, hidden, *variant):
            out = real(layer, hidden, *variant)
            return torch.roll(out, 1, dims=-1) if hidden.numel() // hidden.shape[-1] == 1 else out

        return wrong

    if kernel == "column":
        monkeypatch.setattr(verify_forms_module, "column_logits", planted(verify_forms_module.column_logits))
    else:
        monkeypatch.setattr(few_rows, "few_rows_linear", planted(few_rows.few_rows_linear))
    assert greedy_generate(target, PROMPT, NEW_TOKENS, kernels="linear").token_ids == expected
    assert greedy_generate(target, PROMPT, NEW_TOKENS, kernels=kernel).token_ids != expected


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
        monkeypatch.setattr(
            verify_forms_module, "column_logits", lambda h, x, *v: torch.roll(real(h, x, *v), 1, dims=-2)
        )
    else:
        real = few_rows.few_rows_linear
        monkeypatch.setattr(few_rows, "few_rows_linear", lambda h, x, *v: torch.roll(real(h, x, *v), 1, dims=-2))
    assert speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, kernels="linear").token_ids == expected
    assert speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, kernels=kernel).token_ids != expected


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

    # The draft on its own kernels, so that every head call counted is the target's.
    result = speculative_generate(
        target, draft, PROMPT, 4, NEW_TOKENS, kernels="column", between_steps=between_steps, draft_kernels="linear"
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
    curve = verify_costs(target, torch.tensor([PROMPT]), 4, repeats=1, kernels="column")
    assert len(curve) == 4 and min(curve) > 0
    assert calls["column"] == [1, 2, 3, 4] * 2  # m = 1 .. 4 in the warm-up sweep and the timed one
    assert "forward" not in vars(target.get_output_embeddings())


# --- through the plugin ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kernel", "column_rows", "rows_rows"),
    [("column", [1, 2, 3, 4, 5], []), ("linear", [], []), ("rows", [], [1, 2, 3, 4, 5])],
)
def test_the_rows_record_which_verify_blocks_ran_which_form(bench, pytester, kernel, column_rows, rows_rows):
    if kernel == "rows" and few_rows.kernel() is None:
        pytest.skip(f"the few-rows kernel is not built here: {few_rows.unavailable_reason()}")
    result = bench(
        f"--specbench-kernels={kernel}",
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
