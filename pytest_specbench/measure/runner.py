"""Run one benchmark case: prepare its input and costs, time baseline and speculative decoding, judge the output.

Knows nothing of pytest. ``measure_case`` times and judges; :func:`.row.build_result` turns that into a
:class:`~..results.schema.CaseResult`, whose ``to_row()`` is what travels between xdist workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..engine.cost_probe import parameter_count
from ..engine.decoding import greedy_generate
from ..engine.drafters import ModelDrafter
from ..engine.names import HEURISTIC
from ..engine.sampling import SamplingParams
from ..engine.stats import GenerationResult
from ..models.base import NotApplicable, context_window
from ..models.loading import LoadedModel
from ..results.schema import CaseResult
from ..settings.config import SpecbenchConfig
from .costs import CostProfile, measure_costs, probed_k
from .engines import ENGINES, RunInputs, sampling_kwargs, sampling_params, speculative_runner
from .inputs import check_context_windows, prompt_input_ids
from .matrix import Case
from .memory import peak_memory_mb, reset_peak_memory
from .prompts import Prompt
from .row import Measurement, build_result
from .shared import SharedMeasurements
from .store import ModelStore
from .timing import RoundTimer, precision, time_rounds
from .verdicts import diagnose, sampling_check, sampling_verdict


@dataclass(frozen=True)
class CaseSetup:
    """What a case decodes and with what, before anything is timed."""

    target: LoadedModel
    drafter: Any
    input_ids: torch.Tensor
    max_new_tokens: int
    eos_token_id: int | None
    sampling: SamplingParams
    reference: list[int]  # the target's generate() output; empty under sampling, where no sequence is "the" one
    costs: CostProfile


def prepare_case(case: Case, store: ModelStore, shared: SharedMeasurements, config: SpecbenchConfig,
                 all_prompts: list[Prompt]) -> CaseSetup:
    """Load the pair, tokenise the prompt, check the context windows, and get the reference and the costs."""
    pair = case.pair
    target, drafter = store.target(pair), store.drafter(pair)
    refusal = ENGINES[case.engine].refusal(case, drafter)
    if refusal:
        raise NotApplicable(refusal)
    input_ids = shared.input_ids((pair.target, pair.revision, case.prompt.id), lambda: prompt_input_ids(
        target.tokenizer, case.prompt, all_prompts, config.context_tokens, store.device))
    eos = target.tokenizer.eos_token_id if config.stop_at_eos else None
    n = config.max_new_tokens
    models = {f"target {pair.target!r}": target.model}
    if isinstance(drafter, ModelDrafter):  # prompt lookup has no window; derived drafts share the target's
        models[f"draft {pair.draft_label!r}"] = drafter.model
    check_context_windows(case, int(input_ids.shape[1]), n, models)
    sampling = sampling_params(config)
    reference = store.reference(pair, case.prompt.id, input_ids, n, eos) if sampling.greedy else []
    # Never past what a run can use: k + 1, the new tokens, and the target's window after the prompt.
    window = context_window(target.model.config)
    longest = probed_k(config.ks, n, None if window is None else window[0] - int(input_ids.shape[1]))
    # A schedule may draft past the probe's longest k (heuristic: from 20 up), at most n - 1 tokens.
    head_rows = max(longest + 1, n if HEURISTIC in config.ks else 0)
    compile_length = int(input_ids.shape[1]) + n if config.compile_steps else None
    costs = shared.costs((pair.name, longest, head_rows, config.head_kernel, compile_length),
                         lambda: measure_costs(target.model, drafter, input_ids, longest + 1, config.head_kernel,
                                               compile_length, head_rows))
    return CaseSetup(target, drafter, input_ids, n, eos, sampling, reference, costs)


def _time_case(case: Case, setup: CaseSetup, store: ModelStore, shared: SharedMeasurements,
               config: SpecbenchConfig, timer: RoundTimer | None) -> tuple[list[GenerationResult],
                                                                          list[GenerationResult], bool]:
    """Warm up once per pair and engine, then time rounds; returns the baseline runs, the speculative runs, and
    whether they ran paired (side by side) rather than against a once-timed baseline."""
    pair, model, input_ids, n = case.pair, setup.target.model, setup.input_ids, setup.max_new_tokens
    baselines: list[GenerationResult] = []
    speculative: list[GenerationResult] = []
    # Seeded per case, so a sampled case repeats on one machine whatever ran before it.
    baseline_generator = torch.Generator().manual_seed(config.seed)

    def run_baseline() -> None:
        baselines.append(greedy_generate(model, input_ids, n, eos_token_id=setup.eos_token_id,
                                         generator=baseline_generator, compile_steps=config.compile_steps,
                                         **sampling_kwargs(setup.sampling)))

    run = speculative_runner(case, RunInputs(model, setup.drafter, input_ids, n, setup.eos_token_id, setup.costs,
                                             setup.sampling, torch.Generator().manual_seed(config.seed + 1),
                                             config.head_kernel, config.compile_steps))

    def run_speculative() -> None:
        speculative.append(run())

    def warm_up() -> None:
        for _ in range(config.warmup):
            run_baseline()
            run_speculative()

    shared.warm_up((pair.name, case.engine), warm_up)
    baselines.clear()
    reset_peak_memory(store.device)
    speculative.clear()
    paired = not config.baseline_once
    if config.baseline_once:
        def time_baseline() -> list[GenerationResult]:
            for _ in range(config.min_rounds):
                run_baseline()
            return list(baselines)

        key = (pair.target, pair.revision, store.dtype_for(pair), case.prompt.id, n, setup.eos_token_id)
        baselines[:] = shared.baseline(key, time_baseline)
    time_rounds(run_speculative, run_baseline if paired else None, lambda: precision(baselines, speculative, paired),
                config, timer)
    return baselines, speculative, paired


def _verdict(case: Case, setup: CaseSetup, tokens: list[int], store: ModelStore, shared: SharedMeasurements,
             config: SpecbenchConfig) -> dict[str, Any]:
    """Token-equal to the reference (a near-tie allowed under half precision), or the sampling check."""
    pair, target = case.pair, setup.target
    if setup.sampling.greedy:
        return diagnose(target.model, target.tokenizer, setup.input_ids, tokens, setup.reference,
                        store.dtype_for(pair) != "float32", config.tie_tolerance)
    key = (pair.name, case.prompt.id, setup.sampling, config.sampling_check_draws, config.seed)
    check = shared.sampling_check(key, lambda: sampling_check(target.model, setup.drafter, setup.input_ids,
                                                              setup.sampling, config.sampling_check_draws,
                                                              config.seed))
    return sampling_verdict(case.engine, check)


def measure_case(case: Case, store: ModelStore, shared: SharedMeasurements, config: SpecbenchConfig,
                 all_prompts: list[Prompt], timer: RoundTimer | None = None) -> Measurement:
    """Time baseline and speculative decoding of one case and judge its output against the reference."""
    setup = prepare_case(case, store, shared, config, all_prompts)
    baselines, speculative, paired = _time_case(case, setup, store, shared, config, timer)
    sizes = shared.sizes(case.pair.name, lambda: {"target_params": parameter_count(setup.target.model),
                                                  "draft_params": parameter_count(getattr(setup.drafter, "model",
                                                                                          None))})
    return Measurement(input_ids=setup.input_ids, reference=setup.reference, baselines=baselines,
                       speculative=speculative, paired=paired,
                       verdict=_verdict(case, setup, speculative[-1].token_ids, store, shared, config),
                       target_load_s=setup.target.load_time_s, target_load_source=setup.target.source,
                       costs=setup.costs, sizes=sizes, peak_memory=peak_memory_mb(store.device),
                       sampling=setup.sampling)


def run_case(case: Case, store: ModelStore, shared: SharedMeasurements, config: SpecbenchConfig,
             all_prompts: list[Prompt], timer: RoundTimer | None = None) -> CaseResult:
    """Measure one case and build its result (verdict included; asserting is the caller's job)."""
    measurement = measure_case(case, store, shared, config, all_prompts, timer)
    return build_result(case, measurement, store.device, store.dtype_for(case.pair), config.ci_target)
