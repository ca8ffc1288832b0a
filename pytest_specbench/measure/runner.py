"""Run one benchmark case: time baseline and speculative decoding, check losslessness.

Knows nothing of pytest. ``measure_case`` times and judges; ``build_result`` turns that into
a :class:`~.schema.CaseResult`, whose ``to_row()`` is what travels between xdist workers.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..settings.config import SpecbenchConfig
from ..engine.cost_model import (accepted_length_histogram, alpha_mle, position_acceptance, predicted_speedup,
                         predicted_tau, recommended_k)
from ..engine.cost_probe import draft_token_cost, parameter_count, verify_costs
from ..engine.output_head import column_head_rows, settle_head_forms
from ..engine.decoding import greedy_generate, speculative_generate
from ..engine.drafters import ModelDrafter, PromptLookupDrafter
from ..engine.hf_assisted import AUTO, HEURISTIC, hf_assisted_generate
from ..engine.sampling import SamplingParams, check_acceptance_rule, expected_acceptance, sampling_distribution
from ..engine.schedules import CostModelSchedule, DraftSchedule, HeuristicSchedule
from .verdicts import diagnose, quality_score
from .matrix import Case
from ..models.base import NotApplicable, UnrunnableCase, context_window
from .prompts import Prompt, filler_text, fit_context
from ..results.schema import CaseResult
from ..results.statistics import Interval, coefficient_of_variation, speedup_interval
from ..engine.stats import GenerationResult
from .store import ModelStore

# (run the speculative decode, run the baseline before each timed round or None, rounds) -> None.
# pytest-benchmark's pedantic() is one: it times the first rounds, the adaptive loop the rest.
RoundTimer = Callable[[Callable[[], Any], Callable[[], Any] | None, int], None]


def prompt_input_ids(tokenizer, prompt: Prompt, all_prompts: list[Prompt], context_tokens: int | None,
                     device: str) -> torch.Tensor:
    """Tokenise a prompt, padded or cut to ``context_tokens`` (special tokens included) when asked."""
    plain = tokenizer(prompt.text, add_special_tokens=False).input_ids
    full = tokenizer(prompt.text).input_ids
    # Leading special tokens (a BOS) stay in front of any padding.
    lead = full[: len(full) - len(plain)] if full[len(full) - len(plain):] == plain else []
    if context_tokens is not None:
        filler = tokenizer(filler_text(all_prompts, exclude_id=prompt.id), add_special_tokens=False).input_ids
        plain = fit_context(plain, max(context_tokens - len(lead), 1), filler)
        full = lead + plain
    return torch.tensor([full], dtype=torch.long, device=device)


def check_context_windows(case: Case, prompt_tokens: int, new_tokens: int, models: dict[str, Any]) -> None:
    """Raise :class:`UnrunnableCase` when the prompt and the new tokens need more positions than a model has.

    ``models`` maps a role and source ("target 'gpt2'") to the model. The engine never feeds a
    position past the last new token (each draft block is cut to what is left), so
    prompt + new tokens is what must fit, whatever k is.
    """
    needed = prompt_tokens + new_tokens
    for role, model in models.items():
        window = context_window(model.config)
        if window is None or needed <= window[0]:
            continue
        limit, attribute = window
        longest_prompt = limit - new_tokens
        shorten = (f"cut the prompts with --specbench-context-tokens={longest_prompt} (or fewer)"
                   if longest_prompt >= 1 else "")
        fewer = f"lower --specbench-max-new-tokens to {limit - prompt_tokens} or less" \
            if limit > prompt_tokens else "lower --specbench-max-new-tokens"
        raise UnrunnableCase(
            f"case {case.id}: the prompt ({prompt_tokens} tokens) and {new_tokens} new tokens need {needed} "
            f"positions, more than the {role} allows ({attribute} = {limit}); "
            f"{' or '.join(part for part in (shorten, fewer) if part)}"
        )


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


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
    # The pair's measured costs ({"verify_costs_s": [v(1), ...], "draft_token_s": ...}), parameter
    # counts and peak memory; absent in hand-built measurements.
    costs: dict[str, Any] | None = None
    sizes: dict[str, int] | None = None
    sampling: SamplingParams | None = None
    peak_memory: tuple[float, str] | None = None


def measure_case(
    case: Case,
    store: ModelStore,
    config: SpecbenchConfig,
    all_prompts: list[Prompt],
    timer: RoundTimer | None = None,
) -> Measurement:
    """Time baseline and speculative decoding of one case and judge its output against the reference."""
    pair = case.pair
    target = store.target(pair)
    drafter = store.drafter(pair)
    if case.engine == "hf" and isinstance(drafter, PromptLookupDrafter) and not isinstance(case.k, int):
        raise NotApplicable(f"transformers' prompt lookup has no draft-length schedule, so the hf engine runs "
                            f"pair {pair.name} at integer k only, not k={case.k}")
    input_ids = store.memo(
        ("input_ids", pair.target, pair.revision, case.prompt.id),
        lambda: prompt_input_ids(target.tokenizer, case.prompt, all_prompts, config.context_tokens, store.device),
    )
    eos = target.tokenizer.eos_token_id if config.stop_at_eos else None
    n = config.max_new_tokens
    models = {f"target {pair.target!r}": target.model}
    if isinstance(drafter, ModelDrafter):  # prompt lookup has no window; derived drafts share the target's
        models[f"draft {pair.draft_label!r}"] = drafter.model
    check_context_windows(case, int(input_ids.shape[1]), n, models)
    sampling = sampling_params(config)
    # Under sampling no token sequence is "the" output: the verdict comes from the distribution check.
    reference = store.reference(pair, case.prompt.id, input_ids, n, eos) if sampling.greedy else []

    baselines: list[GenerationResult] = []
    speculative: list[GenerationResult] = []
    # Seeded per case, so a sampled case repeats on one machine whatever ran before it.
    baseline_generator = torch.Generator().manual_seed(config.seed)

    def run_baseline() -> None:
        baselines.append(greedy_generate(target.model, input_ids, n, eos_token_id=eos, generator=baseline_generator,
                                         compile_steps=config.compile_steps, **sampling_kwargs(sampling)))

    longest = probed_k(config.ks)
    # A schedule may draft past the probe's longest k (heuristic: from 20 up), at most n - 1 tokens.
    head_rows = max(longest + 1, n if HEURISTIC in config.ks else 0)
    compile_length = int(input_ids.shape[1]) + n if config.compile_steps else None
    costs = store.memo(("cost_model", pair.name, longest, head_rows, config.head_kernel, compile_length),
                       lambda: measure_costs(target.model, drafter, input_ids, longest + 1, config.head_kernel,
                                             compile_length, head_rows))
    speculative_run = speculative_runner(case, target.model, drafter, input_ids, n, eos, costs, sampling,
                                         torch.Generator().manual_seed(config.seed + 1), config.head_kernel,
                                         config.compile_steps)

    def run_speculative() -> None:
        speculative.append(speculative_run())

    def warm_up() -> bool:
        for _ in range(config.warmup):
            run_baseline()
            run_speculative()
        return True

    # Once per pair and engine on this worker: first-call costs (allocations, kernel choice) are paid here.
    store.memo(("warmup", pair.name, case.engine), warm_up)

    sizes = store.memo(("sizes", pair.name), lambda: {
        "target_params": parameter_count(target.model),
        "draft_params": parameter_count(getattr(drafter, "model", None))})
    baselines.clear()
    reset_peak_memory(store.device)
    speculative.clear()

    paired = not config.baseline_once
    if config.baseline_once:
        # Timed once per (target, prompt) and shared by every k and pair with that target.
        key = ("baseline", pair.target, pair.revision, store.dtype_for(pair), case.prompt.id, n, eos)

        def time_baseline() -> list[GenerationResult]:
            for _ in range(config.min_rounds):
                run_baseline()
            return list(baselines)

        baselines[:] = store.memo(key, time_baseline)
    time_rounds(run_speculative, run_baseline if paired else None, lambda: _precision(baselines, speculative, paired),
                config, timer)

    if sampling.greedy:
        verdict = diagnose(target.model, target.tokenizer, input_ids, speculative[-1].token_ids, reference,
                           store.dtype_for(pair) != "float32", config.tie_tolerance)
    else:
        verdict = sampling_verdict(case, store.memo(
            ("sampling_check", pair.name, case.prompt.id, sampling, config.sampling_check_draws, config.seed),
            lambda: sampling_check(target.model, drafter, input_ids, sampling, config.sampling_check_draws,
                                   config.seed)))
    return Measurement(input_ids=input_ids, reference=reference, baselines=baselines, speculative=speculative,
                       paired=paired, verdict=verdict, target_load_s=target.load_time_s,
                       target_load_source=target.source, costs=costs, sizes=sizes,
                       peak_memory=peak_memory_mb(store.device), sampling=sampling)


#: the longest k the cost probe covers when a schedule chooses k (auto, heuristic)
SCHEDULE_MAX_K = 16


def probed_k(ks) -> int:
    """The largest k whose verify cost v(k+1) the cost probe measures: the largest k run, at least 16 with a schedule."""
    constant = [k for k in ks if isinstance(k, int)]
    return max(constant + ([SCHEDULE_MAX_K] if len(constant) < len(ks) else []))


def case_schedule(k: int | str, costs: dict[str, Any]) -> int | DraftSchedule:
    """What the native engine drafts with: a constant k, transformers' heuristic, or the cost model's choice."""
    if k == HEURISTIC:
        return HeuristicSchedule()
    if k == AUTO:
        curve = costs["verify_costs_s"]
        return CostModelSchedule(curve, costs["draft_token_s"] / curve[0])
    return k


def sampling_params(config: SpecbenchConfig) -> SamplingParams:
    return SamplingParams(config.temperature, config.top_p, config.top_k)


def sampling_kwargs(sampling: SamplingParams) -> dict[str, Any]:
    return {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k}


def speculative_runner(case: Case, target_model, drafter, input_ids: torch.Tensor, max_new_tokens: int,
                       eos: int | None, costs: dict[str, Any], sampling: SamplingParams | None = None,
                       generator: torch.Generator | None = None, head_kernel: str = "auto",
                       compile_steps: bool = False) -> Callable[[], GenerationResult]:
    """One speculative run of the case, by its engine; under sampling each run draws on ``generator``."""
    sampling = sampling or SamplingParams()
    if case.engine == "hf":
        def run_hf() -> GenerationResult:
            # transformers samples from torch's global generator: seed it from this case's generator.
            seed = None if sampling.greedy else int(torch.randint(2**31 - 1, (1,), generator=generator))
            return hf_assisted_generate(target_model, drafter, input_ids, case.k, max_new_tokens, eos_token_id=eos,
                                        sampling=sampling, seed=seed)
        return run_hf
    schedule = case_schedule(case.k, costs)
    return lambda: speculative_generate(target_model, drafter, input_ids, schedule, max_new_tokens,
                                        eos_token_id=eos, generator=generator, head_kernel=head_kernel,
                                        compile_steps=compile_steps, **sampling_kwargs(sampling))


@torch.inference_mode()
def sampling_check(target_model, drafter, input_ids: torch.Tensor, sampling: SamplingParams, draws: int,
                   seed: int) -> dict[str, Any]:
    """The engine's accept/resample rule on the case's real distributions at the prompt (p, and q or the point
    mass prompt lookup proposes there), ``draws`` simulated draft tokens, chi-square against p."""
    p = sampling_distribution(target_model(input_ids=input_ids, logits_to_keep=1).logits[0, -1], sampling)
    generator = torch.Generator().manual_seed(seed + 2)
    expected_alpha = None
    if isinstance(drafter, ModelDrafter):
        draft = drafter.model
        q = sampling_distribution(draft(input_ids=input_ids.to(draft.device), logits_to_keep=1).logits[0, -1],
                                  sampling).to(p.device)
        check = check_acceptance_rule(p, q, draws, generator)
        expected_alpha = float(expected_acceptance(p, q))
    else:
        proposal = drafter.propose(input_ids, 1)
        # Nothing to look up at the prompt: check the rule on the target's own most likely token instead.
        token = int(proposal[0]) if proposal.numel() else int(p.argmax())
        check = check_acceptance_rule(p, None, draws, generator, proposed_token=token)
    return {"statistic": check.statistic, "dof": check.dof, "p_value": check.p_value, "draws": check.n,
            "significance": check.significance, "passed": check.passed, "expected_alpha": expected_alpha}


def sampling_verdict(case: Case, check: dict[str, Any]) -> dict[str, Any]:
    """The row's verdict under sampling: this package's rule checked on the case's distributions; transformers'
    own rule (the hf engine) is not re-run, so its cases are not checked."""
    fields = {"sampling_check_p_value": check["p_value"], "sampling_check_statistic": check["statistic"],
              "sampling_check_dof": check["dof"], "sampling_check_draws": check["draws"],
              "expected_alpha": check["expected_alpha"]}
    if case.engine == "hf":
        return {"verdict": "not-checked", **fields}
    return {"verdict": "lossless" if check["passed"] else "diverged", **fields}


def measure_costs(target_model, drafter, input_ids: torch.Tensor, max_positions: int,
                  head_kernel: str = "auto", compile_length: int | None = None,
                  head_rows: int | None = None) -> dict[str, Any]:
    """The cost model's inputs for one pair, as the native engine runs: v(1) .. v(max_positions), the draft's
    per-token cost, and the verify block sizes (2 .. ``head_rows``) whose head runs as weight @ hidden.T,
    every one of them measured here, before any timed run."""
    curve = verify_costs(target_model, input_ids, max_positions, head_kernel=head_kernel,
                         compile_length=compile_length)
    head_rows = max(head_rows or 0, max_positions)
    settle_head_forms(target_model, head_rows, head_kernel)
    return {"verify_costs_s": curve,
            "draft_token_s": draft_token_cost(drafter, input_ids, compile_length=compile_length),
            "column_head_rows": column_head_rows(target_model, head_kernel, head_rows)}


def reset_peak_memory(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: str) -> tuple[float, str]:
    """Peak CUDA memory allocated since the reset, or on CPU the process's peak resident set (MiB)."""
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_allocated"
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (2**20 if sys.platform == "darwin" else 2**10), "process_rss"


