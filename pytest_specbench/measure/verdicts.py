"""A case's verdict: greedy output compared with the target's reference (a divergence explained), or under
sampling the engine's accept/resample rule checked on the case's own distributions."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..engine.plain_generate import plain_generate, plain_generation_config
from ..engine.sampling import (
    SIGNIFICANCE,
    SamplingParams,
    check_acceptance_rule,
    expected_acceptance,
    sampling_distribution,
)
from ..settings.engines import OWN_SAMPLING_ENGINES


def reference_tokens(model, input_ids: torch.Tensor, max_new_tokens: int, eos_token_id: int | None) -> list[int]:
    """The target's own greedy continuation of the whole prompt, from transformers' ``generate``.

    Every prompt token is attended (see :mod:`~..engine.plain_generate`). With ``eos_token_id=None`` EOS is
    ignored so exactly ``max_new_tokens`` come back; min_new_tokens is not used because it masks EOS and so
    changes the argmax.
    """
    config = plain_generation_config(model, max_new_tokens, eos_token_id)
    with torch.inference_mode():
        output = plain_generate(model, input_ids, torch.ones_like(input_ids), config)
    return output[0, input_ids.shape[1] :].tolist()


def first_divergence(tokens: Sequence[int], reference: Sequence[int]) -> int | None:
    """Index of the first differing token (a length difference counts), or None if equal."""
    for index, (got, want) in enumerate(zip(tokens, reference)):
        if got != want:
            return index
    if len(tokens) != len(reference):
        return min(len(tokens), len(reference))
    return None


def quality_score(tokens: Sequence[int], reference: Sequence[int]) -> float:
    """Fraction of reference positions where the output holds the same token."""
    if not reference:
        return 1.0
    return sum(got == want for got, want in zip(tokens, reference)) / len(reference)


def top2_margin(model, input_ids: torch.Tensor, reference: Sequence[int], position: int) -> tuple[float, float]:
    """The target's logit gap between its best and second-best token at ``position``, and one step of its logits'
    dtype at the best logit's size (the gap between two neighbouring values: 0.125 near 20 in bfloat16)."""
    prefix = torch.cat([input_ids[0], torch.tensor(reference[:position], dtype=torch.long, device=input_ids.device)])
    ids = prefix.unsqueeze(0)
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), logits_to_keep=1).logits[0, -1]
    best = torch.topk(logits.float(), 2).values
    top = abs(float(best[0]))
    step = 2.0 ** math.floor(math.log2(top)) * torch.finfo(logits.dtype).eps if top > 0 else 0.0
    return float(best[0] - best[1]), step


def diagnose(
    model,
    tokenizer,
    input_ids: torch.Tensor,
    tokens: Sequence[int],
    reference: Sequence[int],
    half_precision: bool,
    tie_tolerance: float,
) -> dict[str, Any]:
    """Verdict and, on divergence, what a reader needs to see why; the margin at a divergence from the target's
    logits (:func:`top2_margin`)."""
    return divergence_verdict(
        tokens,
        reference,
        lambda position: top2_margin(model, input_ids, reference, position),
        tokenizer,
        half_precision,
        tie_tolerance,
    )


def divergence_verdict(
    tokens: Sequence[int],
    reference: Sequence[int],
    margin_at: Callable[[int], tuple[float | None, float | None]],
    tokenizer,
    half_precision: bool,
    tie_tolerance: float,
) -> dict[str, Any]:
    """Verdict and, on divergence, what a reader needs to see why. ``margin_at(position)``: the target's top-2
    margin there and one step of its logits' dtype (None where unknown).

    Under half precision a divergence is a tie where the margin is below the tolerance or at most one step of
    the logits' dtype: two neighbouring values, which any other order of the same sums can swap."""
    position = first_divergence(tokens, reference)
    if position is None:
        return {"verdict": "lossless", "first_divergence": None}
    got = tokens[position] if position < len(tokens) else None
    want = reference[position] if position < len(reference) else None
    # No margin when the output ran longer than the reference: there is no target choice to weigh.
    margin, step = margin_at(position) if want is not None else (None, None)
    tie = half_precision and margin is not None and (margin < tie_tolerance or (step is not None and margin <= step))
    decode = (lambda ids: tokenizer.decode(ids)) if tokenizer is not None else (lambda ids: str(list(ids)))
    return {
        "verdict": "tie-divergence" if tie else "diverged",
        "first_divergence": position,
        "expected_token": want,
        "expected_text": decode([want]) if want is not None else "<end>",
        "got_token": got,
        "got_text": decode([got]) if got is not None else "<end>",
        "context_text": decode(list(reference[max(0, position - 12) : position])),
        "top2_margin": margin,
        "top2_margin_step": step,
    }


