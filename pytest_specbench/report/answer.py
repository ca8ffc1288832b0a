"""The answer of a run: per (pair, engine, prompt) the best constant k, the k tied with it, the k slower than it,
and what the cost model's recommended k (the best predicted among the k run) gives up; then, per pair, the k
best or tied-best on most prompts.

Rows are the schema's typed results; what comes back are typed answers (:class:`RunAnswer`, :class:`PromptAnswer`,
:class:`PairAnswer`: frozen dataclasses, read by attribute), which :meth:`.records.JsonRecord.to_json` writes into
the JSON document. Which rows an answer reads is :func:`.analysis.speedup_left_out`'s to say: a case that diverged
from the target's output is in no answer, neither ranked nor recommended.
"Slower" is decided by test, never by intervals that fail to overlap: a k the race eliminated is slower (its row
says which k beat it), any other is tested against the best with :func:`..results.racing.rank_against_best`
on the rounds both ran in their block (family-wise 5% per (pair, engine, prompt), the best being picked from the
same data; see racing's docstring). A row without round data (a file written before rounds were kept) is
"unknown": the test cannot be run, and "tied" would claim what nobody measured. So is every k of a
(pair, engine, prompt) whose rows come from more than one run (``run_id``: some replayed from a results log
by ``--specbench-resume``, some measured now): round i of one run is not round i of another, so nothing pairs
them; the answer says so (``not_ranked_reason``) rather than rank minutes-apart data. A *suspect* k (its decode
speedup above tau: results/invariants.py) is not ranked either: its speedup credits speculation with a kernel's
gain, so it is neither the best, nor tied, nor slower, nor recommended; the answer lists it under ``suspect`` with
:data:`SUSPECT_SPEEDUP`. Where every k of a prompt is suspect, the answer has no best k (``best_k`` None).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..results.racing import SLOWER, TIED, UNKNOWN, rank_against_best
from ..results.schema import CaseResult
from ..settings.engines import LIBRARY_SCHEDULE_ENGINE, runs_own_loop
from .analysis import (
    SUSPECT,
    further_cells,
    further_columns,
    further_values,
    k_order,
    predicted_curve,
    recommended_among,
    speedup_left_out,
)
from .answer_types import (
    K,
    KCount,
    PairAnswer,
    PromptAnswer,
    ScheduleAnswer,
    SlowerK,
    SuspectCount,
    SuspectK,
)
from .dtype_view import DtypeView, dtype_views
from .formatting import SUSPECT_MARK, entry_with_interval
from .records import JsonRecord
from .regret import (
    AgainstHf,
    HfSummary,
    PairedRatio,
    ScheduleSummary,
    interval_text,
    over_prompts,
    ratio_to_best,
    ratio_to_hf,
    round_times,
)

#: the schedule compared across engines: transformers' own default against this package's cost model
AUTO = "auto"

#: family-wise level of the final ranking of one (pair, engine, prompt)
ALPHA = 0.05

#: a PromptAnswer's ``ranking``: every k tested against the best over shared rounds, or over rounds of their own
#: (each k in its own block, as a served engine's servers run them), unpaired
TESTED, UNPAIRED = "tested", "tested unpaired"
#: why a (pair, engine, prompt)'s k were not ranked: rows of several runs, or rows without round data
SPLIT_ACROSS_RUNS = "its cases were measured in different runs"
NO_ROUND_DATA = "no round data"
TOO_FEW_ROUNDS = "too few rounds in common: a tie needs 2 or more (--specbench-min-rounds)"
OWN_BLOCKS = "timed in blocks of their own, while other k shared the best's: rerun them in one block"
#: why a k was not ranked although it ran: its decode speedup broke the bound speedup <= tau
SUSPECT_SPEEDUP = "suspect: a decode speedup above tau, which equal kernels on a steady machine forbid"


@dataclass(frozen=True)
class RunAnswer(JsonRecord):
    """The answer of a run, as the JSON document keeps it under "answer"."""

    prompts: tuple[PromptAnswer, ...]
    pairs: tuple[PairAnswer, ...]
    dtypes: tuple[DtypeView, ...]


def schedule_summaries(answers: Sequence[PromptAnswer]) -> tuple[ScheduleSummary, ...]:
    """Per schedule in the answers of one (pair, engine): :func:`over_prompts` of its ratio to the best, over the
    prompts where its speedup is not suspect (results/invariants.py: above tau, not a measured gain)."""
    by_k: dict[int | str, list[PairedRatio]] = {}
    for answer in answers:
        for schedule in answer.schedules:
            if not schedule.suspect:
                by_k.setdefault(schedule.k, []).append(schedule.to_best)
    summaries = []
    for k, items in by_k.items():
        summary = over_prompts(items)
        if summary is not None:
            summaries.append(ScheduleSummary(k, summary.prompts, summary.ratio, summary.ci_low, summary.ci_high))
    return tuple(summaries)


def hf_summary(answers: Sequence[PromptAnswer]) -> HfSummary | None:
    """:func:`over_prompts` of native k=auto over hf k=auto, over the answers that hold the comparison; with
    how many of them were paired over rounds."""
    items = [answer.against_hf for answer in answers if answer.against_hf]
    summary = over_prompts(items)
    if summary is None:
        return None
    paired = sum(item.paired for item in items)
    return HfSummary(items[0].k, summary.prompts, summary.ratio, summary.ci_low, summary.ci_high, paired)


def _constant_k(row: CaseResult) -> bool:
    return isinstance(row.k, int) and not isinstance(row.k, bool)


def _listed(row: CaseResult) -> bool:
    """A row the answer shows: its speedup measured (:func:`.analysis.speedup_left_out`), or suspect, then listed
    apart and never ranked; a diverged row, or one without a speedup, is in no answer."""
    return speedup_left_out(row) in (None, SUSPECT)


def _schedule(row: CaseResult, best: CaseResult) -> ScheduleAnswer:
    ratio = ratio_to_best(row, best)
    return ScheduleAnswer(
        row.k, row.decode_speedup, row.suspect, ratio.ratio, ratio.ci_low, ratio.ci_high, ratio.rounds
    )


def prompt_answer(rows: Sequence[CaseResult]) -> PromptAnswer | None:
    """The answer for the rows of one (pair, engine, prompt); None when no constant k ran (or none that the
    answer shows: see :func:`_listed`).

    The best is the constant k with the highest decode speedup among those the race did not eliminate (all of
    them, if it eliminated every one), suspect k left out; schedules (k=auto, k=heuristic) are not raced, only set
    beside it.
    """
    rows = [row for row in rows if _listed(row)]
    listed = {row.k: row for row in rows if _constant_k(row)}
    if not listed:
        return None
    suspect = tuple(SuspectK(k, row.suspect_cause) for k, row in sorted(listed.items()) if row.suspect)
    constant = {k: row for k, row in listed.items() if speedup_left_out(row) is None}
    if not constant:
        return _no_best(next(iter(listed.values())), suspect)
    standing = [row for row in constant.values() if row.eliminated_by is None] or list(constant.values())
    best = max(standing, key=lambda row: row.decode_speedup)
    status: dict[K, str] = {}
    eliminated = {k: row.eliminated_by for k, row in constant.items() if k != best.k and row.eliminated_by is not None}
    status.update(dict.fromkeys(eliminated, SLOWER))
    timed = {k: round_times(row) for k, row in constant.items() if k not in eliminated}
    # Rows of different runs (some replayed by --specbench-resume) were never timed in shared rounds.
    split = len({row.run_id for k, row in constant.items() if k not in eliminated}) > 1
    paired, apart = True, False
    if split or timed[best.k] is None:
        status.update({k: UNKNOWN for k in timed if k != best.k})
    else:
        with_data = {k: rounds for k, rounds in timed.items() if rounds is not None}
        # k timed in blocks of their own (a served engine: one server per k) share no round with the best.
        sharing = {k: bool(set(rounds) & set(with_data[best.k])) for k, rounds in with_data.items() if k != best.k}
        paired = not sharing or any(sharing.values())
        apart = paired and not all(sharing.values())  # some k share the best's rounds, others none: not compared
        status.update(rank_against_best(with_data, best.k, alpha=ALPHA, paired=paired))
        status.update({k: UNKNOWN for k, rounds in timed.items() if rounds is None})
    ordered = sorted(status, key=k_order)
    # Among the k this run measured and trusts, so that its regret is a measured figure.
    recommended = recommended_among(predicted_curve(list(listed.values())), list(constant))
    at_recommended = constant.get(recommended)
    unknown = tuple(k for k in ordered if status[k] == UNKNOWN)
    return PromptAnswer(
        pair=best.pair,
        engine=best.engine,
        prompt=best.prompt,
        dtype=best.dtype,
        best_k=best.k,
        decode_speedup=best.decode_speedup,
        decode_speedup_ci_low=best.decode_speedup_ci_low,
        decode_speedup_ci_high=best.decode_speedup_ci_high,
        tied=tuple(k for k in ordered if status[k] == TIED),
        slower=tuple(SlowerK(k, eliminated.get(k)) for k in ordered if status[k] == SLOWER),
        unknown=unknown,
        ranking=UNKNOWN if unknown else TESTED if paired else UNPAIRED,
        not_ranked_reason=_not_ranked_reason(split, timed, apart) if unknown else None,
        suspect=suspect,
        recommended_k=recommended,
        recommended_decode_speedup=at_recommended.decode_speedup if at_recommended else None,
        # measured speedup at the recommended k / the best's: 1 when the model picks the best, None when not run
        regret=at_recommended.decode_speedup / best.decode_speedup if at_recommended else None,
        # each schedule's decode speedup / the best's, paired over the rounds both ran (see regret.py: the best
        # is picked after the fact from the same data, so the ratio is a conservative figure)
        schedules=tuple(
            _schedule(row, best) for row in sorted(rows, key=lambda row: k_order(row.k)) if not _constant_k(row)
        ),
        paired=paired,
        further=further_values(best),
    )


def _not_ranked_reason(split: bool, timed: dict[K, dict | None], apart: bool) -> str:
    """Why some k were not ranked: rows of several runs, a row without round data, k in blocks of their own beside
    k in the best's, or too few rounds."""
    if split:
        return SPLIT_ACROSS_RUNS
    if any(rounds is None for rounds in timed.values()):
        return NO_ROUND_DATA
    return OWN_BLOCKS if apart else TOO_FEW_ROUNDS


