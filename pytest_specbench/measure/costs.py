"""The pair's measured costs (a typed :class:`CostProfile`) and the row fields the cost model derives from them."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedModel

from ..engine.compiled_steps import one_token_step
from ..engine.cost_model import (
    PROBE_TRIES,
    accepted_length_histogram,
    alpha_mle,
    bounded_curve,
    catch_up_passes,
    curve_dip,
    decode_tokens_of_steps,
    lowest_ratio,
    observed_proposals,
    position_acceptance,
    predict_steps,
    recommended_k_for,
)
from ..engine.cost_probe import own_kernel_step_costs, prefilled_cache, verify_costs
from ..engine.drafters import Drafter
from ..engine.kv_cache import cache_length, crop_to
from ..engine.stats import GenerationResult
from ..kernels.bandwidth import effective_gbps, memory_read_gbps, weight_bytes
from ..kernels.timing import DeviceClock
from ..kernels.verify_forms import KernelForms, draft_kernel_forms, kernel_forms
from ..models.weight_pages import pages_of
from ..settings.engines import runs_own_loop

#: the longest k the cost probe covers when a schedule chooses k (auto, heuristic)
SCHEDULE_MAX_K = 16


@dataclass(frozen=True)
class CostProfile:
    """What one pass costs on this machine, as the native engine runs it."""

    verify_costs_s: list[float]  # v(1) .. v(m): one target pass over m positions
    draft_token_s: float  # one drafted token: the draft's one-position pass
    column_head_rows: list[int]  # verify block sizes whose head runs as weight @ hidden.T
    # verify block sizes at which some linear layer runs the few-rows kernel (kernels/few_rows.py)
    few_rows_rows: list[int] = field(default_factory=list)
    # The draft's two-position pass: the catch-up after a fully accepted block (its own last token and the
    # target's bonus token); None where not measured (taken as no dearer than one position).
    draft_catch_up_s: float | None = None
    # The target's one-position pass timed in turn with the draft's passes, the unit of their ratios;
    # None: v(1) of the curve.
    draft_reference_s: float | None = None
    # Where the draft's costs come from: "probe" (passes timed in turn before any run) or "runs" (untimed native
    # runs after the warm-up, see :func:`calibrated_costs`); the probe's one-position pass is kept.
    draft_cost_source: str = "probe"
    probe_draft_token_s: float | None = None
    # The target's one-row step in transformers' own kernels, timed in turn with the engine's: what the
    # engine's kernels gain over transformers' forward, a figure apart from any speedup. None: not measured.
    own_step_s: float | None = None
    engine_step_s: float | None = None
    # The target's weight bytes and this process's memory read bandwidth (GB/s), for each pass's share of it.
    weight_bytes: int | None = None
    memory_read_gbps: float | None = None
    # The few-rows kernel: the build that ran ("built <identity>"), why none did, or "" where no pass could use
    # it (the row's few_rows_kernel).
    few_rows_kernel: str = ""
    # The pages holding the target's weights (models/weight_pages.py; the row's weight_pages).
    weight_pages: str = ""
    # The draft model's forms at one row (KernelForms.described; the row's draft_kernel_forms), "" without a model,
    # and its weight bytes, for its one-row step's share of the read bandwidth.
    draft_forms: str = ""
    draft_weight_bytes: int | None = None
    # the target's and the draft's forms as digests, "target/draft" (the row's kernel_forms)
    forms_digest: str = ""

    @property
    def _draft_unit(self) -> float:
        return self.draft_reference_s or self.verify_costs_s[0]

    @property
    def cost_ratio(self) -> float:
        """c: a drafted token's cost in one-token target steps."""
        return self.draft_token_s / self._draft_unit

    @property
    def catch_up_ratio(self) -> float | None:
        """c2: the draft's two-position (catch-up) pass in one-token target steps; None where not measured."""
        return None if self.draft_catch_up_s is None else self.draft_catch_up_s / self._draft_unit


