"""The decoding engines a case can run on, behind one registry: what each needs, and one speculative run.

``native`` is this package's loop (engine/decoding.py); ``hf`` is transformers' assisted generation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from ..engine.cross_tokenizer import CrossTokenizerDrafter
from ..engine.decoding import speculative_generate
from ..engine.drafters import Drafter, PromptLookupDrafter
from ..engine.hf_assisted import hf_assisted_generate, universal_assisted_refusal
from ..engine.names import AUTO, HEURISTIC
from ..engine.sampling import SamplingParams
from ..engine.schedules import CostModelSchedule, DraftSchedule, HeuristicSchedule
from ..engine.stats import GenerationResult
from ..settings.config import SpecbenchConfig
from ..settings.options import ENGINE_NAMES
from .costs import CostProfile
from .matrix import Case
from .pairing import HF_WHOLE_RUNS

SpeculativeRun = Callable[..., GenerationResult]


@dataclass(frozen=True)
class RunInputs:
    """What one case's speculative runs decode: the same for every engine."""

    target_model: PreTrainedModel
    drafter: Drafter
    input_ids: torch.Tensor
    max_new_tokens: int
    eos_token_id: int | None
    costs: CostProfile
    sampling: SamplingParams
    generator: torch.Generator | None = None
    head_kernel: str = "auto"
    compile_steps: bool = False


def sampling_params(config: SpecbenchConfig) -> SamplingParams:
    return SamplingParams(config.temperature, config.top_p, config.top_k)


def sampling_kwargs(sampling: SamplingParams) -> dict[str, Any]:
    return {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k}


def case_schedule(k: int | str, costs: CostProfile, greedy: bool = True) -> int | DraftSchedule:
    """What the native engine drafts with: a constant k, transformers' heuristic, or the cost model's choice
    (its setting for the drafter; a draft model's confidence stop applies only when greedy)."""
    if k == HEURISTIC:
        return HeuristicSchedule()
    if k == AUTO:
        return CostModelSchedule.tuned(costs.verify_costs_s, costs.cost_ratio, confidence_stop=greedy)
    return k


def _native(case: Case, run: RunInputs) -> SpeculativeRun:
    schedule = case_schedule(case.k, run.costs, run.sampling.greedy)
    return lambda between_steps=None: speculative_generate(
        run.target_model,
        run.drafter,
        run.input_ids,
        schedule,
        run.max_new_tokens,
        eos_token_id=run.eos_token_id,
        generator=run.generator,
        head_kernel=run.head_kernel,
        compile_steps=run.compile_steps,
        between_steps=between_steps,
        **sampling_kwargs(run.sampling),
    )


def _hf(case: Case, run: RunInputs) -> SpeculativeRun:
    def run_hf() -> GenerationResult:
        # transformers samples from torch's global generator: seed it from this case's generator.
        seed = None if run.sampling.greedy else int(torch.randint(2**31 - 1, (1,), generator=run.generator))
        return hf_assisted_generate(
            run.target_model,
            run.drafter,
            run.input_ids,
            case.k,
            run.max_new_tokens,
            eos_token_id=run.eos_token_id,
            sampling=run.sampling,
            seed=seed,
        )

    return run_hf


#: why the hf engine skips a case of batch > 1
HF_BATCH_REFUSAL = "transformers' assisted generation does not support batches (huggingface/transformers#32165)"


#: why the hf engine skips a pair whose draft is its target (the store loads one model object for both)
HF_SELF_DRAFT_REFUSAL = (
    "its draft is its target, one model object: transformers' assisted generation would "
    "run both on it, and the target's passes could not be told from the draft's; the "
    "native engine runs it"
)


def cross_tokenizer_refusal(case: Case, temperature: float = 0.0) -> str | None:
    """Why a case of a pair marked ``cross_tokenizer`` cannot run (it is skipped with the reason), or None: its
    drafts cross to the target as text, one sequence at a time, and only a greedy acceptance rule judges a draft
    by the tokens it became (speculative sampling needs the draft's probabilities in the target's tokens)."""
    if not case.pair.cross_tokenizer:
        return None
    why = f"pair {case.pair.name}'s draft has another tokenizer than its target (cross_tokenizer = true)"
    if case.batched:
        return f"{why}: it drafts through text one sequence at a time, so it runs at batch 1 only, not {case.batch}"
    if temperature > 0:
        return (
            f"{why}: greedy only, so it does not run under sampling (--specbench-temperature={temperature:g}); "
            "the sampling acceptance rule needs the draft's probabilities over the target's tokens"
        )
    return None


def _native_refusal(case: Case, drafter: Drafter | None, target: PreTrainedModel | None = None) -> str | None:
    return cross_tokenizer_refusal(case)


def _hf_refusal(case: Case, drafter: Drafter | None, target: PreTrainedModel | None = None) -> str | None:
    if case.batched:
        return cross_tokenizer_refusal(case) or HF_BATCH_REFUSAL
    pair = case.pair
    if pair.drafter == "model" and pair.draft == pair.target:
        return f"pair {pair.name}: {HF_SELF_DRAFT_REFUSAL}"
    if isinstance(drafter, PromptLookupDrafter) and not isinstance(case.k, int):
        return (
            f"transformers' prompt lookup has no draft-length schedule, so the hf engine runs "
            f"pair {case.pair.name} at integer k only, not k={case.k}"
        )
    if isinstance(drafter, CrossTokenizerDrafter) and target is not None:
        refusal = universal_assisted_refusal(target, drafter)
        return f"pair {pair.name}: {refusal}" if refusal else None
    return None


@dataclass(frozen=True)
class Engine:
    runner: Callable[[Case, RunInputs], SpeculativeRun]
    # Why a case cannot run on this engine (it is skipped with the reason), or None; the target when loaded.
    refusal: Callable[..., str | None] = lambda case, drafter, target=None: None
    # Why its runs cannot take ``between_steps`` (speculative_generate's), so no baseline runs between their
    # steps (a :mod:`.pairing` reason); None where they can.
    whole_runs: str | None = None
    # Whether its runs keep the model's own forward (transformers' generate), so its baseline must too: a
    # speedup compares equal kernels.
    own_kernels: bool = False

    def baseline_kernel(self, head_kernel: str) -> str:
        """The kernel forms of this engine's greedy baseline, given the run's ``--specbench-head-kernel``."""
        return "linear" if self.own_kernels else head_kernel


#: every engine by name: the names are settings/options.py's ENGINE_NAMES, which the option parser accepts
ENGINES: dict[str, Engine] = {
    "native": Engine(_native, _native_refusal),
    "hf": Engine(_hf, _hf_refusal, HF_WHOLE_RUNS, own_kernels=True),
}
if tuple(ENGINES) != ENGINE_NAMES:  # an accepted name with no engine would fail only when a case ran on it
    raise RuntimeError(
        f"the engine registry holds {tuple(ENGINES)}, the option accepts {ENGINE_NAMES}: list the same names in both"
    )


def speculative_runner(case: Case, run: RunInputs) -> SpeculativeRun:
    """One speculative run of the case, by its engine; under sampling each run draws on ``run.generator``."""
    return ENGINES[case.engine].runner(case, run)
