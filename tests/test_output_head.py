"""The verify pass's output head as ``weight @ hidden.T``: the same logits, chosen by measurement, lossless.

Losslessness is checked against transformers' ``generate(do_sample=False)`` on every tiny
architecture with each head kernel, and a planted bug in the column form is shown to fail it.
"""

from __future__ import annotations

import functools
import json

import pytest
import torch
from factory import ARCHITECTURES, hf_generate, tiny_pair

import pytest_specbench.engine.output_head as output_head
from pytest_specbench import speculative_generate
from pytest_specbench.engine.cost_probe import verify_costs
from pytest_specbench.engine.derived_models import int8_copy
from pytest_specbench.engine.names import HEAD_KERNELS
from pytest_specbench.engine.output_head import column_head, column_head_rows, head_choices

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT = [5, 17, 33, 9, 60, 2, 41, 7, 8, 11, 12, 13, 70, 71, 3, 4, 44, 45, 46, 47]
NEW_TOKENS = 29


@functools.cache
def pair(arch: str):
    return tiny_pair(arch)


@functools.cache
def reference(arch: str) -> tuple[int, ...]:
    return tuple(hf_generate(pair(arch)[0], PROMPT, NEW_TOKENS))


class _Model(torch.nn.Module):
    """Just enough of a causal LM for the head helpers: an output head."""

    def __init__(self, head: torch.nn.Module) -> None:
        super().__init__()
        self.head = head

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.head


@pytest.fixture
def columns(monkeypatch) -> list[int]:
    """One entry per call of the column form."""
    calls: list[int] = []
    real_column = output_head.column_logits
    monkeypatch.setattr(output_head, "column_logits", lambda head, hidden: calls.append(1) or real_column(head, hidden))
    return calls


def _linear(bias: bool, seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(48, 300, bias=bias)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 2, 5, 17])
def test_the_column_form_computes_the_heads_logits(bias, rows):
    head = _linear(bias)
    hidden = torch.randn(1, rows, 48)
    expected = head(hidden)
    with column_head(_Model(head), "column"):
        logits = head(hidden)
    assert logits.shape == expected.shape == (1, rows, 300)
    assert logits.is_contiguous()
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))


def test_the_head_is_restored_after_the_block_even_on_an_error():
    head = _linear(False)
    with pytest.raises(RuntimeError, match="inside"):
        with column_head(_Model(head), "column"):
            assert "forward" in vars(head)
            raise RuntimeError("inside")
    assert "forward" not in vars(head)


def test_linear_kernel_and_quantised_heads_are_left_alone():
    target, _ = pair("llama")
    with column_head(target, "linear"):
        assert "forward" not in vars(target.get_output_embeddings())
    quantised = int8_copy(target)
    assert type(quantised.get_output_embeddings()) is not torch.nn.Linear
    with column_head(quantised, "column"):
        assert "forward" not in vars(quantised.get_output_embeddings())
    assert column_head_rows(quantised, "column", 9) == []
    assert column_head_rows(target, "linear", 9) == []
    assert column_head_rows(target, "column", 5) == [2, 3, 4, 5]


def test_an_inner_block_leaves_the_outer_one_in_place():
    head = _linear(False)
    model = _Model(head)
    with column_head(model, "column"):
        outer = vars(head)["forward"]
        with column_head(model, "auto"):
            assert vars(head)["forward"] is outer
        assert vars(head)["forward"] is outer
    assert "forward" not in vars(head)


def test_auto_measures_each_row_count_once_and_keeps_the_faster_form(monkeypatch, columns):
    head = _linear(True, seed=1)
    model = _Model(head)
    measured = []

    def fake_measure(head, hidden, repeats=3):
        rows = hidden.numel() // hidden.shape[-1]
        measured.append(rows)
        return rows >= 4  # the column form "wins" from 4 rows on

    monkeypatch.setattr(output_head, "_column_is_faster", fake_measure)
    with column_head(model, "auto"):
        for rows in (1, 3, 3, 5, 5, 1):
            head(torch.randn(1, rows, 48))
    assert measured == [3, 5]  # one-row calls are never measured; each row count once
    assert len(columns) == 2  # the two 5-row calls
    assert head_choices(model) == {3: "linear", 5: "column"}
    assert column_head_rows(model, "auto", 17) == [5]
    assert column_head_rows(model, "auto", 4) == []