def probed_k(ks: Sequence[int | str], new_tokens: int | None = None, room: int | None = None) -> int:
    """The largest k whose verify cost v(k+1) the cost probe measures: the largest k run, at least 16 with a schedule,
    and never a block longer than a run can use (see :func:`probe_positions`)."""
    constant = [k for k in ks if isinstance(k, int)]
    longest = max(constant + ([SCHEDULE_MAX_K] if len(constant) < len(ks) else []))
    return probe_positions(longest, new_tokens, room) - 1


def probe_positions(longest_k: int, new_tokens: int | None = None, room: int | None = None) -> int:
    """How many positions the probe's longest verify block holds: min(k + 1, new tokens, room), and at least 2 where
    the room allows (the cost model needs v(1) and v(2)).

    A run of n new tokens never verifies more than n positions at once (each block is cut to what is left), and
    ``room``, the target's context window less the prompt, is as far as the cache can grow: measuring past either
    would time blocks no case runs, and past the window index past the position table.
    """
    positions = longest_k + 1
    if new_tokens is not None:
        positions = min(positions, max(new_tokens, 2))
    if room is not None:
        positions = min(positions, room)
    return max(positions, 1)


@torch.inference_mode()
def draft_pass_costs(
    target_model,
    drafter: Drafter,
    input_ids: torch.Tensor,
    repeats: int = 7,
    compile_length: int | None = None,
    kernels: KernelForms | str = "auto",
    draft_kernels: KernelForms | str | None = None,
) -> tuple[float, float | None, float | None]:
    """Seconds of the draft's one-position pass, its two-position pass and the target's one-position pass (medians),
    the three timed in turn within each repeat, so that their ratios compare passes of the same moment.

    The two-position pass is the draft's catch-up: after the target accepts a whole block, the draft has not
    read its own last token, and its first pass of the next step reads that token and the target's bonus token
    together. Each pass runs on a warm cache of the prompt, cropped back after it, as the engine runs it (with
    ``compile_length``: static caches of that size, the draft's one-token step compiled, longer feeds eager).
    A drafter without a model costs nothing: ``(0.0, None, None)``. A draft with another tokenizer
    (:class:`~..engine.cross_tokenizer.CrossTokenizerDrafter`) is timed on the prompt in its own tokens; its
    passes only, the re-tokenisation between them is in the runs' draft time (see :func:`calibrated_costs`).
    Each model runs in its own forms, as in a run: ``kernels`` the target's, ``draft_kernels`` the draft's (None:
    the target's setting), settled before the first repeat.
    """
    draft = drafter.model
    if draft is None:
        return 0.0, None, None  # prompt lookup and other model-free drafters: microseconds of tensor search
    draft_input = drafter.draft_ids_for(input_ids)
    clock = DeviceClock(draft.device)
    target_ids = input_ids.to(target_model.device)
    draft_ids = draft_input.to(draft.device)
    static = None if compile_length is None else max(compile_length, input_ids.shape[1] + 2)
    # A draft that does not compile (another tokenizer) runs eager on a dynamic cache, whatever --specbench-compile
    # says: time it so.
    draft_static = static if drafter.compiles else None
    target_cache = prefilled_cache(target_model, target_ids, static, "target")
    draft_cache = prefilled_cache(draft, draft_ids, draft_static, "draft")
    target_length, draft_length = cache_length(target_cache), cache_length(draft_cache)
    step = draft if draft_static is None else one_token_step(draft)
    pair = draft_ids[0].repeat(2)[-2:].unsqueeze(0)  # two real tokens, even from a one-token prompt
    passes = {
        "target": lambda: target_model(
            input_ids=target_ids[:, -1:], cache=target_cache, use_cache=True, logits_to_keep=1
        ),
        "one": lambda: step(input_ids=draft_ids[:, -1:], cache=draft_cache, use_cache=True, logits_to_keep=1),
        "two": lambda: step(input_ids=pair, cache=draft_cache, use_cache=True, logits_to_keep=1),
    }
    samples: dict[str, list[float]] = {name: [] for name in passes}
    target_forms = kernel_forms(target_model, kernels)
    draft_forms = draft_kernel_forms(draft, draft_kernels, target_forms, drafter.pass_rows)
    draft_forms.settle(drafter.pass_rows)  # its owner's forms too, before the first repeat
    # Both models' linear layers in the engine's forms, as in a run (the target's one-row step is the unit of c).
    with target_forms.applied(), draft_forms.applied():
        for repeat in range(repeats + 1):  # the first round warms up (and compiles) and is not kept
            for name, run in passes.items():
                start = clock.now()
                run()
                elapsed = clock.now() - start
                crop_to(target_cache, target_length)
                crop_to(draft_cache, draft_length)
                if repeat:
                    samples[name].append(elapsed)
    return (statistics.median(samples["one"]), statistics.median(samples["two"]), statistics.median(samples["target"]))


