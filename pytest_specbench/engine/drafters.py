"""Drafters: whatever proposes the tokens that the target verifies.

The engine talks to every drafter through :class:`Drafter`: ``reset`` before
a generation, ``prefill`` with the prompt, then per step ``propose`` up to
``k`` tokens that continue the committed sequence and ``commit`` how many of
them the target accepted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from transformers import PreTrainedModel

from .compiled_steps import one_token_step
from .kv_cache import cache_length, crop_to, enable_rollback, new_cache, static_cache
from .names import DEFAULT_NGRAM_SIZE
from .sampling import SamplingParams, sample_tokens, sampling_distribution


class Drafter(ABC):
    """Proposes draft tokens; stays in step with the committed sequence."""

    #: forward passes of a draft model since the last ``reset`` (0 for model-free drafters)
    forward_passes: int = 0

    def reset(self) -> None:
        """Forget any state from a previous generation."""
        self.forward_passes = 0

    def prefill(self, prompt_ids: torch.Tensor) -> None:
        """Read the prompt (shape ``(1, L)``) before the first proposal; the engine times it with the prefill."""

    @abstractmethod
    def propose(self, committed_ids: torch.Tensor, k: int, min_confidence: float | None = None) -> torch.Tensor:
        """Return up to ``k`` token ids (1-D) that continue ``committed_ids`` (shape ``(1, L)``).

        With ``min_confidence``, a drafter that has probabilities ends the block after a token
        whose probability is below it (the engine passes it only when a schedule sets one).
        """

    def propose_sampled(
        self, committed_ids: torch.Tensor, k: int, sampling: SamplingParams, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Propose under sampling: up to ``k`` tokens and the distributions ``q`` they were drawn from.

        ``q`` has one row per proposed token (shape ``(len, V)``), or is ``None``
        when the proposal is a deterministic function of ``committed_ids`` (prompt
        lookup, say): ``q`` is then a point mass on each proposed token. This
        default proposes as :meth:`propose` does, so a drafter whose proposals
        are random must override it, or the engine's acceptance rule is wrong.
        """
        return self.propose(committed_ids, k), None

    def commit(self, num_accepted: int) -> None:
        """The target kept the first ``num_accepted`` tokens of the last proposal, then added its own."""


