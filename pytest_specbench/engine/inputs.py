"""Checks and shapes for the engine's inputs, shared by the unbatched and the batched loops."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def check_lengths(max_new_tokens: int, k: int | None = None) -> None:
    """Refuse a ``max_new_tokens`` that is not an integer >= 0, or a ``k`` that is not an integer >= 1
    (a bool is refused as either: ``True`` is no length)."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if k is not None:
        check_k(k)


def check_k(k: int) -> None:
    """Refuse a draft length ``k`` that is not an integer >= 1 (a bool included)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k (draft tokens per step) must be an integer >= 1, got {k!r}")


def as_batch_of_one(input_ids: torch.Tensor | Sequence[int], device: torch.device) -> torch.Tensor:
    """One prompt, shape ``(L,)`` or ``(1, L)``, as a ``(1, L)`` long tensor on ``device``."""
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ValueError(f"input_ids must hold one sequence (shape (L,) or (1, L)), got shape {tuple(ids.shape)}")
    if ids.shape[1] == 0:
        raise ValueError("input_ids is empty: the prompt needs at least one token")
    return ids.to(device)


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


def check_batch(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """A left-padded batch as ``(ids, mask)`` on ``device``; refuses other shapes, masks and right padding."""
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