def _probed_curve(
    target_model: PreTrainedModel,
    input_ids: torch.Tensor,
    max_positions: int,
    forms: KernelForms,
    compile_length: int | None,
) -> list[float]:
    """v(1) .. v(max_positions), probed again while some v(m)/v(1) is below :data:`.cost_model.CURVE_FLOOR` (a wider
    pass cheaper than a one-row step: at equal kernels only noise does that), :data:`PROBE_TRIES` tries at most: the
    try whose lowest ratio is highest. A curve that still dips flags the rows priced on it
    (:func:`prediction_fault`)."""
    best: list[float] = []
    for _ in range(PROBE_TRIES):
        curve = verify_costs(target_model, input_ids, max_positions, kernels=forms, compile_length=compile_length)
        if not best or lowest_ratio(curve)[1] > lowest_ratio(best)[1]:
            best = curve
        if not curve_dip(best):
            break
    return best


def measure_costs(
    target_model: PreTrainedModel,
    drafter: Drafter,
    input_ids: torch.Tensor,
    max_positions: int,
    kernels: KernelForms | str = "auto",
    compile_length: int | None = None,
    head_rows: int | None = None,
    draft_kernels: KernelForms | str | None = None,
) -> CostProfile:
    """The cost model's inputs for one pair: v(1) .. v(max_positions), the draft's one- and two-position passes
    (with the target's one-position pass timed in turn with them), the pass sizes (1 .. ``head_rows``) whose
    linear layers run other forms than the model's own, every one settled here before any timed run, and the
    figures of the target's passes against memory (:func:`bandwidth_fields`). ``kernels``: the target's
    :class:`~..kernels.verify_forms.KernelForms` (its owner's, which the runs then use as settled here), or a
    setting for forms of this call; ``draft_kernels`` the draft model's (None: the target's setting). A curve with a
    wider pass cheaper than a one-row step is probed again (:func:`_probed_curve`)."""
    forms = kernel_forms(target_model, kernels)
    head_rows = max(head_rows or 0, max_positions)
    forms.settle(head_rows)
    curve = _probed_curve(target_model, input_ids, max_positions, forms, compile_length)
    # the draft's forms made once: the probe settles and times them, the row describes them
    draft_forms = draft_kernel_forms(drafter.model, draft_kernels, forms, drafter.pass_rows)
    one, two, reference = draft_pass_costs(
        target_model, drafter, input_ids, compile_length=compile_length, kernels=forms, draft_kernels=draft_forms
    )
    engine_step = own_step = None
    if forms.kernel != "linear":  # otherwise both are the model's own
        engine_step, own_step = own_kernel_step_costs(target_model, input_ids, forms)
    nbytes = weight_bytes(target_model)
    return CostProfile(
        verify_costs_s=curve,
        draft_token_s=one,
        column_head_rows=forms.column_head_rows(head_rows),
        few_rows_rows=forms.few_rows_rows(head_rows),
        draft_catch_up_s=two,
        draft_reference_s=reference,
        own_step_s=own_step,
        engine_step_s=engine_step,
        weight_bytes=nbytes,
        memory_read_gbps=memory_read_gbps(target_model.device, nbytes),
        few_rows_kernel=forms.few_rows_kernel or (draft_forms.few_rows_kernel if draft_forms else ""),
        weight_pages=pages_of(target_model),
        draft_forms=draft_forms.described(1) if draft_forms else "",
        draft_weight_bytes=weight_bytes(drafter.model) if draft_forms else None,
        forms_digest=f"{forms.digest(head_rows)}/{draft_forms.digest(drafter.pass_rows) if draft_forms else '-'}",
    )


