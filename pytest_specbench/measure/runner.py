"""Run the cases of one block: prepare each one's input and costs, time them in shared rounds, judge the output.

Knows nothing of pytest. ``measure_block`` times and judges (:mod:`.blocks` holds the rounds); :func:`.row.build_result`
turns a measurement into a :class:`~..results.schema.CaseResult`, whose ``to_row()`` is what travels between xdist
workers. ``run_case`` is one case as a block of its own. A case of batch size B > 1 is prepared, run and judged by
:mod:`.batches` (a batch of its category's prompts, the batched engine, a verdict per row); its block holds only
cases of that batch size, so they share its batched baseline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..engine.cost_probe import parameter_count
from ..engine.decoding import GreedyStepper, greedy_generate
from ..engine.drafters import ModelDrafter
from ..engine.interleave import InterleavedBaseline
from ..engine.names import HEURISTIC
from ..engine.sampling import SamplingParams
from ..engine.stats import GenerationResult
from ..engine.timing import DeviceClock
from ..models.base import ModelUnavailable, NotApplicable, UnrunnableCase, context_window
from ..models.loading import LoadedModel
from ..results.schema import CaseResult
from ..settings.config import SpecbenchConfig
from ..settings.options import INTERLEAVED
from . import batches
from .blocks import BLOCK_BUDGET, MAX_ROUNDS, TimedCase, interleaved_pair, time_block
from .costs import CostProfile, calibrated_costs, measure_costs, probed_k
from .engines import ENGINES, RunInputs, sampling_kwargs, sampling_params, speculative_runner
from .inputs import check_context_windows, prompt_input_ids
from .matrix import Case
from .memory import peak_memory_mb, reset_peak_memory
from .prompts import Prompt
from .row import BlockRecord, Measurement, build_result
from .shared import SharedMeasurements
from .store import ModelStore
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
    costs_key: tuple  # the profile's key in SharedMeasurements, under which the warm-up's runs replace it


def prepare_case(
    case: Case, store: ModelStore, shared: SharedMeasurements, config: SpecbenchConfig, all_prompts: list[Prompt]
) -> CaseSetup:
    """Load the pair, tokenise the prompt, check the context windows, and get the reference and the costs."""
    pair = case.pair
    target, drafter = store.target(pair), store.drafter(pair)
    refusal = ENGINES[case.engine].refusal(case, drafter)
    if refusal:
        raise NotApplicable(refusal)
    input_ids = shared.input_ids(
        (pair.target, pair.revision, case.prompt.id),
        lambda: prompt_input_ids(target.tokenizer, case.prompt, all_prompts, config.context_tokens, store.device),
    )
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
    costs_key = (pair.name, longest, head_rows, config.head_kernel, compile_length)
    costs = shared.costs(
        costs_key,
        lambda: measure_costs(
            target.model, drafter, input_ids, longest + 1, config.head_kernel, compile_length, head_rows
        ),
    )
    return CaseSetup(target, drafter, input_ids, n, eos, sampling, reference, costs, costs_key)


def _speculative_run(case: Case, setup: CaseSetup, config: SpecbenchConfig) -> Callable[[], GenerationResult]:
    # Seeded per case, so a sampled case repeats on one machine whatever ran before it.
    return speculative_runner(
        case,
        RunInputs(
            setup.target.model,
            setup.drafter,
            setup.input_ids,
            setup.max_new_tokens,
            setup.eos_token_id,
            setup.costs,
            setup.sampling,
            torch.Generator().manual_seed(config.seed + 1),
            config.head_kernel,
            config.compile_steps,
        ),
    )


def _run_of(case: Case, setup, config: SpecbenchConfig) -> Callable[[], GenerationResult]:
    return batches.speculative_run(case, setup) if case.batch > 1 else _speculative_run(case, setup, config)


def _baseline_run(setup: CaseSetup, config: SpecbenchConfig) -> Callable[[], GenerationResult]:
    generator = torch.Generator().manual_seed(config.seed)
    return lambda: greedy_generate(
        setup.target.model,
        setup.input_ids,
        setup.max_new_tokens,
        eos_token_id=setup.eos_token_id,
        generator=generator,
        compile_steps=config.compile_steps,
        **sampling_kwargs(setup.sampling),
    )


def _interleaved_baseline(setup: CaseSetup, config: SpecbenchConfig) -> Callable[[], InterleavedBaseline]:
    """A fresh interleaved baseline per call: the same greedy decode as the baseline run, in slices."""
    generator = torch.Generator().manual_seed(config.seed)
    model = setup.target.model

    def new_stepper() -> GreedyStepper:
        return GreedyStepper(
            model,
            setup.input_ids,
            setup.max_new_tokens,
            setup.sampling,
            generator,
            setup.eos_token_id,
            config.compile_steps,
        )

    return lambda: InterleavedBaseline(new_stepper, DeviceClock(model.device))


def _verdict(
    case: Case,
    setup: CaseSetup,
    tokens: list[int],
    store: ModelStore,
    shared: SharedMeasurements,
    config: SpecbenchConfig,
) -> dict[str, Any]:
    """Token-equal to the reference (a near-tie allowed under half precision), or the sampling check."""
    pair, target = case.pair, setup.target
    if setup.sampling.greedy:
        return diagnose(
            target.model,
            target.tokenizer,
            setup.input_ids,
            tokens,
            setup.reference,
            store.dtype_for(pair) != "float32",
            config.tie_tolerance,
        )
    key = (pair.name, case.prompt.id, setup.sampling, config.sampling_check_draws, config.seed)
    check = shared.sampling_check(
        key,
        lambda: sampling_check(
            target.model, setup.drafter, setup.input_ids, setup.sampling, config.sampling_check_draws, config.seed
        ),
    )
    return sampling_verdict(case.engine, check)


@dataclass
class BlockPlan:
    """What a block may spend and whom it tells: its share of the run's budget and the after-round callback."""

    budget_s: float | None = None
    budget_reason: str = BLOCK_BUDGET
    after_round: Callable[[int, float], None] | None = None


