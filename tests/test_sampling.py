"""Speculative sampling: the processing, the accept/resample rule, and losslessness in distribution.

Statistical design of the losslessness tests
--------------------------------------------
The target is a tiny GPT-2 with a vocabulary of :data:`VOCAB` ids, so the exact
joint distribution of its first few sampled tokens can be enumerated: one
batched forward pass over every prefix gives every conditional, after the
same temperature, top-k and top-p processing. Each case runs the engine
:data:`RUNS` times from one seeded generator and counts the joint outcomes
(one cell per sequence of new tokens). A chi-square goodness-of-fit test
compares the counts with the exact probabilities, pooling the cells expected
to hold fewer than 5 runs into one tail cell; a run in a cell of probability
zero fails outright. Each case fails when its p-value falls below
:data:`SIGNIFICANCE` (0.001), so a correct engine raises a false alarm with
probability 0.001 per case (at most 0.5% for the five cases together); the
seed is fixed, so CI is deterministic. With this seed the correct engine's
p-values lie between 0.28 and 0.81.

A speculative case generates ``k + 2`` tokens: the prefill's own token, one
full block of ``k`` drafts and its bonus token (a rejection makes room for a
further, shorter block), and tests their joint distribution: 25 to 37 degrees
of freedom after pooling. Cases: a model draft at k 1 and 2, prompt lookup
at k 1 and 2, and ``greedy_generate``'s sampling, across two settings
(temperature 1; temperature 0.8 with top-p 0.9 and top-k 5). The same test,
same runs and seed, rejects two planted bugs: resampling from ``p`` instead
of ``max(p - q, 0)`` after a rejection (p-values 3e-13 with the model draft,
2e-29 with prompt lookup), and keeping a draft with probability
``min(1, q/p)`` instead of ``min(1, p/q)`` (1e-60). Each case takes 4 to 10 s
on a 2-core CPU, the module about 50 s.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from factory import tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

import pytest_specbench.engine.decoding as decoding
import pytest_specbench.engine.sampling as sampling
from pytest_specbench import ModelDrafter, PromptLookupDrafter, greedy_generate, speculative_generate
from pytest_specbench.engine.sampling import (
    SamplingParams,
    accept_draft,
    accept_drafts,
    check_acceptance_rule,
    chisquare_pooled,
    expected_acceptance,
    residual_distribution,
    sample_tokens,
    sampling_distribution,
)

#: the tiny models' vocabulary: small enough to enumerate every sequence of k + 2 tokens
VOCAB = 8
SIGNIFICANCE = 0.001
#: seeded engine runs per statistical case
RUNS = 1000
SEED = 20260
MODEL_PROMPT = [3, 6, 4, 5]
#: the target's greedy path from 6, repeated: prompt lookup proposes tokens the target keeps about half the time
LOOKUP_PROMPT = [6, 4, 3, 3, 3, 7, 7, 2, 2, 2, 6, 4, 3, 3]
SETTINGS = {
    "plain": SamplingParams(temperature=1.0),
    "filtered": SamplingParams(temperature=0.8, top_p=0.9, top_k=5),
}

HYPOTHESIS = settings(max_examples=60, deadline=None, derandomize=True, database=None)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@functools.cache
def target_model() -> torch.nn.Module:
    """One layer (fast runs) and a small initializer range: next-token entropies of about 1 to 1.6 nats,
    where the factory's default range makes a vocabulary of 8 nearly deterministic."""
    return tiny_model("gpt2", seed=21, vocab_size=VOCAB, n_layer=1, initializer_range=0.15)


@functools.cache
def draft_model() -> torch.nn.Module:
    """An unrelated, narrower model: it agrees with the target about half the time (alpha 0.45 to 0.6)."""
    return tiny_model("gpt2", seed=22, vocab_size=VOCAB, n_layer=1, n_embd=32, n_head=2, initializer_range=0.15)


