"""Cases of batch size B > 1: the batch a case decodes, its batched baseline and speculative run, its verdict per row.

A batch is the case's own prompt, then the other prompts of its category in file order, repeated up to B, each
tokenised as an unbatched case's and left padded, so rows accept differently, as in a server. The baseline is
:func:`~pytest_specbench.engine.batched.batched_greedy_generate`, the speculative run
:func:`~pytest_specbench.engine.batched.batched_speculative_generate` with the case's drafter; greedy, constant k
and eager only (:func:`batch_refusal` says why another case is skipped). Each row must equal the target's batched
``generate`` with the same padding and its prompt's unbatched greedy output; batched products round differently
(transformers #39421), so a difference at a top-2 margin below the tie tolerance (:data:`FLOAT32_BATCH_TIE` in
float32) is a tie-divergence, never a pass, and the case is lossless only when every row is. See docs/measuring.md,
"Batch size".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from ..cases.matrix import Case
from ..cases.prompts import Prompt
from ..engine.batched import BatchedGenerationResult, batched_greedy_generate, batched_speculative_generate, left_pad
from ..engine.drafters import Drafter
from ..engine.plain_generate import own_pad_token_id, plain_generate, plain_generation_config
from ..engine.sampling import SamplingParams
from ..models.base import NotApplicable, context_window
from ..models.loading import LoadedModel
from ..settings.config import SpecbenchConfig
from .case_run import BaselineRun, CaseRun, Judgement
from .costs import CostProfile, measure_batched_costs, probed_k
from .engines import ENGINES, SpeculativeRun
from .inputs import check_context_windows, prompt_input_ids
from .pairing import BATCHED_RUNS
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
    if not case.batched:
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
    drafter: Drafter
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


def batched_reference(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    max_new_tokens: int,
    eos_token_id: int | None,
) -> list[list[int]]:
    """The target's batched greedy ``generate`` with the same left padding, per row (cut just after EOS)."""
    config = plain_generation_config(model, max_new_tokens, eos_token_id)
    with torch.inference_mode():
        output = plain_generate(model, input_ids, attention_mask, config)
    rows = output[:, input_ids.shape[1] :].tolist()
    if eos_token_id is not None:
        rows = [row[: row.index(eos_token_id) + 1] if eos_token_id in row else row for row in rows]
    return rows


def pad_token_id(model: PreTrainedModel) -> int:
    """The id that fills a batch's masked positions: the model's own pad
    (:func:`~..engine.plain_generate.own_pad_token_id`, as its batched reference pads), else 0: a masked
    position's id never reaches the output."""
    own = own_pad_token_id(model)
    return 0 if own is None else own


def _batch_input(run: BatchRun, prompts: list[Prompt]) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, int]:
    """Each row's own prompt tokens, and the batch left padded: (row ids, ids, mask, pad id)."""
    context, pair = run.context, run.case.pair
    target = context.store.target(pair, run.dtype)
    row_ids = [
        context.shared.input_ids(
            run.case.key("row_input_ids", row_prompt=prompt.id),
            lambda prompt=prompt: prompt_input_ids(
                target.tokenizer, prompt, context.all_prompts, context.config.context_tokens, context.store.device
            ),
        )
        for prompt in prompts
    ]
    pad = pad_token_id(target.model)
    ids, mask = left_pad([row[0].tolist() for row in row_ids], pad_token_id=pad)
    return row_ids, ids.to(context.store.device), mask.to(context.store.device), pad