def _no_best(row: CaseResult, suspect: tuple[SuspectK, ...]) -> PromptAnswer:
    """The answer where every constant k is suspect: no best, nothing ranked or recommended, and why."""
    return PromptAnswer(
        pair=row.pair,
        engine=row.engine,
        prompt=row.prompt,
        dtype=row.dtype,
        best_k=None,
        decode_speedup=None,
        decode_speedup_ci_low=None,
        decode_speedup_ci_high=None,
        tied=(),
        slower=(),
        unknown=(),
        ranking=UNKNOWN,
        not_ranked_reason=SUSPECT_SPEEDUP,
        suspect=suspect,
        recommended_k=None,
        recommended_decode_speedup=None,
        regret=None,
        schedules=(),
        further=further_values(row),
    )


def prompt_answers(results: Sequence[CaseResult]) -> list[PromptAnswer]:
    """:func:`prompt_answer` for every (pair, engine, prompt, dtype), in order of first appearance: each dtype
    is timed in its own block against its own greedy baseline, so its k are ranked apart."""
    groups: dict[tuple, list[CaseResult]] = {}
    for row in results:
        groups.setdefault((row.pair, row.engine, row.prompt, row.dtype, further_values(row)), []).append(row)
    answers = [answer for answer in map(prompt_answer, groups.values()) if answer is not None]
    return [replace(answer, against_hf=_against_hf(answer, groups)) for answer in answers]


