"""A case of one sequence: its prompt, the engine's speculative run, the target's greedy baseline (whole or
interleaved with the run), and its verdict against the target's own output."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from ..cases.matrix import Case
from ..engine.decoding import GreedyStepper, greedy_generate
from ..engine.drafters import Drafter
from ..engine.interleave import InterleavedBaseline
from ..engine.names import HEURISTIC
from ..engine.sampling import SamplingParams
from ..engine.stats import GenerationResult
from ..kernels.timing import DeviceClock
from ..kernels.verify_forms import KernelForms
from ..models.base import NotApplicable, context_window
from ..models.loading import LoadedModel
from ..settings.engines import runs_own_loop
from .blocks import interleaved_pair
from .case_run import BaselineRun, CaseRun, Judgement, MeasureContext, NewInterleaved
from .costs import CostProfile, calibrated_costs, measure_costs, probed_k
from .engines import (
    ENGINES,
    RunInputs,
    SpeculativeRun,
    sampling_kwargs,
    sampling_params,
    speculative_runner,
)
from .inputs import check_context_windows, prompt_input_ids
from .verdicts import diagnose, sampling_check, sampling_verdict

#: untimed (baseline, speculative) pairs, after the warm-up, that re-time a draft model's costs
#: (:func:`.costs.calibrated_costs`)
CALIBRATION_PAIRS = 2


@dataclass(frozen=True)
class SequenceSetup:
    """What a case decodes and with what, before anything is timed."""

    target: LoadedModel
    drafter: Drafter
    input_ids: torch.Tensor
    max_new_tokens: int
    eos_token_id: int | None
    sampling: SamplingParams
    reference: list[int]  # the target's generate() output; empty under sampling, where no sequence is "the" one
    costs: CostProfile
    costs_key: tuple  # the profile's key in SharedMeasurements, under which a calibration replaces it


class SequenceRun(CaseRun):
    """A case of batch size 1; of a conversation prompt, the turn after ``answers`` (the target's answers to the
    turns before it: :mod:`.turns` runs one per turn)."""

    setup: SequenceSetup

    def __init__(self, case: Case, context: MeasureContext, answers: tuple[str, ...] = ()) -> None:
        self.answers = answers  # before the constructor prepares it: its input holds them
        super().__init__(case, context)

    @property
    def turn(self) -> int:
        """Its turn of the prompt, from 0."""
        return len(self.answers)

    @property
    def prompt_key(self) -> str:
        """Its input's name among the run's references: the prompt id, and a later turn's number."""
        return self.case.prompt.id + (f"/turn{self.turn + 1}" if self.turn else "")

    def prepare(self) -> None:
        case, context = self.case, self.context
        store, shared, config, all_prompts = context.store, context.shared, context.config, context.all_prompts
        refusal = ENGINES[case.engine].refusal(case, temperature=config.temperature)  # before any model loads
        if refusal:
            raise NotApplicable(refusal)
        pair, dtype = case.pair, store.dtype_for(case)
        target, drafter = store.target(pair, dtype), store.drafter(pair, dtype)
        refusal = ENGINES[case.engine].refusal(case, drafter, target.model, config.temperature)
        if refusal:
            raise NotApplicable(refusal)
        # A later turn's input holds the answers before it, which depend on the dtype.
        input_ids = shared.input_ids(
            case.key("input_ids", turn=self.turn),
            lambda: prompt_input_ids(
                target.tokenizer, case.prompt, all_prompts, config.context_tokens, store.device, self.answers
            ),
        )
        eos = target.tokenizer.eos_token_id if config.stop_at_eos else None
        n = config.max_new_tokens
        models = {f"target {pair.target!r}": target.model}
        # Prompt lookup has no window; a draft with another tokenizer reads other tokens, so its count is not this.
        if drafter.model is not None and not pair.cross_tokenizer:
            models[f"draft {pair.draft_label!r}"] = drafter.model
        check_context_windows(case, int(input_ids.shape[1]), n, models)
        sampling = sampling_params(config)
        reference = []  # under sampling, the statistical check judges the runs
        if sampling.greedy:
            reference = store.reference(self.reference_key(n, eos), pair, input_ids, n, eos, dtype)
        # Never past what a run can use: k + 1, the new tokens, and the target's window after the prompt.
        window = context_window(target.model.config)
        longest = probed_k(config.ks, n, None if window is None else window[0] - int(input_ids.shape[1]))
        # A schedule may draft past the probe's longest k (heuristic: from 20 up), at most n - 1 tokens.
        head_rows = max(longest + 1, n if HEURISTIC in config.ks else 0)
        compile_length = int(input_ids.shape[1]) + n if config.compile_steps else None
        costs_key = case.key(
            "costs", longest=longest, head_rows=head_rows, kernel=config.kernels, compiled=compile_length
        )
        forms = store.kernel_forms(target, config.kernels)
        draft_forms = store.draft_kernel_forms(drafter, config.kernels)
        costs = shared.costs(
            costs_key,
            lambda: measure_costs(
                target.model, drafter, input_ids, longest + 1, forms, compile_length, head_rows, draft_forms
            ),
        )
        self.setup = SequenceSetup(target, drafter, input_ids, n, eos, sampling, reference, costs, costs_key)

    def greedy_answer(self) -> list[int]:
        """The target's greedy tokens for its input (its reference, computed under sampling too): what the next
        turn's input holds as this turn's answer."""
        setup, case = self.setup, self.case
        if setup.reference:
            return setup.reference
        n, eos = setup.max_new_tokens, setup.eos_token_id
        return self.context.store.reference(self.reference_key(n, eos), case.pair, setup.input_ids, n, eos, self.dtype)

    @property
    def kernels(self) -> KernelForms:
        """The target's kernel forms under ``--specbench-kernels``: its store's, one object per loaded target."""
        return self.context.store.kernel_forms(self.setup.target, self.context.config.kernels)

    @property
    def draft_kernels(self) -> KernelForms | None:
        """The draft model's kernel forms under ``--specbench-kernels`` (its store's), None without a model."""
        return self.context.store.draft_kernel_forms(self.setup.drafter, self.context.config.kernels)

    def reference_key(self, max_new_tokens: int, eos_token_id: int | None) -> tuple:
        """Its reference's key: the target's greedy tokens for this input, shared by every pair of the target."""
        return self.case.key("reference", input=self.prompt_key, new_tokens=max_new_tokens, eos=eos_token_id)

    def new_runner(self) -> SpeculativeRun:
        setup, config = self.setup, self.context.config
        # Seeded per case, so a sampled case repeats on one machine whatever ran before it.
        inputs = RunInputs(
            setup.target.model,
            setup.drafter,
            setup.input_ids,
            setup.max_new_tokens,
            setup.eos_token_id,
            setup.costs,
            setup.sampling,
            torch.Generator().manual_seed(config.seed + 1),
            self.kernels,
            config.compile_steps,
            self.draft_kernels,
        )
        return speculative_runner(self.case, inputs)

    def baseline(self) -> BaselineRun:
        setup, config = self.setup, self.context.config
        generator = torch.Generator().manual_seed(config.seed)
        return lambda: greedy_generate(
            setup.target.model,
            setup.input_ids,
            setup.max_new_tokens,
            eos_token_id=setup.eos_token_id,
            generator=generator,
            kernels=ENGINES[self.case.engine].baseline_kernels(self.kernels),
            compile_steps=config.compile_steps,
            **sampling_kwargs(setup.sampling),
        )

    def interleaved_baseline(self) -> NewInterleaved:
        """The same greedy decode as :meth:`baseline`, in slices between a run's steps."""
        setup, config = self.setup, self.context.config
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

    @property
    def interleave_refusal(self) -> str | None:
        return ENGINES[self.case.engine].whole_runs

    def calibrate(self, baseline: BaselineRun, new_interleaved: NewInterleaved | None) -> None:
        """With a draft model on the native engine, :data:`CALIBRATION_PAIRS` untimed pairs of runs re-time the
        pair's draft costs in the engine's own loop, and every case on that profile reads the new one (see
        :func:`.costs.calibrated_costs`). Interleaved where the block interleaves: the ratio of two runs timed
        apart moves with the machine's speed."""
        if not runs_own_loop(self.case.engine) or self.setup.drafter.model is None:
            return
        pairs = [
            interleaved_pair(self.run, new_interleaved) if new_interleaved else (baseline(), self.run())
            for _ in range(CALIBRATION_PAIRS)
        ]
        self.context.shared.replace_costs(self.setup.costs_key, calibrated_costs(self.setup.costs, pairs))

    def refresh_costs(self) -> None:
        setup = self.setup
        self.setup = dataclasses.replace(setup, costs=self.context.shared.costs(setup.costs_key, lambda: setup.costs))

    def judge(self, result: GenerationResult) -> Judgement:
        return Judgement(self.verdict(result.token_ids))

    def verdict(self, tokens: list[int]) -> dict[str, Any]:
        """Token-equal to the reference (a near-tie allowed under half precision), or the sampling check."""
        case, setup, shared, config = self.case, self.setup, self.context.shared, self.context.config
        target = setup.target
        if setup.sampling.greedy:
            return diagnose(
                target.model,
                target.tokenizer,
                setup.input_ids,
                tokens,
                setup.reference,
                self.half_precision,
                config.tie_tolerance,
            )
        key = case.key(
            "sampling_check", turn=self.turn, sampling=setup.sampling, draws=config.sampling_check_draws,
            seed=config.seed,
        )  # fmt: skip
        check = shared.sampling_check(
            key,
            lambda: sampling_check(
                target.model, setup.drafter, setup.input_ids, setup.sampling, config.sampling_check_draws, config.seed
            ),
        )
        return sampling_verdict(case.engine, check)

    @property
    def input_ids(self) -> torch.Tensor:
        return self.setup.input_ids

    @property
    def reference(self) -> list[int]:
        return self.setup.reference