def params_kwargs(params: SamplingParams) -> dict:
    return dict(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k)


# --- SamplingParams ------------------------------------------------------------------------


def test_sampling_params_defaults_and_greedy():
    assert SamplingParams().greedy
    params = SamplingParams(temperature=1, top_p=1, top_k=3)
    assert not params.greedy and isinstance(params.temperature, float) and params.temperature == 1.0


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(temperature=-0.1), "temperature"),
        (dict(temperature=math.inf), "temperature"),
        (dict(temperature="1"), "temperature"),
        (dict(temperature=True), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(top_k=2.0), "top_k"),
    ],
)
def test_sampling_params_reject_bad_values(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SamplingParams(**kwargs)
    with pytest.raises(ValueError, match=name):
        speculative_generate(target_model(), draft_model(), [3, 4], k=2, max_new_tokens=3, **kwargs)
    with pytest.raises(ValueError, match=name):
        greedy_generate(target_model(), [3, 4], 3, **kwargs)


# --- the processing ------------------------------------------------------------------------


def test_processing_on_hand_computed_logits():
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()
    # top-p keeps the smallest set of most likely tokens reaching 0.7: {0.5, 0.3}
    assert torch.allclose(
        sampling_distribution(logits, SamplingParams(1.0, top_p=0.7)), torch.tensor([0.625, 0.375, 0.0, 0.0])
    )
    assert torch.allclose(
        sampling_distribution(logits, SamplingParams(1.0, top_k=2)), torch.tensor([0.625, 0.375, 0.0, 0.0])
    )
    assert torch.allclose(sampling_distribution(logits, SamplingParams(2.0)), (logits / 2).softmax(-1))
    assert sampling_distribution(logits, SamplingParams()).tolist() == [1.0, 0.0, 0.0, 0.0]  # greedy: a point mass
    # Blocks of rows are processed row by row.
    block = torch.stack([logits, logits.flip(0)])
    assert torch.allclose(
        sampling_distribution(block, SamplingParams(1.0, top_p=0.7))[1],
        sampling_distribution(logits.flip(0), SamplingParams(1.0, top_p=0.7)),
    )


@pytest.mark.parametrize("params", [SamplingParams(0.7, 0.9, 5), SamplingParams(1.3, 0.8), SamplingParams(0.9, 1.0, 4)])
def test_processing_matches_generate(params):
    # generate(do_sample=True) returns the processed scores it sampled from: the same distribution.
    model = tiny_model("gpt2")  # the factory's 96-token vocabulary
    ids = torch.tensor([[5, 17, 33, 9]])
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            max_new_tokens=1,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=0,
            **params_kwargs(params),
        )
        ours = sampling_distribution(model(input_ids=ids).logits[:, -1], params)
    theirs = out.scores[0].softmax(dim=-1)
    assert torch.equal(ours > 0, theirs > 0)
    assert torch.allclose(ours, theirs, atol=1e-6)
    assert 1 < int((ours > 0).sum()) < model.config.vocab_size  # the filters did cut, and left a choice


def test_sample_tokens_follows_the_distribution():
    probs = torch.tensor([0.0, 0.1, 0.0, 0.6, 0.3, 0.0])
    draws = sample_tokens(probs.expand(20000, -1), torch.Generator().manual_seed(1))
    counts = torch.bincount(draws, minlength=6)
    assert counts[probs == 0].sum() == 0
    assert chisquare_pooled(counts.numpy(), probs.numpy(), SIGNIFICANCE).passed
    # Unnormalised rows are fine.
    assert set(sample_tokens(torch.tensor([[0.0, 5.0]]).expand(50, -1)).tolist()) == {1}


# --- the accept/resample rule on hand-computed cases --------------------------------------------