def case_column_head_rows(case: Case, costs: dict[str, Any] | None) -> list[int]:
    """The verify block sizes of this case whose head ran as weight @ hidden.T: native engine only, and at a
    constant k only blocks of k + 1 rows or fewer."""
    if not costs or case.engine != "native":
        return []
    rows = list(costs.get("column_head_rows", []))
    return [m for m in rows if m <= case.k + 1] if isinstance(case.k, int) else rows


def cost_model_fields(k: int | str, drafted_per_step: list[int], accepted_per_step: list[int],
                      costs: dict[str, Any] | None, decode_speedup: float) -> dict[str, Any]:
    """The row's cost-model fields from a run's per-step counts and the pair's measured costs."""
    alpha = alpha_mle(drafted_per_step, accepted_per_step)
    fields: dict[str, Any] = {
        "alpha": alpha,
        "position_acceptance": position_acceptance(drafted_per_step, accepted_per_step),
        "accepted_length_histogram": accepted_length_histogram(drafted_per_step, accepted_per_step),
    }
    if costs is None:
        return fields
    curve = costs["verify_costs_s"]
    v1 = curve[0]
    c = costs["draft_token_s"] / v1
    fields.update(cost_ratio=c, draft_token_ms=1000 * costs["draft_token_s"],
                  verify_costs_ms=[1000 * v for v in curve])
    if not isinstance(k, int):  # a schedule's k changes from step to step: one k's predictions do not apply
        return fields
    if k < len(curve):
        fields["verify_cost_ratio"] = curve[k] / v1
    if alpha is not None and k < len(curve):
        predicted = predicted_speedup(alpha, k, c, curve)
        fields.update(predicted_tau=predicted_tau(alpha, k), predicted_speedup=predicted,
                      efficiency=decode_speedup / predicted if predicted > 0 else None,
                      recommended_k=recommended_k(alpha, c, curve))
    return fields


