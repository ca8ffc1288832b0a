"""Drafters: prompt lookup, and every drafter's losslessness against ``generate``."""

from __future__ import annotations

import pytest
import torch
from factory import NEW_TOKENS

from pytest_specbench import speculative_generate
from pytest_specbench.engine.derived_models import int8_copy, truncated_copy
from pytest_specbench.engine.drafters import Drafter, ModelDrafter, PromptLookupDrafter

# --- losslessness ------------------------------------------------------------------

DRAFTERS = {
    "truncated": lambda target: ModelDrafter(truncated_copy(target, 1)),
    "int8": lambda target: ModelDrafter(int8_copy(target)),
    "prompt-lookup": lambda target: PromptLookupDrafter(ngram_size=3),
}


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 4, 8])
@pytest.mark.parametrize("kind", list(DRAFTERS))
def test_every_drafter_is_lossless(gpt2_target, repetitive_prompt, gpt2_reference, kind, k):
    drafter = DRAFTERS[kind](gpt2_target)
    result = speculative_generate(gpt2_target, drafter, repetitive_prompt, k=k, max_new_tokens=NEW_TOKENS)
    assert torch.equal(result.sequences, gpt2_reference)
    assert result.stats.new_tokens == NEW_TOKENS
    if kind == "prompt-lookup":
        assert result.stats.accepted_tokens > 0
        assert result.stats.draft_forward_passes == 0


# --- prompt lookup -------------------------------------------------------------------


def ids(*tokens: int) -> torch.Tensor:
    return torch.tensor([tokens])


def test_prompt_lookup_copies_what_followed_the_most_recent_match():
    drafter = PromptLookupDrafter(ngram_size=2)
    # "1 2" occurs at 0 (followed by 3 4) and at 4 (followed by 9 8); the latter is more recent.
    assert drafter.propose(ids(1, 2, 3, 4, 1, 2, 9, 8, 7, 1, 2), 3).tolist() == [9, 8, 7]
    assert drafter.forward_passes == 0


def test_prompt_lookup_falls_back_to_shorter_ngrams():
    drafter = PromptLookupDrafter(ngram_size=3)
    # No earlier "4 5 6" or "5 6"; the unigram "6" occurred, followed by 7 8.
    assert drafter.propose(ids(6, 7, 8, 4, 5, 6), 2).tolist() == [7, 8]


def test_prompt_lookup_proposes_nothing_without_a_match():
    drafter = PromptLookupDrafter()
    for sequence in [(1,), (1, 2, 3, 4)]:
        proposal = drafter.propose(ids(*sequence), 4)
        assert proposal.numel() == 0 and proposal.dtype == torch.long


def test_prompt_lookup_limits_the_proposal():
    sequence = ids(1, 2, 3, 4, 5, 6, 7, 1, 2)
    assert PromptLookupDrafter(ngram_size=2).propose(sequence, 3).tolist() == [3, 4, 5]
    assert PromptLookupDrafter(ngram_size=2, max_proposal=2).propose(sequence, 3).tolist() == [3, 4]
    # A match near the end has fewer tokens after it than asked for.
    assert PromptLookupDrafter(ngram_size=1).propose(ids(4, 5, 4), 5).tolist() == [5, 4]


@pytest.mark.parametrize(
    "kwargs", [{"ngram_size": 0}, {"ngram_size": 2.0}, {"ngram_size": True}, {"max_proposal": 0}, {"max_proposal": "3"}]
)
def test_prompt_lookup_validates_its_arguments(kwargs):
    with pytest.raises(ValueError):
        PromptLookupDrafter(**kwargs)


class _NeverDrafts(Drafter):
    def propose(self, committed_ids: torch.Tensor, k: int) -> torch.Tensor:
        return torch.empty(0, dtype=torch.long)


@pytest.mark.slow
def test_engine_takes_a_plain_target_step_on_an_empty_proposal(gpt2_target, repetitive_prompt, gpt2_reference):
    result = speculative_generate(gpt2_target, _NeverDrafts(), repetitive_prompt, k=4, max_new_tokens=NEW_TOKENS)
    assert torch.equal(result.sequences, gpt2_reference)
    assert result.stats.drafted_tokens == 0 and result.stats.steps == NEW_TOKENS
