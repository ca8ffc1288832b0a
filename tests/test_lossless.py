"""The verdict on a case: lossless, a near-tie under half precision, or a real divergence."""

from __future__ import annotations

import math

import pytest
import torch
from factory import tiny_model

from pytest_specbench.measure import verdicts
from pytest_specbench.measure.verdicts import (
    diagnose,
    divergence_message,
    first_divergence,
    quality_score,
    reference_tokens,
)


@pytest.mark.slow
def test_reference_comes_from_generate_and_ignores_eos_for_fixed_length() -> None:
    model = tiny_model("gpt2")
    ids = torch.tensor([[5, 0, 6, 1, 7, 2]])  # the tiny models' pad, BOS and EOS ids
    reference = reference_tokens(model, ids, 20, eos_token_id=None)
    assert len(reference) == 20
    assert (
        reference
        == model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=20,
            eos_token_id=None,
            pad_token_id=0,
        )[0, 6:].tolist()
    )


def test_verdicts() -> None:
    model = tiny_model("gpt2")
    ids = torch.tensor([[5, 6, 7]])
    reference = reference_tokens(model, ids, 12, eos_token_id=None)
    assert diagnose(model, None, ids, reference, reference, False, 0.1)["verdict"] == "lossless"

    wrong = list(reference)
    wrong[4] = (wrong[4] + 1) % model.config.vocab_size
    real = diagnose(model, None, ids, wrong, reference, half_precision=False, tie_tolerance=1e9)
    assert real["verdict"] == "diverged"  # float32: any divergence fails, whatever the margin
    assert (real["first_divergence"], real["expected_token"], real["got_token"]) == (4, reference[4], wrong[4])
    assert real["top2_margin"] > 0
    tie = diagnose(model, None, ids, wrong, reference, half_precision=True, tie_tolerance=real["top2_margin"] + 1)
    assert tie["verdict"] == "tie-divergence"
    clear = diagnose(model, None, ids, wrong, reference, half_precision=True, tie_tolerance=real["top2_margin"] / 2)
    assert clear["verdict"] == "diverged"


def test_a_margin_of_one_step_of_the_logits_dtype_is_a_tie_under_half_precision(monkeypatch) -> None:
    model = tiny_model("gpt2").to(torch.bfloat16)
    ids = torch.tensor([[5, 6, 7]])
    reference = reference_tokens(model, ids, 8, eos_token_id=None)
    margin, step = verdicts.top2_margin(model, ids, reference, 4)
    logits = model(ids).logits  # any bfloat16 logit: its step is 2**floor(log2 |x|) / 128
    assert logits.dtype == torch.bfloat16 and step > 0 and math.log2(step * 128).is_integer()
    wrong = list(reference)
    wrong[4] = (wrong[4] + 1) % model.config.vocab_size
    for found, verdict in (((0.125, 0.125), "tie-divergence"), ((0.25, 0.125), "diverged")):
        monkeypatch.setattr(verdicts, "top2_margin", lambda *args, found=found: found)
        info = diagnose(model, None, ids, wrong, reference, half_precision=True, tie_tolerance=0.1)
        assert info["verdict"] == verdict and info["top2_margin_step"] == 0.125
        assert "one step of the logits' dtype, 0.125 there" in divergence_message("c", info, 0.1)
    float32 = diagnose(model, None, ids, wrong, reference, half_precision=False, tie_tolerance=0.1)
    assert float32["verdict"] == "diverged"  # float32: never a tie


def test_first_divergence_and_quality_score() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 9, 3], [1, 2, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    assert quality_score([1, 9, 3, 4], [1, 2, 3, 4]) == 0.75
