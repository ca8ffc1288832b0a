"""The decoding engines a case can run on, behind one registry: each engine's :class:`~.engine.Engine`.

``native`` is this package's loop (engine/decoding.py) and ``hf`` transformers' assisted generation, declared
here; a served engine is declared in its own module (measure/vllm_engine.py) and its cases run as
:class:`.served_case.ServedSequenceRun`.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedModel

from ..cases.drafter_kinds import CROSS, KINDS, kind_of
from ..cases.matrix import Case
from ..engine.decoding import speculative_generate
from ..engine.drafters import Drafter
from ..engine.hf_assisted import hf_assisted_generate, universal_assisted_refusal
from ..engine.names import AUTO, HEURISTIC
from ..engine.sampling import SamplingParams
from ..engine.schedules import CostModelSchedule, DraftSchedule, HeuristicSchedule
from ..engine.stats import GenerationResult
from ..settings.config import SpecbenchConfig
from ..settings.engines import ENGINE_NAMES, SERVED_ENGINES
from .costs import CostProfile
from .engine import Engine, PeerMethod, RunInputs, SpeculativeRun
from .llamacpp_engine import LLAMACPP_ENGINE
from .pairing import HF_WHOLE_RUNS
from .vllm_engine import VLLM_ENGINE

__all__ = ["ENGINES", "Engine", "RunInputs", "SpeculativeRun", "case_schedule", "speculative_runner"]


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


#: transformers' way of running each drafter kind, by the kind's name (cases/drafter_kinds.py)
_ASSISTANT = PeerMethod("assisted generation (assistant_model)")
HF_METHODS: dict[str, PeerMethod] = {
    "model": _ASSISTANT,
    "truncated": _ASSISTANT,
    "int8": _ASSISTANT,
    "prompt_lookup": PeerMethod("prompt lookup", integer_k_only=True),
    "cross_tokenizer": PeerMethod("universal assisted generation"),
}


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
            methods=HF_METHODS,
            pair_refusal=_hf_pair_refusal,
            whole_runs=HF_WHOLE_RUNS,
            own_kernels=True,
        ),
        VLLM_ENGINE,
        LLAMACPP_ENGINE,
    )
}
if tuple(ENGINES) != ENGINE_NAMES:  # an accepted name with no engine would fail only when a case ran on it
    raise RuntimeError(
        f"the engine registry holds {tuple(ENGINES)}, the option accepts {ENGINE_NAMES}: list the same names in both"
    )
if {name for name, engine in ENGINES.items() if engine.served} != set(SERVED_ENGINES) or any(
    (engine.runner is None) != (engine.served is not None) for engine in ENGINES.values()
):
    raise RuntimeError(
        f"the served engines {SERVED_ENGINES} (settings/engines.py) have a served side and no runner, every other "
        "engine a runner: a served engine's cases request its servers"
    )

_KIND_NAMES = {*KINDS, CROSS.name}
if any(set(engine.methods) - _KIND_NAMES for engine in ENGINES.values()):  # a misspelt kind would be refused
    raise RuntimeError(f"an engine declares a method for a drafter kind that does not exist; kinds: {_KIND_NAMES}")


def speculative_runner(case: Case, run: RunInputs) -> SpeculativeRun:
    """One speculative run of the case, by its engine; under sampling each run draws on ``run.generator``."""
    runner = ENGINES[case.engine].runner
    if runner is None:
        raise ValueError(f"the {case.engine} engine is served: its cases run through measure/served_case.py")
    return runner(case, run)
