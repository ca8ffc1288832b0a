"""Speculative sampling: the distributions, the accept/resample rule and a check of the rule.

Under sampling, speculative decoding stays lossless *in distribution* (Leviathan et al. 2023; Chen et al. 2023).
With ``p`` the target's and ``q`` the draft's next-token distribution after the same temperature, top-k and top-p
processing, a draft token ``x ~ q`` is kept with probability ``min(1, p(x) / q(x))``; the first rejected one is
replaced by a draw from the normalised positive part of ``p - q``, and after a fully accepted block the bonus token
is drawn from ``p``. Prompt lookup proposes a point mass, so its token is kept with probability ``p(x)``.

The decoding loop and :func:`check_acceptance_rule` (the per-case check under sampling) both run
:func:`accept_drafts`, so the check tests the code that decodes. All randomness comes from the caller's
:class:`torch.Generator`, so a seeded run is reproducible. How it is tested: docs/sampling.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from .numbers import is_finite_number

__all__ = [
    "DistributionCheck",
    "SamplingParams",
    "accept_draft",
    "accept_drafts",
    "acceptance_probability",
    "check_acceptance_rule",
    "chisquare_pooled",
    "expected_acceptance",
    "next_token",
    "residual_distribution",
    "sample_tokens",
    "sampling_distribution",
]

#: the distribution checks' default significance: a correct sampler fails one check in a thousand
SIGNIFICANCE = 0.001
#: pooled chi-square: cells expected to hold fewer draws than this join one tail cell
MIN_EXPECTED_COUNT = 5.0
#: rows x vocabulary entries per batch of :func:`check_acceptance_rule`: bounds its memory on large vocabularies
_CHECK_BATCH_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen: greedy (``temperature == 0``) or sampled after processing.

    ``top_k == 0`` and ``top_p == 1`` switch those filters off, as in
    ``model.generate``; both are ignored when greedy.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        if not is_finite_number(self.temperature) or self.temperature < 0:
            raise ValueError(
                f"temperature must be a finite number >= 0 (0 means greedy decoding), got {self.temperature!r}"
            )
        if not is_finite_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be a number in (0, 1] (1 switches top-p off), got {self.top_p!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 switches top-k off), got {self.top_k!r}")
        # transformers' temperature warper takes floats only; an int temperature is as good.
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "top_p", float(self.top_p))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


#: greedy decoding, the default of every engine (frozen, so one instance serves as a default argument)
GREEDY = SamplingParams()


def sampling_distribution(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Next-token probabilities from ``logits`` (shape ``(V,)`` or ``(n, V)``) after ``params``' processing.

    The processing is transformers' own warpers in ``generate``'s order
    (temperature, top-k, top-p, each only when it changes something), on
    float32 logits as ``generate`` does, so top-p means what it means there.
    Greedy ``params`` give the limit of temperature 0: a point mass on the argmax.
    """
    rows = logits.reshape(-1, logits.shape[-1]).float()
    if params.greedy:
        probs = torch.zeros_like(rows).scatter_(-1, rows.argmax(dim=-1, keepdim=True), 1.0)
        return probs.reshape(logits.shape)
    warpers = []
    if params.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(params.temperature))
    if params.top_k != 0:
        warpers.append(TopKLogitsWarper(top_k=params.top_k))
    if params.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=params.top_p))
    for warper in warpers:
        rows = warper(None, rows)  # these three warpers never read input_ids
    return rows.softmax(dim=-1).reshape(logits.shape)


