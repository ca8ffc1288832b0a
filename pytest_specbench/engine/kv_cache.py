"""KV-cache helpers: build a rollback-capable cache and crop it.

Transformers 5.x caches are cropped by a negative count of tokens to remove.
Sliding-window layers forget old states unless past recording is switched on,
so speculative decoding switches it on after the prefill and crops after
every forward, which also trims sliding layers back to their window.
"""

from __future__ import annotations

from transformers import DynamicCache, PreTrainedModel


def new_cache(model: PreTrainedModel) -> DynamicCache:
    """An empty dynamic cache laid out for ``model`` (full and sliding layers)."""
    return DynamicCache(config=model.config)


def enable_rollback(cache: DynamicCache) -> None:
    """Keep enough past states that :func:`crop_to` can undo a forward pass."""
    cache.activate_past_recording()


def crop_to(cache: DynamicCache, length: int) -> None:
    """Roll ``cache`` back so that it holds the first ``length`` positions."""
    excess = cache.get_seq_length() - length
    if excess < 0:
        raise ValueError(f"cannot grow a cache from {cache.get_seq_length()} to {length} positions by cropping")
    # crop(0) is not a no-op: it trims sliding-window layers back to the window.
    cache.crop(-excess)
