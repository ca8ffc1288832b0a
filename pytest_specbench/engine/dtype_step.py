"""The cost of a bfloat16 one-token step against a float32 one, timed on the same model: a check of the native
dtypes (kernels/native_dtypes.py) by the step they make cheaper."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel


def _one_token_times(models: list[PreTrainedModel], input_ids: torch.Tensor, repeats: int) -> list[list[float]]:
    """Seconds of each model's one-token forward on its warm prompt cache, the models interleaved per repeat."""
    from ..kernels.timing import DeviceClock
    from .kv_cache import cache_length, crop_to, enable_rollback, new_cache

    caches = []
    for model in models:
        cache = new_cache(model)
        model(input_ids=input_ids[:, :-1].to(model.device), cache=cache, use_cache=True, logits_to_keep=1)
        enable_rollback(cache)
        caches.append(cache)
    lengths = [cache_length(cache) for cache in caches]
    samples: list[list[float]] = [[] for _ in models]
    for repeat in range(repeats + 1):  # the first round warms up and is not kept
        for model, cache, length, kept in zip(models, caches, lengths, samples):
            clock = DeviceClock(model.device)
            start = clock.now()
            model(input_ids=input_ids[:, -1:].to(model.device), cache=cache, use_cache=True, logits_to_keep=1)
            elapsed = clock.now() - start
            crop_to(cache, length)
            if repeat:
                kept.append(elapsed)
    return samples


def step_cost_ratio(
    models: Callable[[torch.dtype], PreTrainedModel] | tuple[PreTrainedModel, PreTrainedModel],
    input_ids: torch.Tensor,
    repeats: int = 5,
) -> float:
    """Median bfloat16 one-token step over the median float32 one: below 1 where bfloat16 is native.

    ``models`` is a factory called with each dtype, or a (float32, bfloat16) pair of the same
    model. ``input_ids`` (at least two tokens) is the prompt; its last token is the probed step.
    """
    import torch

    if input_ids.shape[-1] < 2:
        raise ValueError(f"step_cost_ratio needs a prompt of at least 2 tokens, got {input_ids.shape[-1]}")
    if repeats < 1:
        raise ValueError(f"step_cost_ratio needs repeats >= 1, got {repeats}")
    pair = list(models) if isinstance(models, tuple) else [models(torch.float32), models(torch.bfloat16)]
    with torch.inference_mode():
        float32_times, bfloat16_times = _one_token_times(pair, input_ids, repeats)
    return statistics.median(bfloat16_times) / statistics.median(float32_times)
