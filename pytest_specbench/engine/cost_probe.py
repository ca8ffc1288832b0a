"""Measure the inputs of the cost model: the verify-cost curve v(m) and the draft's per-token cost.

v(m) is the time of one target forward pass over m new positions on a warm cache that already
holds the prompt, as a verify pass of m - 1 drafted tokens runs. Each repeat crops the cache
back to the prompt, and the m values are interleaved so drift hits all of them alike. With
``compile_length`` (the run's prompt plus new tokens) both run as the engine then runs them: on
static caches of that size, the draft's step compiled.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch
from transformers import PreTrainedModel

from ..kernels.bandwidth import packed_linears
from ..kernels.timing import DeviceClock
from ..kernels.verify_forms import KernelForms, kernel_forms
from .compiled_steps import one_token_step
from .drafters import Drafter
from .kv_cache import cache_length, crop_to, enable_rollback, new_cache, static_cache


def prefilled_cache(
    model: PreTrainedModel, input_ids: torch.Tensor, static_length: int | None = None, role: str = "target"
) -> Any:
    """A cache holding ``input_ids``' prefill (static, of ``static_length``, where given), ready to roll back."""
    cache = new_cache(model) if static_length is None else static_cache(model, static_length, role)
    model(input_ids=input_ids, cache=cache, use_cache=True, logits_to_keep=1)
    enable_rollback(cache)
    return cache


def filler_block(input_ids: torch.Tensor, m: int) -> torch.Tensor:
    """m real tokens from the prompt, repeated as needed: a pass's cost does not depend on their values."""
    ids = input_ids[0]
    return ids.repeat(m // ids.numel() + 1)[:m].unsqueeze(0)


def timed_pass(
    model: PreTrainedModel, cache: Any, input_ids: torch.Tensor, m: int, prompt_length: int, clock: DeviceClock
) -> float:
    """Seconds of one pass over m positions after the prompt on ``cache``, cropped back to ``prompt_length``."""
    block = filler_block(input_ids, m)
    start = clock.now()
    model(input_ids=block, cache=cache, use_cache=True, logits_to_keep=m)
    elapsed = clock.now() - start
    crop_to(cache, prompt_length)
    return elapsed


@torch.inference_mode()
def verify_costs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    max_positions: int,
    repeats: int = 5,
    kernels: KernelForms | str = "auto",
    compile_length: int | None = None,
) -> list[float]:
    """Seconds of one target pass over m new positions after the prompt, m = 1 .. max_positions (median).

    The linear layers run as in the engine's verify pass (``kernels``: the model's
    :class:`~pytest_specbench.kernels.verify_forms.KernelForms`, or a setting for forms of this call), their forms
    settled before the sweeps.
    """
    forms = kernel_forms(model, kernels)
    clock = DeviceClock(model.device)
    static_length = None if compile_length is None else max(compile_length, input_ids.shape[1] + max_positions)
    cache = prefilled_cache(model, input_ids, static_length)
    prompt_length = cache_length(cache)
    samples: dict[int, list[float]] = {m: [] for m in range(1, max_positions + 1)}
    forms.settle(max_positions)
    with forms.applied():
        for repeat in range(repeats + 1):  # the first sweep warms up and is not kept
            for m in samples:
                elapsed = timed_pass(model, cache, input_ids, m, prompt_length, clock)
                if repeat:
                    samples[m].append(elapsed)
    return [statistics.median(samples[m]) for m in samples]