#: untimed (baseline, speculative) pairs, after the warm-up, that re-time a draft model's costs
#: (:func:`.costs.calibrated_costs`)
CALIBRATION_PAIRS = 2


def _warm_up(
    cases: Sequence[Case],
    setups: dict[str, Any],
    run_baseline: Callable[[], GenerationResult],
    shared: SharedMeasurements,
    config: SpecbenchConfig,
    new_interleaved: Callable[[], InterleavedBaseline] | None = None,
) -> None:
    """Pay first-call costs (allocations, kernel choice) untimed, once per (pair, engine, batch). After a native
    warm-up with a draft model, :data:`CALIBRATION_PAIRS` untimed pairs of runs re-time the pair's draft costs, and
    every case set up on that profile (this block's, and later blocks' through ``shared``) reads the new one, so
    k=auto's schedule and the rows' predictions price a drafted token as the timed runs' loop pays it. With
    ``new_interleaved`` those pairs' baselines are interleaved with their runs: a ratio of two runs timed apart
    moves with the machine's speed (one AVX-512 run read c as 0.188 from pairs timed apart; its timed rows
    paid 0.21)."""
    for case in cases:
        setup = setups[case.id]
        run = _run_of(case, setup, config)
        warmed = shared.warm_up(
            (case.pair.name, case.engine, case.batch), lambda: [(run_baseline(), run()) for _ in range(config.warmup)]
        )
        if (
            warmed
            and case.engine == "native"
            and isinstance(setup, CaseSetup)
            and isinstance(setup.drafter, ModelDrafter)
        ):
            pairs = [
                interleaved_pair(run, new_interleaved) if new_interleaved else (run_baseline(), run())
                for _ in range(CALIBRATION_PAIRS)
            ]
            shared.replace_costs(setup.costs_key, calibrated_costs(setup.costs, pairs))
    for case in cases:
        setup = setups[case.id]
        if isinstance(setup, CaseSetup):
            setups[case.id] = dataclasses.replace(setup, costs=shared.costs(setup.costs_key, lambda: setup.costs))


