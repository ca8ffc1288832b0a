"""What a case measures from, as digests: the row's ``inputs_fingerprint``, which ``--specbench-resume``
compares before it replays a logged row.

Computed from the pair, the prompts and the config alone, so a resumed run checks every logged case before any
model loads. Each part is the short sha256 of what it covers: ``target`` and ``draft`` (the model, by
:func:`..models.loading.source_identity`; ``draft`` only for a draft model), ``drafter`` (its kind and settings),
``prompt`` (the case's text, a batch's other rows, the ``--specbench-context-tokens`` padding), ``case`` (the
settings its id may not show: engine, k, batch size, dtype) and, on a served engine, ``server`` (what the engine's
fingerprint holds: its version and arguments, or the endpoints). The run's result-changing options are compared as a
whole before this (:func:`..results.log.settings_differences`). See docs/measuring.md, "Resume replays only what
it can vouch for".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..cases.drafter_kinds import kind_of
from ..cases.matrix import Case
from ..cases.prompts import Prompt, filler_text
from ..results.schema import CaseResult
from ..settings.axes import fingerprint_values
from ..settings.config import SpecbenchConfig

#: each part's name in words, for the line that says why a case runs again
PART_NAMES = {
    "target": "target model",
    "draft": "draft model",
    "drafter": "drafter settings",
    "prompt": "prompt text",
    "case": "case settings (engine, k, batch, dtype)",
    "server": "server (the engine's version and arguments, or the endpoints)",
}
#: what a logged row without a fingerprint (a log of an older version) is run again for
NOT_RECORDED = "inputs not recorded"


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]


def case_inputs(case: Case, config: SpecbenchConfig, prompts: Sequence[Prompt]) -> dict[str, str]:
    """The case's inputs fingerprint: a digest per part (see the module docstring). ``prompts``: every prompt
    of the file, which batches and padding draw from."""
    from ..models.loading import source_identity
    from .batches import batch_prompts
    from .engines import ENGINES  # torch's: not before a case runs

    pair = case.pair
    # batch 1: its own; a conversation by every turn (its form, not only its text, is what the model reads)
    texts = [list(p.turns) if p.conversation else p.text for p in batch_prompts(case.prompt, prompts, case.batch)]
    if config.context_tokens is not None:
        texts.append(filler_text(prompts, exclude_id=case.prompt.id))
    parts = {"target": source_identity(pair.target, revision=pair.revision, cache_dir=config.cache_dir)}
    kind = kind_of(pair)
    if kind.draft_model and pair.draft:
        # A pair's revision is its target's (the store loads the draft without one).
        parts["draft"] = source_identity(pair.draft, cache_dir=config.cache_dir)
    parts["drafter"] = kind.fingerprint(pair)
    parts["prompt"] = texts
    parts["case"] = fingerprint_values(case.axis_values())
    served = ENGINES[case.engine].served
    server = served.fingerprint(case, config) if served is not None else None
    if server is not None:
        parts["server"] = server
    return {name: _digest(value) for name, value in parts.items()}


def inputs_changes(logged: Mapping[str, Any] | None, now: Mapping[str, str]) -> list[str]:
    """The parts, in words, in which a logged fingerprint differs from ``now``'s; ``[NOT_RECORDED]`` without
    one."""
    if not isinstance(logged, Mapping) or not logged:
        return [NOT_RECORDED]
    return [PART_NAMES.get(name, name) for name in dict.fromkeys([*now, *logged]) if logged.get(name) != now.get(name)]


def replayable(
    rows: Mapping[str, CaseResult], cases: Sequence[Case], config: SpecbenchConfig, prompts: Sequence[Prompt]
) -> tuple[dict[str, CaseResult], dict[str, list[str]]]:
    """The logged ``rows`` a resumed run may replay, and for each other case of ``cases`` what changed.

    A row of a case in ``cases`` is replayed only when its fingerprint equals the case's now; a row of a case
    this run does not have is kept as it is (carried into the new log, never reported)."""
    replayed, rerun = {}, {}
    by_id = {case.id: case for case in cases}
    for case_id, row in rows.items():
        case = by_id.get(case_id)
        changes = [] if case is None else inputs_changes(row.inputs_fingerprint, case_inputs(case, config, prompts))
        if changes:
            rerun[case_id] = changes
        else:
            replayed[case_id] = row
    return replayed, rerun
