"""Batched greedy and speculative decoding: B left-padded prompts, each row at its own speed.

Greedy only (``temperature=0``): every row's output is the target's greedy continuation of that
row's prompt. Sampling is not implemented here.

>>> from pytest_specbench.engine.batched import batched_speculative_generate, left_pad
>>> ids, mask = left_pad([[5, 6, 7], [8, 9]], pad_token_id=0)
>>> out = batched_speculative_generate(target, draft, ids, mask, k=4, max_new_tokens=32)
>>> [row.token_ids for row in out]          # one GenerationResult per row
>>> out.stats.decode_tokens_per_second      # the whole batch

Each step every unfinished row drafts up to ``k`` tokens, the target scores all rows' blocks in
one forward pass, and each row commits its own accepted prefix plus the target's next token, so
rows advance by different amounts.

Cache design: one ``DynamicCache`` per model with a batch dimension, and beside it a boolean
*validity mask* of shape (rows, slots) (:class:`RowCache`). A slot is a position in the cache
tensors; a row's tokens are its valid slots, in slot order. Every forward pass gets that mask as
its ``attention_mask`` and explicit ``position_ids`` (a row's position = how many valid slots
precede it), so a row never sees another row's layout. Rolling row ``b`` back to ``n`` tokens just
marks its valid slots after the ``n``-th invalid (:meth:`RowCache.rollback`): the rejected drafts
become *holes*, masked like left padding. Slots at the end that no row holds any more are cropped
with the cache's own ``crop``, so the cache grows by ``1 + max(accepted)`` per step. Why holes
rather than re-cropping each row: a batched tensor cannot be cropped per row without copying every
layer's cache each step; holes cost nothing but the masked slots, which attention reads (at most
the batch's largest accepted count per step, beyond the tokens themselves).

Holes are wrong for sliding-window layers: transformers' sliding mask counts slots, not tokens,
so a hole inside the window would push a real token out of it. A cache with sliding-window layers
(Gemma 3, Mistral) is therefore *compacted* after every rollback: each row's valid slots are
gathered to the right, so every row is again plainly left padded, and columns no row holds are
dropped (``layout="compact"``, chosen automatically; it can be forced for any model). Compaction
copies the cache once per step (skipped when no row moved); the sliding layers hold only ``window - 1``
slots between steps. In the holes layout the left padding of a row that left the batch stays until
the batch ends (only the end of the cache is cropped). While no row has padding or a hole (always at
batch 1), passes get no mask and no positions, exactly as the unbatched engine's do.
It reads the cache layers' tensors directly (``DynamicLayer.keys``/``values`` and a sliding layer's
``cumulative_length``), checked against transformers 5.x; other layer types are refused.

Finished rows (``max_new_tokens`` reached, or EOS) are dropped from both caches at once
(``batch_select_indices``), so they cost neither draft nor target work afterwards. A row with one
token left drafts nothing of its own, but while others draft it still rides along in the draft's
batched passes.

Drafters: a draft ``PreTrainedModel`` (or a :class:`~pytest_specbench.engine.drafters.ModelDrafter`,
whose model is used) drafts for all rows in batched passes with its own :class:`RowCache`;
:class:`~pytest_specbench.engine.drafters.PromptLookupDrafter` looks up each row's own sequence;
any other drafter is passed as a sequence of one :class:`Drafter` per row.

What "lossless" means here: each row's tokens equal the target's own batched greedy
``model.generate(input_ids, attention_mask=..., do_sample=False)`` with the same padding, and each
prompt's unbatched greedy output, up to float rounding: batched and padded matrix products round
differently from unbatched ones, so where the target's top-2 logits are within rounding a batched
run may take the other token (transformers #39421). The tests report such a difference as a
near-tie, never as a pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from .decoding import _record_step
from .drafters import Drafter, ModelDrafter, PromptLookupDrafter
from .stats import DecodeStats, GenerationResult
from .timing import DeviceClock

__all__ = [
    "BatchedGenerationResult",
    "RowCache",
    "batched_greedy_generate",
    "batched_speculative_generate",
    "left_pad",
]

#: how a rollback treats the rows; anything but "own" is a planted bug for the tests
#: ("row0": row 0's rollback applied to every row; "min": the rollback of the row that rolled back most)
_ROLLBACK_ROWS = "own"


# --- inputs ----------------------------------------------------------------------------


def left_pad(prompts: Sequence[Sequence[int]], pad_token_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token-id lists into ``(input_ids, attention_mask)``, both (B, T) long tensors."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.as_tensor(list(prompt), dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


def _check_batch(input_ids, attention_mask, device) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    if ids.dim() != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"input_ids must have shape (B, T) with B, T >= 1, got {tuple(ids.shape)}")
    mask = torch.ones_like(ids) if attention_mask is None else torch.as_tensor(attention_mask).long()
    if mask.shape != ids.shape:
        raise ValueError(f"attention_mask has shape {tuple(mask.shape)}, input_ids {tuple(ids.shape)}")
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 and 1")
    if bool((mask[:, 1:] < mask[:, :-1]).any()):
        raise ValueError("attention_mask must be left padded (each row 0...0 1...1): right padding is not supported")
    if bool((mask[:, -1] == 0).any()):
        raise ValueError("every row of attention_mask needs at least one token")
    return ids.to(device), mask.to(device)


def _check_lengths(max_new_tokens: int, k: int | None = None) -> None:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"k (draft tokens per step) must be an integer >= 1, got {k!r}")


# --- the per-row cache -------------------------------------------------------------------


def _has_sliding_layers(cache: DynamicCache) -> bool:
    return any(getattr(layer, "is_sliding", False) for layer in cache.layers)


class RowCache:
    """A batched ``DynamicCache`` whose rows hold different numbers of tokens (see the module docstring).

    ``valid`` (rows, slots) marks which cache slots hold a row's tokens; ``lengths`` counts them.
    """

    def __init__(self, model: PreTrainedModel, layout: str = "auto") -> None:
        self.model = model
        self.cache = DynamicCache(config=model.config)
        sliding = _has_sliding_layers(self.cache)
        if layout not in ("auto", "holes", "compact"):
            raise ValueError(f"layout must be 'auto', 'holes' or 'compact', got {layout!r}")
        if layout == "holes" and sliding:
            raise ValueError("layout='holes' is wrong for a model with sliding-window layers: use 'auto' or 'compact'")
        self.compact = sliding if layout == "auto" else layout == "compact"
        for layer in self.cache.layers:
            if self.compact and type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer):
                raise ValueError(f"compacting a batched cache supports DynamicLayer and DynamicSlidingWindowLayer, "
                                 f"not {type(layer).__name__}")
        # Sliding layers keep every state until the next crop, which the rollback always calls.
        self.cache.activate_past_recording()
        self.valid: torch.Tensor | None = None
        self.lengths: torch.Tensor | None = None
        self.dense = True  # no row has a hole or padding
        self.forward_passes = 0

    @property
    def slots(self) -> int:
        return 0 if self.valid is None else self.valid.shape[1]

    def forward(self, input_ids: torch.Tensor, new_valid: torch.Tensor | None = None,
                logits_to_keep: int = 1) -> torch.Tensor:
        """Feed ``input_ids`` (rows, W), of which ``new_valid`` (rows, W) marks the real tokens (``None``: all
        of them); return the logits. The W new slots are appended; the invalid ones are holes from the start.

        While no row has a hole or padding (``dense``: batch 1 always, since its rejected drafts are cropped),
        the pass gets neither mask nor positions, as the unbatched engine's passes do.
        """
        rows, width = input_ids.shape
        device = input_ids.device
        if new_valid is None:
            new_valid = torch.ones((rows, width), dtype=torch.bool, device=device)
            dense = self.dense
        else:
            dense = False
        if self.valid is None:
            valid = new_valid
            lengths = torch.zeros(rows, dtype=torch.long, device=device)
        else:
            valid = torch.cat([self.valid, new_valid], dim=1)
            lengths = self.lengths
        if dense:
            out = self.model(input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=logits_to_keep)
        else:
            positions = (lengths.unsqueeze(1) + new_valid.long().cumsum(dim=1) - 1).clamp(min=0)
            out = self.model(input_ids=input_ids, attention_mask=valid.long(), position_ids=positions,
                             cache=self.cache, use_cache=True, logits_to_keep=logits_to_keep)
        self.forward_passes += 1
        self.valid = valid
        self.lengths = lengths + new_valid.sum(dim=1)
        self.dense = dense
        return out.logits

    def rollback(self, keep: torch.Tensor) -> None:
        """Keep the first ``keep[b]`` tokens of each row ``b``; the rest become holes (then trimmed or compacted)."""
        keep = torch.minimum(keep.to(self.lengths.device), self.lengths)
        if _ROLLBACK_ROWS != "own":  # the planted bug: one row's rollback applied to every row
            removed = self.lengths - keep
            shared = removed[0] if _ROLLBACK_ROWS == "row0" else removed.max()
            keep = (self.lengths - shared).clamp(min=0)
        rank = self.valid.long().cumsum(dim=1)
        self.valid = self.valid & (rank <= keep.unsqueeze(1))
        self.lengths = keep.clone()
        self._tidy()

    def select(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (indices into the current batch)."""
        self.cache.batch_select_indices(rows)
        self.valid = self.valid[rows]
        self.lengths = self.lengths[rows]
        self._tidy()

    def _tidy(self) -> None:
        if self.compact:
            self._compact()
        else:
            self._crop_unheld()
        self.dense = bool(self.valid.all())

    def _crop_unheld(self) -> None:
        # Crop the slots at the end that no row holds any more.
        held = self.valid.any(dim=0).nonzero()
        end = int(held[-1, 0]) + 1 if held.numel() else 0
        excess = self.slots - end
        if excess > 0:
            self.cache.crop(-excess)
            self.valid = self.valid[:, :end]

    def _compact(self) -> None:
        """Gather each row's valid slots to the right, in order, and drop the columns no row holds."""
        slots = self.slots
        width = int(self.lengths.max()) if self.lengths.numel() else 0
        arange = torch.arange(slots, device=self.valid.device)
        # Per row: invalid slots first (as -1), then the valid slot indices in order; keep the last `width`.
        order = torch.where(self.valid, arange, -1).sort(dim=1).values[:, slots - width :]
        new_valid = order >= 0
        index = order.clamp(min=0)
        # Nothing to move when every row is already right-aligned (plain left padding) and no column is empty.
        aligned = width == slots and bool((self.valid == (arange >= slots - self.lengths.unsqueeze(1))).all())
        if not aligned:
            for layer in self.cache.layers:
                if not layer.is_initialized or layer.keys is None or layer.keys.numel() == 0:
                    continue
                held = layer.keys.shape[-2]
                if held == slots:
                    layer_index = index
                else:  # a sliding layer holding only its last `held` slots: compact within them
                    offset = slots - held
                    arange_h = torch.arange(held, device=index.device)
                    order_h = torch.where(self.valid[:, offset:], arange_h, -1).sort(dim=1).values
                    layer_index = order_h[:, held - min(held, width) :].clamp(min=0)
                gather = layer_index[:, None, :, None].to(layer.keys.device)
                layer.keys = layer.keys.gather(2, gather.expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3]))
                layer.values = layer.values.gather(
                    2, gather.expand(-1, layer.values.shape[1], -1, layer.values.shape[3]))
                if isinstance(layer, DynamicSlidingWindowLayer):
                    layer.cumulative_length = width
        self.valid = new_valid
        # Trims the sliding layers back to their window (a no-op for full layers).
        self.cache.crop(0)


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