def time_rounds(run_speculative: Callable[[], Any], run_baseline: Callable[[], Any] | None,
                relative_half_width: Callable[[], float], config: SpecbenchConfig,
                timer: RoundTimer | None = None) -> int:
    """Time rounds until the speedup interval is tight enough, the budget is spent, or max rounds ran.

    A round runs the baseline (when given) and the speculative decode side by side, in
    alternating order so neither always runs on a cache the other warmed. The first
    ``min_rounds`` may go through ``timer`` (pytest-benchmark); the budget never cuts
    below ``min_rounds``. Returns the number of rounds.
    """
    rounds = 0
    start = time.perf_counter()
    if timer is not None:
        timer(run_speculative, run_baseline, config.min_rounds)
        rounds = config.min_rounds
    while rounds < config.max_rounds:
        elapsed = time.perf_counter() - start
        if rounds >= config.min_rounds:
            # Stop when precise enough, or when one more round (at the mean round's cost) would overrun.
            if relative_half_width() <= config.ci_target or elapsed + elapsed / rounds > config.case_budget:
                break
        first, second = (run_baseline, run_speculative) if rounds % 2 == 0 else (run_speculative, run_baseline)
        for run in (first, second):
            if run is not None:
                run()
        rounds += 1
    return rounds


def _speedups(baselines: list[GenerationResult], speculative: list[GenerationResult], paired: bool
              ) -> tuple[Interval, Interval]:
    """End-to-end and decode-only speedup intervals (wall time, and wall time after the first token)."""
    if paired:
        baselines = baselines[: len(speculative)]
    end_to_end = speedup_interval([run.stats.wall_time_s for run in baselines],
                                  [run.stats.wall_time_s for run in speculative], paired=paired)
    decode = speedup_interval([run.stats.time_per_decode_token_s for run in baselines],
                              [run.stats.time_per_decode_token_s for run in speculative], paired=paired)
    return end_to_end, decode