def _uniforms(count: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """``count`` float64 uniforms in [0, 1), drawn on the generator's device and moved to ``device``."""
    source = generator.device if generator is not None else device
    return torch.rand(count, generator=generator, device=source, dtype=torch.float64).to(device)


def sample_tokens(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token id per row of ``probs`` (shape ``(B, V)``; rows need not be normalised), shape ``(B,)``.

    Inverse-CDF sampling: one uniform per row, so a generator on the CPU works
    for rows on any device, and zero-probability tokens are never drawn.
    """
    cdf = probs.double().cumsum(dim=-1)
    targets = _uniforms(probs.shape[0], generator, probs.device).unsqueeze(-1) * cdf[:, -1:]
    # right=True: the first token whose cumulative mass exceeds the target, which skips zero-mass tokens.
    return torch.searchsorted(cdf, targets, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)


def next_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """The next token (shape ``(1, 1)``) from last-position logits ``(1, V)``: argmax when greedy, else a sample."""
    if params.greedy:
        return logits.argmax(dim=-1, keepdim=True)
    return sample_tokens(sampling_distribution(logits, params), generator).unsqueeze(-1)


def acceptance_probability(target_token_probs: torch.Tensor, draft_token_probs: torch.Tensor) -> torch.Tensor:
    """``min(1, p(x) / q(x))`` for proposed tokens ``x``: how likely each is kept."""
    return (target_token_probs / draft_token_probs).clamp(max=1.0)


def residual_distribution(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """The distribution a rejected position is resampled from: ``max(p - q, 0)`` normalised, per row.

    Where ``p <= q`` everywhere (so ``p == q``) a rejection has probability zero;
    ``p`` itself is returned then, so the result is always a distribution.
    """
    residual = (target_probs - draft_probs).clamp(min=0)
    mass = residual.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, residual / mass.clamp(min=torch.finfo(residual.dtype).tiny), target_probs)


def accept_drafts(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    proposals: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The accept/resample rule on a batch of independent draft blocks.

    ``target_probs`` ``(B, m+1, V)``: the target's distributions at each proposal
    position plus one; ``draft_probs`` ``(B, m, V')`` with ``V' <= V`` (a smaller
    draft vocabulary is padded with zeros), or ``None`` when every proposal is
    a point mass; ``proposals`` ``(B, m)``. Returns how many proposed tokens
    each block keeps (shape ``(B,)``) and the token committed after them:
    resampled at the first rejection, or the bonus token from row ``m``.
    """
    batch, m = proposals.shape
    vocab = target_probs.shape[-1]
    if draft_probs is not None and draft_probs.shape[-1] < vocab:
        draft_probs = torch.nn.functional.pad(draft_probs, (0, vocab - draft_probs.shape[-1]))
    rows = torch.arange(batch, device=proposals.device)
    if m:
        picked = proposals.unsqueeze(-1)
        target_token_probs = target_probs[:, :m].gather(-1, picked).squeeze(-1)
        draft_token_probs = (
            torch.ones_like(target_token_probs) if draft_probs is None else draft_probs.gather(-1, picked).squeeze(-1)
        )
        uniforms = _uniforms(batch * m, generator, proposals.device).view(batch, m)
        kept = uniforms < acceptance_probability(target_token_probs, draft_token_probs)
        num_accepted = kept.to(torch.int64).cumprod(dim=1).sum(dim=1)
    else:
        num_accepted = torch.zeros(batch, dtype=torch.int64, device=proposals.device)
    next_probs = target_probs[rows, num_accepted]
    rejected = num_accepted < m
    if bool(rejected.any()):
        # The rejected position's q: the draft's row there, or a point mass on the proposed token.
        at = num_accepted.clamp(max=m - 1)
        if draft_probs is None:
            rejected_q = torch.zeros_like(next_probs).scatter_(-1, proposals[rows, at].unsqueeze(-1), 1.0)
        else:
            rejected_q = draft_probs[rows, at].to(next_probs.dtype)
        next_probs = torch.where(rejected.unsqueeze(-1), residual_distribution(next_probs, rejected_q), next_probs)
    return num_accepted, sample_tokens(next_probs, generator)


def accept_draft(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    proposal: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[int, int]:
    """The rule for one draft block, as the decoding loop calls it: :func:`accept_drafts` on a batch of one.

    ``target_probs`` ``(m+1, V)``, ``draft_probs`` ``(m, V')`` or ``None`` (point
    masses), ``proposal`` ``(m,)``. Returns ``(num_accepted, next_token)``.
    """
    batch_draft = None if draft_probs is None else draft_probs.unsqueeze(0)
    num_accepted, tokens = accept_drafts(target_probs.unsqueeze(0), batch_draft, proposal.unsqueeze(0), generator)
    return int(num_accepted[0]), int(tokens[0])


def expected_acceptance(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """Per-token acceptance under sampling, ``sum_x min(p(x), q(x))`` over the last axis: the cost model's alpha."""
    vocab = target_probs.shape[-1]
    if draft_probs.shape[-1] < vocab:
        draft_probs = torch.nn.functional.pad(draft_probs, (0, vocab - draft_probs.shape[-1]))
    return torch.minimum(target_probs, draft_probs.to(target_probs.dtype)).sum(dim=-1)


@dataclass(frozen=True)
class DistributionCheck:
    """A chi-square goodness-of-fit verdict: draws against the distribution they should follow.

    ``passed`` is ``p_value >= significance``, so a correct sampler fails with
    probability ``significance`` (a false alarm). A draw in a cell of
    probability zero gives an infinite statistic and ``p_value`` 0; otherwise
    ``dof`` 0 means a single cell was left after pooling: nothing to test, ``p_value`` 1.
    """

    statistic: float
    dof: int
    p_value: float
    n: int
    significance: float
    passed: bool


def chisquare_pooled(
    counts: np.ndarray | torch.Tensor,
    probs: np.ndarray | torch.Tensor,
    significance: float = SIGNIFICANCE,
) -> DistributionCheck:
    """Chi-square test of observed ``counts`` per cell against cell probabilities ``probs``.

    Cells expected to hold fewer than 5 draws are pooled into one tail cell
    (the chi-square approximation needs about 5 per cell); a tail still below
    5 takes in the smallest remaining cells until it reaches 5. A draw in a
    cell of probability zero is impossible: the test fails outright.
    """
    from scipy.stats import chisquare  # scipy is only needed here; keep the engine's import light

    observed = np.asarray(counts, dtype=np.float64).ravel()
    expected_probs = np.asarray(probs, dtype=np.float64).ravel()
    n = int(observed.sum())
    if observed.shape != expected_probs.shape:
        raise ValueError(f"counts and probs need one entry per cell, got {observed.shape} and {expected_probs.shape}")
    impossible = bool((observed[expected_probs <= 0] > 0).any())
    expected = expected_probs / expected_probs.sum() * n
    order = np.argsort(expected, kind="stable")  # ascending, so small cells pool first
    small = int(np.searchsorted(expected[order], MIN_EXPECTED_COUNT, side="left"))
    while 0 < small < order.size and expected[order[:small]].sum() < MIN_EXPECTED_COUNT:
        small += 1
    if small == 0:
        cells_observed, cells_expected = observed, expected
    else:
        big = order[small:]
        cells_observed = np.append(observed[big], observed[order[:small]].sum())
        cells_expected = np.append(expected[big], expected[order[:small]].sum())
    dof = cells_observed.size - 1
    if impossible:
        return DistributionCheck(math.inf, dof, 0.0, n, significance, False)
    if dof == 0:
        return DistributionCheck(0.0, 0, 1.0, n, significance, True)
    statistic, p_value = chisquare(cells_observed, cells_expected)
    return DistributionCheck(float(statistic), dof, float(p_value), n, significance, bool(p_value >= significance))


def check_acceptance_rule(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    num_draws: int,
    generator: torch.Generator | None = None,
    *,
    proposed_token: int | None = None,
    significance: float = SIGNIFICANCE,
) -> DistributionCheck:
    """Check the engine's accept/resample rule on one position's real distributions.

    Simulates ``num_draws`` one-token drafts from ``draft_probs`` (shape ``(V',)``;
    ``None``: a point-mass drafter proposing ``proposed_token`` every time),
    runs them through :func:`accept_drafts`, the rule the decoding loop uses,
    and tests the tokens it commits (the draft when kept, the resampled token
    when not) against ``target_probs`` (shape ``(V,)``) with
    :func:`chisquare_pooled`. This proves the rule right on these distributions;
    it says nothing about the caches or the distributions the loop computes.
    """
    if isinstance(num_draws, bool) or not isinstance(num_draws, int) or num_draws < 1:
        raise ValueError(f"num_draws must be an integer >= 1, got {num_draws!r}")
    if (draft_probs is None) == (proposed_token is None):
        raise ValueError("give draft_probs (a draft model's q) or proposed_token (a point-mass drafter), not both")
    vocab = target_probs.shape[-1]
    # Row 1 (the bonus row) is never read for the first token; it only gives the block its m+1 rows.
    block_target = target_probs.reshape(1, 1, vocab).expand(1, 2, vocab)
    counts = torch.zeros(vocab, dtype=torch.int64, device=target_probs.device)
    batch_size = max(1, _CHECK_BATCH_ELEMENTS // vocab)
    for start in range(0, num_draws, batch_size):
        batch = min(batch_size, num_draws - start)
        if draft_probs is None:
            proposals = torch.full((batch, 1), int(proposed_token), dtype=torch.int64, device=target_probs.device)
            batch_draft = None
        else:
            proposals = sample_tokens(draft_probs.reshape(1, -1).expand(batch, -1), generator).unsqueeze(-1)
            batch_draft = draft_probs.reshape(1, 1, -1).expand(batch, 1, -1)
        num_accepted, next_tokens = accept_drafts(
            block_target.expand(batch, 2, vocab), batch_draft, proposals, generator
        )
        committed = torch.where(num_accepted > 0, proposals[:, 0], next_tokens)
        counts += torch.bincount(committed, minlength=vocab)
    return chisquare_pooled(counts.cpu().numpy(), target_probs.detach().double().cpu().numpy(), significance)
