"""Loading the target and timing its verify passes: the rounds of :func:`verify_costs` per (dtype, form), and
one decode step split into its linear layers and the rest. The verify-curve tool's only torch module."""

from __future__ import annotations

import copy
import statistics
from collections.abc import Sequence
from typing import Any

import torch

from ...engine.cost_probe import verify_costs
from ...engine.kv_cache import cache_length, crop_to, enable_rollback, new_cache
from ...engine.timing import DeviceClock
from ...engine.verify_forms import KernelForms
from .curve import FORMS

TINY_TARGET = "tiny:gemma3"
TINY_PROMPT_TOKENS = 24


def load_targets(target: str, dtypes: Sequence[str], device: str, prompt: str) -> tuple[dict[str, Any], torch.Tensor]:
    """The target in each dtype, and the prompt's ids (``tiny:gemma3``: a tiny random Gemma 3, fixed ids), so every
    dtype times the same prompt."""
    if target == TINY_TARGET:
        from ...testing.tiny_models import tiny_model

        model = tiny_model("gemma3")
        models = {dtype: copy.deepcopy(model).to(device=device, dtype=getattr(torch, dtype)) for dtype in dtypes}
        return models, torch.arange(3, 3 + TINY_PROMPT_TOKENS, device=device).unsqueeze(0)
    from ...measure.inputs import prompt_input_ids
    from ...measure.prompts import load_prompts, select_prompts
    from ...models.loading import load_model

    loaded = {dtype: load_model(target, device=device, dtype=dtype) for dtype in dtypes}
    suite = load_prompts()
    chosen = select_prompts(suite, [prompt], 1)
    if not chosen:
        raise SystemExit(f"--prompt: no prompt of category {prompt!r} in the shipped suite")
    tokenizer = next(iter(loaded.values())).tokenizer
    ids = prompt_input_ids(tokenizer, chosen[0], suite, None, device)
    return {dtype: entry.model for dtype, entry in loaded.items()}, ids


def kernel_forms_of(models: dict[str, Any], forms: Sequence[str]) -> dict[tuple[str, str], KernelForms]:
    """The kernel forms of each (dtype, form): one object per dtype's model and form, settled once for all rounds."""
    return {(dtype, form): KernelForms(model, FORMS[form]) for dtype, model in models.items() for form in forms}


def measure(
    models: dict[str, Any],
    input_ids: torch.Tensor,
    forms: Sequence[str],
    positions: Sequence[int],
    repeats: int,
    kernels: dict[tuple[str, str], KernelForms] | None = None,
) -> dict[tuple[str, str], list[list[float]]]:
    """Every round's curve v(1) .. v(max m) per (dtype, form): ``repeats`` rounds, each running every
    (dtype, form) once, order rotated, so drift hits them alike; ``kernels``: each one's forms (default:
    :func:`kernel_forms_of`)."""
    kernels = kernels if kernels is not None else kernel_forms_of(models, forms)
    contenders = [(dtype, form) for dtype in models for form in forms]
    samples: dict[tuple[str, str], list[list[float]]] = {contender: [] for contender in contenders}
    for round_index in range(repeats):
        shift = round_index % len(contenders)
        for dtype, form in contenders[shift:] + contenders[:shift]:
            curve = verify_costs(models[dtype], input_ids, max(positions), repeats=1, kernels=kernels[dtype, form])
            samples[dtype, form].append(curve)
    return samples


def one_row_split(
    model: Any, input_ids: torch.Tensor, form: str, repeats: int = 5, kernels: KernelForms | None = None
) -> dict[str, float]:
    """One decode step split into its linear layers and the rest (medians of ``repeats`` steps): a step
    whose linear layers stream at the memory limit is bounded by what runs between them. ``kernels``: the model's
    forms of ``form`` (default: new ones, settled for the step)."""
    kernels = kernels if kernels is not None else KernelForms(model, FORMS[form])
    kernels.settle(1)
    linears = [module for module in model.modules() if isinstance(module, torch.nn.Linear)]
    clock, inside, started = DeviceClock(model.device), [0.0], [0.0]
    hooks = [layer.register_forward_pre_hook(lambda *_: started.__setitem__(0, clock.now())) for layer in linears]
    hooks += [
        layer.register_forward_hook(lambda *_: inside.__setitem__(0, inside[0] + clock.now() - started[0]))
        for layer in linears
    ]
    cache = new_cache(model)
    model(input_ids=input_ids, cache=cache, use_cache=True, logits_to_keep=1)
    enable_rollback(cache)
    length = cache_length(cache)
    steps, in_linear = [], []
    try:
        with kernels.applied():
            for repeat in range(repeats + 1):  # the first step warms up and is not kept
                inside[0] = 0.0
                start = clock.now()
                model(input_ids=input_ids[:, -1:], cache=cache, use_cache=True, logits_to_keep=1)
                if repeat:
                    steps.append(clock.now() - start)
                    in_linear.append(inside[0])
                crop_to(cache, length)
    finally:
        for hook in hooks:
            hook.remove()
    linear_bytes = sum(
        layer.weight.numel() * layer.weight.element_size() for layer in {id(x.weight): x for x in linears}.values()
    )
    return {"step_s": statistics.median(steps), "linear_s": statistics.median(in_linear), "linear_bytes": linear_bytes}