def measure_block(
    cases: Sequence[Case],
    store: ModelStore,
    shared: SharedMeasurements,
    config: SpecbenchConfig,
    all_prompts: list[Prompt],
    plan: BlockPlan | None = None,
) -> dict[str, Measurement | BaseException]:
    """Time the cases of one block in shared rounds and judge each one's output; by case id, its measurement or
    the error that stopped it before timing (a missing model, an engine that refuses the case)."""
    plan = plan or BlockPlan()
    if len({case.batch for case in cases}) > 1:
        raise ValueError("the cases of one block share a batch size (Case.block), and with it the baseline")
    outcome: dict[str, Measurement | BaseException] = {}
    setups: dict[str, CaseSetup | batches.BatchSetup] = {}
    for case in cases:
        try:
            if case.batch > 1:
                refusal = ENGINES[case.engine].refusal(case, None)
                if refusal:
                    raise NotApplicable(refusal)
                setups[case.id] = batches.prepare_batch(case, store, shared, config, all_prompts)
            else:
                setups[case.id] = prepare_case(case, store, shared, config, all_prompts)
        except (NotApplicable, ModelUnavailable, UnrunnableCase) as error:
            outcome[case.id] = error
    if not setups:
        return outcome
    ready = [case for case in cases if case.id in setups]
    # A block holds one batch size (Case.block), so its cases share the baseline.
    first = ready[0]
    run_baseline = (
        batches.baseline_run(setups[first.id]) if first.batch > 1 else _baseline_run(setups[first.id], config)
    )
    # Under --specbench-compile a compiled baseline step between the run's steps changed the run's output in
    # tests/test_compiled_steps.py (a near tie came out the other way), so compiled runs keep whole baselines.
    interleave = (
        config.pairing == INTERLEAVED and first.batch == 1 and not config.baseline_once and not config.compile_steps
    )
    new_interleaved = _interleaved_baseline(setups[first.id], config) if interleave else None
    _warm_up(ready, setups, run_baseline, shared, config, new_interleaved)
    timed = [
        TimedCase(
            case,
            _run_of(case, setups[case.id], config),
            interleavable=case.batch == 1 and ENGINES[case.engine].interleavable,
        )
        for case in ready
    ]
    reset_peak_memory(store.device)
    block = time_block(
        timed, run_baseline, config, plan.budget_s, plan.budget_reason, plan.after_round, new_interleaved
    )
    memory = peak_memory_mb(store.device)
    paired = not config.baseline_once
    spreads = block.spreads(paired)
    for member in timed:
        case, setup = member.case, setups[member.case.id]
        sizes = shared.sizes(
            case.pair.name,
            lambda: {
                "target_params": parameter_count(setup.target.model),
                "draft_params": parameter_count(getattr(setup.drafter, "model", None)),
            },
        )
        if case.batch > 1:
            verdict = batches.batch_verdict(
                setup, member.runs[-1].token_ids, store.dtype_for(case.pair) != "float32", config.tie_tolerance
            )
            input_ids, reference = setup.own_ids, setup.references
        else:
            verdict = _verdict(case, setup, member.runs[-1].token_ids, store, shared, config)
            input_ids, reference = setup.input_ids, setup.reference
        outcome[case.id] = Measurement(
            input_ids=input_ids,
            reference=reference,
            baselines=block.case_baselines(member, paired),
            speculative=member.runs,
            paired=paired,
            spreads=spreads,
            verdict=verdict,
            target_load_s=setup.target.load_time_s,
            target_load_source=setup.target.source,
            costs=setup.costs,
            sizes=sizes,
            peak_memory=memory,
            sampling=setup.sampling,
            block=BlockRecord(
                case.block, list(member.rounds), member.eliminated_by, member.stop or MAX_ROUNDS, block.rounds
            ),
            batch_prompt_ids=list(setup.prompt_ids) if case.batch > 1 else None,
        )
    return outcome


def measure_case(
    case: Case, store: ModelStore, shared: SharedMeasurements, config: SpecbenchConfig, all_prompts: list[Prompt]
) -> Measurement:
    """Time one case as a block of its own, and judge its output against the reference."""
    measured = measure_block([case], store, shared, config, all_prompts)[case.id]
    if isinstance(measured, BaseException):
        raise measured
    return measured


def run_case(
    case: Case, store: ModelStore, shared: SharedMeasurements, config: SpecbenchConfig, all_prompts: list[Prompt]
) -> CaseResult:
    """Measure one case and build its result (verdict included; asserting is the caller's job)."""
    measurement = measure_case(case, store, shared, config, all_prompts)
    return build_result(case, measurement, store.device, store.dtype_for(case.pair), config.ci_target)