def _against_hf(answer: PromptAnswer, groups: dict[tuple, list[CaseResult]]) -> AgainstHf | None:
    """For the native engine's answer: its k=auto against the hf engine's k=auto (transformers' default schedule)
    on the same prompt and dtype, end to end (:func:`.regret.ratio_to_hf`); None where either did not run."""
    if not runs_own_loop(answer.engine):
        return None
    pair, prompt, dtype, further = answer.pair, answer.prompt, answer.dtype, answer.further
    native = [row for row in groups[pair, answer.engine, prompt, dtype, further] if row.k == AUTO and _listed(row)]
    library = groups.get((pair, LIBRARY_SCHEDULE_ENGINE, prompt, dtype, further), [])
    hf = [row for row in library if row.k == AUTO and _listed(row)]
    return ratio_to_hf(native[0], hf[0]) if native and hf else None


def pair_answers(prompts: Sequence[PromptAnswer]) -> list[PairAnswer]:
    """Per (pair, engine, dtype), over its prompts: the k best or tied-best on most of them (then best on most,
    then the smaller), with every k's counts."""
    groups: dict[tuple[str, str, str], list[PromptAnswer]] = {}
    for answer in prompts:
        groups.setdefault((answer.pair, answer.engine, answer.dtype), []).append(answer)
    lines = []
    for (pair, engine, dtype), answers in groups.items():
        ranked = [answer for answer in answers if answer.best_k is not None]  # not every k suspect
        best = Counter(answer.best_k for answer in ranked)
        top = Counter(k for answer in ranked for k in (answer.best_k, *answer.tied))
        ks = sorted(top, key=lambda k: (-top[k], -best[k], k_order(k)))
        undecided = [answer for answer in ranked if answer.ranking == UNKNOWN]
        lines.append(
            PairAnswer(
                pair=pair,
                engine=engine,
                dtype=dtype,
                k=ks[0] if ks else None,  # None: every k of every prompt suspect
                best_or_tied=top[ks[0]] if ks else 0,
                best=best[ks[0]] if ks else 0,
                prompts=len(answers),
                suspect=_suspect_counts(answers),
                unanswered_prompts=len(answers) - len(ranked),
                undecided_prompts=len(undecided),
                undecided_reasons=tuple(sorted({a.not_ranked_reason or NO_ROUND_DATA for a in undecided})),
                counts=tuple(KCount(k, top[k], best[k]) for k in ks),
                schedules=schedule_summaries(answers),
                against_hf=hf_summary(answers),
            )
        )
    return lines


