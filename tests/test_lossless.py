"""The verdict on a case: lossless, a near-tie under half precision, or a real divergence."""

from __future__ import annotations

import pytest
import torch
from factory import tiny_model

from pytest_specbench.measure.verdicts import diagnose, first_divergence, quality_score, reference_tokens


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


def test_first_divergence_and_quality_score() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 9, 3], [1, 2, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    assert quality_score([1, 9, 3, 4], [1, 2, 3, 4]) == 0.75
