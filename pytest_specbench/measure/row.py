"""A measured case as its result row: speedups with intervals, medians, step counts, costs and the verdict."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..cases.matrix import Case
from ..engine.sampling import SamplingParams
from ..engine.stats import DecodeStats, GenerationResult
from ..results.invariants import suspect_fields
from ..results.requests import request_fields, request_stats
from ..results.schema import CaseResult
from ..results.statistics import coefficient_of_variation
from ..settings.axes import AXIS_NAMES
from .costs import CostProfile, bandwidth_fields, case_block_rows, cost_model_fields
from .engines import sampling_kwargs
from .pairing import Pairing
from .speedup_intervals import NO_SPREADS, Spreads, speedups
from .verdicts import quality_score


@dataclass(frozen=True)
class BlockRecord:
    """Where a case was timed: its block, the block rounds it ran in, and why it stopped being timed."""

    block: str
    rounds: list[int]
    eliminated_by: int | str | None
    stop: str  # blocks.TIGHT, ELIMINATED, ...
    block_rounds: int  # rounds the whole block ran
    resumed_rounds: int = 0  # its first rounds, which a stopped run timed and this one continued from
    retimed_why: str = ""  # why a stopped run's logged rounds of the block were timed again


#: (its last run, the speed fields, the step fields, the median run's other time) -> (its fields, the other time)
KindFields = Callable[[GenerationResult, dict[str, Any], dict[str, Any], float], tuple[dict[str, Any], float]]


@dataclass
class Measurement:
    """What timing one case produced, before it becomes a result row."""

    input_ids: torch.Tensor
    reference: list[int]
    baselines: list[GenerationResult]
    speculative: list[GenerationResult]
    paired: bool  # baseline and speculative rounds ran side by side
    verdict: dict[str, Any]
    target_load_s: float
    target_load_source: str
    # The pair's measured costs, parameter counts and peak memory; absent in hand-built measurements.
    costs: CostProfile | None = None
    sizes: dict[str, int] | None = None
    sampling: SamplingParams | None = None
    peak_memory: tuple[float, str, float] | None = None  # peak MiB, its kind, weights held MiB
    draft_label: str | None = None  # the drafter as it ran (CaseRun.draft_label); absent: the pair's own label
    block: BlockRecord | None = None
    batch_prompt_ids: list[str] | None = None  # a batch's: each row's prompt id (None for a single sequence)
    spreads: Spreads = NO_SPREADS  # the block's pooled noise; by default each case's own
    pairing: Pairing | None = None  # how the block timed its baselines; absent in hand-built measurements
    turn_verdicts: list[dict[str, Any]] | None = None  # a multi-turn case's verdict per turn
    vocabulary_overlap: float | None = None  # a cross-tokenizer pair's (ModelStore.vocabulary_overlap)
    # The fields its kind adds from its last run, the speed and step fields, and the other time it leaves
    # (CaseRun.row_fields); absent in hand-built measurements: none.
    kind_fields: KindFields | None = None


def median(runs: list[GenerationResult], field: str) -> float:
    """The median over ``runs`` of a DecodeStats field."""
    return statistics.median(getattr(run.stats, field) for run in runs)


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _identity_fields(case: Case, measurement: Measurement) -> dict[str, Any]:
    pair, values = case.pair, case.axis_values()
    return dict(
        case=case.id,
        config=case.config,
        # each axis's row field, but the dtype: the row's is the one its models ran in (build_result's)
        **{name: values[name] for name in AXIS_NAMES if name != "dtype"},
        target=pair.target,
        draft=measurement.draft_label or pair.draft_label,
        drafter=pair.drafter,
        prompt_id=case.prompt.id,
        category=case.prompt.category,
        **sampling_kwargs(measurement.sampling or SamplingParams()),
        prompt_tokens=int(measurement.input_ids.shape[1]),
        turns=_turn_records(measurement),
    )


def _speed_fields(measurement: Measurement, ci_target: float) -> dict[str, Any]:
    """Speedups with their intervals, throughput and latency medians, and the rounds' spread."""
    baselines, speculative = measurement.baselines, measurement.speculative
    end_to_end, decode = speedups(baselines, speculative, measurement.paired, measurement.spreads)
    pooled = measurement.spreads[1] if measurement.paired else None
    baseline_tps = _spread([run.stats.tokens_per_second for run in baselines])
    speculative_tps = _spread([run.stats.tokens_per_second for run in speculative])
    new_tokens = max(speculative[-1].stats.new_tokens, 1)

    return dict(
        latency_ms=1000 * median(speculative, "wall_time_s") / new_tokens,
        throughput_tps=speculative_tps["median"],
        baseline_tps=baseline_tps["median"],
        baseline_tps_min=baseline_tps["min"],
        baseline_tps_max=baseline_tps["max"],
        speculative_tps=speculative_tps["median"],
        speculative_tps_min=speculative_tps["min"],
        speculative_tps_max=speculative_tps["max"],
        speedup=end_to_end.estimate,
        speedup_ci_low=end_to_end.low,
        speedup_ci_high=end_to_end.high,
        ttft_ms=1000 * median(speculative, "prefill_time_s"),
        baseline_ttft_ms=1000 * median(baselines, "prefill_time_s"),
        decode_tps=median(speculative, "decode_tokens_per_second"),
        baseline_decode_tps=median(baselines, "decode_tokens_per_second"),
        decode_speedup=decode.estimate,
        decode_speedup_ci_low=decode.low,
        decode_speedup_ci_high=decode.high,
        baseline_cv=coefficient_of_variation([run.stats.wall_time_s for run in baselines]),
        speculative_cv=coefficient_of_variation([run.stats.wall_time_s for run in speculative]),
        rounds=len(speculative),
        baseline_runs=len(baselines),
        interval_dof=pooled.dof if pooled else (len(speculative) - 1 if measurement.paired else None),
        round_log_sd=pooled.sd if pooled else None,
        round_decode_token_s=[run.stats.time_per_decode_token_s for run in speculative],
        round_wall_s=[run.stats.wall_time_s for run in speculative],
        baseline_round_decode_token_s=[run.stats.time_per_decode_token_s for run in baselines],
        # An eliminated case was stopped on purpose, with an interval that sufficed to rank it.
        unstable=(
            max(end_to_end.relative_half_width, decode.relative_half_width) > ci_target
            and (measurement.block is None or measurement.block.eliminated_by is None)
        ),
    )