@torch.inference_mode()
def measure_batched_costs(
    target_model: PreTrainedModel,
    drafter: Drafter,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    max_positions: int,
    repeats: int = 5,
) -> CostProfile:
    """The cost model's inputs at batch B = ``input_ids.shape[0]``, as the batched engine runs its passes
    (:class:`~pytest_specbench.engine.batched.RowCache`, the model's own output head): v(m), one target pass over
    B x m positions on a warm cache of the left-padded prompts, m = 1 .. ``max_positions``; the draft's one- and
    two-position passes over the B rows, each timed in turn with a target one-position pass over the B rows (the
    unit of their ratios). Each pass is rolled back after it; the first sweep warms up and is not kept."""
    from ..engine.batched import RowCache

    clock = DeviceClock(target_model.device)
    padded = None if bool(attention_mask.all()) else attention_mask.bool()
    target = RowCache(target_model)
    target.forward(input_ids, padded)
    draft = None
    if drafter.model is not None:
        draft = RowCache(drafter.model)
        draft.forward(input_ids.to(drafter.model.device), None if padded is None else padded.to(drafter.model.device))
    last = input_ids[:, -1:]

    def timed(cache, width: int) -> float:
        block = last.to(cache.model.device).repeat(1, width)  # the cost does not depend on the tokens' values
        start = clock.now()
        cache.forward(block, None, logits_to_keep=width)
        elapsed = clock.now() - start
        cache.rollback(cache.lengths - width)
        return elapsed

    curve: dict[int, list[float]] = {m: [] for m in range(1, max_positions + 1)}
    passes: dict[str, list[float]] = {"one": [], "two": [], "target": []}
    for repeat in range(repeats + 1):
        for m in curve:
            elapsed = timed(target, m)
            if repeat:
                curve[m].append(elapsed)
        if draft is not None:
            for name, cache, width in (("target", target, 1), ("one", draft, 1), ("two", draft, 2)):
                elapsed = timed(cache, width)
                if repeat:
                    passes[name].append(elapsed)
    verify = [statistics.median(curve[m]) for m in curve]
    if draft is None:
        return CostProfile(verify_costs_s=verify, draft_token_s=0.0, column_head_rows=[])
    return CostProfile(
        verify_costs_s=verify,
        draft_token_s=statistics.median(passes["one"]),
        column_head_rows=[],
        draft_catch_up_s=statistics.median(passes["two"]),
        draft_reference_s=statistics.median(passes["target"]),
    )