def _finish(rows: list[_Row], batch: DecodeStats, start: float, end: float, layout: str,
            padded_length: int) -> BatchedGenerationResult:
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
    _check_lengths(max_new_tokens)
    ids, mask = _check_batch(input_ids, attention_mask, model.device)
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
                _record_step(rows[b].stats, 0, 0, 1, 0)
                if done:
                    rows[b].stats.wall_time_s = clock.now() - start
                else:
                    keep.append(position)
            _record_step(batch, 0, 0, len(active), 0)
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
    return _finish(rows, batch, start, end, "compact" if cache.compact else "holes", ids.shape[1])


# --- drafting ----------------------------------------------------------------------------


class _BatchedModelDraft:
    """A draft model drafting for all active rows in batched passes, with its own :class:`RowCache`."""

    def __init__(self, model: PreTrainedModel, layout: str) -> None:
        self.cache = RowCache(model, layout)
        self.device = model.device
        self.last_passes = 0  # draft passes of the last prefill or proposal, which every active row took part in

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> None:
        self.cache.forward(ids.to(self.device), None if bool(mask.all()) else mask.bool().to(self.device))
        self.last_passes = 1

    def propose(self, rows: list[_Row], limits: list[int], pad_token_id: int) -> list[list[int]]:
        steps = max(limits)
        self._steps = steps
        self.last_passes = steps
        if steps == 0:
            return [[] for _ in rows]
        # Each row feeds its committed tokens the draft has not read (1 or 2), left padded with holes.
        self._base = [len(row.sequence) for row in rows]
        cached = self.cache.lengths.tolist()
        # (At least the newest token: only a broken rollback leaves the draft ahead of a row.)
        pending = [row.sequence[min(length, len(row.sequence) - 1) :] for row, length in zip(rows, cached)]
        width = max(len(p) for p in pending)
        feed = torch.tensor([[pad_token_id] * (width - len(p)) + p for p in pending], dtype=torch.long)
        feed_valid = torch.tensor([[False] * (width - len(p)) + [True] * len(p) for p in pending])
        feed = feed.to(self.device)
        feed_valid = None if bool(feed_valid.all()) else feed_valid.to(self.device)
        drafted = []
        for step in range(steps):
            logits = self.cache.forward(feed, feed_valid, logits_to_keep=1)
            feed = logits[:, -1].argmax(dim=-1, keepdim=True)
            drafted.append(feed)
            feed_valid = None
            if step == steps - 1:
                break
        tokens = torch.cat(drafted, dim=1).tolist()
        return [t[:limit] for t, limit in zip(tokens, limits)]

    def commit(self, accepted: list[int]) -> None:
        if self._steps == 0:
            return
        # The cache holds each row's committed prefix plus the first steps - 1 drafts (the last was never fed).
        keep = [base + min(a, self._steps - 1) for base, a in zip(self._base, accepted)]
        self.cache.rollback(torch.tensor(keep, dtype=torch.long))

    def select(self, rows: torch.Tensor) -> None:
        self.cache.select(rows.to(self.device))

    @property
    def forward_passes(self) -> int:
        return self.cache.forward_passes