def _block_fields(block: BlockRecord | None, pairing: Pairing | None) -> dict[str, Any]:
    fields = {} if pairing is None else dict(pairing=pairing.kind, pairing_reason=pairing.reason)
    if block is None:
        return fields
    return dict(
        fields,
        block=block.block,
        block_rounds=list(block.rounds),
        eliminated_by=block.eliminated_by,
        timing_stop=block.stop,
        block_round_count=block.block_rounds,
        resumed_rounds=block.resumed_rounds,
        rounds_retimed=block.retimed_why,
    )


def _step_fields(last: DecodeStats, median_run: DecodeStats) -> dict[str, Any]:
    """Where the median run's time went, and the last run's per-step counts (the same in every greedy run)."""
    return dict(
        new_tokens=last.new_tokens,
        prefill_tokens=median_run.prefill_tokens,
        draft_time_s=median_run.draft_time_s,
        verify_time_s=median_run.verify_time_s,
        other_time_s=median_run.other_time_s,
        acceptance_rate=last.acceptance_rate,
        tau=last.tokens_per_step,
        drafted_tokens=last.drafted_tokens,
        accepted_tokens=last.accepted_tokens,
        target_forward_passes=last.target_forward_passes,
        draft_forward_passes=last.draft_forward_passes,
        accepted_per_step=list(last.accepted_per_step),
        drafted_per_step=list(last.drafted_per_step),
        k_per_step=list(last.k_per_step),
    )


def _tokenizer_fields(measurement: Measurement) -> dict[str, Any]:
    """A draft with another tokenizer: how much of the target's vocabulary it shares, and the share of its draft
    time spent re-tokenising, summed over the timed runs (None where no run recorded any: the hf engine's
    translation happens inside transformers)."""
    runs = [run.stats for run in measurement.speculative]
    translation_s = sum(stats.translation_time_s for stats in runs)
    draft_s = sum(stats.draft_time_s for stats in runs)
    return dict(
        vocabulary_overlap=measurement.vocabulary_overlap,
        translation_share=translation_s / draft_s if translation_s > 0 and draft_s > 0 else None,
    )


def _flat(tokens: list) -> list:
    """A batch's tokens (a list per row) as one list; a single run's as they are."""
    return [token for row in tokens for token in row] if tokens and isinstance(tokens[0], list) else tokens