class BatchRun(CaseRun):
    """A case of batch size B > 1 (see the module docstring)."""

    setup: BatchSetup

    def prepare(self) -> None:
        case, context = self.case, self.context
        store, shared, config = context.store, context.shared, context.config
        refusal = ENGINES[case.engine].refusal(case, temperature=config.temperature) or batch_refusal(case, config)
        if refusal:
            raise NotApplicable(refusal)
        pair, dtype = case.pair, self.dtype
        target, drafter = store.target(pair, dtype), store.drafter(pair, dtype)
        if not drafter.drafts_batches:
            raise NotApplicable(f"pair {pair.name}'s drafter does not draft for batches: it runs at batch 1 only")
        prompts = batch_prompts(case.prompt, context.all_prompts, case.batch)
        if any(prompt.conversation for prompt in prompts):
            raise NotApplicable(
                "a batch of conversation prompts (a Spec-Bench or MT-bench question file): these run at batch 1, "
                "where each turn reads the conversation in its chat form"
            )
        row_ids, ids, mask, pad = _batch_input(self, prompts)
        eos = target.tokenizer.eos_token_id if config.stop_at_eos else None
        n = config.max_new_tokens
        models = {f"target {pair.target!r}": target.model}
        if drafter.model is not None:
            models[f"draft {pair.draft_label!r}"] = drafter.model
        # The padded width: the batched engine's positions count a row's own tokens only, but its cache holds the
        # padded width, and so does the batched generate() that is its reference.
        check_context_windows(case, int(ids.shape[1]), n, models)
        references = shared.batched_reference(
            case.key("batched_reference", rows=tuple(prompt.id for prompt in prompts), new_tokens=n, eos=eos),
            lambda: batched_reference(target.model, ids, mask, n, eos),
        )
        unbatched = [
            store.reference(case.key("reference", input=prompt.id, new_tokens=n, eos=eos), pair, row, n, eos, dtype)
            for prompt, row in zip(prompts, row_ids)
        ]
        window = context_window(target.model.config)
        longest = probed_k(config.ks, n, None if window is None else window[0] - int(ids.shape[1]))
        costs = shared.costs(
            case.key("batched_costs", longest=longest),
            lambda: measure_batched_costs(target.model, drafter, ids, mask, longest + 1),
        )
        prompt_ids = [prompt.id for prompt in prompts]
        self.setup = BatchSetup(
            target, drafter, ids, mask, row_ids, prompt_ids, n, eos, pad, references, unbatched, costs
        )

    def new_runner(self) -> SpeculativeRun:
        # Each run resets the drafter (its batch form) and reads the batch's prompts.
        setup, k = self.setup, int(self.case.k)
        return lambda: batched_speculative_generate(
            setup.target.model,
            setup.drafter,
            setup.input_ids,
            setup.attention_mask,
            k,
            setup.max_new_tokens,
            eos_token_id=setup.eos_token_id,
            pad_token_id=setup.pad_token_id,
        )

    def baseline(self) -> BaselineRun:
        setup = self.setup
        return lambda: batched_greedy_generate(
            setup.target.model,
            setup.input_ids,
            setup.attention_mask,
            setup.max_new_tokens,
            eos_token_id=setup.eos_token_id,
        )

    @property
    def interleave_refusal(self) -> str | None:
        return BATCHED_RUNS

    def judge(self, result: BatchedGenerationResult) -> Judgement:
        tokens = result.token_ids
        return Judgement(batch_verdict(self.setup, tokens, self.half_precision, self.context.config.tie_tolerance))

    @property
    def input_ids(self) -> torch.Tensor:
        return self.setup.row_ids[0]

    @property
    def reference(self) -> list[list[int]]:
        return self.setup.references

    @property
    def batch_prompt_ids(self) -> list[str]:
        return list(self.setup.prompt_ids)

    def row_fields(
        self, last_run: BatchedGenerationResult, speed: dict[str, Any], steps: dict[str, Any], other_time_s: float
    ) -> tuple[dict[str, Any], float]:
        """Per-sequence counts from the batch's rows, and the batch's own fields (:func:`batch_row_fields`)."""
        return batch_row_fields(last_run, self.batch_prompt_ids, speed, steps, other_time_s)


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


def batch_row_fields(
    last: BatchedGenerationResult,
    prompt_ids: list[str],
    speed: dict[str, Any],
    steps: dict[str, Any],
    other_time_s: float,
) -> tuple[dict[str, Any], float]:
    """A batch's own row fields (its rows' prompts, the whole batch's speeds, the rows' acceptance spread), with
    ``steps`` made per sequence in place, and the median run's other time per sequence step.

    The cost model reads every row's decode steps in turn, each priced as a step of the whole batch (the batch's
    v(m) and draft costs), so the overhead of a batch step is charged to each of its rows' steps. The per-position
    acceptance pooled from those lists is that of the batch's sequences (the batch's own lists sum a step over
    its rows). ``last``: the last timed run."""
    steps["tau"] = row_tau(last)
    steps["new_tokens"] = last[0].stats.new_tokens  # per row, as at batch 1 (the case's own prompt)
    drafted, accepted, chosen = row_step_lists(last)
    steps.update(drafted_per_step=list(drafted), accepted_per_step=list(accepted), k_per_step=chosen)
    if last.stats.decode_steps:
        other_time_s *= (len(drafted) - 1) / last.stats.decode_steps
    acceptance = row_acceptance(last)
    known = [value for value in acceptance if value is not None]
    fields = dict(
        batch_prompt_ids=list(prompt_ids),
        batch_prompt_tokens=[row.prompt_length for row in last],
        batch_new_tokens=[row.stats.new_tokens for row in last],
        batch_decode_tps=speed["decode_tps"],
        batch_baseline_decode_tps=speed["baseline_decode_tps"],
        row_acceptance=acceptance,
        row_acceptance_min=min(known) if known else None,
        row_acceptance_max=max(known) if known else None,
    )
    return fields, other_time_s
