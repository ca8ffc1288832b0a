"""Cases of batch size B > 1: the batch a case decodes, its batched baseline and speculative run, its verdict per row.

A batch is built from the prompts of the case's category (the prompt file's prompts of that category, in file
order, the case's own prompt first), repeated when the category has fewer than B, each tokenised as an unbatched
case's prompt is, then left padded (:func:`~pytest_specbench.engine.batched.left_pad`). So acceptance differs
between rows as it would in a server.

The baseline is the target's batched greedy decoding (:func:`~pytest_specbench.engine.batched.batched_greedy_generate`);
the speculative run is :func:`~pytest_specbench.engine.batched.batched_speculative_generate` with the case's drafter
(a draft model drafts for all rows in batched passes; prompt lookup looks up each row's own sequence). Greedy only,
a constant k only, eager only: :func:`batch_refusal` says why any other batched case is skipped.

Lossless per row: each row's tokens must equal the target's own batched ``generate`` with the same padding (the
batched reference) and that prompt's unbatched greedy output (the reference of its batch-1 case). Batched and
padded matrix products round differently from unbatched ones (transformers #39421), so where the target's top-2
logits are within rounding a batched run may take the other token: such a difference is a tie-divergence (the
margin below the tie tolerance in half precision, below :data:`FLOAT32_BATCH_TIE` in float32), never a pass. The
case is lossless only when every row is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..engine.batched import BatchedGenerationResult, batched_greedy_generate, batched_speculative_generate, left_pad
from ..engine.drafters import ModelDrafter
from ..engine.plain_generate import plain_generate, plain_generation_config
from ..engine.sampling import SamplingParams
from ..models.base import NotApplicable, context_window
from ..models.loading import LoadedModel
from ..settings.config import SpecbenchConfig
from .costs import CostProfile, measure_batched_costs, probed_k
from .inputs import check_context_windows, prompt_input_ids
from .matrix import Case
from .prompts import Prompt
from .shared import SharedMeasurements
from .store import ModelStore
from .verdicts import diagnose

#: in float32, a row that differs from a reference where the target's top-2 logit margin is below this is a
#: tie-divergence: the rounding of batched products, not a bug (half precision uses --specbench-tie-tolerance)
FLOAT32_BATCH_TIE = 1e-2

#: verdicts in order of severity: a batch's verdict is its worst row's
_SEVERITY = {"lossless": 0, "tie-divergence": 1, "diverged": 2}


def batch_prompts(prompt: Prompt, all_prompts: Sequence[Prompt], size: int) -> list[Prompt]:
    """The ``size`` prompts of a batch: ``prompt`` first, then the others of its category in file order, the
    whole list repeated as often as needed."""
    others = [other for other in all_prompts if other.category == prompt.category and other.id != prompt.id]
    pool = [prompt, *others]
    return [pool[index % len(pool)] for index in range(size)]


def batch_refusal(case: Case, config: SpecbenchConfig) -> str | None:
    """Why a case of batch > 1 cannot run (it is skipped with the reason), or None. The hf engine's own refusal
    is :data:`~.engines.HF_BATCH_REFUSAL`."""
    if case.batch <= 1:
        return None
    if config.temperature > 0:
        return (
            f"the batched engine decodes greedily only, so batch {case.batch} does not run under sampling "
            f"(--specbench-temperature={config.temperature:g})"
        )
    if not isinstance(case.k, int):
        return f"the batched engine drafts a constant k, so batch {case.batch} does not run k={case.k}"
    if config.compile_steps:
        return f"the batched engine runs eager only, so batch {case.batch} does not run with --specbench-compile"
    return None


@dataclass(frozen=True)
class BatchSetup:
    """What a batched case decodes and with what, before anything is timed."""

    target: LoadedModel
    drafter: Any
    input_ids: torch.Tensor  # (B, T), left padded
    attention_mask: torch.Tensor  # (B, T)
    row_ids: list[torch.Tensor]  # each row's own prompt, (1, T_b), unpadded
    prompt_ids: list[str]  # each row's prompt id
    max_new_tokens: int
    eos_token_id: int | None
    pad_token_id: int
    references: list[list[int]]  # per row: the target's batched generate() with the same padding
    unbatched: list[list[int]]  # per row: the target's unbatched generate() of that prompt
    costs: CostProfile
    sampling: SamplingParams = SamplingParams()  # greedy: the batched engine samples nothing

    @property
    def own_ids(self) -> torch.Tensor:
        return self.row_ids[0]


def batched_reference(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int, eos_token_id: int | None
) -> list[list[int]]:
    """The target's batched greedy ``generate`` with the same left padding, per row (cut just after EOS)."""
    config = plain_generation_config(model, max_new_tokens, eos_token_id)
    with torch.inference_mode():
        output = plain_generate(model, input_ids, attention_mask, config)
    rows = output[:, input_ids.shape[1] :].tolist()
    if eos_token_id is not None:
        rows = [row[: row.index(eos_token_id) + 1] if eos_token_id in row else row for row in rows]
    return rows