@torch.inference_mode()
def decode_step_costs(
    model: PreTrainedModel, input_ids: torch.Tensor, kernels: KernelForms | str = "linear", repeats: int = 3
) -> tuple[float, float]:
    """Seconds per token of a prefill of ``input_ids``, and of one one-token step after it in ``kernels`` (the
    forms the baseline decodes in), medians, the first repeat a warm-up: the run plan's short probe of a target
    (measure/cost_estimate.py)."""
    forms = kernel_forms(model, kernels)
    forms.settle(1)
    clock = DeviceClock(model.device)
    prefills: list[float] = []
    steps: list[float] = []
    feed = input_ids[:, -1:]
    for repeat in range(repeats + 1):
        cache = new_cache(model)
        start = clock.now()
        model(input_ids=input_ids, cache=cache, use_cache=True, logits_to_keep=1)
        prefill = clock.now() - start
        length = cache_length(cache)
        enable_rollback(cache)
        for _ in range(4):
            with forms.applied():
                start = clock.now()
                model(input_ids=feed, cache=cache, use_cache=True, logits_to_keep=1)
                step = clock.now() - start
            crop_to(cache, length)
            if repeat:
                steps.append(step)
        if repeat:
            prefills.append(prefill)
    return statistics.median(prefills) / input_ids.shape[1], statistics.median(steps)


@torch.inference_mode()
def own_kernel_step_costs(
    model: PreTrainedModel, input_ids: torch.Tensor, kernels: KernelForms | str = "auto", repeats: int = 5
) -> tuple[float, float]:
    """Seconds of one one-row decode step in the engine's forms (``kernels``) and in the model's own
    (transformers') kernels, timed in turn (medians): their ratio is what the kernels gain, a figure apart from
    any speedup."""
    forms = kernel_forms(model, kernels)
    own = KernelForms(model, "linear")
    clock = DeviceClock(model.device)
    cache = prefilled_cache(model, input_ids)
    prompt_length = cache_length(cache)
    forms.settle(1)
    samples: dict[bool, list[float]] = {True: [], False: []}
    feed = input_ids[:, -1:]
    for repeat in range(repeats + 1):  # the first round warms up and is not kept
        for engine_forms in (True, False):
            with (forms if engine_forms else own).applied():
                start = clock.now()
                model(input_ids=feed, cache=cache, use_cache=True, logits_to_keep=1)
                elapsed = clock.now() - start
            crop_to(cache, prompt_length)
            if repeat:
                samples[engine_forms].append(elapsed)
    return statistics.median(samples[True]), statistics.median(samples[False])


@torch.inference_mode()
def draft_token_cost(
    drafter: Drafter,
    input_ids: torch.Tensor,
    repeats: int = 5,
    compile_length: int | None = None,
    kernels: KernelForms | str = "linear",
) -> float:
    """Seconds of one drafted token: a draft model's one-token step on the prompt's cache, its linear layers in
    ``kernels`` (its model's forms, or a setting), settled first; 0 without a model."""
    model = drafter.model
    if model is None:
        return 0.0  # prompt lookup and other model-free drafters: microseconds of tensor search
    forms = kernel_forms(model, kernels)
    forms.settle(1)
    clock = DeviceClock(model.device)
    ids = drafter.draft_ids_for(input_ids).to(model.device)
    if not drafter.compiles:
        compile_length = None
    static_length = None if compile_length is None else max(compile_length, ids.shape[1] + 1)
    cache = prefilled_cache(model, ids, static_length, role="draft")
    step = model if compile_length is None else one_token_step(model)
    prompt_length = cache_length(cache)
    samples = []
    with forms.applied():
        for repeat in range(repeats + 1):  # the first repeat warms up (and compiles) and is not kept
            start = clock.now()
            step(input_ids=ids[:, -1:], cache=cache, use_cache=True, logits_to_keep=1)
            elapsed = clock.now() - start
            crop_to(cache, prompt_length)
            if repeat:
                samples.append(elapsed)
    return statistics.median(samples)


def parameter_count(model: torch.nn.Module | None) -> int:
    """Weights of a model (0 for none); tied weights count once, int8-quantised linears count too.

    A dynamically quantised linear keeps its weight packed, outside ``parameters()``, and the
    weight-only int8 linear keeps it in a buffer: both are counted by their weight's shape.
    """
    if model is None:
        return 0
    total = sum(p.numel() for p in model.parameters())
    total += sum(linear.weight_numel + linear.bias_numel for linear in packed_linears(model))
    for module in model.modules():
        if hasattr(module, "qweight") and isinstance(module.qweight, torch.Tensor):
            total += module.qweight.numel() + (module.bias.numel() if isinstance(module.bias, torch.Tensor) else 0)
    return total
