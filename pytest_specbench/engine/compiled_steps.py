"""Opt-in: one-token steps through ``torch.compile`` on a static KV cache.

On a GPU, a one-token step of a small model is mostly Python and kernel launches. A static
cache (engine/kv_cache.py) gives every such step the same shapes and tensors, so the compiled
forward (CUDA graphs: mode ``reduce-overhead``) replays it whole. The one-token steps are the
draft's proposals and the greedy baseline's tokens. The target's verify passes (a different
number of rows each step) stay eager, so the tokens the target decides on are computed as without
this mode; a compiled baseline may still differ from eager ``generate`` where float rounding breaks
a tie (rows record ``baseline_matches_reference``).

The first calls compile (seconds to minutes): warm-up rounds absorb them. Models with
sliding-window layers are refused (engine/kv_cache.py says why).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import PreTrainedModel

#: torch.compile backend; tests on a CPU may switch to "eager" (tracing without code generation)
BACKEND = "inductor"

# Kept on the model (the compiled bound method refers to it), so both are freed together.
_ATTRIBUTE = "_specbench_one_token_step"


def one_token_step(model: PreTrainedModel) -> Callable:
    """``model``'s forward for a static cache: one-token steps compiled (once per model), longer feeds eager."""
    compiled = getattr(model, _ATTRIBUTE, None)
    if compiled is None:
        # CUDA graphs on CUDA; elsewhere torch.compile's default mode.
        mode = "reduce-overhead" if model.device.type == "cuda" and BACKEND == "inductor" else None
        compiled = torch.compile(model.forward, backend=BACKEND, mode=mode, dynamic=False, fullgraph=False)
        setattr(model, _ATTRIBUTE, compiled)

    def step(input_ids: torch.Tensor, **kwargs):
        if input_ids.shape[1] != 1:  # a prompt or a catch-up block: eager, its shapes vary
            return model(input_ids=input_ids, **kwargs)
        # A token sliced from a longer tensor keeps that tensor's strides; a fresh (1, 1) tensor
        # keeps the compiled graph's guards (and CUDA graph's inputs) the same every step.
        return compiled(input_ids=input_ids.flatten().clone().unsqueeze(0), **kwargs)

    return step