def _step_text(step: float | None) -> str:
    return "" if step is None else f", {step:.4g} there"


def _margin_text(margin: float | None) -> str:
    return "None" if margin is None else format(margin, ".4g")


def divergence_message(case_id: str, info: dict[str, Any], tie_tolerance: float) -> str:
    """A readable failure message for a case whose output is not the greedy output (or, under sampling, whose
    acceptance rule failed the distribution check)."""
    if info.get("sampling_check_p_value") is not None:
        return (
            f"{case_id}: under sampling, the tokens the engine's accept/resample rule commits do not follow "
            f"the target's distribution at the prompt: chi-square {info['sampling_check_statistic']:.1f} on "
            f"{info.get('sampling_check_dof')} degrees of freedom over {info['sampling_check_draws']} simulated "
            f"drafts, p = {info['sampling_check_p_value']:.3g} (below the {SIGNIFICANCE} significance)"
        )
    return (
        f"{case_id}: speculative output differs from the target's greedy output "
        f"at new token {info['first_divergence']}\n"
        f"  context:  ...{info['context_text']!r}\n"
        f"  expected: {info['expected_token']} {info['expected_text']!r} (target greedy)\n"
        f"  got:      {info['got_token']} {info['got_text']!r} (speculative)\n"
        f"  target top-2 logit margin there: {_margin_text(info['top2_margin'])} "
        f"(a tie under float16/bfloat16 below {tie_tolerance} or at most one step of the logits' dtype"
        f"{_step_text(info.get('top2_margin_step'))})"
    )


@torch.inference_mode()
def sampling_check(
    target_model, drafter, input_ids: torch.Tensor, sampling: SamplingParams, draws: int, seed: int
) -> dict[str, Any]:
    """The engine's accept/resample rule on the case's real distributions at the prompt (p, and q or the point
    mass prompt lookup proposes there), ``draws`` simulated draft tokens, chi-square against p."""
    p = sampling_distribution(target_model(input_ids=input_ids, logits_to_keep=1).logits[0, -1], sampling)
    generator = torch.Generator().manual_seed(seed + 2)
    expected_alpha = None
    if drafter.model is not None:
        draft = drafter.model
        q = sampling_distribution(
            draft(input_ids=input_ids.to(draft.device), logits_to_keep=1).logits[0, -1], sampling
        ).to(p.device)
        check = check_acceptance_rule(p, q, draws, generator)
        expected_alpha = float(expected_acceptance(p, q))
    else:
        proposal = drafter.propose(input_ids, 1)
        # Nothing to look up at the prompt: check the rule on the target's own most likely token instead.
        token = int(proposal[0]) if proposal.numel() else int(p.argmax())
        check = check_acceptance_rule(p, None, draws, generator, proposed_token=token)
    return {
        "statistic": check.statistic,
        "dof": check.dof,
        "p_value": check.p_value,
        "draws": check.n,
        "significance": check.significance,
        "passed": check.passed,
        "expected_alpha": expected_alpha,
    }


def sampling_verdict(engine: str, check: dict[str, Any]) -> dict[str, Any]:
    """The row's verdict under sampling: this package's rule checked on the case's distributions; transformers'
    own rule (the hf engine) is not re-run, so its cases are not checked."""
    fields = {
        "sampling_check_p_value": check["p_value"],
        "sampling_check_statistic": check["statistic"],
        "sampling_check_dof": check["dof"],
        "sampling_check_draws": check["draws"],
        "expected_alpha": check["expected_alpha"],
    }
    if engine in OWN_SAMPLING_ENGINES:
        return {"verdict": "not-checked", **fields}
    return {"verdict": "lossless" if check["passed"] else "diverged", **fields}
