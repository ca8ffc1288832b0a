"""A served request as the engines' result: its tokens from the API, prefill as time to first token, and its steps
from the server's speculative-decoding counters over the request (vLLM's and llama.cpp's alike)."""

from __future__ import annotations

import torch

from ..engine.stats import DecodeStats, GenerationResult
from ..served.client import ServedRun
from ..served.metrics import SpecCounters


def served_result(prompt_ids: list[int], run: ServedRun, counters: SpecCounters | None) -> GenerationResult:
    """A streamed request as the engines' result: the tokens from the API, prefill as time to first token, and the
    steps from the server's counters over the request (None: no speculation, one token per step).

    The counters give how many verify steps drafted, and how many of those accepted exactly j tokens (from the
    per-position counts: acceptance is a prefix), not their order: the per-step lists hold the prefill, the
    steps that drafted in ascending accepted count, then the steps that did not draft. Drafts accepted past the
    tokens returned are taken off the last of them."""
    n = len(run.token_ids)
    stats = DecodeStats(new_tokens=n, wall_time_s=run.wall_s, prefill_time_s=run.ttft_s)
    steps: list[tuple[int, int]] = [(0, 0)]  # the prefill: drafted, accepted
    k = len(counters.accepted_per_position) if counters is not None else 0
    if counters is not None and counters.drafts:
        per_position = [round(count) for count in counters.accepted_per_position]
        ended = [round(counters.drafts), *per_position, 0]  # drafts that accepted at least j tokens, j = 0..k
        accepted_each = [a for a in range(k + 1) for _ in range(ended[a] - ended[a + 1])]
        steps += list(zip(_drafted(accepted_each, round(counters.draft_tokens), k), accepted_each))
    # Each step commits its accepted tokens and one of the target's. The counters also count drafts accepted past
    # the tokens asked for (the last step's), so those are taken off the steps that accepted most, as the native
    # engine drafts only what the run can still use.
    excess = sum(accepted for _, accepted in steps) + len(steps) - n
    if excess > k:  # more than one step's drafts past the end
        raise ValueError(
            f"the server's counters moved by more than this request: {n} tokens came back, and the counters "
            f"account for {n + excess} (another client on the server?)"
        )
    while excess > 0 and len(steps) > 1:
        drafted, accepted = steps[-1]
        cut = min(excess, accepted + 1)
        steps[-1] = (drafted - min(cut, drafted), accepted - min(cut, accepted))
        if cut > accepted:  # the whole step lies past the end
            steps.pop()
        excess -= cut
    steps += [(0, 0)] * (n - sum(accepted for _, accepted in steps) - len(steps))
    stats.drafted_per_step = [drafted for drafted, _ in steps]
    stats.accepted_per_step = [accepted for _, accepted in steps]
    stats.k_per_step = [0] + [k if drafted else 0 for drafted, _ in steps[1:]]
    stats.target_forward_passes = len(steps)
    stats.drafted_tokens = sum(stats.drafted_per_step)
    stats.accepted_tokens = sum(stats.accepted_per_step)
    stats.bonus_tokens = len(steps)
    sequences = torch.tensor([prompt_ids + run.token_ids], dtype=torch.long)
    return GenerationResult(sequences, len(prompt_ids), stats)


def _drafted(accepted: list[int], total: int, k: int) -> list[int]:
    """Drafted tokens per step, from each step's accepted count and the total drafted (vLLM's proposals may be
    shorter than k): at least what it accepted, and one more where it accepted fewer than k (a rejection, or a
    shorter proposal), the rest spread in order, at most k each, so that they sum to the server's total."""
    drafted = [min(k, a + 1) if a < k else k for a in accepted]
    if sum(drafted) > total:  # proposals shorter than k that were accepted whole: no rejection to count
        drafted = list(accepted)
    left = total - sum(drafted)
    for i, value in enumerate(drafted):
        more = min(left, k - value)
        drafted[i] += more
        left -= more
    return drafted