def _suspect_counts(answers: Sequence[PromptAnswer]) -> tuple[SuspectCount, ...]:
    counts = Counter(item.k for answer in answers for item in answer.suspect)
    return tuple(SuspectCount(k, counts[k]) for k in sorted(counts, key=k_order))


def run_answer(results: Sequence[CaseResult]) -> RunAnswer:
    """The answer of a run, as the JSON document keeps it under "answer" (:meth:`RunAnswer.to_json`): per dtype the
    best k; when several dtypes ran, under "dtypes" the fastest (dtype, k) against float32 greedy
    (:func:`.dtype_view.dtype_views`)."""
    prompts = prompt_answers(results)
    return RunAnswer(tuple(prompts), tuple(pair_answers(prompts)), tuple(dtype_views(results, prompts)))


# --- tables: cells as text, for tabulate (terminal) and Markdown alike ----------------------------


def _ks(values: Sequence[K]) -> str:
    return ", ".join(str(k) for k in values) or "-"


def _slower(answer: PromptAnswer) -> str:
    return (
        ", ".join(
            f"{s.k} (eliminated by {s.eliminated_by})" if s.eliminated_by is not None else str(s.k)
            for s in answer.slower
        )
        or "-"
    )


def prompt_table(
    answers: Sequence[PromptAnswer], engines: bool, dtypes: bool = False
) -> tuple[list[list[str]], list[str]]:
    """(cells, headers) of the per-prompt answer; an engine column only when several engines ran, a dtype column
    only when several dtypes did."""
    cells = []
    hf = any(a.against_hf for a in answers)  # a column only when both engines ran k=auto
    further = further_columns(answers)
    for a in answers:
        recommended = "" if a.recommended_k is None else str(a.recommended_k)
        regret = ("not run" if a.regret is None else f"{a.regret:.2f}") if recommended else ""
        best = a.best_k is not None
        cells.append(
            [
                a.prompt,
                *further_cells(a, further),
                *([a.engine] if engines else []),
                *([a.dtype] if dtypes else []),
                str(a.best_k) if best else "-",
                entry_with_interval(a) if best else "-",
                _unpaired(a, _ks(a.tied)),
                _unpaired(a, _slower(a)),
                _not_ranked(a),
                recommended,
                regret,
                ", ".join(f"{s.k} {_schedule_ratio(s)}" for s in a.schedules) or "-",
                *([_hf_cell(a.against_hf)] if hf else []),
            ]
        )
    headers = [
        "prompt",
        *further,
        *(["engine"] if engines else []),
        *(["dtype"] if dtypes else []),
        "best k",
        "decode speedup",
        "tied",
        "slower",
        "not ranked",
        "recommended k",
        "its speedup / best",
        "schedules / best [95% CI]",
        *(["auto / hf auto (end to end)"] if hf else []),
    ]
    return cells, headers