def test_the_real_measurement_returns_a_choice():
    head = _linear(False)
    assert output_head._column_is_faster(head, torch.randn(1, 4, 48), repeats=1) in (True, False)


def test_an_unknown_kernel_is_refused():
    with pytest.raises(ValueError, match="head kernel must be one of auto, column, linear, got 'fast'"):
        with column_head(_Model(_linear(False)), "fast"):
            pass


@pytest.mark.parametrize("k", [2, 8])
@pytest.mark.parametrize("head_kernel", HEAD_KERNELS)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_head_kernel_is_lossless(arch, head_kernel, k, columns):
    target, draft = pair(arch)
    result = speculative_generate(target, draft, PROMPT, k, NEW_TOKENS, head_kernel=head_kernel)
    assert result.token_ids == list(reference(arch))
    assert "forward" not in vars(target.get_output_embeddings())
    if head_kernel == "column":  # every verify pass of a drafted block (2 rows or more) went through it
        assert len(columns) == sum(1 for drafted in result.stats.drafted_per_step if drafted > 0)
    elif head_kernel == "linear":
        assert columns == []


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gpt2", "gemma3"])
def test_a_wrong_column_form_is_caught(arch, monkeypatch):
    target, draft = pair(arch)
    expected = list(reference(arch))
    real_column = output_head.column_logits
    # Planted bug: each position gets the logits of the position before it.
    monkeypatch.setattr(
        output_head, "column_logits", lambda head, hidden: torch.roll(real_column(head, hidden), shifts=1, dims=-2)
    )
    assert speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, head_kernel="linear").token_ids == expected
    assert speculative_generate(target, draft, PROMPT, 4, NEW_TOKENS, head_kernel="column").token_ids != expected


def test_the_cost_probe_times_the_engines_head(columns):
    target, _ = pair("gpt2")
    curve = verify_costs(target, torch.tensor([PROMPT]), 4, repeats=1, head_kernel="column")
    assert len(curve) == 4 and min(curve) > 0
    assert len(columns) == 2 * 3  # m = 2, 3, 4 in the warm-up sweep and the timed one
    assert "forward" not in vars(target.get_output_embeddings())


# --- through the plugin ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("head_kernel", "expected_rows"), [("column", [2, 3, 4, 5]), ("linear", [])])
def test_the_rows_record_which_verify_blocks_ran_the_column_head(bench, pytester, head_kernel, expected_rows):
    result = bench(
        f"--specbench-head-kernel={head_kernel}",
        "--specbench-engine=native,hf",
        "--specbench-k=1,4",
        "--specbench-prompts=natural",
        "--specbench-json=results.json",
    )
    result.assert_outcomes(passed=4)
    rows = {row["case"]: row for row in json.loads((pytester.path / "results.json").read_text())["results"]}
    assert rows["tiny-native-k4-natural"]["column_head_rows"] == expected_rows
    assert rows["tiny-native-k1-natural"]["column_head_rows"] == expected_rows[:1]  # k=1 verifies 2 rows at most
    assert rows["tiny-hf-k4-natural"]["column_head_rows"] == []  # transformers' loop keeps the model's head
    assert all(row["verdict"] == "lossless" for row in rows.values())


@pytest.mark.slow
def test_a_schedule_longer_than_the_probe_has_its_head_measured_before_the_timed_rounds(bench, pytester, monkeypatch):
    measured_during_runs = []
    real_measure = output_head._column_is_faster
    import pytest_specbench.measure.sequence as runner

    real_runner = runner.speculative_runner

    def watched_runner(*args, **kwargs):
        run = real_runner(*args, **kwargs)

        def watched(**kwargs):
            monkeypatch.setattr(
                output_head,
                "_column_is_faster",
                lambda head, hidden, repeats=3: measured_during_runs.append(1) or real_measure(head, hidden, repeats),
            )
            try:
                return run(**kwargs)
            finally:
                monkeypatch.setattr(output_head, "_column_is_faster", real_measure)

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