class _PerRowDrafters:
    """One unbatched :class:`Drafter` per row (prompt lookup shares one: it keeps no state)."""

    def __init__(self, drafters: list[Drafter]) -> None:
        self.drafters = drafters
        self.active = list(range(len(drafters)))
        self.last_passes = 0  # model-free: drafter forward passes are counted in forward_passes only

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> None:
        for b, drafter in enumerate(self.drafters):
            drafter.reset()
        for b, drafter in enumerate(self.drafters):
            drafter.prefill(ids[b, mask[b].bool()].unsqueeze(0))

    def propose(self, rows: list[_Row], limits: list[int], pad_token_id: int) -> list[list[int]]:
        self._proposed = []
        out = []
        for b, row, limit in zip(self.active, rows, limits):
            proposal = []
            if limit > 0:
                sequence = torch.tensor([row.sequence], dtype=torch.long)
                proposal = self.drafters[b].propose(sequence, limit).tolist()[:limit]
            self._proposed.append(bool(limit > 0))
            out.append(proposal)
        return out

    def commit(self, accepted: list[int]) -> None:
        for b, proposed, a in zip(self.active, self._proposed, accepted):
            if proposed:
                self.drafters[b].commit(a)

    def select(self, rows: torch.Tensor) -> None:
        self.active = [self.active[i] for i in rows.tolist()]

    @property
    def forward_passes(self) -> int:
        return sum(getattr(d, "forward_passes", 0) for d in {id(d): d for d in self.drafters}.values())