def _unpaired(answer: PromptAnswer, cell: str) -> str:
    return f"{cell} (unpaired)" if not answer.paired and cell != "-" else cell


def _not_ranked(answer: PromptAnswer) -> str:
    parts = []
    if answer.unknown:
        parts.append(f"{_ks(answer.unknown)} ({answer.not_ranked_reason or NO_ROUND_DATA})")
    suspect = [item.k for item in answer.suspect]
    if suspect:
        parts.append(f"{_ks(suspect)} ({SUSPECT_SPEEDUP})")
    return "; ".join(parts) or "-"


def _schedule_ratio(schedule: ScheduleAnswer) -> str:
    ratio = interval_text(schedule.ratio_to_best, schedule.ratio_to_best_ci_low, schedule.ratio_to_best_ci_high)
    return f"{ratio} {SUSPECT_MARK}" if schedule.suspect else ratio


def _hf_cell(against: AgainstHf | None) -> str:
    if against is None:
        return "-"
    return interval_text(against.ratio, against.ci_low, against.ci_high) + ("" if against.paired else " (unpaired)")


def pair_sentence(pair: PairAnswer, engines: bool, dtypes: bool = False) -> str:
    """The across-prompts answer of one pair (and engine, and dtype when several ran), in words."""
    where = ([f"{pair.engine} engine"] if engines else []) + ([pair.dtype] if dtypes else [])
    engine = f" ({', '.join(where)})" if where else ""
    reasons = "; ".join(pair.undecided_reasons or [NO_ROUND_DATA])
    undecided = (
        f"; on {pair.undecided_prompts} prompt(s) the ties are unknown ({reasons})" if pair.undecided_prompts else ""
    )
    suspect = _suspect_clause(pair.suspect)
    if pair.k is None:
        return f"Across {pair.prompts} prompt(s){engine}: no k is best{suspect}."
    unanswered = pair.unanswered_prompts
    suspect = (f"; on {unanswered} prompt(s) no k is best" if unanswered else "") + suspect
    return (
        f"Across {pair.prompts} prompt(s){engine}: k={pair.k} is best or tied with the best on "
        f"{pair.best_or_tied} (best on {pair.best}); per k, best or tied: "
        + ", ".join(f"{c.k}: {c.best_or_tied}" for c in pair.counts)
        + f"{undecided}{suspect}."
        + "".join(f" {line}" for line in regret_sentences(pair))
    )


def _suspect_clause(suspect: Sequence[SuspectCount]) -> str:
    """The pair's suspect k, each with on how many prompts, as a clause of its sentence; empty without any."""
    if not suspect:
        return ""
    named = ", ".join(f"k={item.k} on {item.prompts} prompt(s)" for item in suspect)
    return f"; not ranked ({SUSPECT_SPEEDUP}): {named}"


def regret_sentences(pair: PairAnswer) -> list[str]:
    """The pair's schedules over its prompts, in words: each one's share of the best constant k, and native k=auto
    over transformers' default schedule."""
    sentences = [
        f"k={s.k} reaches {interval_text(s.ratio, s.ci_low, s.ci_high)} of the best constant "
        f"k's decode speedup (geometric mean over {s.prompts} prompt(s), 95% CI; the best is chosen "
        "after the fact, so this is conservative)."
        for s in pair.schedules
    ]
    hf = pair.against_hf
    if hf:
        unpaired = hf.prompts - hf.paired_prompts
        sentences.append(
            f"Native k={hf.k} against transformers' default schedule (hf k={hf.k}), end to end: "
            f"{interval_text(hf.ratio, hf.ci_low, hf.ci_high)} over {hf.prompts} prompt(s)"
            + (f" ({unpaired} without per-round wall times: unpaired, no interval of their own)" if unpaired else "")
            + "."
        )
    return sentences
