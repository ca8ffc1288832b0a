"""Every block's expected seconds, before anything is timed: the run plan's estimate (:mod:`.budget`).

From what is known before timing: the models (each target probed for one prefill and one decode step in each
dtype, each draft model for one drafted token), the prompts' and turns' token counts, the new tokens, the batch
and k. A speculative run's decode is the cost model's (engine/cost_model.py) at an assumed acceptance; the
scales the plan learns from each block timed correct all of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..cases.matrix import Case, target_of
from ..engine.cost_model import predicted_speedup
from ..engine.cost_probe import decode_step_costs, draft_token_cost
from ..models.base import context_window
from .budget import BlockCost, CaseCost
from .case_run import MeasureContext
from .engines import ENGINES
from .inputs import prompt_input_ids

#: the acceptance a speculative run's estimate assumes (the first rounds correct it)
ASSUMED_ACCEPTANCE = 0.7
#: the prompt tokens of the probe's prefill (fewer where the target's window is shorter)
PROBE_TOKENS = 64
#: k a schedule's estimate assumes
SCHEDULE_K = 4
#: one pass over m positions, relative to one: 1 + this * (m - 1) (kernels/few_rows.py keeps small m near flat)
VERIFY_SLOPE = 0.03
#: transformers' generate() (the reference) against the engine's greedy decoding, per token
REFERENCE_FACTOR = 1.5
#: a round's runs beside each other (an interleaved baseline's steps between the run's) against each alone: the
#: default CPU run's first round took 36.2 s where this estimate without it says 31.7 s
#: (docs/results/2026-12-04-run-plan.md)
ROUND_OVERHEAD = 1.15
#: the cost probe, warm-up checks and kernel choice on a pair's first use in a dtype, in one-token steps per
#: probed position
PROBE_STEPS_PER_POSITION = 8


@dataclass(frozen=True)
class TargetCosts:
    """A target in one dtype on this machine: seconds per prefill token and per decode step."""

    prefill_token_s: float
    step_s: float


def _turn_lengths(case: Case, context: MeasureContext, tokenizer) -> list[int]:
    """The prompt tokens each turn of the case reads (a later turn: the conversation so far, answers included)."""
    config = context.config
    answer = " ".join(["word"] * config.max_new_tokens)
    lengths = []
    for turn in range(len(case.prompt.turns)):
        ids = prompt_input_ids(
            tokenizer, case.prompt, context.all_prompts, config.context_tokens, "cpu", answers=(answer,) * turn
        )
        lengths.append(int(ids.shape[1]))
    return lengths


def _drafted(case: Case, default: int, new_tokens: int) -> int:
    """The tokens a step drafts: k, or ``default`` for a schedule; never more than the new tokens, as the engine
    caps a block at what is left to decode."""
    return max(min(case.k if isinstance(case.k, int) else default, new_tokens), 1)


def _speculative_share(case: Case, cost_ratio: float, new_tokens: int) -> float:
    """The speculative run's decode time over the baseline's, as the cost model predicts it at the assumed
    acceptance."""
    k = _drafted(case, SCHEDULE_K, new_tokens)
    curve = [1.0 + VERIFY_SLOPE * m for m in range(k + 1)]
    return 1.0 / predicted_speedup(ASSUMED_ACCEPTANCE, k, cost_ratio, curve)


class CostEstimator:
    """Probes what it needs once (a target per dtype, a drafter per pair and dtype) and estimates cases."""

    def __init__(self, context: MeasureContext) -> None:
        self._context = context
        self._targets: dict[tuple, TargetCosts] = {}
        self._draft_ratios: dict[tuple, float] = {}
        self._first_use: set[tuple] = set()
        self._turn_lengths: dict[tuple, list[int]] = {}  # a block's cases share a prompt: tokenised once

    def _target(self, case: Case) -> tuple[TargetCosts, object]:
        store = self._context.store
        loaded = store.target(case.pair, store.dtype_for(case))
        key = (target_of(case.pair), store.dtype_for(case), case.engine)
        if key not in self._targets:
            window = context_window(loaded.model.config)
            length = PROBE_TOKENS if window is None else max(min(PROBE_TOKENS, window[0] - 2), 1)
            ids = prompt_input_ids(loaded.tokenizer, case.prompt, self._context.all_prompts, length, store.device)
            target_forms = store.kernel_forms(loaded, self._context.config.kernels)
            forms = ENGINES[case.engine].baseline_kernels(target_forms)
            prefill, step = decode_step_costs(loaded.model, ids, forms)
            self._targets[key] = TargetCosts(prefill, step)
        return self._targets[key], loaded

    def _lengths(self, case: Case, tokenizer) -> list[int]:
        key = (id(tokenizer), case.key("turn_lengths"))
        if key not in self._turn_lengths:
            self._turn_lengths[key] = _turn_lengths(case, self._context, tokenizer)
        return self._turn_lengths[key]

    def _draft_ratio(self, case: Case, step_s: float, tokenizer) -> float:
        store = self._context.store
        key = (case.pair.name, store.dtype_for(case), case.engine)
        if key not in self._draft_ratios:
            drafter = store.drafter(case.pair, store.dtype_for(case))
            ids = prompt_input_ids(tokenizer, case.prompt, self._context.all_prompts, None, store.device)
            # the draft in the forms its runs use, as the target's step above: its store's, or the model's own
            forms = store.draft_kernel_forms(drafter, self._context.config.kernels)
            kernels = ENGINES[case.engine].baseline_kernels(forms) if forms is not None else "linear"
            self._draft_ratios[key] = draft_token_cost(drafter, ids, repeats=2, kernels=kernels) / step_s
        return self._draft_ratios[key]

    def steps_s(self) -> dict[str, float]:
        """One decode step of each target probed, by ``name dtype`` (``name dtype engine`` beside another engine)."""
        engines = {engine for _, _, engine in self._targets}
        return {
            " ".join([target.removeprefix("embedded:"), dtype, *([engine] if len(engines) > 1 else [])]): costs.step_s
            for (target, dtype, engine), costs in self._targets.items()
        }

    def case_cost(self, case: Case) -> CaseCost:
        """The case's round and setup; raises what would stop it (a missing model, a case it cannot run)."""
        config = self._context.config
        costs, loaded = self._target(case)
        lengths = self._lengths(case, loaded.tokenizer)
        new_tokens = config.max_new_tokens
        prefill_s = sum(length * costs.prefill_token_s for length in lengths) * case.batch
        decode_s = len(lengths) * new_tokens * costs.step_s * case.batch
        share = _speculative_share(case, self._draft_ratio(case, costs.step_s, loaded.tokenizer), new_tokens)
        baseline_s = prefill_s + decode_s
        round_s = ROUND_OVERHEAD * (baseline_s + prefill_s + decode_s * share)
        setup_s = 0.0
        first_use = case.key("warm_up")
        if first_use not in self._first_use:
            self._first_use.add(first_use)
            k = _drafted(case, 16, new_tokens)
            setup_s = config.warmup * round_s + PROBE_STEPS_PER_POSITION * (k + 1) * costs.step_s
        return CaseCost(
            case.id, case.pair.name, str(case.k), case.dtype, case.prompt_label, round_s=round_s, setup_s=setup_s
        )

    def reference_s(self, case: Case) -> float:
        """The target's reference decode of the case's prompt (generate() with transformers' kernels)."""
        costs, loaded = self._target(case)
        lengths = self._lengths(case, loaded.tokenizer)
        tokens = len(lengths) * self._context.config.max_new_tokens
        return case.batch * (sum(lengths) * costs.prefill_token_s + REFERENCE_FACTOR * tokens * costs.step_s)


@dataclass(frozen=True)
class Estimates:
    """The blocks' expected seconds, and what the probe measured: one decode step of each target, by its name and
    dtype (the plan says them)."""

    blocks: dict[str, BlockCost]
    steps_s: dict[str, float]


def estimate_blocks(cases: Sequence[Case], context: MeasureContext) -> Estimates:
    """By block, in run order, the expected seconds of its setup and its round. A case that cannot be estimated
    (a model missing, a prompt its window cannot hold, a case its engine refuses) is left out: its block then
    says why it cannot run, in the words of the step that finds it."""
    estimator = CostEstimator(context)
    blocks: dict[str, list[CaseCost]] = {}
    fixed: dict[str, float] = {}
    for case in cases:
        try:
            cost = estimator.case_cost(case)
            if case.block not in fixed:
                fixed[case.block] = estimator.reference_s(case)
        except Exception:  # noqa: BLE001 - the estimate is no check: the case's own preparation reports it
            continue
        blocks.setdefault(case.block, []).append(cost)
    return Estimates(
        {block: BlockCost(block, fixed[block], tuple(members)) for block, members in blocks.items()},
        estimator.steps_s(),
    )