class ModelDrafter(Drafter):
    """A small causal LM that drafts with its own KV cache: greedily, or by sampling under sampling.

    The cache is rolled back to the committed prefix after each step, so the
    prefix is never recomputed.
    """

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.reset()

    def reset(self) -> None:
        super().reset()
        self._cache = None
        self._cached_length = 0  # committed positions already in the cache
        self._proposal_base = 0  # committed length when the last proposal was made
        self._proposal_length = 0
        self._static_length: int | None = None  # set by compile_steps until the next reset
        self._forward = self.model

    def compile_steps(self, max_length: int) -> None:
        """Until the next reset: a static cache of ``max_length`` positions, one-token steps compiled
        (:mod:`~pytest_specbench.engine.compiled_steps`). Call after ``reset``, before ``prefill``."""
        self._static_length = max_length
        self._forward = one_token_step(self.model)

    def _ensure_cache(self) -> None:
        if self._cache is None:
            self._cache = (new_cache(self.model) if self._static_length is None
                           else static_cache(self.model, self._static_length, role="draft"))
            enable_rollback(self._cache)

    def prefill(self, prompt_ids: torch.Tensor) -> None:
        self._ensure_cache()
        self.model(input_ids=prompt_ids.to(self.model.device), cache=self._cache, use_cache=True, logits_to_keep=1)
        self.forward_passes += 1
        self._cached_length = cache_length(self._cache)

    def propose(self, committed_ids: torch.Tensor, k: int, min_confidence: float | None = None) -> torch.Tensor:
        return self._draft(committed_ids, k, None, None, min_confidence)[0]

    def propose_sampled(
        self, committed_ids: torch.Tensor, k: int, sampling: SamplingParams, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self._draft(committed_ids, k, sampling, generator)

    def _draft(
        self, committed_ids: torch.Tensor, k: int, sampling: SamplingParams | None, generator: torch.Generator | None,
        min_confidence: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``k`` tokens, each the argmax (``sampling`` None or greedy) or a sample of the processed
        distribution; with the sampled rows ``q``, or None when drafting greedily. With
        ``min_confidence`` (greedy only) the block ends after a token whose probability is below it."""
        self._ensure_cache()  # a caller that skipped prefill() reads the prompt here instead
        device = self.model.device
        feed = committed_ids[:, self._cached_length :].to(device)
        sampled = sampling is not None and not sampling.greedy
        proposal, draft_probs = [], []
        for _ in range(k):
            logits = self._forward(input_ids=feed, cache=self._cache, use_cache=True, logits_to_keep=1).logits
            if sampled:
                probs = sampling_distribution(logits[:, -1], sampling)
                token = sample_tokens(probs, generator).unsqueeze(-1)
                draft_probs.append(probs)
            else:
                token = logits[:, -1].argmax(dim=-1, keepdim=True)
            proposal.append(token)
            feed = token
            self.forward_passes += 1
            # As transformers' confidence criterion: keep the unsure token, draft no further.
            if min_confidence is not None and float(logits[0, -1].float().softmax(-1).max()) < min_confidence:
                break
        self._proposal_base = committed_ids.shape[1]
        self._proposal_length = len(proposal)
        if not proposal:
            return torch.empty(0, dtype=torch.long, device=device), None
        return torch.cat(proposal, dim=1)[0], torch.cat(draft_probs) if sampled else None

    def commit(self, num_accepted: int) -> None:
        # The cache holds the committed prefix plus the first k-1 proposed tokens
        # (the last proposed token was never fed back). Under sampling the token
        # committed after a rejection is the target's resample, not the draft's:
        # it lies past the kept prefix, so it is cropped too and fed next step.
        kept = self._proposal_base + min(num_accepted, max(self._proposal_length - 1, 0))
        crop_to(self._cache, min(kept, cache_length(self._cache)))
        self._cached_length = cache_length(self._cache)


def as_drafter(draft: PreTrainedModel | Drafter) -> Drafter:
    """Wrap a bare model in :class:`ModelDrafter`; pass drafters through."""
    if isinstance(draft, Drafter):
        return draft
    if isinstance(draft, PreTrainedModel):
        return ModelDrafter(draft)
    raise TypeError(f"draft must be a transformers PreTrainedModel or a Drafter, got {type(draft).__name__}")


class PromptLookupDrafter(Drafter):
    """Model-free n-gram drafter ("prompt lookup decoding").

    Finds the most recent earlier occurrence of the sequence's last
    ``ngram_size`` tokens (falling back to shorter n-grams, down to one
    token, as transformers' prompt lookup does) and proposes the tokens that
    followed it. Proposes nothing when no n-gram recurs; the engine then
    takes a plain target step. Pays off on inputs that repeat themselves
    (code edits, summaries quoting their source, extraction).
    """

    def __init__(self, ngram_size: int = DEFAULT_NGRAM_SIZE, max_proposal: int | None = None) -> None:
        if isinstance(ngram_size, bool) or not isinstance(ngram_size, int) or ngram_size < 1:
            raise ValueError(f"ngram_size must be an integer >= 1, got {ngram_size!r}")
        if max_proposal is not None and (
            isinstance(max_proposal, bool) or not isinstance(max_proposal, int) or max_proposal < 1
        ):
            raise ValueError(f"max_proposal must be None or an integer >= 1, got {max_proposal!r}")
        self.ngram_size = ngram_size
        self.max_proposal = max_proposal
        self.reset()

    def propose(self, committed_ids: torch.Tensor, k: int, min_confidence: float | None = None) -> torch.Tensor:
        sequence = committed_ids[0]
        limit = k if self.max_proposal is None else min(k, self.max_proposal)
        length = sequence.numel()
        if limit >= 1:
            # An n-gram needs at least one earlier position to match, hence length - 1.
            for n in range(min(self.ngram_size, length - 1), 0, -1):
                pattern = sequence[length - n :]
                # Windows starting at 0 .. length-n-1: every earlier occurrence, each
                # followed by at least one token; the last window is the pattern itself.
                windows = sequence.unfold(0, n, 1)[:-1]
                hits = (windows == pattern).all(dim=1).nonzero()
                if hits.numel():
                    start = int(hits[-1, 0]) + n  # the most recent occurrence
                    return sequence[start : start + limit].clone()
        return torch.empty(0, dtype=torch.long, device=committed_ids.device)
