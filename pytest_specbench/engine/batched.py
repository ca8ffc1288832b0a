"""Batched greedy and speculative decoding: B left-padded prompts, each row at its own speed.

>>> ids, mask = left_pad([[5, 6, 7], [8, 9]], pad_token_id=0)
>>> out = batched_speculative_generate(target, draft, ids, mask, k=4, max_new_tokens=32)
>>> [row.token_ids for row in out], out.stats.decode_tokens_per_second   # per row; the whole batch

Greedy only. Each step every unfinished row drafts up to ``k`` tokens (the batch form of
:class:`~pytest_specbench.engine.drafters.Drafter`), the target scores all rows' blocks in one pass, and each row
commits its own accepted prefix plus the target's next token; both caches
(:class:`~pytest_specbench.engine.row_cache.RowCache`) roll back per row, and a finished row leaves them. Lossless
means equal to the target's batched greedy ``generate`` with the same padding, and to its unbatched output up to
float rounding at near-ties (transformers #39421): docs/measuring.md, "Batch size".
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from ..kernels.timing import DeviceClock
from .acceptance import block_limit, greedy_accepted
from .drafters import Drafter, ModelDrafter, RowDrafters
from .inputs import check_batch, check_lengths, left_pad
from .row_cache import RowCache
from .stats import DecodeStats, GenerationResult, record_step, record_step_times, record_verify_step

__all__ = [
    "BatchedGenerationResult",
    "RowCache",
    "batched_greedy_generate",
    "batched_speculative_generate",
    "left_pad",
]


# --- results -----------------------------------------------------------------------------


@dataclass
class BatchedGenerationResult(Sequence):
    """One :class:`GenerationResult` per row (index it, iterate it) and ``stats`` for the whole batch.

    A row's ``sequences`` is its unpadded prompt plus its new tokens, shape (1, L); its ``stats`` count
    that row's drafted, accepted and bonus tokens per step (the steps it took part in), its
    ``wall_time_s`` is the time until the row finished, and its ``prefill_time_s`` is the batch's.
    ``stats`` is the batch: tokens summed over rows, ``target_forward_passes`` the batched passes,
    per-step lists summed over rows, times of the whole batch (``prefill_tokens`` = rows, so
    ``decode_tokens_per_second`` is the batch's decode throughput).
    """

    rows: list[GenerationResult]
    stats: DecodeStats
    padded_prompt_length: int = 0
    layout: str = "holes"

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]

    def __iter__(self) -> Iterator[GenerationResult]:
        return iter(self.rows)

    @property
    def token_ids(self) -> list[list[int]]:
        return [row.token_ids for row in self.rows]

    @property
    def acceptance_per_row(self) -> list[float]:
        return [row.stats.acceptance_rate for row in self.rows]

    @property
    def tokens_per_step_per_row(self) -> list[float]:
        return [row.stats.tokens_per_step for row in self.rows]


@dataclass
class _Row:
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)  # committed new tokens
    stats: DecodeStats = field(default_factory=DecodeStats)
    done: bool = False

    @property
    def sequence(self) -> list[int]:
        return self.prompt + self.tokens


def _finish(
    rows: list[_Row], batch: DecodeStats, start: float, end: float, layout: str, padded_length: int
) -> BatchedGenerationResult:
    results = []
    for row in rows:
        row.stats.new_tokens = len(row.tokens)
        row.stats.prefill_tokens = 1 if row.tokens else 0
        row.stats.prefill_time_s = batch.prefill_time_s
        if not row.stats.wall_time_s:
            row.stats.wall_time_s = end - start
        sequences = torch.tensor([row.sequence], dtype=torch.long)
        results.append(GenerationResult(sequences=sequences, prompt_length=len(row.prompt), stats=row.stats))
    batch.wall_time_s = end - start
    batch.new_tokens = sum(len(row.tokens) for row in rows)
    batch.prefill_tokens = sum(1 for row in rows if row.tokens)
    return BatchedGenerationResult(results, batch, padded_length, layout)


def _commit(row: _Row, tokens: list[int], max_new_tokens: int, eos_token_id: int | None) -> tuple[int, bool]:
    """Append ``tokens`` to ``row``, cut at EOS and at ``max_new_tokens``; returns how many were kept and
    whether the row is finished."""
    room = max_new_tokens - len(row.tokens)
    tokens = tokens[:room]
    if eos_token_id is not None and eos_token_id in tokens:
        tokens = tokens[: tokens.index(eos_token_id) + 1]
        row.done = True
    row.tokens.extend(tokens)
    if len(row.tokens) >= max_new_tokens:
        row.done = True
    return len(tokens), row.done


# --- greedy ------------------------------------------------------------------------------


@torch.inference_mode()
def batched_greedy_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    max_new_tokens: int,
    eos_token_id: int | None = None,
    *,
    layout: str = "auto",
) -> BatchedGenerationResult:
    """Target-only greedy decoding of a left-padded batch: the batched baseline.

    Each row gets exactly ``max_new_tokens`` tokens, or stops just after ``eos_token_id``; a row that
    stopped leaves the batch. Greedy only. Each row equals the row of
    ``model.generate(input_ids, attention_mask=attention_mask, do_sample=False)`` (up to float near-ties).
    """
    check_lengths(max_new_tokens)
    ids, mask = check_batch(input_ids, attention_mask, model.device)
    rows = [_Row(ids[b, mask[b].bool()].tolist()) for b in range(ids.shape[0])]
    clock = DeviceClock(model.device)
    batch = DecodeStats()
    cache = RowCache(model, layout)
    active = list(range(len(rows)))
    start = clock.now()
    if max_new_tokens > 0:
        feed, feed_valid = ids, None if bool(mask.all()) else mask.bool()
        while active:
            logits = cache.forward(feed, feed_valid, logits_to_keep=1)
            chosen = logits[:, -1].argmax(dim=-1)
            chosen_list = chosen.tolist()
            keep = []
            for position, b in enumerate(active):
                _, done = _commit(rows[b], [chosen_list[position]], max_new_tokens, eos_token_id)
                record_step(rows[b].stats, 0, 0, 1, 0)
                if done:
                    rows[b].stats.wall_time_s = clock.now() - start
                else:
                    keep.append(position)
            record_step(batch, 0, 0, len(active), 0)
            if batch.target_forward_passes == 1:
                batch.prefill_time_s = clock.now() - start
            if len(keep) < len(active):
                if not keep:
                    break
                index = torch.tensor(keep, device=chosen.device)
                cache.select(index)
                chosen = chosen[index]
                active = [active[p] for p in keep]
            feed, feed_valid = chosen.unsqueeze(1), None
    end = clock.now()
    batch.verify_time_s = max(end - start - batch.prefill_time_s, 0.0)
    return _finish(rows, batch, start, end, cache.layout, ids.shape[1])


# --- drafting ----------------------------------------------------------------------------


def _as_batch_drafter(draft, batch_size: int) -> Drafter:
    """What the batched engine drafts with: a model's :class:`ModelDrafter`, a drafter that drafts batches, or one
    drafter per row (each asked in turn)."""
    if isinstance(draft, PreTrainedModel):
        return ModelDrafter(draft)
    if isinstance(draft, Drafter):
        if draft.drafts_batches:
            return draft
        raise TypeError(f"{type(draft).__name__} does not draft batches: pass one instance per row (a list)")
    if isinstance(draft, Sequence) and not isinstance(draft, (str, bytes)):
        drafters = list(draft)
        if len(drafters) != batch_size or not all(isinstance(d, Drafter) for d in drafters):
            raise ValueError(f"a sequence of drafters needs one Drafter per row ({batch_size})")
        if any(d.model is not None and d.drafts_batches for d in drafters):
            raise ValueError("pass a draft model once (the model or one ModelDrafter), not one drafter per row")
        return RowDrafters(drafters)
    raise TypeError(
        f"draft must be a PreTrainedModel, a Drafter that drafts batches (ModelDrafter, PromptLookupDrafter) or a "
        f"list of Drafters, got {type(draft).__name__}"
    )


# --- speculative -------------------------------------------------------------------------


@dataclass
class _BatchRun:
    """What every step of one batched speculative run reads, and the rows it commits to."""

    rows: list[_Row]
    cache: RowCache
    drafter: Drafter
    k: int
    max_new_tokens: int
    eos_token_id: int | None
    pad_token_id: int
    clock: DeviceClock
    stats: DecodeStats = field(default_factory=DecodeStats)
    start: float = 0.0


@torch.inference_mode()
def batched_speculative_generate(
    target: PreTrainedModel,
    draft: PreTrainedModel | Drafter | Sequence[Drafter],
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    k: int,
    max_new_tokens: int,
    eos_token_id: int | None = None,
    *,
    pad_token_id: int = 0,
    layout: str = "auto",
) -> BatchedGenerationResult:
    """Greedy speculative decoding of a left-padded batch; each row equals the target's greedy output.

    Greedy only (no sampling). The first step is the batched prefill, timed as ``stats.prefill_time_s``. Then
    each step drafts up to ``k`` tokens per row (fewer near a row's ``max_new_tokens``, or where prompt lookup
    finds fewer), verifies all rows' blocks in one target pass, and commits per row the accepted prefix plus the
    target's next token; both caches roll back per row. A row stops after ``max_new_tokens`` tokens or just after
    ``eos_token_id`` and leaves the batch.

    ``draft``: a causal LM sharing the target's vocabulary (or a ``ModelDrafter``), a ``PromptLookupDrafter``,
    or a sequence of one ``Drafter`` per row. ``pad_token_id`` fills the holes of padded blocks (any id works;
    they are masked). ``layout``: the caches' layout (:class:`~pytest_specbench.engine.row_cache.RowCache`).
    """
    check_lengths(max_new_tokens, k)
    ids, mask = check_batch(input_ids, attention_mask, target.device)
    drafter = _as_batch_drafter(draft, ids.shape[0])
    drafter.reset()
    rows = [_Row(ids[b, mask[b].bool()].tolist()) for b in range(ids.shape[0])]
    cache, clock = RowCache(target, layout), DeviceClock(target.device)
    run = _BatchRun(rows, cache, drafter, k, max_new_tokens, eos_token_id, pad_token_id, clock)
    run.start = clock.now()
    active = _prefill_rows(run, ids, mask, layout) if max_new_tokens > 0 else []
    t_step = clock.now()
    while active:
        active, t_step = _batched_step(run, active, t_step)
    end = clock.now()
    run.stats.draft_forward_passes = drafter.forward_passes
    return _finish(rows, run.stats, run.start, end, cache.layout, ids.shape[1])


def _prefill_rows(run: _BatchRun, ids: torch.Tensor, mask: torch.Tensor, layout: str) -> list[int]:
    """The first step: the target reads the prompts and commits each row's first token, and the drafter reads
    the prompts. Returns the rows still active."""
    logits = run.cache.forward(ids, None if bool(mask.all()) else mask.bool(), logits_to_keep=1)
    first = logits[:, -1].argmax(dim=-1).tolist()
    run.drafter.prefill_rows(ids, mask, layout)
    for row, token in zip(run.rows, first):
        _commit(row, [token], run.max_new_tokens, run.eos_token_id)
        record_step(row.stats, 0, 0, 1, 0)
        row.stats.draft_forward_passes += run.drafter.last_passes
    record_step(run.stats, 0, 0, len(run.rows), 0)
    run.stats.prefill_time_s = run.clock.now() - run.start
    return _drop_finished(run, list(range(len(run.rows))))


def _batched_step(run: _BatchRun, active: list[int], t_draft: float) -> tuple[list[int], float]:
    """One decode step of the ``active`` rows: draft, verify and accept, commit, roll both caches back, record.

    ``t_draft`` is the clock reading the step starts from. Returns the rows still active and the clock
    reading the next step starts from.
    """
    live = [run.rows[b] for b in active]
    limits = [block_limit(run.k, run.max_new_tokens - len(row.tokens)) for row in live]
    proposals = run.drafter.propose_rows([row.sequence for row in live], limits, run.pad_token_id)
    t_verify = run.clock.now()
    accepted, target_tokens = _verify_rows(run.cache, live, proposals, run.pad_token_id)
    step_accepted, step_bonus = _commit_rows(run, live, proposals, accepted, target_tokens)
    # The target cache holds every committed token but the newest; the draft rolls back to match.
    run.cache.rollback(torch.tensor([len(row.sequence) - 1 for row in live], dtype=torch.long))
    run.drafter.commit_rows(accepted)
    t_done = run.clock.now()
    for stats in (run.stats, *(row.stats for row in live)):
        record_step_times(stats, t_draft, t_verify, t_done)
    record_step(run.stats, sum(len(p) for p in proposals), step_accepted, step_bonus, run.k)
    return _drop_finished(run, active), run.clock.now()


def _verify_rows(
    cache: RowCache, live: list[_Row], proposals: list[list[int]], pad_token_id: int
) -> tuple[list[int], list[list[int]]]:
    """Score every row's block in one target pass; per row, the accepted drafts and the target's greedy tokens."""
    width = 1 + max(len(p) for p in proposals)
    # Each row's newest token, its drafts, then holes up to the widest block.
    block = torch.tensor(
        [row.sequence[-1:] + p + [pad_token_id] * (width - 1 - len(p)) for row, p in zip(live, proposals)],
        dtype=torch.long,
    )
    block_valid = torch.tensor([[True] * (1 + len(p)) + [False] * (width - 1 - len(p)) for p in proposals])
    all_valid = bool(block_valid.all())
    device = cache.model.device
    block, block_valid = block.to(device), block_valid.to(device)
    logits = cache.forward(block, None if all_valid else block_valid, logits_to_keep=width)
    target_tokens = logits.argmax(dim=-1)  # (rows, width)
    accepted = greedy_accepted(block[:, 1:], target_tokens, block_valid[:, 1:])
    return accepted.tolist(), target_tokens.tolist()


def _commit_rows(
    run: _BatchRun, live: list[_Row], proposals: list[list[int]], accepted: list[int], target_tokens: list[list[int]]
) -> tuple[int, int]:
    """Per row: commit its accepted drafts and the target's next token, and record the step in the row's stats.
    Returns the accepted and the bonus tokens kept, summed over the rows."""
    step_accepted = step_bonus = 0
    for row, proposal, num_accepted, tokens in zip(live, proposals, accepted, target_tokens):
        committed = proposal[:num_accepted] + [tokens[num_accepted]]
        kept, _ = _commit(row, committed, run.max_new_tokens, run.eos_token_id)
        kept_accepted = record_verify_step(row.stats, len(proposal), num_accepted, kept, run.k)
        row.stats.draft_forward_passes += run.drafter.last_passes
        step_accepted += kept_accepted
        step_bonus += kept - kept_accepted
    return step_accepted, step_bonus


def _drop_finished(run: _BatchRun, active: list[int]) -> list[int]:
    """Note when each newly finished row finished and drop it from both caches; returns the rows still active."""
    keep = [position for position, b in enumerate(active) if not run.rows[b].done]
    for b in active:
        if run.rows[b].done and not run.rows[b].stats.wall_time_s:
            run.rows[b].stats.wall_time_s = run.clock.now() - run.start
    if len(keep) == len(active):
        return active
    if keep:
        index = torch.tensor(keep, dtype=torch.long, device=run.cache.valid.device)
        run.cache.select(index)
        run.drafter.select_rows(index)
    return [active[p] for p in keep]
