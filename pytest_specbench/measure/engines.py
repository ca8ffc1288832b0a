"""The decoding engines a case can run on, behind one registry: what each needs, and one speculative run.

``native`` is this package's loop (engine/decoding.py); ``hf`` is transformers' assisted generation; ``vllm`` is a
vLLM server (a served engine: its cases run as :class:`.served_case.ServedSequenceRun`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from ..engine.decoding import speculative_generate
from ..engine.drafters import Drafter
from ..engine.hf_assisted import hf_assisted_generate, universal_assisted_refusal
from ..engine.names import AUTO, HEURISTIC
from ..engine.sampling import SamplingParams
from ..engine.schedules import CostModelSchedule, DraftSchedule, HeuristicSchedule
from ..engine.stats import GenerationResult
from ..kernels.verify_forms import KernelForms
from ..settings.config import SpecbenchConfig
from ..settings.engine_names import ENGINE_NAMES, SERVED_ENGINES
from .costs import CostProfile
from .drafter_kinds import kind_of, kind_refusal, peer_method
from .matrix import Case
from .pairing import HF_WHOLE_RUNS, SERVED_WHOLE_RUNS

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
    kernels: KernelForms | str = "auto"  # the target's forms (its store's), or a setting for forms of each run
    compile_steps: bool = False
    draft_kernels: KernelForms | str | None = None  # the draft model's forms (its store's); None: the target's setting


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
        kernels=run.kernels,
        draft_kernels=run.draft_kernels,
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


def _hf_pair_refusal(case: Case, drafter: Drafter | None, target: PreTrainedModel | None) -> str | None:
    """What transformers' assisted generation cannot run in this pair beyond its kind's method."""
    pair = case.pair
    if kind_of(pair).draft_model and pair.draft == pair.target:
        return f"pair {pair.name}: {HF_SELF_DRAFT_REFUSAL}"
    if pair.cross_tokenizer and target is not None and drafter is not None:
        refusal = universal_assisted_refusal(target, drafter)
        return f"pair {pair.name}: {refusal}" if refusal else None
    return None


#: why the vllm engine skips a case of batch > 1
VLLM_BATCH_REFUSAL = (
    "the vllm engine runs one request at a time here: a served batch (concurrent requests) is not measured yet"
)


def _vllm_pair_refusal(case: Case, drafter: Drafter | None, target: PreTrainedModel | None) -> str | None:
    """What the vllm engine cannot run beyond its kind's method: a setting its method has no counterpart for, and a
    conversation (one request per turn is not measured yet)."""
    if "max_proposal" in case.pair.options:
        return f"pair {case.pair.name}: vLLM's ngram proposes k tokens and has no counterpart of max_proposal"
    if case.prompt.later_turns:
        return f"prompt {case.prompt.id}: a conversation of several turns is not measured on the vllm engine yet"
    return None


@dataclass(frozen=True)
class Engine:
    """A decoding engine: how it runs a case, and what it cannot run, declared."""

    name: str
    # One speculative run of a case; None for a served engine, whose case runs request its server.
    runner: Callable[[Case, RunInputs], SpeculativeRun] | None
    # Why it cannot run a batch > 1 (the case is skipped with the reason), or None where it can.
    batch_refusal: str | None = None
    # It is a peer engine: it runs a drafter kind by its own method for that kind (measure/drafter_kinds.py).
    peer: bool = False
    # What else it cannot run in a pair (its drafter and target when loaded), beyond the above.
    pair_refusal: Callable[[Case, Drafter | None, PreTrainedModel | None], str | None] = lambda case, drafter, target: (
        None
    )
    # Why its runs cannot take ``between_steps`` (speculative_generate's), so no baseline runs between their
    # steps (a :mod:`.pairing` reason); None where they can.
    whole_runs: str | None = None
    # Whether its runs keep the model's own forward (transformers' generate), so its baseline must too: a
    # speedup compares equal kernels.
    own_kernels: bool = False
    # Why it runs greedy decoding only (its cases are skipped under sampling), or None where it samples too.
    greedy_only: str | None = None

    @property
    def served(self) -> bool:
        """It runs on a server (settings/options.py SERVED_ENGINES): its case runs request it."""
        return self.name in SERVED_ENGINES

    def refusal(
        self,
        case: Case,
        drafter: Drafter | None = None,
        target: PreTrainedModel | None = None,
        temperature: float = 0.0,
    ) -> str | None:
        """Why this engine cannot run ``case`` (it is skipped with the reason), or None. Without the loaded
        ``drafter`` and ``target`` (before any model loads), only what the case's settings decide."""
        why = kind_refusal(case.pair, batch=case.batch, temperature=temperature)
        if why:
            return why
        if case.batched and self.batch_refusal:
            return self.batch_refusal
        if temperature > 0 and self.greedy_only:
            return self.greedy_only
        if self.peer:
            method = peer_method(case.pair, self.name)
            if isinstance(method, str):
                return method
            if method.integer_k_only and not isinstance(case.k, int):
                return (
                    f"the {self.name} engine's {method.name} has no draft-length schedule, so it runs "
                    f"pair {case.pair.name} at integer k only, not k={case.k}"
                )
        return self.pair_refusal(case, drafter, target)

    def baseline_kernels(self, kernels: KernelForms) -> KernelForms | str:
        """The kernel forms of this engine's greedy baseline, given the target's forms under the run's
        ``--specbench-kernels``: those, or the model's own (``"linear"``) where its runs keep them."""
        return "linear" if self.own_kernels else kernels


#: every engine by name: the names are settings/options.py's ENGINE_NAMES, which the option parser accepts
ENGINES: dict[str, Engine] = {
    engine.name: engine
    for engine in (
        Engine("native", _native),
        Engine(
            "hf",
            _hf,
            batch_refusal=HF_BATCH_REFUSAL,
            peer=True,
            pair_refusal=_hf_pair_refusal,
            whole_runs=HF_WHOLE_RUNS,
            own_kernels=True,
        ),
        Engine(
            "vllm",
            None,
            batch_refusal=VLLM_BATCH_REFUSAL,
            peer=True,
            pair_refusal=_vllm_pair_refusal,
            whole_runs=SERVED_WHOLE_RUNS,
            own_kernels=True,
            greedy_only=(
                "the vllm engine runs greedy decoding only here: its sampled tokens are not checked against the "
                "target's distribution yet (--specbench-temperature=0)"
            ),
        ),
    )
}
if tuple(ENGINES) != ENGINE_NAMES:  # an accepted name with no engine would fail only when a case ran on it
    raise RuntimeError(
        f"the engine registry holds {tuple(ENGINES)}, the option accepts {ENGINE_NAMES}: list the same names in both"
    )
if {name for name, engine in ENGINES.items() if engine.runner is None} != set(SERVED_ENGINES):
    raise RuntimeError(
        f"the engines without a runner must be the served ones, {SERVED_ENGINES}: their cases request a server"
    )


def speculative_runner(case: Case, run: RunInputs) -> SpeculativeRun:
    """One speculative run of the case, by its engine; under sampling each run draws on ``run.generator``."""
    runner = ENGINES[case.engine].runner
    if runner is None:
        raise ValueError(f"the {case.engine} engine is served: its cases run through measure/served_case.py")
    return runner(case, run)