def _begins(tokens: list, reference: list) -> bool:
    """The baseline's tokens are the reference's, or begin them: an interleaved baseline decodes only as many
    tokens as fit in its run's time."""
    if tokens and isinstance(tokens[0], list) or len(tokens) >= len(reference):
        return tokens == reference
    return tokens == reference[: len(tokens)]


def _turn_records(measurement: Measurement) -> list[dict[str, Any]]:
    """A multi-turn case's figures per turn (empty for one turn): medians over its runs and its baselines."""
    verdicts = measurement.turn_verdicts or []
    records = []
    for index, verdict in enumerate(verdicts):
        runs = [run.turns[index] for run in measurement.speculative]
        baselines = [run.turns[index] for run in measurement.baselines if len(run.turns) > index]
        run_ms = 1000 * median(runs, "time_per_decode_token_s")
        baseline_ms = 1000 * median(baselines, "time_per_decode_token_s") if baselines else None
        last = runs[-1].stats
        records.append(
            dict(
                turn=index + 1,
                prompt_tokens=runs[-1].prompt_length,
                new_tokens=last.new_tokens,
                tau=last.tokens_per_step,
                acceptance_rate=last.acceptance_rate,
                decode_ms_per_token=run_ms,
                baseline_decode_ms_per_token=baseline_ms,
                decode_speedup=baseline_ms / run_ms if baseline_ms and run_ms > 0 else None,
                verdict=verdict["verdict"],
                first_divergence=verdict.get("first_divergence"),
            )
        )
    return records


def _verdict_fields(measurement: Measurement) -> dict[str, Any]:
    reference, verdict = measurement.reference, measurement.verdict
    tokens = _flat(measurement.speculative[-1].token_ids)
    return dict(
        quality_score=quality_score(tokens, _flat(reference)) if reference else None,
        lossless=None if verdict["verdict"] == "not-checked" else verdict["verdict"] == "lossless",
        baseline_matches_reference=(_begins(measurement.baselines[-1].token_ids, reference) if reference else None),
        **verdict,
    )


def build_result(case: Case, measurement: Measurement, device: str, dtype: str, ci_target: float) -> CaseResult:
    """The result row of a measured case: speedups with intervals, medians, counts and the verdict."""
    speculative = measurement.speculative
    last = speculative[-1].stats
    median_run = sorted(speculative, key=lambda run: run.stats.wall_time_s)[len(speculative) // 2].stats
    speed = _speed_fields(measurement, ci_target)
    memory = measurement.peak_memory
    steps = _step_fields(last, median_run)
    other_time_s = median_run.other_time_s
    kind: dict[str, Any] = {}
    if measurement.kind_fields is not None:
        kind, other_time_s = measurement.kind_fields(speculative[-1], speed, steps, other_time_s)
    drafted, accepted = steps["drafted_per_step"], steps["accepted_per_step"]
    row = CaseResult(
        **_identity_fields(case, measurement),
        **speed,
        **steps,
        **_verdict_fields(measurement),
        **_block_fields(measurement.block, measurement.pairing),
        **_tokenizer_fields(measurement),
        **kind,
        # Each round's run, turn or batch row is one request (results/requests.py).
        **request_fields(request_stats(speculative, batched=measurement.batch_prompt_ids is not None)),
        device=device,
        dtype=dtype,
        threads=torch.get_num_threads(),
        target_load_s=measurement.target_load_s,  # includes a GGUF conversion on a first run
        target_load_source=measurement.target_load_source,
        **cost_model_fields(
            case.k,
            drafted,
            accepted,
            measurement.costs,
            speed["decode_speedup"],
            other_time_s=other_time_s,
            tau=steps.get("tau"),
        ),
        **bandwidth_fields(case.engine, measurement.costs, case.k),
        column_head_rows=case_block_rows(
            case.engine, case.k, measurement.costs.column_head_rows if measurement.costs else []
        ),
        few_rows_rows=case_block_rows(
            case.engine, case.k, measurement.costs.few_rows_rows if measurement.costs else []
        ),
        **(measurement.sizes or {}),
        **(dict(zip(("peak_memory_mb", "peak_memory_kind", "weights_held_mb"), memory)) if memory else {}),
    )
    # A speedup the bound speedup <= tau does not allow: the runs' kernels or the machine's load differed
    # (results/invariants.py).
    return replace(row, **suspect_fields(row))