def _precision(baselines: list[GenerationResult], speculative: list[GenerationResult], paired: bool) -> float:
    if not baselines or not speculative:
        return float("inf")
    return max(interval.relative_half_width for interval in _speedups(baselines, speculative, paired))


def build_result(case: Case, measurement: Measurement, device: str, dtype: str, ci_target: float) -> CaseResult:
    """The result row of a measured case: speedups with intervals, medians, counts and the verdict."""
    pair = case.pair
    baselines, speculative = measurement.baselines, measurement.speculative
    last = speculative[-1]
    stats = last.stats
    end_to_end, decode = _speedups(baselines, speculative, measurement.paired)
    baseline_tps = _spread([run.stats.tokens_per_second for run in baselines])
    speculative_tps = _spread([run.stats.tokens_per_second for run in speculative])
    median_run = sorted(speculative, key=lambda run: run.stats.wall_time_s)[len(speculative) // 2]
    latency_ms = 1000 * statistics.median(run.stats.wall_time_s for run in speculative) / max(stats.new_tokens, 1)
    return CaseResult(
        case=case.id,
        config=f"{pair.name}_k{case.k}" + ("" if case.engine == "native" else f"_{case.engine}"),
        pair=pair.name,
        target=pair.target,
        draft=pair.draft_label,
        drafter=pair.drafter,
        engine=case.engine,
        k=case.k,
        prompt=case.prompt_label,
        prompt_id=case.prompt.id,
        category=case.prompt.category,
        **sampling_kwargs(measurement.sampling or SamplingParams()),
        prompt_tokens=int(measurement.input_ids.shape[1]),
        new_tokens=stats.new_tokens,
        latency_ms=latency_ms,
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
        ttft_ms=1000 * statistics.median(run.stats.prefill_time_s for run in speculative),
        baseline_ttft_ms=1000 * statistics.median(run.stats.prefill_time_s for run in baselines),
        prefill_tokens=median_run.stats.prefill_tokens,
        decode_tps=statistics.median(run.stats.decode_tokens_per_second for run in speculative),
        baseline_decode_tps=statistics.median(run.stats.decode_tokens_per_second for run in baselines),
        decode_speedup=decode.estimate,
        decode_speedup_ci_low=decode.low,
        decode_speedup_ci_high=decode.high,
        baseline_cv=coefficient_of_variation([run.stats.wall_time_s for run in baselines]),
        speculative_cv=coefficient_of_variation([run.stats.wall_time_s for run in speculative]),
        rounds=len(speculative),
        baseline_runs=len(baselines),
        unstable=max(end_to_end.relative_half_width, decode.relative_half_width) > ci_target,
        draft_time_s=median_run.stats.draft_time_s,
        verify_time_s=median_run.stats.verify_time_s,
        other_time_s=median_run.stats.other_time_s,
        acceptance_rate=stats.acceptance_rate,
        tau=stats.tokens_per_step,
        drafted_tokens=stats.drafted_tokens,
        accepted_tokens=stats.accepted_tokens,
        target_forward_passes=stats.target_forward_passes,
        draft_forward_passes=stats.draft_forward_passes,
        accepted_per_step=list(stats.accepted_per_step),
        drafted_per_step=list(stats.drafted_per_step),
        k_per_step=list(stats.k_per_step),
        quality_score=quality_score(last.token_ids, measurement.reference) if measurement.reference else None,
        lossless=(None if measurement.verdict["verdict"] == "not-checked"
                  else measurement.verdict["verdict"] == "lossless"),
        baseline_matches_reference=(baselines[-1].token_ids == measurement.reference if measurement.reference
                                    else None),
        **measurement.verdict,
        device=device,
        dtype=dtype,
        threads=torch.get_num_threads(),
        target_load_s=measurement.target_load_s,  # includes a GGUF conversion on a first run
        target_load_source=measurement.target_load_source,
        **cost_model_fields(case.k, list(stats.drafted_per_step), list(stats.accepted_per_step), measurement.costs,
                            decode.estimate),
        column_head_rows=case_column_head_rows(case, measurement.costs),
        **(measurement.sizes or {}),
        **(dict(zip(("peak_memory_mb", "peak_memory_kind"), measurement.peak_memory))
           if measurement.peak_memory else {}),
    )


def run_case(
    case: Case,
    store: ModelStore,
    config: SpecbenchConfig,
    all_prompts: list[Prompt],
    timer: RoundTimer | None = None,
) -> CaseResult:
    """Measure one case and build its result (verdict included; asserting is the caller's job)."""
    measurement = measure_case(case, store, config, all_prompts, timer)
    return build_result(case, measurement, store.device, store.dtype_for(case.pair), config.ci_target)
