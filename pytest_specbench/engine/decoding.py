"""Greedy and speculative decoding for Hugging Face causal LMs.

Both loops are plain functions with no pytest in sight:

>>> from pytest_specbench import greedy_generate, speculative_generate
>>> base = greedy_generate(target, input_ids, max_new_tokens=64)
>>> spec = speculative_generate(target, draft, input_ids, k=4, max_new_tokens=64)
>>> spec.token_ids == base.token_ids
True

Speculative decoding here is greedy (lossless by construction): the drafter
proposes ``k`` tokens, the target scores the block in one forward pass, and
the longest prefix on which the target's argmax agrees is committed together
with the target's own next token. Both KV caches are cropped back to the
committed length, so no prefix is recomputed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from .drafters import Drafter, as_drafter
from .kv_cache import crop_to, enable_rollback, new_cache
from .schedules import ConstantSchedule, DraftSchedule
from .stats import DecodeStats, GenerationResult
from .timing import DeviceClock

__all__ = ["greedy_generate", "speculative_generate"]


def _as_batch_of_one(input_ids: torch.Tensor | Sequence[int], device: torch.device) -> torch.Tensor:
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ValueError(f"input_ids must hold one sequence (shape (L,) or (1, L)), got shape {tuple(ids.shape)}")
    if ids.shape[1] == 0:
        raise ValueError("input_ids is empty: the prompt needs at least one token")
    return ids.to(device)


def _check_lengths(max_new_tokens: int, k: int | None = None) -> None:
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if k is not None and (not isinstance(k, int) or k < 1):
        raise ValueError(f"k (draft tokens per step) must be an integer >= 1, got {k!r}")


def _cut_at_eos(tokens: torch.Tensor, eos_token_id: int | None) -> tuple[torch.Tensor, bool]:
    """Cut a 1-D block of new tokens just after its first EOS, if any."""
    if eos_token_id is None:
        return tokens, False
    hits = (tokens == eos_token_id).nonzero()
    if hits.numel() == 0:
        return tokens, False
    return tokens[: int(hits[0, 0]) + 1], True


@torch.inference_mode()
def greedy_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor | Sequence[int],
    max_new_tokens: int,
    *,
    eos_token_id: int | None = None,
) -> GenerationResult:
    """Target-only greedy decoding with a KV cache: the baseline.

    Generates exactly ``max_new_tokens`` tokens, or stops after
    ``eos_token_id`` when one is given. Token-for-token equal to
    ``model.generate(do_sample=False)``.
    """
    _check_lengths(max_new_tokens)
    ids = _as_batch_of_one(input_ids, model.device)
    clock = DeviceClock(model.device)
    stats = DecodeStats()
    cache = new_cache(model)
    new_tokens = []
    feed = ids
    start = clock.now()
    for step in range(max_new_tokens):
        logits = model(input_ids=feed, cache=cache, use_cache=True, logits_to_keep=1).logits
        feed = logits[:, -1].argmax(dim=-1, keepdim=True)
        new_tokens.append(feed)
        stats.target_forward_passes += 1
        stats.drafted_per_step.append(0)
        stats.accepted_per_step.append(0)
        stats.k_per_step.append(0)
        if step == 0:
            stats.prefill_time_s = clock.now() - start  # the prompt's pass: time to first token
        # Reading the token back syncs the device, so only do it when EOS can stop us.
        if eos_token_id is not None and int(feed) == eos_token_id:
            break
    stats.wall_time_s = clock.now() - start
    stats.verify_time_s = stats.wall_time_s - stats.prefill_time_s
    stats.new_tokens = len(new_tokens)
    stats.bonus_tokens = stats.new_tokens
    sequences = torch.cat([ids, *new_tokens], dim=1)
    return GenerationResult(sequences=sequences, prompt_length=ids.shape[1], stats=stats)


def _verify(target: PreTrainedModel, cache, block: torch.Tensor, proposal: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Score ``block`` (uncached committed tokens + proposal) in one pass.

    Returns how many proposed tokens the target accepts and the target's
    greedy tokens at each proposal position plus one.
    """
    logits = target(input_ids=block, cache=cache, use_cache=True, logits_to_keep=proposal.numel() + 1).logits
    target_tokens = logits[0].argmax(dim=-1)
    agree = (proposal == target_tokens[:-1]).to(torch.int32)
    num_accepted = int(agree.cumprod(dim=0).sum())
    return num_accepted, target_tokens


