"""Drafters: whatever proposes the tokens that the target verifies.

The engine talks to every drafter through :class:`Drafter`: ``reset`` before a generation, ``prefill`` with the
prompt, then per step ``propose`` up to ``k`` tokens that continue the committed sequence and ``commit`` how many of
them the target accepted. Its batch form, for the batched engine, is the same steps for every row of a left-padded
batch at once (``prefill_rows``, ``propose_rows``, ``commit_rows``, ``select_rows``). What a drafter can do is
said by its attributes (``model``, ``drafts_batches``, ``drafts_sampled``), never by its class: callers read those.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from .compiled_steps import one_token_step
from .kv_cache import cache_length, crop_to, enable_rollback, new_cache, static_cache
from .names import DEFAULT_NGRAM_SIZE
from .row_cache import RowCache
from .sampling import SamplingParams, sample_tokens, sampling_distribution


class Drafter(ABC):
    """Proposes draft tokens; stays in step with the committed sequence."""

    #: the draft model that proposes, or None for a model-free drafter (prompt lookup)
    model: PreTrainedModel | None = None
    #: forward passes of a draft model since the last ``reset`` (0 for model-free drafters)
    forward_passes: int = 0
    #: draft forward passes of the last ``prefill_rows`` or ``propose_rows``, which every active row took part in
    last_passes: int = 0
    #: seconds of proposals since the last ``reset`` spent outside the draft's passes in work of its own (a drafter
    #: with another tokenizer: re-tokenisation); the engine reports it apart from the draft's time
    translation_time_s: float = 0.0
    #: it drafts for a batch (the batch form below). The default batch form asks this one instance for each row
    #: in turn, which is right only for a drafter that keeps no per-sequence state; others override it or say no.
    drafts_batches: bool = False
    #: it proposes under sampling with the distributions it drew from (:meth:`propose_sampled`)
    drafts_sampled: bool = True
    #: its draft model's one-token steps run compiled under :meth:`compile_steps`
    compiles: bool = False
    #: the most positions one pass of its draft model reads after the prefill: the row counts its model's kernel forms
    #: are settled for (:mod:`.verify_forms`; a wider pass runs the model's own kernels)
    pass_rows: int = 1
    #: how transformers' ``generate()`` runs it: ``"assistant_model"``, ``"prompt_lookup"``, ``"universal"``
    #: (universal assisted generation, another tokenizer), or None where it has no such method
    assisted_by: str | None = None

    def reset(self) -> None:
        """Forget any state from a previous generation."""
        self.forward_passes = 0
        self.translation_time_s = 0.0

    def prefill(self, prompt_ids: torch.Tensor) -> None:
        """Read the prompt (shape ``(1, L)``) before the first proposal; the engine times it with the prefill."""

    def compile_steps(self, max_length: int) -> None:
        """Until the next reset, run its one-token steps compiled on a static cache of ``max_length`` positions
        (``--specbench-compile``); a drafter with nothing to compile ignores it."""

    def draft_ids_for(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``input_ids`` (the target's tokens, ``(1, L)``) as its draft model reads them: the same ids, unless its
        tokenizer is another one."""
        return input_ids

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

    # --- the batch form (where ``drafts_batches``) -----------------------------------------------------------

    _rows: RowDrafters | None = None  # the default batch form's rows, from prefill_rows

    def prefill_rows(self, ids: torch.Tensor, mask: torch.Tensor, layout: str = "auto") -> None:
        """Read the left-padded prompts ``ids`` (B, T), whose real tokens ``mask`` marks; ``layout`` is a
        draft cache's :class:`~pytest_specbench.engine.row_cache.RowCache` layout."""
        self._rows = RowDrafters([self] * ids.shape[0])
        self._rows.prefill_rows(ids, mask, layout)

    def propose_rows(self, sequences: list[list[int]], limits: list[int], pad_token_id: int) -> list[list[int]]:
        """Per active row, at most ``limits[i]`` tokens continuing ``sequences[i]`` (its committed tokens);
        ``pad_token_id`` fills the holes of a padded batched pass."""
        return self._rows.propose_rows(sequences, limits, pad_token_id)

    def commit_rows(self, accepted: list[int]) -> None:
        """Each active row kept the first ``accepted[i]`` tokens of its last proposal, then the target's own."""
        if self._rows is not None:
            self._rows.commit_rows(accepted)

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only the active rows ``rows`` (indices into the current active rows)."""
        if self._rows is not None:
            self._rows.select_rows(rows)


class RowDrafters(Drafter):
    """The batch form of one :class:`Drafter` per row, each asked in turn; an instance may serve several rows only
    if it keeps no per-sequence state (prompt lookup). Draft passes are counted in ``forward_passes`` only.
    Unbatched, it is its first row's drafter."""

    drafts_batches = True

    def __init__(self, drafters: Sequence[Drafter]) -> None:
        self.drafters = list(drafters)
        self.active = list(range(len(self.drafters)))
        self._proposed: list[bool] = []

    def reset(self) -> None:
        for drafter in self.drafters:
            drafter.reset()
        self.active = list(range(len(self.drafters)))

    def propose(self, committed_ids: torch.Tensor, k: int, min_confidence: float | None = None) -> torch.Tensor:
        return self.drafters[0].propose(committed_ids, k, min_confidence)

    def prefill_rows(self, ids: torch.Tensor, mask: torch.Tensor, layout: str = "auto") -> None:
        self.reset()
        for b, drafter in enumerate(self.drafters):
            drafter.prefill(ids[b, mask[b].bool()].unsqueeze(0))

    def propose_rows(self, sequences: list[list[int]], limits: list[int], pad_token_id: int) -> list[list[int]]:
        self._proposed = [limit > 0 for limit in limits]
        return [
            self.drafters[b].propose(torch.tensor([sequence], dtype=torch.long), limit).tolist()[:limit]
            if limit > 0
            else []
            for b, sequence, limit in zip(self.active, sequences, limits)
        ]

    def commit_rows(self, accepted: list[int]) -> None:
        for b, proposed, a in zip(self.active, self._proposed, accepted):
            if proposed:
                self.drafters[b].commit(a)

    def select_rows(self, rows: torch.Tensor) -> None:
        self.active = [self.active[i] for i in rows.tolist()]

    @property
    def forward_passes(self) -> int:  # each instance once, however many rows it serves
        return sum(drafter.forward_passes for drafter in {id(d): d for d in self.drafters}.values())


