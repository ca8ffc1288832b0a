"""KV-cache helpers: build a rollback-capable cache, read its length, crop it.

Transformers 5.x caches are cropped by a negative count of tokens to remove.
Sliding-window layers forget old states unless past recording is switched on,
so speculative decoding switches it on after the prefill and crops after
every forward, which also trims sliding layers back to their window.

A static cache (fixed-size tensors, for compiled steps: engine/compiled_steps.py)
rolls back by moving its write position; its stale entries lie past every query
and are masked. One is kept per model and reset for each generation, so a compiled
step meets the same cache object, and the same shapes, every time.
"""

from __future__ import annotations

import weakref

from transformers import Cache, DynamicCache, PreTrainedModel, StaticCache
from transformers.cache_utils import StaticSlidingWindowLayer

#: static caches are sized up to a multiple of this, so prompts of similar length share one
STATIC_LENGTH_STEP = 128

# model -> {role: (positions, its static cache)}
_static_caches: weakref.WeakKeyDictionary[PreTrainedModel, dict[str, tuple[int, StaticCache]]] = (
    weakref.WeakKeyDictionary()
)


def new_cache(model: PreTrainedModel) -> DynamicCache:
    """An empty dynamic cache laid out for ``model`` (full and sliding layers)."""
    return DynamicCache(config=model.config)


def static_cache(model: PreTrainedModel, length: int, role: str = "target") -> StaticCache:
    """``model``'s reusable static cache for ``role``, emptied, holding at least ``length`` positions.

    One cache per model and role: a model that drafts for itself keeps two. Raises ``ValueError``
    for a model with sliding-window layers: transformers' static sliding layer counts positions in
    a Python int, which torch.compile specialises on (it would compile again at every step).
    """
    size = -(-length // STATIC_LENGTH_STEP) * STATIC_LENGTH_STEP
    held = _static_caches.setdefault(model, {})
    held_size, cache = held.get(role, (None, None))
    if cache is None or held_size != size:
        cache = StaticCache(config=model.config, max_cache_len=size)
        sliding = sum(isinstance(layer, StaticSlidingWindowLayer) for layer in cache.layers)
        if sliding:
            raise ValueError(
                f"compiled steps need a model without sliding-window layers; this one has {sliding} of "
                f"{len(cache.layers)} (transformers' static sliding layer counts positions in a Python "
                "int, so torch.compile would compile again at every step): leave --specbench-compile "
                "(compile_steps) off for it"
            )
        held[role] = (size, cache)
    cache.reset()
    return cache


def enable_rollback(cache: Cache) -> None:
    """Keep enough past states that :func:`crop_to` can undo a forward pass."""
    cache.activate_past_recording()


def cache_length(cache: Cache) -> int:
    """Positions ``cache`` holds (a static cache reports a tensor; this reads it once)."""
    return int(cache.get_seq_length())


def crop_to(cache: Cache, length: int) -> None:
    """Roll ``cache`` back so that it holds the first ``length`` positions."""
    excess = cache_length(cache) - length
    if excess < 0:
        raise ValueError(f"cannot grow a cache from {cache_length(cache)} to {length} positions by cropping")
    # crop(0) is not a no-op: it trims sliding-window layers back to the window.
    cache.crop(-excess)