def test_rule_half_accepted_and_the_rest_resampled_to_the_other_token():
    # p = [.5, .5], q = [1, 0]: the proposed token 0 is kept with probability .5;
    # max(p - q, 0) = [0, .5], so every rejection resamples token 1.
    n = 20000
    target = torch.tensor([[0.5, 0.5], [0.5, 0.5]]).expand(n, 2, 2)
    draft = torch.tensor([[1.0, 0.0]]).expand(n, 1, 2)
    proposals = torch.zeros(n, 1, dtype=torch.long)
    num_accepted, tokens = accept_drafts(target, draft, proposals, torch.Generator().manual_seed(2))
    rate = float(num_accepted.double().mean())
    assert abs(rate - 0.5) < 4 * math.sqrt(0.25 / n)
    assert set(tokens[num_accepted == 0].tolist()) == {1}
    assert torch.equal(
        residual_distribution(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0])), torch.tensor([0.0, 1.0])
    )


def test_rule_certain_cases():
    generator = torch.Generator().manual_seed(3)
    target = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    draft = torch.tensor([[0.5, 0.5, 0.0]])
    for _ in range(20):
        # p(1) = 0: always rejected; max(p - q, 0) = [.5, 0, 0] resamples token 0.
        assert accept_draft(target, draft, torch.tensor([1]), generator) == (0, 0)
        # p(0) / q(0) = 2: always kept; the bonus comes from the next row, a point mass on 2.
        assert accept_draft(target, draft, torch.tensor([0]), generator) == (1, 2)
        # No proposal: a plain draw from the first row.
        assert accept_draft(target[:1], None, torch.empty(0, dtype=torch.long), generator) == (0, 0)
        # A draft vocabulary smaller than the target's is padded with zeros.
        assert accept_draft(target, draft[:, :2], torch.tensor([0]), generator) == (1, 2)


def test_rule_point_mass_drafter():
    # q a point mass on the proposed token 1: kept with probability p(1) = .8; a rejection
    # resamples from p without token 1, which leaves token 0 only.
    n = 20000
    target = torch.tensor([[0.2, 0.8, 0.0], [0.0, 0.0, 1.0]]).expand(n, 2, 3)
    num_accepted, tokens = accept_drafts(
        target, None, torch.ones(n, 1, dtype=torch.long), torch.Generator().manual_seed(4)
    )
    assert abs(float(num_accepted.double().mean()) - 0.8) < 4 * math.sqrt(0.8 * 0.2 / n)
    assert set(tokens[num_accepted == 0].tolist()) == {0}
    assert set(tokens[num_accepted == 1].tolist()) == {2}


def test_rule_stops_at_the_first_rejection():
    # Three proposals; the second has p = 0, so at most one is kept, whatever the third.
    target = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.5, 0.5], [0.5, 0.5]]).expand(500, 4, 2)
    proposals = torch.tensor([0, 1, 0]).expand(500, 3)
    num_accepted, tokens = accept_drafts(target, None, proposals, torch.Generator().manual_seed(5))
    assert set(num_accepted.tolist()) == {0, 1}
    assert set(tokens[num_accepted == 1].tolist()) == {0}  # max(p - q, 0) at the second position: token 0


def test_rule_is_reproducible_with_a_seeded_generator():
    target = torch.tensor([[0.3, 0.3, 0.4]] * 4)
    draft = torch.tensor([[0.6, 0.2, 0.2]] * 3)
    proposal = torch.tensor([0, 0, 2])

    def outcomes(seed: int) -> list[tuple[int, int]]:
        generator = torch.Generator().manual_seed(seed)
        return [accept_draft(target, draft, proposal, generator) for _ in range(50)]

    assert outcomes(9) == outcomes(9) != outcomes(10)
    assert len(set(outcomes(9))) > 1


# --- properties ----------------------------------------------------------------------------


def _distribution(size: int) -> st.SearchStrategy[torch.Tensor]:
    # Zeros included: top-k and top-p leave exact zeros.
    weights = st.lists(
        st.sampled_from([0.0, 0.0, 1e-6, 0.1, 0.5, 1.0, 3.0]) | st.floats(0, 10), min_size=size, max_size=size
    )
    return weights.filter(lambda w: sum(w) > 1e-3).map(lambda w: torch.tensor(w, dtype=torch.float64) / sum(w))