def calibrated_costs(costs: CostProfile, pairs: Sequence[tuple[GenerationResult, GenerationResult]]) -> CostProfile:
    """The profile with the draft's costs read from untimed (baseline, speculative) pairs of native runs, in the
    loop and on the clock the timed rounds use: a drafted token is the speculative runs' draft time per
    one-position pass (a catch-up pass counted at the probe's two-to-one ratio), in units of the baselines'
    decode time per token, a target one-token step as the runs take it.

    Read in the engine's own loop because no estimate made before timing, the probe's included, has matched
    what the timed rows paid on a shared CPU (docs/results/2026-12-01-default-cpu-run-run-costs.md). The curve,
    v(m), stays the probe's. Unchanged where nothing was drafted or decoded, or for a drafter that costs
    nothing."""
    # A draft with another tokenizer: its runs' draft time holds the re-tokenisation (DecodeStats'
    # translation_time_s is part of draft_time_s), so its c here is what a drafted token costs it all told.
    draft_s = sum(run.stats.draft_time_s for _, run in pairs)
    passes = sum(run.stats.draft_forward_passes for _, run in pairs)
    catch_ups = min(
        sum(catch_up_passes(run.stats.drafted_per_step, run.stats.accepted_per_step) for _, run in pairs), passes
    )
    decode_s = sum(base.stats.decode_time_s for base, _ in pairs)
    decode_tokens = sum(base.stats.decode_tokens for base, _ in pairs)
    if min(draft_s, passes, decode_s, decode_tokens, costs.draft_token_s) <= 0:
        return costs
    two_to_one = (costs.draft_catch_up_s or costs.draft_token_s) / costs.draft_token_s
    one = draft_s / (passes - catch_ups + two_to_one * catch_ups)
    return dataclasses.replace(
        costs,
        draft_token_s=one,
        draft_catch_up_s=two_to_one * one,
        draft_reference_s=decode_s / decode_tokens,
        draft_cost_source="runs",
        probe_draft_token_s=costs.draft_token_s,
    )


def case_block_rows(engine: str, k: int | str, rows: list[int]) -> list[int]:
    """Of the verify block sizes ``rows`` (a :class:`CostProfile` list), those a case ran: native engine only,
    and at a constant k only blocks of k + 1 rows or fewer."""
    if not runs_own_loop(engine):
        return []
    return [m for m in rows if m <= k + 1] if isinstance(k, int) else list(rows)


def bandwidth_fields(engine: str, costs: CostProfile | None, k: int | str) -> dict[str, Any]:
    """The row's kernel and memory figures from the probe, for the native engine's passes only: the read
    bandwidth, the one-row step's and the case's verify pass's effective bandwidth (weight bytes over v(1)
    and v(k + 1)), and what the engine's one-row step gains over transformers' own."""
    if not runs_own_loop(engine) or costs is None:
        return {}
    curve, nbytes = costs.verify_costs_s, costs.weight_bytes
    fields: dict[str, Any] = {
        "memory_read_gbps": costs.memory_read_gbps,
        "few_rows_kernel": costs.few_rows_kernel,
        "weight_pages": costs.weight_pages,
        "kernel_forms": costs.forms_digest,
    }
    if nbytes:
        fields["one_row_gbps"] = effective_gbps(nbytes, curve[0])
        if isinstance(k, int) and k < len(curve):
            fields["verify_pass_gbps"] = effective_gbps(nbytes, curve[k])
    if costs.own_step_s and costs.engine_step_s:
        fields["kernel_step_gain"] = costs.own_step_s / costs.engine_step_s
    if costs.draft_forms:
        fields["draft_kernel_forms"] = costs.draft_forms
        draft_step = costs.probe_draft_token_s or costs.draft_token_s
        if costs.draft_weight_bytes:
            fields["draft_one_row_gbps"] = effective_gbps(costs.draft_weight_bytes, draft_step)
    return fields