@torch.inference_mode()
def speculative_generate(
    target: PreTrainedModel,
    draft: PreTrainedModel | Drafter,
    input_ids: torch.Tensor | Sequence[int],
    k: int | DraftSchedule,
    max_new_tokens: int,
    *,
    eos_token_id: int | None = None,
) -> GenerationResult:
    """Greedy speculative decoding; output equals the target's greedy output.

    ``draft`` is a causal LM sharing the target's tokenizer, or any
    :class:`~pytest_specbench.drafters.Drafter`. Each step drafts up to ``k``
    tokens (fewer near the end, so no block runs past ``max_new_tokens``), or
    as many as a :class:`~pytest_specbench.engine.schedules.DraftSchedule` chooses,
    verifies them in one target forward pass and commits the agreeing prefix
    plus the target's next token. The first step is the prefill alone (the
    target commits its first token; the drafter reads the prompt), timed as
    ``stats.prefill_time_s``. Stops after ``max_new_tokens`` tokens, or just
    after ``eos_token_id`` when one is given.
    """
    _check_lengths(max_new_tokens)
    schedule = k if isinstance(k, DraftSchedule) else ConstantSchedule(k)
    schedule.reset()
    # Only passed when set, so a drafter written before confidence thresholds existed still works.
    confidence = {} if schedule.confidence_threshold is None else {"min_confidence": schedule.confidence_threshold}
    drafter = as_drafter(draft)
    drafter.reset()
    ids = _as_batch_of_one(input_ids, target.device)
    prompt_length = ids.shape[1]
    clock = DeviceClock(target.device)
    stats = DecodeStats()
    cache = new_cache(target)
    enable_rollback(cache)
    cached_length = 0  # committed positions whose keys/values the target cache holds

    hit_eos = False
    start = clock.now()
    if max_new_tokens > 0:
        # Prefill, timed apart: the target reads the prompt and commits its own first token, and
        # the drafter reads the prompt. Time to first token is then comparable with greedy decoding.
        logits = target(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1).logits
        first = logits[:, -1].argmax(dim=-1, keepdim=True)
        drafter.prefill(ids)
        ids = torch.cat([ids, first], dim=1)
        cached_length = prompt_length
        stats.target_forward_passes += 1
        stats.bonus_tokens += 1
        stats.drafted_per_step.append(0)
        stats.accepted_per_step.append(0)
        stats.k_per_step.append(0)
        hit_eos = eos_token_id is not None and int(first) == eos_token_id
    t_draft = clock.now()
    stats.prefill_time_s = t_draft - start
    while not hit_eos and ids.shape[1] - prompt_length < max_new_tokens:
        remaining = max_new_tokens - (ids.shape[1] - prompt_length)
        # Leave room for the bonus token so a block never overshoots.
        chosen_k = schedule.next_k()
        block_k = min(chosen_k, remaining - 1)
        if block_k > 0:
            proposal = drafter.propose(ids, block_k, **confidence).to(ids.device)[:block_k]
        else:
            proposal = ids.new_empty(0)
        t_verify = clock.now()
        block = torch.cat([ids[0, cached_length:], proposal]).unsqueeze(0)
        num_accepted, target_tokens = _verify(target, cache, block, proposal)
        committed = torch.cat([proposal[:num_accepted], target_tokens[num_accepted : num_accepted + 1]])
        committed, hit_eos = _cut_at_eos(committed, eos_token_id)
        # An EOS inside the accepted prefix drops the tokens after it, bonus included.
        kept_accepted = min(num_accepted, committed.numel())
        ids = torch.cat([ids, committed.unsqueeze(0)], dim=1)
        # The newest committed token has not been fed to the target yet.
        cached_length = ids.shape[1] - 1
        crop_to(cache, min(cached_length, cache.get_seq_length()))
        if block_k > 0:  # only a drafter that was asked to propose has anything to commit
            drafter.commit(num_accepted)
        schedule.update(proposal.numel(), num_accepted)
        t_done = clock.now()

        stats.draft_time_s += t_verify - t_draft
        stats.verify_time_s += t_done - t_verify
        t_draft = t_done  # the next step starts where this one ended: one device sync fewer
        stats.target_forward_passes += 1
        stats.drafted_tokens += proposal.numel()
        stats.accepted_tokens += kept_accepted
        stats.bonus_tokens += committed.numel() - kept_accepted
        stats.drafted_per_step.append(proposal.numel())
        stats.accepted_per_step.append(kept_accepted)
        stats.k_per_step.append(chosen_k)
    stats.wall_time_s = clock.now() - start
    stats.draft_forward_passes = drafter.forward_passes
    stats.new_tokens = ids.shape[1] - prompt_length
    return GenerationResult(sequences=ids, prompt_length=prompt_length, stats=stats)