_pairs = st.integers(2, 10).flatmap(lambda size: st.tuples(_distribution(size), _distribution(size)))


@pytest.mark.slow
@HYPOTHESIS
@given(_pairs)
def test_property_residual_is_a_distribution_and_the_rule_preserves_p(pair):
    p, q = pair
    residual = residual_distribution(p, q)
    assert float(residual.min()) >= 0 and math.isclose(float(residual.sum()), 1.0, rel_tol=1e-9)
    # One position: P(token) = min(p, q) (kept drafts) + P(reject) * residual = p, exactly.
    alpha = expected_acceptance(p, q)
    assert torch.allclose(torch.minimum(p, q) + (1 - alpha) * residual, p, atol=1e-9)
    assert 0 <= float(alpha) <= 1 + 1e-12
    assert math.isclose(float(alpha), float(expected_acceptance(q, p)), rel_tol=1e-12)


@pytest.mark.slow
@HYPOTHESIS
@given(_pairs.map(lambda pair: pair[0]), st.integers(0, 2**31), st.integers(1, 3))
def test_property_equal_distributions_always_accept(p, seed, m):
    generator = torch.Generator().manual_seed(seed)
    proposals = sample_tokens(p.expand(64 * m, -1), generator).view(64, m)
    rows = p.expand(64, m + 1, -1)
    num_accepted, tokens = accept_drafts(rows, rows[:, :m], proposals, generator)
    assert num_accepted.tolist() == [m] * 64
    assert float(p[tokens].min()) > 0  # the bonus is drawn from p


@pytest.mark.slow
@HYPOTHESIS
@given(_pairs.map(lambda pair: pair[0]), st.integers(0, 9))
def test_property_point_mass_residual_removes_the_token(p, token):
    token %= p.numel()
    point = torch.zeros_like(p)
    point[token] = 1.0
    residual = residual_distribution(p, point)
    rest = p.clone()
    rest[token] = 0.0
    if float(rest.sum()) > 0:
        assert torch.allclose(residual, rest / rest.sum(), atol=1e-12)
    else:  # p is that point mass: a rejection is impossible, and p is returned
        assert torch.equal(residual, p)
    assert math.isclose(float(expected_acceptance(p, point)), float(p[token]), rel_tol=1e-12)


# --- the chi-square test with pooled cells --------------------------------------------------


def test_chisquare_pooled():
    probs = np.array([0.5, 0.3, 0.2])
    counts = np.array([260, 140, 100])
    plain = chisquare_pooled(counts, probs)
    assert (plain.statistic, plain.p_value) == pytest.approx(tuple(chisquare(counts, probs * 500)))
    assert plain.dof == 2 and plain.n == 500 and plain.passed
    # Cells expected below 5 pool into one tail cell: 1 + 2 + 1 draws expected, still below 5, so the
    # smallest other cell (46 expected) joins the tail.
    probs = np.array([0.80, 0.10, 0.002, 0.004, 0.002, 0.092])
    tail = chisquare_pooled(np.array([390, 55, 1, 3, 0, 51]), probs)
    assert tail.dof == 2
    assert tail.statistic == pytest.approx(chisquare([390, 55, 55], [400, 50, 50]).statistic)
    impossible = chisquare_pooled(np.array([9, 1]), np.array([1.0, 0.0]))
    assert impossible.p_value == 0.0 and not impossible.passed
    single = chisquare_pooled(np.array([10, 0]), np.array([1.0, 0.0]))
    assert single.dof == 0 and single.passed
    assert not chisquare_pooled(np.array([300, 200]), np.array([0.5, 0.5]), significance=0.001).passed


# --- planted bugs: a wrong rule must be rejected --------------------------------------------