def cost_model_fields(
    k: int | str,
    drafted_per_step: list[int],
    accepted_per_step: list[int],
    costs: CostProfile | None,
    decode_speedup: float,
    *,
    other_time_s: float | None = None,
    tau: float | None = None,
) -> dict[str, Any]:
    """The row's cost-model fields from a run's per-step counts and the pair's measured costs.

    The prediction (:func:`~pytest_specbench.engine.cost_model.predict_steps`) prices the run's steps as they ran,
    on the probe's curve with no pass priced below a one-row step (``bounded_curve``), and divides the tokens they
    committed by that time:
    each at the length its drafter proposed (the last block shortened by the run's end, prompt lookup's proposals
    where its match ended), with the draft's catch-up pass after a block accepted whole and ``other_time_s`` (the
    median run's decode time outside drafting and verifying) spread over its steps as a per-step overhead. The
    recommended k maximises the same cost per step over the drafter's proposal lengths capped at each k. A
    prediction above the run's ``tau``, or from a curve that dips, is flagged (:func:`prediction_fault`).
    """
    alpha = alpha_mle(drafted_per_step, accepted_per_step)
    fields: dict[str, Any] = {
        "alpha": alpha,
        "position_acceptance": position_acceptance(drafted_per_step, accepted_per_step),
        "accepted_length_histogram": accepted_length_histogram(drafted_per_step, accepted_per_step),
    }
    if costs is None:
        return fields
    curve, c, c2 = costs.verify_costs_s, costs.cost_ratio, costs.catch_up_ratio
    steps = max(len(drafted_per_step) - 1, 0)
    overhead_s = (other_time_s or 0.0) / steps if steps else 0.0
    probe = costs.probe_draft_token_s
    fields.update(
        cost_ratio=c,
        draft_token_ms=1000 * costs.draft_token_s,
        verify_costs_ms=[1000 * v for v in curve],
        draft_cost_source=costs.draft_cost_source if costs.draft_token_s > 0 else None,
        draft_token_probe_ms=None if probe is None else 1000 * probe,
        draft_catch_up_ms=None if costs.draft_catch_up_s is None else 1000 * costs.draft_catch_up_s,
        step_overhead_ms=1000 * overhead_s if other_time_s is not None else None,
    )
    if not isinstance(k, int) or k >= len(curve):  # a schedule's k changes step to step: one k's predictions fail
        return fields
    if max(drafted_per_step, default=0) >= len(curve):  # transformers' drafts of another tokenizer may pass k
        return fields
    fields["verify_cost_ratio"] = curve[k] / curve[0]
    if alpha is not None and steps:
        overhead = overhead_s / curve[0]
        priced = bounded_curve(curve)
        run = predict_steps(alpha, drafted_per_step, c, priced, c2, overhead)
        # The tokens the steps committed, counted over the same steps whose time is priced (a later turn's prefill
        # entry: one token, one plain step), over that time: a prediction of the time, which the bound speedup <= tau
        # holds; alpha's i.i.d. tokens per step stay in predicted_tau.
        tokens = decode_tokens_of_steps(accepted_per_step)
        predicted = tokens / run.time if run.time > 0 else 0.0
        fault = prediction_fault(predicted, tau, curve, max(drafted_per_step, default=0) + 1)
        fields.update(
            predicted_tau=run.tau,
            # A prediction the bound forbids is the probe's fault, not a figure: kept in the cause only.
            predicted_speedup=None if fault else predicted,
            efficiency=decode_speedup / predicted if predicted > 0 and not fault else None,
            prediction_fault=fault,
            recommended_k=recommended_k_for(
                alpha, c, priced, observed_proposals(k, drafted_per_step, accepted_per_step), c2, overhead
            ),
        )
    return fields


def prediction_fault(predicted: float, tau: float | None, curve: Sequence[float], longest: int) -> str | None:
    """Why a row's predicted speedup is no figure, in words with the figures, or None: the probe's curve up to the
    run's widest pass dips below :data:`~..engine.cost_model.CURVE_FLOOR`, or the prediction exceeds the run's tau
    (speedup <= tau binds a prediction as it binds a measurement: results/invariants.py; priced on
    ``bounded_curve``, only a fault breaks it)."""
    causes = []
    dip = curve_dip(curve, longest)
    if dip:
        causes.append(f"the probe's {dip}")
    if tau and predicted > tau * (1 + 1e-9):  # a guard: priced on bounded_curve, a prediction keeps the bound
        m, ratio = lowest_ratio(curve, longest)
        low = f": the probe's lowest v(m)/v(1) up to v({longest}) is v({m})/v(1) = {ratio:.2f}" if m > 1 else ""
        causes.append(f"predicted speedup {predicted:.2f} above the run's tau {tau:.2f}{low}")
    return "; ".join(causes) or None
