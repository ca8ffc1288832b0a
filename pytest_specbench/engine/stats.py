"""What a decoding run returns: the tokens and the counts and times behind them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class DecodeStats:
    """Counts and times of one decoding run.

    A *step* is one target forward pass that commits tokens: in speculative
    decoding it verifies a draft block and commits the accepted prefix plus
    the target's own next token (the bonus token); in greedy decoding it
    commits one token. The first step is the prefill: it reads the prompt and
    commits one token, and its time (``prefill_time_s``, the time to first
    token) is kept apart from the decode phase that follows. ``draft_time_s``
    and ``verify_time_s`` cover the decode phase only.
    """

    new_tokens: int = 0
    target_forward_passes: int = 0
    draft_forward_passes: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    bonus_tokens: int = 0
    wall_time_s: float = 0.0
    draft_time_s: float = 0.0
    verify_time_s: float = 0.0
    prefill_time_s: float = 0.0
    # Decode phase, a part of draft_time_s: a cross-tokenizer drafter's text translation (0 for a shared tokenizer).
    translation_time_s: float = 0.0
    # Tokens the prefill step commits: 1 for this engine; more for Hugging Face's, whose first
    # target pass also verifies a draft block.
    prefill_tokens: int = 1
    # Prefill steps among the steps: 1, or a multi-turn run's one per turn (its turns' stats summed).
    prefill_steps: int = 1
    # Per step: tokens proposed and how many of them the target accepted.
    drafted_per_step: list[int] = field(default_factory=list)
    accepted_per_step: list[int] = field(default_factory=list)
    # Per step: the draft length the schedule chose (0 at the prefill); drafted_per_step can be
    # less (the end of the run, a drafter with nothing to propose, a confidence stop).
    k_per_step: list[int] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.accepted_per_step)

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens / drafted tokens (0.0 when nothing was drafted)."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def decode_steps(self) -> int:
        """Steps after the prefill(s): the verify passes."""
        return max(self.steps - self.prefill_steps, 0)

    @property
    def decode_tokens(self) -> int:
        """Tokens committed after the prefill step's."""
        return max(self.new_tokens - self.prefill_tokens, 0)

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens committed per decode step (tau), bonus token included; the prefill is not a decode step."""
        return self.decode_tokens / self.decode_steps if self.decode_steps else 0.0

    @property
    def decode_time_s(self) -> float:
        """Wall time after the first token."""
        return max(self.wall_time_s - self.prefill_time_s, 0.0)

    @property
    def time_per_decode_token_s(self) -> float:
        """Decode time per token after the first; per token, so a run cut short by EOS still compares
        fairly; a run with no decode phase (one token) gives its wall time."""
        return self.decode_time_s / self.decode_tokens if self.decode_tokens else self.wall_time_s

    @property
    def other_time_s(self) -> float:
        """Decode time spent neither drafting nor verifying (bookkeeping, cache rollback)."""
        return max(self.decode_time_s - self.draft_time_s - self.verify_time_s, 0.0)

    @property
    def tokens_per_second(self) -> float:
        """End to end: new tokens over the wall time, prefill included."""
        return self.new_tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0

    @property
    def decode_tokens_per_second(self) -> float:
        """Decoding speed: tokens after the first over the time after the first (prefill excluded)."""
        return self.decode_tokens / self.decode_time_s if self.decode_time_s > 0 else 0.0


@dataclass
class GenerationResult:
    """Generated tokens (prompt excluded) with the run's stats.

    ``sequences`` is prompt plus new tokens, shaped like ``model.generate``'s
    output, so the two can be compared directly.
    """

    sequences: torch.Tensor
    prompt_length: int
    stats: DecodeStats
    # A multi-turn run: each turn's own result, in order (``stats`` sums them); empty for one turn.
    turns: list[GenerationResult] = field(default_factory=list)

    @property
    def token_ids(self) -> list[int]:
        return self.sequences[0, self.prompt_length :].tolist()


def summed_stats(parts: Sequence[DecodeStats]) -> DecodeStats:
    """One run's stats from its parts' (a multi-turn run's turns): counts and times added, per-step lists
    joined in order, so ``prefill_steps`` counts each part's prefill."""
    total = DecodeStats(prefill_tokens=0, prefill_steps=0)
    for part in parts:
        for item in dataclasses.fields(DecodeStats):
            value = getattr(part, item.name)
            setattr(total, item.name, getattr(total, item.name) + (list(value) if isinstance(value, list) else value))
    return total


def joined_result(turns: Sequence[GenerationResult]) -> GenerationResult:
    """A multi-turn run as one result: the first turn's prompt, every turn's new tokens in order, the summed
    stats, and each turn's own result in ``turns``."""
    first = turns[0]
    new = [turn.sequences[:, turn.prompt_length :] for turn in turns]
    sequences = torch.cat([first.sequences[:, : first.prompt_length], *new], dim=1)
    return GenerationResult(sequences, first.prompt_length, summed_stats([t.stats for t in turns]), list(turns))


def record_step(stats: DecodeStats, drafted: int, accepted: int, bonus: int, k: int) -> None:
    """Count one target pass that committed ``accepted`` of ``drafted`` draft tokens and ``bonus`` of its own.

    ``k`` is the draft length the schedule chose (0 for the prefill and greedy steps). Every loop
    records its steps here, so the per-step lists and the totals always agree.
    """
    stats.target_forward_passes += 1
    stats.drafted_tokens += drafted
    stats.accepted_tokens += accepted
    stats.bonus_tokens += bonus
    stats.drafted_per_step.append(drafted)
    stats.accepted_per_step.append(accepted)
    stats.k_per_step.append(k)


def record_step_times(stats: DecodeStats, t_draft: float, t_verify: float, t_done: float) -> None:
    """Add one decode step's times: drafting from ``t_draft`` to ``t_verify``, then verifying to ``t_done``."""
    stats.draft_time_s += t_verify - t_draft
    stats.verify_time_s += t_done - t_verify


def record_verify_step(stats: DecodeStats, drafted: int, accepted: int, committed: int, k: int) -> int:
    """:func:`record_step` for a verify pass that accepted ``accepted`` drafts and committed ``committed`` tokens
    in all; returns the accepted tokens kept. An EOS inside the accepted prefix drops the tokens after it, bonus
    included, so fewer may be kept than accepted."""
    kept = min(accepted, committed)
    record_step(stats, drafted, kept, committed - kept, k)
    return kept