def _pad_token_id(tokenizer) -> int:
    for candidate in (getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if isinstance(candidate, int):
            return candidate
    return 0


def prepare_batch(
    case: Case, store: ModelStore, shared: SharedMeasurements, config: SpecbenchConfig, all_prompts: list[Prompt]
) -> BatchSetup:
    """Load the pair, build and pad the batch, check the context windows, and get both references and the costs."""
    refusal = batch_refusal(case, config)
    if refusal:
        raise NotApplicable(refusal)
    pair = case.pair
    target = store.target(pair)
    prompts = batch_prompts(case.prompt, all_prompts, case.batch)
    row_ids = [
        shared.input_ids(
            (pair.target, pair.revision, prompt.id),
            lambda prompt=prompt: prompt_input_ids(
                target.tokenizer, prompt, all_prompts, config.context_tokens, store.device
            ),
        )
        for prompt in prompts
    ]
    pad = _pad_token_id(target.tokenizer)
    ids, mask = left_pad([row[0].tolist() for row in row_ids], pad_token_id=pad)
    ids, mask = ids.to(store.device), mask.to(store.device)
    eos = target.tokenizer.eos_token_id if config.stop_at_eos else None
    n = config.max_new_tokens
    drafter = store.drafter(pair)
    models = {f"target {pair.target!r}": target.model}
    if isinstance(drafter, ModelDrafter):
        models[f"draft {pair.draft_label!r}"] = drafter.model
    # The padded width: the batched engine's positions count a row's own tokens only, but its cache holds the
    # padded width, and so does the batched generate() that is its reference.
    check_context_windows(case, int(ids.shape[1]), n, models)
    references = shared.batched_reference(
        (pair.target, pair.revision, store.dtype_for(pair), tuple(prompt.id for prompt in prompts), n, eos),
        lambda: batched_reference(target.model, ids, mask, n, eos),
    )
    unbatched = [store.reference(pair, prompt.id, row, n, eos) for prompt, row in zip(prompts, row_ids)]
    window = context_window(target.model.config)
    longest = probed_k(config.ks, n, None if window is None else window[0] - int(ids.shape[1]))
    costs = shared.costs(
        (pair.name, longest, "batch", case.batch, case.prompt.id),
        lambda: measure_batched_costs(target.model, drafter, ids, mask, longest + 1),
    )
    return BatchSetup(
        target,
        drafter,
        ids,
        mask,
        row_ids,
        [prompt.id for prompt in prompts],
        n,
        eos,
        pad,
        references,
        unbatched,
        costs,
    )


def speculative_run(case: Case, setup: BatchSetup) -> Callable[[], BatchedGenerationResult]:
    # The store's drafter is a BatchDrafter (engine/drafters.py): each run resets it and reads the batch's prompts.
    return lambda: batched_speculative_generate(
        setup.target.model,
        setup.drafter,
        setup.input_ids,
        setup.attention_mask,
        int(case.k),
        setup.max_new_tokens,
        eos_token_id=setup.eos_token_id,
        pad_token_id=setup.pad_token_id,
    )


def baseline_run(setup: BatchSetup) -> Callable[[], BatchedGenerationResult]:
    return lambda: batched_greedy_generate(
        setup.target.model, setup.input_ids, setup.attention_mask, setup.max_new_tokens, eos_token_id=setup.eos_token_id
    )


def _row_verdict(
    setup: BatchSetup, row: int, tokens: list[int], half_precision: bool, tie_tolerance: float
) -> dict[str, Any]:
    """A row against its batched reference, then against its unbatched one: the first that differs decides."""
    tolerance = tie_tolerance if half_precision else FLOAT32_BATCH_TIE
    target = setup.target
    for against, reference in (("batched", setup.references[row]), ("unbatched", setup.unbatched[row])):
        if tokens == reference:
            continue
        # The margin is the target's own, unbatched, at the reference's prefix; a tie at any dtype, since
        # batching itself rounds differently.
        info = diagnose(target.model, target.tokenizer, setup.row_ids[row], tokens, reference, True, tolerance)
        return {**info, "against": against, "row": row}
    return {"verdict": "lossless", "first_divergence": None, "row": row}


def batch_verdict(
    setup: BatchSetup, tokens: list[list[int]], half_precision: bool, tie_tolerance: float
) -> dict[str, Any]:
    """The case's verdict: its worst row's, with that row's divergence, and every row's verdict."""
    rows = [
        _row_verdict(setup, row, row_tokens, half_precision, tie_tolerance) for row, row_tokens in enumerate(tokens)
    ]
    worst = max(rows, key=lambda info: (_SEVERITY[info["verdict"]], -info["row"]))
    verdict = {key: value for key, value in worst.items() if key not in ("against", "row")}
    verdict["row_verdicts"] = [info["verdict"] for info in rows]
    verdict["divergent_row"] = None if worst["verdict"] == "lossless" else worst["row"]
    verdict["divergence_against"] = worst.get("against")
    # The references agree with each other unless batching moved the target's own argmax (a near-tie).
    verdict["batched_reference_matches_unbatched"] = setup.references == setup.unbatched
    return verdict


def row_step_lists(result: BatchedGenerationResult) -> tuple[list[int], list[int], list[int]]:
    """The per-step drafted, accepted and chosen-k counts of every row's decode steps in turn, after one
    prefill entry: a run's lists as the cost model and the per-position acceptance read them (they leave index
    0, the prefill, out), one block of one sequence each. The batch's own lists sum each step over its rows,
    which read as one run's block would show positions past k."""
    drafted, accepted, chosen = [0], [0], [0]
    for row in result:
        drafted.extend(row.stats.drafted_per_step[1:])
        accepted.extend(row.stats.accepted_per_step[1:])
        chosen.extend(row.stats.k_per_step[1:])
    return drafted, accepted, chosen


def row_acceptance(result: BatchedGenerationResult) -> list[float | None]:
    """Each row's acceptance (accepted / drafted; None where the row drafted nothing)."""
    return [
        row.stats.accepted_tokens / row.stats.drafted_tokens if row.stats.drafted_tokens else None for row in result
    ]


def row_tau(result: BatchedGenerationResult) -> float:
    """Mean tokens per decode step of a row, over the rows."""
    taus = [row.stats.tokens_per_step for row in result]
    return sum(taus) / len(taus) if taus else 0.0
