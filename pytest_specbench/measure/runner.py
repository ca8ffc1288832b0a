"""Measure the cases of one block: prepare each (:class:`.case_run.CaseRun`), warm them up, time them in shared
rounds (:mod:`.blocks`, paired as :mod:`.pairing` chooses) and judge each one's output.

Knows nothing of pytest. :func:`.row.build_result` turns a measurement into a
:class:`~..results.schema.CaseResult`. A block holds one batch
size (:attr:`..cases.matrix.Case.block`), so its cases share one baseline.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..cases.matrix import Case
from ..models.base import ModelUnavailable, NotApplicable, UnrunnableCase
from .batches import BatchRun
from .blocks import BLOCK_BUDGET, MAX_ROUNDS, BlockTiming, TimedCase, time_block
from .case_inputs import case_inputs
from .case_run import BaselineRun, CaseRun, MeasureContext, NewInterleaved
from .engines import ENGINES
from .kept_rounds import BlockKeeping, RoundKeeper
from .memory import peak_memory_mb, reset_peak_memory
from .pairing import OWN_BASELINE, Pairing, choose_pairing
from .row import BlockRecord, Measurement
from .sequence import SequenceRun
from .served_case import ServedSequenceRun
from .turns import TurnsRun


@dataclass(frozen=True)
class BlockShare:
    """A block's seconds of timed rounds (None: no limit), and why it stops when they are spent."""

    seconds: float | None = None
    reason: str = BLOCK_BUDGET


@dataclass
class BlockPlan:
    """What a block may spend and whom it tells: ``share`` is asked once its cases are prepared and warmed up, so
    the run's plan knows what their setup took; ``after_round`` hears each round's seconds."""

    share: Callable[[], BlockShare] = BlockShare
    after_round: Callable[[int, float], None] | None = None
    keeper: RoundKeeper | None = None  # logs each round, and offers the rounds a stopped run logged


def case_run_for(case: Case, context: MeasureContext) -> CaseRun:
    """The case as its kind measures it: on a server, a batch, a conversation of several turns, or a single
    sequence."""
    if ENGINES[case.engine].served:
        return ServedSequenceRun(case, context)
    if case.batched:
        return BatchRun(case, context)
    return TurnsRun(case, context) if case.prompt.later_turns else SequenceRun(case, context)


def _prepared(
    cases: Sequence[Case], context: MeasureContext
) -> tuple[list[CaseRun], dict[str, Measurement | BaseException]]:
    """The cases that could be prepared, and by case id the error that stopped each other one."""
    ready: list[CaseRun] = []
    refused: dict[str, Measurement | BaseException] = {}
    for case in cases:
        try:
            case_run = case_run_for(case, context)  # prepared as it is made
        except (NotApplicable, ModelUnavailable, UnrunnableCase) as error:
            refused[case.id] = error
        else:
            ready.append(case_run)
    return ready, refused


def _measurement(
    case_run: CaseRun,
    member: TimedCase,
    block: BlockTiming,
    pairing: Pairing,
    memory: tuple[float, str, float] | None,
    retimed_why: str,
) -> Measurement:
    """What timing the case gave, judged: its runs, its paired baselines, its verdict and what its row needs."""
    case = case_run.case
    stop = member.stop or MAX_ROUNDS
    judgement = case_run.judge(member.runs[-1])
    return Measurement(
        input_ids=case_run.input_ids,
        reference=case_run.reference,
        baselines=block.case_baselines(member),
        speculative=member.runs,
        paired=block.paired,
        spreads=block.spreads(),
        verdict=judgement.verdict,
        turn_verdicts=judgement.turn_verdicts,
        target_load_s=case_run.target.load_time_s,
        target_load_source=case_run.target.source,
        costs=case_run.costs,
        sizes=case_run.sizes(),
        peak_memory=memory,
        draft_label=case_run.draft_label,
        vocabulary_overlap=case_run.context.store.vocabulary_overlap(case.pair, case_run.dtype),
        sampling=case_run.sampling,
        block=BlockRecord(
            case.block, list(member.rounds), member.eliminated_by, stop, block.rounds, block.resumed_rounds, retimed_why
        ),
        batch_prompt_ids=case_run.batch_prompt_ids,
        kind_fields=case_run.row_fields,
        pairing=pairing,
    )


def _what_decides(case_run: CaseRun) -> str:
    """What decides a case's numbers beyond the machine: its kernel forms (none on a served engine) and its inputs'
    fingerprint (models, drafter, prompt text, server), as a round kept of it records them."""
    context = case_run.context
    inputs = case_inputs(case_run.case, context.config, context.all_prompts)
    forms = getattr(case_run.costs, "forms_digest", "")
    return f"{forms} {hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]}"


def _warmed_up(ready: list[CaseRun], pairing: Pairing) -> tuple[BaselineRun | None, NewInterleaved | None]:
    """The block's baseline (the first case's: a block holds one batch size, so its cases share it; None where they
    do not share an input, and each case has its own) and, where a case interleaves, its fresh interleaved
    baselines; every case warmed up and its timed runs started on its latest costs."""
    baseline = ready[0].baseline() if pairing.kind != OWN_BASELINE else None
    interleaving = any(pairing.interleaves(case_run.interleave_refusal) for case_run in ready)
    new_interleaved = ready[0].interleaved_baseline() if interleaving else None
    for case_run in ready:
        interleaved = new_interleaved if pairing.interleaves(case_run.interleave_refusal) else None
        case_run.warm_up(baseline or case_run.baseline(), interleaved)
    for case_run in ready:
        case_run.refresh_costs()  # a calibration may have replaced the costs this case was prepared with
        case_run.start_runs()
    return baseline, new_interleaved


def measure_block(
    cases: Sequence[Case], context: MeasureContext, plan: BlockPlan | None = None
) -> dict[str, Measurement | BaseException]:
    """Time the cases of one block in shared rounds and judge each one's output; by case id, its measurement or
    the error that stopped it before timing (a missing model, an engine that refuses the case)."""
    plan = plan or BlockPlan()
    if len({case.batch for case in cases}) > 1:
        raise ValueError("the cases of one block share a batch size (Case.block), and with it the baseline")
    ready, outcome = _prepared(cases, context)
    if not ready:
        return outcome
    shared = all(case_run.shares_block_baseline for case_run in ready)
    pairing = choose_pairing(context.config, [case_run.interleave_refusal for case_run in ready], shared)
    baseline, new_interleaved = _warmed_up(ready, pairing)
    timed = [
        TimedCase(case_run.case, case_run.run, baseline=None if baseline is not None else case_run.baseline())
        for case_run in ready
    ]
    keeping = (
        plan.keeper.begin(ready[0].case.block, {run.case.id: _what_decides(run) for run in ready}, pairing.kind)
        if plan.keeper is not None
        else BlockKeeping()
    )
    share = plan.share()
    reset_peak_memory(context.store.device)
    block = time_block(
        timed,
        baseline,
        context.config,
        share.seconds,
        share.reason,
        plan.after_round,
        pairing,
        new_interleaved,
        keeping.restored,
        keeping.keep,
    )
    memory = (*peak_memory_mb(context.store.device), context.store.weights_held_peak_bytes / 2**20)
    for case_run, member in zip(ready, timed):
        outcome[case_run.case.id] = _measurement(case_run, member, block, pairing, memory, keeping.retimed_why)
    return {case.id: outcome[case.id] for case in cases if case.id in outcome}