def resample_from_target(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """Planted bug: after a rejection, resample from p instead of max(p - q, 0)."""
    return target_probs / target_probs.sum(dim=-1, keepdim=True)


def inverted_ratio(target_token_probs: torch.Tensor, draft_token_probs: torch.Tensor) -> torch.Tensor:
    """Planted bug: keep a draft with probability min(1, q/p) instead of min(1, p/q)."""
    return (draft_token_probs / target_token_probs).clamp(max=1.0)


BUGS = {
    "resample-from-p": ("residual_distribution", resample_from_target),
    "min-1-q-over-p": ("acceptance_probability", inverted_ratio),
}


def plant(monkeypatch: pytest.MonkeyPatch, bug: str) -> None:
    # The rule looks both helpers up in its module, so the decoding loop and the per-case check get the bug alike.
    name, replacement = BUGS[bug]
    monkeypatch.setattr(sampling, name, replacement)


# --- the per-case check (issue 13, item 3) ----------------------------------------------------


@functools.cache
def case_distributions() -> tuple[torch.Tensor, torch.Tensor]:
    """p and q at one prompt for a 96-token target and an unrelated small draft (alpha about 0.3)."""
    params = SamplingParams(1.0, top_p=0.95)
    ids = torch.tensor([[5, 17, 33, 9, 60]])
    target = tiny_model("gpt2", initializer_range=0.2)
    draft = tiny_model("gpt2", seed=7, n_layer=1, n_embd=32, n_head=2, initializer_range=0.2)
    with torch.inference_mode():
        p = sampling_distribution(target(input_ids=ids).logits[0, -1], params)
        q = sampling_distribution(draft(input_ids=ids).logits[0, -1], params)
    return p, q


def run_case_check(*, point_mass: bool = False):
    p, q = case_distributions()
    generator = torch.Generator().manual_seed(SEED)
    if point_mass:  # the target's second most likely token, as prompt lookup might propose it
        return check_acceptance_rule(p, None, 20000, generator, proposed_token=int(p.argsort()[-2]))
    return check_acceptance_rule(p, q, 20000, generator)


@pytest.mark.parametrize("point_mass", [False, True], ids=["model-draft", "point-mass"])
def test_case_check_passes_the_engine_rule(point_mass):
    p, q = case_distributions()
    assert 0.2 < float(expected_acceptance(p, q)) < 0.8  # a draft that is wrong often enough to exercise resampling
    check = run_case_check(point_mass=point_mass)
    assert check.passed, check
    assert check.n == 20000 and check.dof > 5  # many cells even after pooling the 96-token vocabulary's tail


@pytest.mark.parametrize("point_mass", [False, True], ids=["model-draft", "point-mass"])
@pytest.mark.parametrize("bug", BUGS)
def test_case_check_rejects_a_planted_bug(bug, point_mass, monkeypatch):
    plant(monkeypatch, bug)
    check = run_case_check(point_mass=point_mass)
    assert not check.passed and check.p_value < SIGNIFICANCE, check


def test_case_check_in_batches(monkeypatch):
    # Large vocabularies are simulated in batches to bound memory; 999 draws a batch here, 21 batches.
    monkeypatch.setattr(sampling, "_CHECK_BATCH_ELEMENTS", 96 * 999)
    check = run_case_check()
    assert check.passed and check.n == 20000


def test_case_check_validates_its_arguments():
    p, q = case_distributions()
    with pytest.raises(ValueError, match="num_draws"):
        check_acceptance_rule(p, q, 0)
    with pytest.raises(ValueError, match="proposed_token"):
        check_acceptance_rule(p, q, 10, proposed_token=3)
    with pytest.raises(ValueError, match="proposed_token"):
        check_acceptance_rule(p, None, 10)


@pytest.mark.slow
def test_rule_acceptance_matches_the_expectation():
    # Issue 13, item 4, on the rule alone: the kept fraction of drafts sampled from q is sum min(p, q).
    p, q = case_distributions()
    n = 50000
    generator = torch.Generator().manual_seed(SEED)
    proposals = sample_tokens(q.expand(n, -1), generator).unsqueeze(-1)
    num_accepted, _ = accept_drafts(p.expand(n, 2, -1), q.expand(n, 1, -1), proposals, generator)
    alpha = float(expected_acceptance(p, q))
    assert abs(float(num_accepted.double().mean()) - alpha) < 4 * math.sqrt(alpha * (1 - alpha) / n)


# --- the engine: exact joint distributions against seeded runs --------------------------------


@dataclass(frozen=True)
class Case:
    """One statistical case: who drafts (``model``, ``lookup``, or ``none`` for greedy_generate), k, processing."""

    drafter: str
    k: int
    setting: str

    @property
    def new_tokens(self) -> int:
        return 3 if self.drafter == "none" else self.k + 2

    @property
    def prompt(self) -> list[int]:
        return LOOKUP_PROMPT if self.drafter == "lookup" else MODEL_PROMPT

    def __str__(self) -> str:
        return f"{self.drafter}-k{self.k}-{self.setting}"


def all_prefixes(length: int) -> torch.Tensor:
    """Every sequence of ``length`` tokens, in lexicographic order, shape ``(VOCAB ** length, length)``."""
    return torch.tensor(list(itertools.product(range(VOCAB), repeat=length)), dtype=torch.long).reshape(-1, length)


@functools.cache
def position_probs(model_name: str, prompt: tuple[int, ...], setting: str, length: int) -> torch.Tensor:
    """The processed distributions of new tokens 1 .. ``length`` after each prefix of ``length - 1`` new tokens.

    Shape ``(VOCAB ** (length - 1), length, VOCAB)``, prefixes in lexicographic order; full forward passes, no cache.
    """
    model = target_model() if model_name == "target" else draft_model()
    prefixes = all_prefixes(length - 1)
    ids = torch.cat([torch.tensor(prompt).expand(prefixes.shape[0], -1), prefixes], dim=1)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[:, len(prompt) - 1 :]
    return sampling_distribution(logits, SETTINGS[setting]).double()


@functools.cache
def exact_joint(prompt: tuple[int, ...], setting: str, length: int) -> np.ndarray:
    """The target's P(first ``length`` new tokens), one entry per sequence in lexicographic order."""
    probs = position_probs("target", prompt, setting, length)
    prefixes = all_prefixes(length - 1)
    prefix_probs = probs[:, :-1].gather(-1, prefixes.unsqueeze(-1)).squeeze(-1).prod(dim=1)
    return (prefix_probs.unsqueeze(-1) * probs[:, -1]).reshape(-1).numpy()


@dataclass
class Runs:
    counts: np.ndarray  # runs per sequence of new tokens, indexed like exact_joint
    accepted: int
    drafted: int


def seeded_runs(case: Case, runs: int = RUNS) -> Runs:
    """``runs`` generations of ``case.new_tokens`` tokens, all drawing from one generator seeded with SEED."""
    target = target_model()
    generator = torch.Generator().manual_seed(SEED)
    kwargs = params_kwargs(SETTINGS[case.setting])
    drafter = ModelDrafter(draft_model()) if case.drafter == "model" else PromptLookupDrafter(ngram_size=2)
    place_values = VOCAB ** np.arange(case.new_tokens - 1, -1, -1)
    counts = np.zeros(VOCAB**case.new_tokens, dtype=np.int64)
    accepted = drafted = 0
    for _ in range(runs):
        if case.drafter == "none":
            result = greedy_generate(target, case.prompt, case.new_tokens, generator=generator, **kwargs)
        else:
            result = speculative_generate(
                target, drafter, case.prompt, case.k, case.new_tokens, generator=generator, **kwargs
            )
        counts[int(np.dot(result.token_ids, place_values))] += 1
        accepted += result.stats.accepted_tokens
        drafted += result.stats.drafted_tokens
    return Runs(counts, accepted, drafted)


cached_runs = functools.cache(seeded_runs)  # the correct engine's runs, shared by the tests that read them


def joint_check(case: Case, runs: Runs):
    return chisquare_pooled(runs.counts, exact_joint(tuple(case.prompt), case.setting, case.new_tokens), SIGNIFICANCE)


LOSSLESS_CASES = [
    Case("model", 1, "plain"),
    Case("model", 2, "filtered"),
    Case("lookup", 1, "filtered"),
    Case("lookup", 2, "plain"),
    Case("none", 0, "filtered"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", LOSSLESS_CASES, ids=str)
def test_sampled_output_follows_the_target_distribution(case):
    """Chi-square of RUNS seeded runs against the exact joint distribution; false alarms at 0.001 per case."""
    runs = cached_runs(case)
    check = joint_check(case, runs)
    assert check.passed, check
    assert check.dof >= 10  # enough cells survive pooling for the test to see the shape
    if case.drafter != "none":  # the block was drafted, and drafts were both kept and rejected
        assert 0 < runs.accepted < runs.drafted


@pytest.mark.slow
@pytest.mark.parametrize(
    "bug, case",
    [
        ("resample-from-p", Case("model", 1, "plain")),
        ("resample-from-p", Case("lookup", 1, "filtered")),
        ("min-1-q-over-p", Case("model", 1, "plain")),
    ],
    ids=lambda value: str(value),
)
def test_sampled_output_test_rejects_a_planted_bug(bug, case, monkeypatch):
    """The lossless test itself, same runs and seed, on an engine with a planted bug: it must fail."""
    plant(monkeypatch, bug)
    check = joint_check(case, seeded_runs(case))
    assert not check.passed and check.p_value < SIGNIFICANCE, check


@pytest.mark.slow
def test_measured_acceptance_matches_the_expectation():
    """Issue 13, item 4: alpha measured by the engine against sum min(p, q), averaged over the first draft's context.

    In the k=1 case of 3 tokens every run drafts exactly one token, after the prefill's token x1, so the
    accepted count is binomial with mean E_x1[sum_v min(p(v|x1), q(v|x1))]; tolerance 4 standard errors.
    """
    case = Case("model", 1, "plain")
    runs = cached_runs(case)
    assert runs.drafted == RUNS
    target = position_probs("target", tuple(case.prompt), case.setting, 2)  # row x1: [P(x1), p(. | x1)]
    draft = position_probs("draft", tuple(case.prompt), case.setting, 2)
    alpha = float((target[0, 0] * expected_acceptance(target[:, 1], draft[:, 1])).sum())
    measured = runs.accepted / runs.drafted
    assert abs(measured - alpha) < 4 * math.sqrt(alpha * (1 - alpha) / runs.drafted), (measured, alpha)


# --- the engine: deterministic checks under sampling -----------------------------------------


def test_temperature_zero_is_the_greedy_path_and_draws_nothing():
    generator = torch.Generator().manual_seed(1)
    state = generator.get_state()
    greedy = greedy_generate(target_model(), MODEL_PROMPT, 12)
    spec = speculative_generate(
        target_model(), draft_model(), MODEL_PROMPT, 3, 12, generator=generator, top_p=0.5, top_k=2
    )
    assert spec.token_ids == greedy.token_ids
    assert greedy_generate(target_model(), MODEL_PROMPT, 12, generator=generator, top_k=2).token_ids == greedy.token_ids
    assert torch.equal(generator.get_state(), state)


def counts_of(stats) -> tuple:
    return (
        stats.new_tokens,
        stats.drafted_tokens,
        stats.accepted_tokens,
        stats.bonus_tokens,
        stats.drafted_per_step,
        stats.accepted_per_step,
        stats.target_forward_passes,
        stats.draft_forward_passes,
    )


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["model", "lookup"])
def test_seeded_runs_repeat_and_stats_add_up(drafter):
    def run(seed: int):
        draft = draft_model() if drafter == "model" else PromptLookupDrafter(ngram_size=2)
        return speculative_generate(
            target_model(),
            draft,
            LOOKUP_PROMPT,
            3,
            20,
            temperature=0.9,
            top_k=6,
            generator=torch.Generator().manual_seed(seed),
        )

    first, again, other = run(5), run(5), run(6)
    assert first.token_ids == again.token_ids and counts_of(first.stats) == counts_of(again.stats)
    assert other.token_ids != first.token_ids
    for stats in (first.stats, other.stats):
        assert stats.new_tokens == 20 == stats.accepted_tokens + stats.bonus_tokens
        assert sum(stats.drafted_per_step) == stats.drafted_tokens > 0
        assert sum(stats.accepted_per_step) == stats.accepted_tokens
        assert stats.bonus_tokens == stats.steps == stats.target_forward_passes
        assert all(0 <= a <= d <= 3 for a, d in zip(stats.accepted_per_step, stats.drafted_per_step))
        expected_draft_passes = stats.drafted_tokens + 1 if drafter == "model" else 0
        assert stats.draft_forward_passes == expected_draft_passes


class CheckingDrafter(ModelDrafter):
    """A model drafter whose q rows are checked against full forward passes: its cache must stay right."""

    def __init__(self, model, params: SamplingParams) -> None:
        super().__init__(model)
        self.params = params
        self.checked = 0

    def propose_sampled(self, committed_ids, k, sampling_params, generator):
        proposal, draft_probs = super().propose_sampled(committed_ids, k, sampling_params, generator)
        with torch.inference_mode():
            full = torch.cat([committed_ids[0], proposal[:-1]]).unsqueeze(0)
            logits = self.model(input_ids=full).logits[0, committed_ids.shape[1] - 1 :]
        assert torch.allclose(draft_probs, sampling_distribution(logits, self.params), atol=1e-5)
        self.checked += 1
        return proposal, draft_probs


@pytest.mark.parametrize("drafter", ["model", "lookup"])
def test_caches_stay_right_under_sampling(drafter, monkeypatch):
    """Every distribution the rule sees equals a full forward pass over the committed sequence.

    Resampled tokens replace rejected drafts, so both caches must be cut back to the kept prefix.
    """
    params = SamplingParams(1.2, top_k=6)
    seen = []

    def recording_rule(target_probs, draft_probs, proposal, generator):
        outcome = accept_draft(target_probs, draft_probs, proposal, generator)
        seen.append((target_probs, proposal, outcome[0]))
        return outcome

    monkeypatch.setattr(decoding, "accept_draft", recording_rule)
    draft = CheckingDrafter(draft_model(), params) if drafter == "model" else PromptLookupDrafter(ngram_size=2)
    generator = torch.Generator().manual_seed(8)
    result = speculative_generate(
        target_model(), draft, LOOKUP_PROMPT, 3, 30, generator=generator, **params_kwargs(params)
    )
    sequence = result.sequences[0]
    position = len(LOOKUP_PROMPT) + 1  # after the prefill's token
    with torch.inference_mode():
        for target_probs, proposal, num_accepted in seen:
            full = torch.cat([sequence[:position], proposal]).unsqueeze(0)
            logits = target_model()(input_ids=full).logits[0, position - 1 :]
            assert torch.allclose(target_probs, sampling_distribution(logits, params), atol=1e-5)
            assert torch.equal(sequence[position : position + num_accepted], proposal[:num_accepted])
            position += num_accepted + 1
    assert position == sequence.numel()
    assert 0 < result.stats.accepted_tokens < result.stats.drafted_tokens
    if drafter == "model":
        assert draft.checked == len([s for s in result.stats.drafted_per_step if s])
