"""Loading the target and timing its verify passes: the rounds of :func:`verify_costs` per (dtype, form), and
one decode step and the widest pass split into their linear layers and the rest. The verify-curve tool's only
torch module."""

from __future__ import annotations

import copy
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ...engine.cost_probe import prefilled_cache, timed_pass, verify_costs
from ...engine.kv_cache import cache_length
from ...kernels.timing import DeviceClock
from ...kernels.verify_forms import KernelForms
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
    from ...cases.prompts import load_prompts, select_prompts
    from ...measure.inputs import prompt_input_ids
    from ...models.loading import load_model, resolve_dtype

    # The smaller dtype loads first: a conversion's load maps the whole checkpoint file for a while, which then
    # comes before the larger model is held, not beside it.
    smaller_first = sorted(dtypes, key=lambda dtype: resolve_dtype(dtype).itemsize)
    loaded = {dtype: load_model(target, device=device, dtype=dtype) for dtype in smaller_first}
    loaded = {dtype: loaded[dtype] for dtype in dtypes}
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


def pass_splits(
    model: Any,
    input_ids: torch.Tensor,
    form: str,
    widest: int = 1,
    repeats: int = 5,
    kernels: KernelForms | None = None,
) -> dict[int, dict[str, float]]:
    """Per m in {1, ``widest``}: ``step_s``, the pass's seconds; ``linear_s``, those inside its linear layers,
    the output head included; ``head_s``, inside the head alone; ``linear_bytes``, their weights' bytes. Each a
    median of ``repeats`` passes (the outside time is a difference of medians), the two widths alternated so
    drift hits both. A step whose linear layers stream at the memory limit is bounded by what runs between
    them; what a wider pass adds shows where v(m)/v(1) goes. ``kernels``: the model's forms of ``form``
    (default: new ones, settled for these passes)."""
    kernels = kernels if kernels is not None else KernelForms(model, FORMS[form])
    kernels.settle(widest)
    linears = [module for module in model.modules() if isinstance(module, torch.nn.Linear)]
    head = model.get_output_embeddings()
    clock, started = DeviceClock(model.device), [0.0]
    inside = {"linear": 0.0, "head": 0.0}

    def stop(part: str) -> Callable[..., None]:
        return lambda *_: inside.__setitem__(part, inside[part] + clock.now() - started[0])

    hooks = [layer.register_forward_pre_hook(lambda *_: started.__setitem__(0, clock.now())) for layer in linears]
    hooks += [layer.register_forward_hook(stop("head" if layer is head else "linear")) for layer in linears]
    cache = prefilled_cache(model, input_ids)
    length = cache_length(cache)
    widths = sorted({1, widest})
    kept: dict[int, dict[str, list[float]]] = {m: {"step_s": [], "linear_s": [], "head_s": []} for m in widths}
    try:
        with kernels.applied():
            for repeat in range(repeats + 1):  # the first of each warms up and is not kept
                for m in widths if repeat % 2 else widths[::-1]:
                    inside.update(linear=0.0, head=0.0)
                    elapsed = timed_pass(model, cache, input_ids, m, length, clock)
                    if repeat:
                        kept[m]["step_s"].append(elapsed)
                        kept[m]["linear_s"].append(inside["linear"] + inside["head"])
                        kept[m]["head_s"].append(inside["head"])
    finally:
        for hook in hooks:
            hook.remove()
    linear_bytes = sum(
        layer.weight.numel() * layer.weight.element_size() for layer in {id(x.weight): x for x in linears}.values()
    )
    return {
        m: {**{name: statistics.median(values) for name, values in parts.items()}, "linear_bytes": linear_bytes}
        for m, parts in kept.items()
    }