def _batched_drafter(draft, batch_size: int, layout: str):
    if isinstance(draft, PreTrainedModel):
        return _BatchedModelDraft(draft, layout)
    if isinstance(draft, ModelDrafter):
        return _BatchedModelDraft(draft.model, layout)
    if isinstance(draft, PromptLookupDrafter):
        return _PerRowDrafters([draft] * batch_size)
    if isinstance(draft, Sequence) and not isinstance(draft, (str, bytes)):
        drafters = list(draft)
        if len(drafters) != batch_size or not all(isinstance(d, Drafter) for d in drafters):
            raise ValueError(f"a sequence of drafters needs one Drafter per row ({batch_size})")
        if any(isinstance(d, ModelDrafter) for d in drafters):
            raise ValueError("pass a draft model once (the model or one ModelDrafter), not one ModelDrafter per row")
        return _PerRowDrafters(drafters)
    if isinstance(draft, Drafter):
        raise TypeError(f"{type(draft).__name__} keeps per-sequence state: pass one instance per row (a list)")
    raise TypeError(f"draft must be a PreTrainedModel, a ModelDrafter, a PromptLookupDrafter or a list of "
                    f"Drafters, got {type(draft).__name__}")


# --- speculative -------------------------------------------------------------------------


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

    Greedy only (no sampling). The first step is the batched prefill (the target commits each row's
    first token; a draft model reads the prompts), timed as ``stats.prefill_time_s``. Then each step
    drafts up to ``k`` tokens per row (fewer where a row's ``max_new_tokens`` is near, or where prompt
    lookup finds fewer), verifies all rows' blocks in one target pass, and commits per row the
    accepted prefix plus the target's next token; both caches roll back per row. A row stops after
    ``max_new_tokens`` tokens or just after ``eos_token_id`` and leaves the batch.

    ``draft``: a causal LM sharing the target's vocabulary (or a ``ModelDrafter``), a
    ``PromptLookupDrafter``, or a sequence of one ``Drafter`` per row. ``pad_token_id`` fills the
    holes of padded blocks (any id works; they are masked). ``layout``: see the module docstring.
    """
    _check_lengths(max_new_tokens, k)
    ids, mask = _check_batch(input_ids, attention_mask, target.device)
    batch_size = ids.shape[0]
    drafter = _batched_drafter(draft, batch_size, layout)
    rows = [_Row(ids[b, mask[b].bool()].tolist()) for b in range(batch_size)]
    clock = DeviceClock(target.device)
    batch = DecodeStats()
    cache = RowCache(target, layout)
    active = list(range(batch_size)) if max_new_tokens > 0 else []
    start = clock.now()
    if active:
        logits = cache.forward(ids, None if bool(mask.all()) else mask.bool(), logits_to_keep=1)
        first = logits[:, -1].argmax(dim=-1).tolist()
        drafter.prefill(ids, mask)
        for b in active:
            _commit(rows[b], [first[b]], max_new_tokens, eos_token_id)
            _record_step(rows[b].stats, 0, 0, 1, 0)
            rows[b].stats.draft_forward_passes += drafter.last_passes
        _record_step(batch, 0, 0, batch_size, 0)
        batch.prefill_time_s = clock.now() - start
        active = _drop_finished(rows, active, cache, drafter, clock, start)
    t_step = clock.now()
    while active:
        live = [rows[b] for b in active]
        limits = [min(k, max_new_tokens - len(row.tokens) - 1) for row in live]
        proposals = drafter.propose(live, limits, pad_token_id)
        t_verify = clock.now()
        width = 1 + max(len(p) for p in proposals)
        # Each row's newest token, its drafts, then holes up to the widest block.
        block = torch.tensor([row.sequence[-1:] + p + [pad_token_id] * (width - 1 - len(p))
                              for row, p in zip(live, proposals)], dtype=torch.long)
        block_valid = torch.tensor([[True] * (1 + len(p)) + [False] * (width - 1 - len(p)) for p in proposals])
        all_valid = bool(block_valid.all())
        block, block_valid = block.to(target.device), block_valid.to(target.device)
        logits = cache.forward(block, None if all_valid else block_valid, logits_to_keep=width)
        target_tokens = logits.argmax(dim=-1)  # (rows, width)
        agree = (block[:, 1:] == target_tokens[:, :-1]) & block_valid[:, 1:]
        accepted = agree.long().cumprod(dim=1).sum(dim=1).tolist()
        target_list = target_tokens.tolist()
        step_accepted = step_bonus = 0
        for i, row in enumerate(live):
            a = accepted[i]
            committed = proposals[i][:a] + [target_list[i][a]]
            kept, _ = _commit(row, committed, max_new_tokens, eos_token_id)
            kept_accepted = min(a, kept)  # an EOS inside the accepted prefix drops the rest
            _record_step(row.stats, len(proposals[i]), kept_accepted, kept - kept_accepted, k)
            row.stats.draft_forward_passes += drafter.last_passes
            step_accepted += kept_accepted
            step_bonus += kept - kept_accepted
        # The target cache holds every committed token but the newest; the draft rolls back to match.
        keep = torch.tensor([len(row.sequence) - 1 for row in live], dtype=torch.long)
        cache.rollback(keep)
        drafter.commit(accepted)
        t_done = clock.now()
        batch.draft_time_s += t_verify - t_step
        batch.verify_time_s += t_done - t_verify
        for row in live:
            row.stats.draft_time_s += t_verify - t_step
            row.stats.verify_time_s += t_done - t_verify
        _record_step(batch, sum(len(p) for p in proposals), step_accepted, step_bonus, k)
        active = _drop_finished(rows, active, cache, drafter, clock, start)
        t_step = clock.now()
    end = clock.now()
    batch.draft_forward_passes = drafter.forward_passes
    return _finish(rows, batch, start, end, "compact" if cache.compact else "holes", ids.shape[1])


def _drop_finished(rows, active, cache: RowCache, drafter, clock: DeviceClock, start: float) -> list[int]:
    keep = [position for position, b in enumerate(active) if not rows[b].done]
    for b in active:
        if rows[b].done and not rows[b].stats.wall_time_s:
            rows[b].stats.wall_time_s = clock.now() - start
    if len(keep) == len(active):
        return active
    if keep:
        index = torch.tensor(keep, dtype=torch.long, device=cache.valid.device)
        cache.select(index)
        drafter.select(index)
    return [active[p] for p in keep]
