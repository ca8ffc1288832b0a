"""The kernel forms a machine settles are kept (kernels/settled_forms.py): a later run, or a process beside it,
reads them and runs the same forms, so greedy tokens do not depend on what a timing saw."""

from __future__ import annotations

import json
import random

import pytest
import torch
from factory import tiny_pair

import pytest_specbench.kernels.verify_forms as verify_forms_module
from pytest_specbench import greedy_generate
from pytest_specbench.kernels import few_rows
from pytest_specbench.kernels.settled_forms import FORMS_DIR_VARIABLE, settled, settled_path
from pytest_specbench.kernels.verify_forms import KernelForms

needs_kernel = pytest.mark.skipif(
    few_rows.kernel() is None, reason=f"the few-rows kernel is not built here: {few_rows.unavailable_reason()}"
)


@pytest.fixture
def flipping_timings(monkeypatch) -> list[str]:
    """A planted timing that names a random applicable form each time (a busy machine at its worst); the forms it
    named, in order."""
    named: list[str] = []
    draw = random.Random(7)

    def fastest(layers, forms, rows):
        named.append(draw.choice(forms))
        return named[-1]

    monkeypatch.setattr(verify_forms_module, "_fastest", fastest)
    return named


@needs_kernel
def test_two_runs_on_one_machine_run_the_same_forms_and_tokens_whatever_the_timing(flipping_timings):
    target = tiny_pair("gpt2")[0]
    prompt = torch.tensor([[5, 17, 3, 9, 4]])
    first = KernelForms(target, "auto")
    first.settle(8)
    timed = len(flipping_timings)
    assert timed > 0
    second = KernelForms(target, "auto")  # a later run: a new process would hold a new object too
    second.settle(8)
    assert len(flipping_timings) == timed  # nothing timed again
    assert second.choices(8) == first.choices(8)
    tokens = [greedy_generate(target, prompt, max_new_tokens=12, kernels=forms).token_ids for forms in (first, second)]
    assert tokens[0] == tokens[1]
    kept = json.loads(settled_path(target.device).read_text())
    assert len(kept) == timed and all(isinstance(form, str) for form in kept.values())


@needs_kernel
def test_without_the_kept_file_the_planted_flip_changes_the_forms(flipping_timings, monkeypatch, tmp_path):
    # The check above would catch a flip: with nothing kept (a folder that cannot be written), two settlings of
    # one model under the planted timing choose other forms.
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv(FORMS_DIR_VARIABLE, str(blocked / "forms"))
    target = tiny_pair("gpt2")[0]
    first, second = KernelForms(target, "auto"), KernelForms(target, "auto")
    first.settle(8)
    second.settle(8)
    assert second.choices(8) != first.choices(8)


def test_a_kept_form_that_no_longer_applies_is_settled_again(tmp_path):
    path = tmp_path / "forms.json"
    path.write_text(json.dumps({"a": "rows_tiles", "b": "own"}))
    measured = []
    chosen = settled(
        path,
        {"a": lambda: measured.append("a") or "rows", "b": lambda: measured.append("b") or "rows", "c": lambda: "own"},
        lambda key, form: form != "rows_tiles",  # no tiles here any more
    )
    assert chosen == {"a": "rows", "b": "own", "c": "own"} and measured == ["a"]
    assert json.loads(path.read_text()) == {"a": "rows", "b": "own", "c": "own"}
    path.write_text("{damaged")
    assert settled(path, {"a": lambda: "own"}, lambda key, form: True) == {"a": "own"}
    assert json.loads(path.read_text()) == {"a": "own"}
