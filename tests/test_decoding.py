"""Speculative decoding must reproduce the target's greedy output exactly.

The reference is transformers' own ``generate(do_sample=False)``, which this
project did not write; ``greedy_generate`` is checked against it too. Every
run's stats are checked for internal consistency, and a deliberately broken
engine is shown to fail the comparison.
"""

from __future__ import annotations

import copy
import functools
import math

import pytest
import torch
from factory import (
    ARCHITECTURES,
    SLIDING_WINDOW,
    VOCAB_SIZE,
    hf_generate,
    small_draft,
    tiny_model,
    tiny_pair,
    top2_margins,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import pytest_specbench.engine.decoding as decoding
from pytest_specbench import DecodeStats, Drafter, ModelDrafter, greedy_generate, speculative_generate

PROMPTS: dict[str, list[int]] = {
    "one-token": [7],
    "short": [30, 31, 32],
    # Longer than the sliding window of the Gemma 3 / Mistral models.
    "long": [5, 17, 33, 9, 60, 2, 41, 7, 8, 11, 12, 13, 70, 71, 3, 4, 44, 45, 46, 47],
}
LENGTHS = (13, 37)  # not multiples of any k below
KS = (1, 2, 3, 4, 8, 16)

assert len(PROMPTS["long"]) > SLIDING_WINDOW


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@functools.cache
def pair(arch: str):
    return tiny_pair(arch)


@functools.cache
def reference(arch: str, prompt: str, max_new_tokens: int) -> tuple[int, ...]:
    """transformers' greedy continuation, EOS ignored."""
    target, _ = pair(arch)
    return tuple(hf_generate(target, PROMPTS[prompt], max_new_tokens))


def assert_lossless(result, prompt: list[int], expected: list[int] | tuple[int, ...]) -> None:
    assert result.prompt_length == len(prompt)
    assert result.sequences.shape == (1, len(prompt) + len(expected))
    assert result.sequences[0, : len(prompt)].tolist() == prompt
    assert result.token_ids == list(expected)


def check_stats(stats: DecodeStats, k: int, max_new_tokens: int, *, model_drafter: bool, eos: bool = False) -> None:
    """Counts and times of one speculative run add up."""
    assert stats.accepted_tokens + stats.bonus_tokens == stats.new_tokens
    assert sum(stats.accepted_per_step) == stats.accepted_tokens
    assert sum(stats.drafted_per_step) == stats.drafted_tokens
    assert len(stats.drafted_per_step) == stats.steps == stats.target_forward_passes
    if stats.steps:  # the first step is the prefill: it drafts nothing and commits the target's token
        assert stats.drafted_per_step[0] == stats.accepted_per_step[0] == 0
    if model_drafter:  # one pass per drafted token, plus the draft's prefill
        assert stats.draft_forward_passes == stats.drafted_tokens + (1 if stats.steps else 0)
    else:
        assert stats.draft_forward_passes == 0
    # Each step commits its accepted prefix plus one bonus token; only an EOS
    # inside the accepted prefix can drop the last step's bonus.
    assert stats.bonus_tokens == stats.steps or (eos and stats.bonus_tokens == stats.steps - 1)
    remaining = max_new_tokens
    for drafted, accepted in zip(stats.drafted_per_step, stats.accepted_per_step):
        # No block drafts past max_new_tokens: room is left for the bonus token.
        assert 0 <= accepted <= drafted <= min(k, remaining - 1)
        remaining -= accepted + 1
    if not eos:
        assert remaining == 0 and stats.new_tokens == max_new_tokens
    assert 0.0 <= stats.acceptance_rate <= 1.0
    decode_steps = stats.steps - 1
    assert stats.tokens_per_step == ((stats.new_tokens - 1) / decode_steps if decode_steps > 0 else 0.0)
    assert min(stats.draft_time_s, stats.verify_time_s, stats.prefill_time_s) >= 0.0
    assert stats.prefill_time_s + stats.draft_time_s + stats.verify_time_s <= stats.wall_time_s + 1e-9


class ScriptedDrafter(Drafter):
    """Proposes from a precomputed greedy reference: right, or wrong at every position.

    Also checks that every committed prefix it is shown matches the reference.
    """

    def __init__(self, sequence: list[int], *, wrong: bool, extra: int = 0) -> None:
        self.sequence = sequence
        self.wrong = wrong
        self.extra = extra  # propose this many tokens beyond k (the engine must drop them)
        self.bad_prefixes = 0

    def propose(self, committed_ids: torch.Tensor, k: int) -> torch.Tensor:
        start = committed_ids.shape[1]
        if committed_ids[0].tolist() != self.sequence[:start]:
            self.bad_prefixes += 1
        tokens = torch.tensor(self.sequence[start : start + k + self.extra], dtype=torch.long)
        return (tokens + 1) % VOCAB_SIZE if self.wrong else tokens


# --- the reference itself -------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_reference_is_varied_with_a_clear_argmax(arch):
    # Guards the premise of exact comparison: no near-ties, no degenerate repeats.
    target, _ = pair(arch)
    for name, prompt in PROMPTS.items():
        ref = list(reference(arch, name, max(LENGTHS)))
        assert len(set(ref)) >= 8
        assert float(top2_margins(target, prompt + ref, len(prompt)).min()) > 1e-3


@pytest.mark.parametrize("arch", ["gemma3", "mistral"])
def test_sliding_window_is_crossed_and_matters(arch):
    # Same weights with a window too big to matter give a different greedy output,
    # so the sliding layers really shape what the lossless tests compare.
    wide = tiny_model(arch, sliding_window=1024)
    assert pair(arch)[0].config.sliding_window == SLIDING_WINDOW < len(PROMPTS["long"])
    assert hf_generate(wide, PROMPTS["long"], 37) != list(reference(arch, "long", 37))


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_greedy_generate_matches_generate(arch, prompt, n):
    target, _ = pair(arch)
    result = greedy_generate(target, PROMPTS[prompt], n)
    assert_lossless(result, PROMPTS[prompt], reference(arch, prompt, n))
    stats = result.stats
    assert stats.new_tokens == stats.steps == stats.target_forward_passes == stats.bonus_tokens == n
    assert stats.drafted_tokens == stats.accepted_tokens == 0


# --- the lossless property ------------------------------------------------


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_speculative_matches_generate(arch, k, prompt, n):
    target, draft = pair(arch)
    result = speculative_generate(target, draft, PROMPTS[prompt], k=k, max_new_tokens=n)
    assert_lossless(result, PROMPTS[prompt], reference(arch, prompt, n))
    check_stats(result.stats, k, n, model_drafter=True)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_draft_acceptance_is_partial(arch):
    target, draft = pair(arch)
    stats = speculative_generate(target, draft, PROMPTS["long"], k=4, max_new_tokens=37).stats
    assert 0.0 < stats.acceptance_rate < 1.0
    assert min(stats.accepted_per_step) < max(stats.accepted_per_step)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_unrelated_smaller_draft(arch):
    # Any target with a one-layer GPT-2 draft of another size (shared vocabulary).
    target, _ = pair(arch)
    draft = cached_small_draft()
    for k in (2, 5):
        result = speculative_generate(target, draft, PROMPTS["long"], k=k, max_new_tokens=13)
        assert_lossless(result, PROMPTS["long"], reference(arch, "long", 13))
        check_stats(result.stats, k, 13, model_drafter=True)


@functools.cache
def cached_small_draft():
    return small_draft()


def test_drafter_is_reusable_across_runs():
    target, draft = pair("gemma3")
    drafter = ModelDrafter(draft)
    first = speculative_generate(target, drafter, PROMPTS["long"], k=3, max_new_tokens=13)
    second = speculative_generate(target, drafter, PROMPTS["short"], k=3, max_new_tokens=13)
    third = speculative_generate(target, drafter, PROMPTS["long"], k=3, max_new_tokens=13)
    assert first.token_ids == third.token_ids == list(reference("gemma3", "long", 13))
    assert second.token_ids == list(reference("gemma3", "short", 13))
    assert first.stats.draft_forward_passes == third.stats.draft_forward_passes == first.stats.drafted_tokens + 1


@pytest.mark.parametrize("arch", ["gpt2", "gemma3"])
def test_input_forms_agree(arch):
    target, draft = pair(arch)
    prompt = PROMPTS["short"]
    forms = [prompt, torch.tensor(prompt), torch.tensor([prompt])]
    outs = [speculative_generate(target, draft, form, k=3, max_new_tokens=13).sequences for form in forms]
    assert all(torch.equal(out, outs[0]) for out in outs)
    assert outs[0][0, 3:].tolist() == list(reference(arch, "short", 13))


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("arch", ["gpt2", "gemma3"])
def test_one_and_zero_new_tokens(arch, k):
    target, draft = pair(arch)
    one = speculative_generate(target, draft, PROMPTS["long"], k=k, max_new_tokens=1)
    assert one.token_ids == list(reference(arch, "long", 13))[:1]
    assert one.stats.steps == 1 and one.stats.drafted_tokens == 0 and one.stats.bonus_tokens == 1
    check_stats(one.stats, k, 1, model_drafter=True)
    for result in (
        speculative_generate(target, draft, PROMPTS["long"], k=k, max_new_tokens=0),
        greedy_generate(target, PROMPTS["long"], 0),
    ):
        assert result.sequences[0].tolist() == PROMPTS["long"]
        assert result.token_ids == [] and result.stats.steps == 0


# --- EOS ------------------------------------------------------------------


def eos_case(arch: str) -> tuple[int, list[int]]:
    """A token greedy first emits mid-sequence, and the output cut just after it."""
    ref = list(reference(arch, "long", 37))
    for i in range(5, len(ref) - 5):
        if ref[i] not in ref[:i]:
            return ref[i], ref[: i + 1]
    raise AssertionError(f"no usable EOS candidate in {ref}")


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_eos_stops_like_generate(arch):
    target, draft = pair(arch)
    prompt = PROMPTS["long"]
    eos, expected = eos_case(arch)
    assert hf_generate(target, prompt, 37, eos_token_id=eos) == expected
    assert greedy_generate(target, prompt, 37, eos_token_id=eos).token_ids == expected
    for k in (1, 3, 8):
        result = speculative_generate(target, draft, prompt, k=k, max_new_tokens=37, eos_token_id=eos)
        assert_lossless(result, prompt, expected)
        check_stats(result.stats, k, 37, model_drafter=True, eos=True)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_eos_inside_an_accepted_block(arch):
    # A perfect draft commits k+1 tokens a step, so the EOS lands inside an
    # accepted block and the tokens after it (bonus included) must be dropped.
    target, _ = pair(arch)
    eos, expected = eos_case(arch)
    # The prefill commits the first token; full blocks of k+1 follow, the last one cut at the EOS.
    k = 8 if (len(expected) - 1) % 9 else 7
    draft = copy.deepcopy(target)
    result = speculative_generate(target, draft, PROMPTS["long"], k=k, max_new_tokens=37, eos_token_id=eos)
    assert_lossless(result, PROMPTS["long"], expected)
    assert result.stats.accepted_per_step[-1] == (len(expected) - 1) % (k + 1)
    check_stats(result.stats, k, 37, model_drafter=True, eos=True)
    assert result.stats.bonus_tokens == result.stats.steps - 1


# --- the extremes ---------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3, 4, 16])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_identical_draft_accepts_everything(arch, k):
    target, _ = pair(arch)
    n = 37
    result = speculative_generate(target, copy.deepcopy(target), PROMPTS["long"], k=k, max_new_tokens=n)
    assert_lossless(result, PROMPTS["long"], reference(arch, "long", n))
    stats = result.stats
    check_stats(stats, k, n, model_drafter=True)
    assert stats.acceptance_rate == 1.0
    assert stats.accepted_per_step == stats.drafted_per_step
    # After the prefill, every step is as full as the remaining budget allows: k+1 tokens until the tail.
    expected_drafts, remaining = [0], n - 1
    while remaining:
        expected_drafts.append(min(k, remaining - 1))
        remaining -= expected_drafts[-1] + 1
    assert stats.drafted_per_step == expected_drafts
    assert stats.steps == 1 + math.ceil((n - 1) / (k + 1))
    assert all(d == k for d in stats.drafted_per_step[1:-1])
    assert stats.tokens_per_step == pytest.approx((n - 1) / (stats.steps - 1))


@pytest.mark.parametrize("k", [1, 4, 16])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_never_agreeing_drafter(arch, k):
    n = 37
    target, _ = pair(arch)
    full = PROMPTS["long"] + list(reference(arch, "long", n))
    drafter = ScriptedDrafter(full, wrong=True)
    result = speculative_generate(target, drafter, PROMPTS["long"], k=k, max_new_tokens=n)
    assert_lossless(result, PROMPTS["long"], full[len(PROMPTS["long"]) :])
    stats = result.stats
    check_stats(stats, k, n, model_drafter=False)
    assert drafter.bad_prefixes == 0
    assert stats.acceptance_rate == 0.0 and stats.accepted_tokens == 0
    assert stats.tokens_per_step == 1.0 and stats.steps == n
    assert stats.drafted_per_step == [0] + [min(k, n - i - 1) for i in range(1, n)]


@pytest.mark.parametrize("k", [1, 5])
def test_oversized_proposals_are_cut_to_the_budget(k):
    # A drafter that proposes more than asked: the engine must use at most k,
    # and never draft past max_new_tokens.
    n = 13
    target, _ = pair("llama")
    full = PROMPTS["short"] + list(reference("llama", "short", n))
    drafter = ScriptedDrafter(full, wrong=False, extra=3)
    result = speculative_generate(target, drafter, PROMPTS["short"], k=k, max_new_tokens=n)
    assert_lossless(result, PROMPTS["short"], full[3:])
    check_stats(result.stats, k, n, model_drafter=False)
    assert result.stats.acceptance_rate == 1.0


# --- the suite catches a broken engine ------------------------------------


def _overeager(real):
    def verify(target, cache, block, proposal):
        num_accepted, target_tokens = real(target, cache, block, proposal)
        return min(num_accepted + 1, proposal.numel()), target_tokens  # accepts one wrong token

    return verify


def _wrong_bonus(real):
    def verify(target, cache, block, proposal):
        num_accepted, target_tokens = real(target, cache, block, proposal)
        target_tokens = target_tokens.clone()
        target_tokens[num_accepted] = (target_tokens[num_accepted] + 1) % VOCAB_SIZE
        return num_accepted, target_tokens

    return verify


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gpt2", "gemma3"])
@pytest.mark.parametrize("bug", ["accept-extra-token", "wrong-bonus-token", "no-cache-rollback"])
def test_broken_engine_is_caught(arch, bug, monkeypatch):
    target, draft = pair(arch)
    prompt, n = PROMPTS["long"], 37
    expected = list(reference(arch, "long", n))
    # Sanity: the unbroken engine passes.
    assert_lossless(speculative_generate(target, draft, prompt, k=4, max_new_tokens=n), prompt, expected)

    if bug == "accept-extra-token":
        monkeypatch.setattr(decoding, "_verify", _overeager(decoding._verify))
    elif bug == "wrong-bonus-token":
        monkeypatch.setattr(decoding, "_verify", _wrong_bonus(decoding._verify))
    else:
        monkeypatch.setattr(decoding, "crop_to", lambda cache, length: None)
    broken = speculative_generate(target, draft, prompt, k=4, max_new_tokens=n)
    assert broken.token_ids != expected
    with pytest.raises(AssertionError):
        assert_lossless(broken, prompt, expected)


# --- input validation -----------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(k=0),
        dict(k=-1),
        dict(k=2.0),
        dict(max_new_tokens=-1),
        dict(k=True),
        dict(max_new_tokens=True),
        dict(input_ids=[[1, 2, 3], [4, 5, 6]]),
        dict(input_ids=[]),
        dict(input_ids=torch.empty(1, 0, dtype=torch.long)),
        dict(input_ids=torch.ones(1, 1, 3, dtype=torch.long)),
    ],
    ids=[
        "k=0",
        "k<0",
        "k-float",
        "negative-length",
        "k-bool",
        "length-bool",
        "two-sequences",
        "empty-list",
        "empty-tensor",
        "3d",
    ],
)
def test_invalid_input_raises(kwargs):
    target, draft = pair("gpt2")
    args = dict(input_ids=[1, 2, 3], k=2, max_new_tokens=4) | kwargs
    with pytest.raises(ValueError):
        speculative_generate(target, draft, **args)
    if "k" not in kwargs:
        with pytest.raises(ValueError):
            greedy_generate(target, args["input_ids"], args["max_new_tokens"])


def test_draft_of_wrong_type_raises():
    target, _ = pair("gpt2")
    with pytest.raises(TypeError):
        speculative_generate(target, "not a model", [1, 2, 3], k=2, max_new_tokens=4)


# --- property test --------------------------------------------------------


@pytest.mark.slow
@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    prompt=st.lists(st.integers(0, VOCAB_SIZE - 1), min_size=1, max_size=24),
    k=st.integers(1, 10),
    n=st.integers(1, 30),
    eos=st.none() | st.integers(0, VOCAB_SIZE - 1),
)
def test_property_lossless_gpt2(prompt, k, n, eos):
    target, draft = pair("gpt2")
    expected = hf_generate(target, prompt, n, eos_token_id=eos)
    # Skip the rare near-tie, where float32 noise may legitimately flip the argmax.
    assume(float(top2_margins(target, prompt + expected, len(prompt)).min()) > 1e-4)
    assert greedy_generate(target, prompt, n, eos_token_id=eos).token_ids == expected
    result = speculative_generate(target, draft, prompt, k=k, max_new_tokens=n, eos_token_id=eos)
    assert_lossless(result, prompt, expected)
    check_stats(result.stats, k, n, model_drafter=True, eos=eos is not None and eos in expected)
