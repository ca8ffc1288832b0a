"""The typed answers of a run, one per (pair, engine, prompt, dtype) and one per (pair, engine, dtype): what
:mod:`.answer` builds and the tables, sentences, figures and dtype view read by attribute (:class:`.records.JsonRecord`
for the JSON document). Apart from :mod:`.answer` so that the modules reading answers need not import what builds
them."""

from __future__ import annotations

from dataclasses import dataclass

from .records import JsonRecord
from .regret import AgainstHf, HfSummary, PairedRatio, ScheduleSummary

K = int | str


@dataclass(frozen=True)
class SlowerK(JsonRecord):
    """A k slower than the best: by the race (``eliminated_by``, the k that beat it) or by the final test (None)."""

    k: K
    eliminated_by: K | None


@dataclass(frozen=True)
class SuspectK(JsonRecord):
    """A k not ranked because its decode speedup is suspect, with the row's cause."""

    k: K
    cause: str | None


@dataclass(frozen=True)
class ScheduleAnswer(JsonRecord):
    """A schedule (k=auto, k=heuristic) beside the best constant k: its decode speedup, whether that is suspect,
    and its share of the best's paired over the rounds both ran (:func:`.regret.ratio_to_best`)."""

    k: K
    decode_speedup: float
    suspect: bool
    ratio_to_best: float
    ratio_to_best_ci_low: float | None
    ratio_to_best_ci_high: float | None
    ratio_to_best_rounds: int

    @property
    def to_best(self) -> PairedRatio:
        """The share of the best as a ratio with its interval, as :func:`.regret.over_prompts` reads one."""
        return PairedRatio(
            self.ratio_to_best, self.ratio_to_best_ci_low, self.ratio_to_best_ci_high, self.ratio_to_best_rounds
        )


@dataclass(frozen=True)
class PromptAnswer(JsonRecord):
    """The answer for one (pair, engine, prompt, dtype); see the module docstring. ``best_k`` None (and its speedup
    with it) where every k is suspect; ``ranking`` "tested" when every k was ranked over rounds shared with the
    best, "tested unpaired" over rounds of their own (each k in its own block: a served engine), else "unknown",
    with the reason in ``not_ranked_reason``; ``regret``: the recommended k's measured speedup over the best's
    (None: not run)."""

    pair: str
    engine: str
    prompt: str
    dtype: str
    best_k: K | None
    decode_speedup: float | None
    decode_speedup_ci_low: float | None
    decode_speedup_ci_high: float | None
    tied: tuple[K, ...]
    slower: tuple[SlowerK, ...]
    unknown: tuple[K, ...]
    ranking: str
    not_ranked_reason: str | None  # why the k in ``unknown`` were not ranked; None when every k was
    suspect: tuple[SuspectK, ...]  # the k not ranked because their speedup is suspect
    recommended_k: int | None
    recommended_decode_speedup: float | None
    regret: float | None
    schedules: tuple[ScheduleAnswer, ...]
    # native k=auto against hf k=auto, end to end: set by :func:`prompt_answers`, which sees both engines
    against_hf: AgainstHf | None = None
    # False where the k were tested unpaired (each in a block of its own), whether or not some k stayed unknown
    paired: bool = True
    # (axis, value) of each axis the report groups by beyond these four and the batch size (settings/axes.py
    # ``report_groups``): each of its values has an answer of its own
    further: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class KCount(JsonRecord):
    """On how many prompts a k was best or tied with the best, and best."""

    k: K
    best_or_tied: int
    best: int


@dataclass(frozen=True)
class SuspectCount(JsonRecord):
    """On how many prompts a k was suspect (not ranked)."""

    k: K
    prompts: int


@dataclass(frozen=True)
class PairAnswer(JsonRecord):
    """Per (pair, engine, dtype), over its prompts: the k best or tied-best on most (None: every k of every prompt
    suspect), with every k's counts, the suspect k, the prompts left unanswered or undecided and why, and the
    schedules over the prompts."""

    pair: str
    engine: str
    dtype: str
    k: K | None
    best_or_tied: int
    best: int
    prompts: int
    suspect: tuple[SuspectCount, ...]
    unanswered_prompts: int  # prompts whose every k is suspect: no best k
    undecided_prompts: int
    undecided_reasons: tuple[str, ...]
    counts: tuple[KCount, ...]
    schedules: tuple[ScheduleSummary, ...]  # each schedule's ratio to the best constant k, over prompts
    against_hf: HfSummary | None  # native k=auto over hf k=auto, over prompts
