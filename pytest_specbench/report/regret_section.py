"""The report's "k=auto against the best constant k" section: per pair, each prompt's schedules as a share of the
best constant k and, over prompts, their geometric means (the figures of :mod:`.regret`, read from a run's answer)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .answer import RunAnswer
from .answer_types import PairAnswer, PromptAnswer
from .regret import AgainstHf, interval_text

_SECTION_INTRO = (
    "Each schedule's decode speedup as a share of the best constant k's on the same prompt, paired over the "
    "rounds both ran in their block (geometric mean of the per-round ratios, 95% t interval). The best "
    "constant k is chosen after the fact from the same data, so the ratio is biased against the schedule: "
    "a conservative figure; 1 or more means the schedule did as well as the sweep, without the sweep. "
    "Where both engines ran k=auto, native k=auto against transformers' default schedule (hf k=auto), end "
    "to end, paired over rounds. Over prompts: geometric mean, t interval over the prompts."
)


def regret_markdown(answer: RunAnswer, figures: dict[str, str] | None = None) -> list[str]:
    """The report's "k=auto against the best constant k" section from a run's answer (:func:`.answer.run_answer`):
    per pair, each prompt's schedules as a share of the best constant k and, over prompts, their geometric means;
    ``figures`` maps a pair to its figure's link. Empty when no schedule ran beside constant k."""
    with_schedules = [a for a in answer.prompts if a.schedules]
    if not with_schedules:
        return []
    lines = ["## k=auto against the best constant k", "", _SECTION_INTRO, ""]
    dtypes = len({a.dtype for a in answer.prompts}) > 1  # then each answer is one dtype's
    for pair in dict.fromkeys(a.pair for a in with_schedules):
        answers = sorted((a for a in with_schedules if a.pair == pair), key=lambda a: (a.prompt, a.engine))
        lines += [f"### Pair `{pair}`", "", _prompts_table(answers, dtypes), ""]
        summary = _over_prompts_cells(answer.pairs, pair, dtypes)
        if summary:
            lines += ["Over prompts:", "", _github_table(summary, ["engine", "schedule", "prompts", _MEAN]), ""]
        if figures and pair in figures:
            lines += [f"![schedules against the best constant k for {pair}]({figures[pair]})", ""]
    return lines


_MEAN = "geometric mean [95% CI]"


def _github_table(cells: list[list[Any]], headers: list[str]) -> str:
    from tabulate import tabulate

    return tabulate(cells, headers=headers, tablefmt="github", disable_numparse=True)


def _engine_text(answer: PromptAnswer | PairAnswer, dtypes: bool) -> str:
    """The engine of an answer, and its dtype when several ran."""
    return f"{answer.engine}, {answer.dtype}" if dtypes else answer.engine


def _prompts_table(answers: Sequence[PromptAnswer], dtypes: bool = False) -> str:
    """One pair's prompts: each schedule against the best constant k, and native auto against hf auto where both
    engines ran it; the engine's dtype beside it when several ran."""
    hf = any(a.against_hf for a in answers)
    cells = [
        [
            a.prompt,
            _engine_text(a, dtypes),
            s.k,
            interval_text(s.ratio_to_best, s.ratio_to_best_ci_low, s.ratio_to_best_ci_high),
            s.ratio_to_best_rounds or "unpaired",
            a.best_k,
            *([_hf_text(a.against_hf) if s.k == "auto" else "-"] if hf else []),
        ]
        for a in answers
        for s in a.schedules
    ]
    headers = ["prompt", "engine", "schedule", "/ best constant k [95% CI]", "rounds paired", "best k"]
    return _github_table(cells, headers + (["native auto / hf auto"] if hf else []))


def _over_prompts_cells(pairs: Sequence[PairAnswer], pair: str, dtypes: bool = False) -> list[list[Any]]:
    """One pair's schedules over its prompts, then native auto over hf auto, per engine (and dtype)."""
    ours = [p for p in pairs if p.pair == pair]
    cells = [
        [_engine_text(p, dtypes), s.k, s.prompts, interval_text(s.ratio, s.ci_low, s.ci_high)]
        for p in ours
        for s in p.schedules
    ]
    return cells + [
        [
            _engine_text(p, dtypes),
            f"{hf.k} / hf {hf.k} (end to end)",
            hf.prompts,
            interval_text(hf.ratio, hf.ci_low, hf.ci_high),
        ]
        for p in ours
        if (hf := p.against_hf)
    ]


def _hf_text(against: AgainstHf | None) -> str:
    if against is None:
        return "-"
    return interval_text(against.ratio, against.ci_low, against.ci_high) + (
        "" if against.paired else " (unpaired: no per-round wall times)"
    )


def regret_pairs(answers: Sequence[PromptAnswer]) -> list[str]:
    """The pairs whose answers hold a schedule beside constant k: those with a regret figure."""
    return list(dict.fromkeys(a.pair for a in answers if a.schedules))
