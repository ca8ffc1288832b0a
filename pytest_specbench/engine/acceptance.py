"""The step rules shared by the unbatched and the batched engine: how long a draft block may be, and how many
of its drafts the target accepts when greedy."""

from __future__ import annotations

import torch


def greedy_accepted(
    drafts: torch.Tensor, target_tokens: torch.Tensor, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """Per row, how many leading drafts equal the target's greedy token at their position.

    ``drafts`` (rows, n), ``target_tokens`` (rows, n + 1) (the last is the token after the block);
    ``valid`` (rows, n) marks real drafts in a padded block (a hole never counts as agreeing).
    Returns a (rows,) long tensor.
    """
    agree = drafts == target_tokens[:, :-1]
    if valid is not None:
        agree &= valid
    return agree.long().cumprod(dim=1).sum(dim=1)


def block_limit(k: int, remaining: int) -> int:
    """Drafts a step may propose: at most ``k``, leaving room for the target's bonus token among the ``remaining``
    new tokens, so no block runs past ``max_new_tokens``."""
    return min(k, remaining - 1)