def _kept_in_draft_cache(accepted: int, drafted: int) -> int:
    """Proposed tokens a draft cache keeps after a step: the accepted ones among the ``drafted - 1`` it was fed
    (the last proposed token never was). Under sampling the token after a rejection is the target's resample,
    not the draft's: it lies past the kept ones, so it is cropped too and fed next step."""
    return min(accepted, max(drafted - 1, 0))


class ModelDrafter(Drafter):
    """A small causal LM that drafts with its own KV cache: greedily, or by sampling under sampling.

    The cache is rolled back to the committed prefix after each step, so the
    prefix is never recomputed. For a batch it drafts for all rows in batched passes with
    its own :class:`~pytest_specbench.engine.row_cache.RowCache`.
    """

    drafts_batches = True
    compiles = True
    assisted_by = "assistant_model"
    pass_rows = 2  # one token, or after a block accepted whole its own last one and the target's bonus token

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
        self._row_cache: RowCache | None = None  # the batch's cache, from prefill_rows
        self._row_bases: list[int] = []  # each active row's committed length at the last proposal
        self._row_steps = 0  # draft passes of the last batch proposal

    def compile_steps(self, max_length: int) -> None:
        """Until the next reset: a static cache of ``max_length`` positions, one-token steps compiled
        (:mod:`~pytest_specbench.engine.compiled_steps`). Call after ``reset``, before ``prefill``."""
        self._static_length = max_length
        self._forward = one_token_step(self.model)

    def _ensure_cache(self) -> None:
        if self._cache is None:
            self._cache = (
                new_cache(self.model)
                if self._static_length is None
                else static_cache(self.model, self._static_length, role="draft")
            )
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
        self,
        committed_ids: torch.Tensor,
        k: int,
        sampling: SamplingParams | None,
        generator: torch.Generator | None,
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
        kept = self._proposal_base + _kept_in_draft_cache(num_accepted, self._proposal_length)
        crop_to(self._cache, min(kept, cache_length(self._cache)))
        self._cached_length = cache_length(self._cache)

    def prefill_rows(self, ids: torch.Tensor, mask: torch.Tensor, layout: str = "auto") -> None:
        self.reset()
        self._row_cache = RowCache(self.model, layout)
        device = self.model.device
        self._row_cache.forward(ids.to(device), None if bool(mask.all()) else mask.bool().to(device))
        self.forward_passes += 1
        self.last_passes = 1

    def propose_rows(self, sequences: list[list[int]], limits: list[int], pad_token_id: int) -> list[list[int]]:
        steps = self.last_passes = self._row_steps = max(limits)
        if steps == 0:
            return [[] for _ in sequences]
        self._row_bases = [len(sequence) for sequence in sequences]
        # Each row feeds its committed tokens the draft has not read (1 or 2), left padded with holes
        # (at least the newest token: only a broken rollback leaves the draft ahead of a row).
        cached = self._row_cache.lengths.tolist()
        pending = [sequence[min(length, len(sequence) - 1) :] for sequence, length in zip(sequences, cached)]
        width = max(len(p) for p in pending)
        feed = torch.tensor([[pad_token_id] * (width - len(p)) + p for p in pending], dtype=torch.long)
        feed_valid = torch.tensor([[False] * (width - len(p)) + [True] * len(p) for p in pending])
        feed = feed.to(self.model.device)
        feed_valid = None if bool(feed_valid.all()) else feed_valid.to(self.model.device)
        drafted = []
        for _ in range(steps):
            logits = self._row_cache.forward(feed, feed_valid, logits_to_keep=1)
            self.forward_passes += 1
            feed, feed_valid = logits[:, -1].argmax(dim=-1, keepdim=True), None
            drafted.append(feed)
        tokens = torch.cat(drafted, dim=1).tolist()
        return [row[:limit] for row, limit in zip(tokens, limits)]

    def commit_rows(self, accepted: list[int]) -> None:
        if self._row_steps == 0:
            return
        keep = [base + _kept_in_draft_cache(a, self._row_steps) for base, a in zip(self._row_bases, accepted)]
        self._row_cache.rollback(torch.tensor(keep, dtype=torch.long))

    def select_rows(self, rows: torch.Tensor) -> None:
        self._row_cache.select(rows.to(self.model.device))


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
    (code edits, summaries quoting their source, extraction). It keeps no state between proposals, so the
    default batch form (this one instance asked for each row) is its own.
    """

    drafts_batches = True
    assisted_by = "prompt_lookup"

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
