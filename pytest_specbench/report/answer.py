"""The answer of a run: per (pair, engine, prompt) the best constant k, the k tied with it, the k slower than it,
and what the cost model's recommended k (the best predicted among the k run) gives up; then, per pair, the k
best or tied-best on most prompts.

Rows are the schema's typed results; what comes back is plain built-in types (the JSON takes it as it is).
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
from typing import Any

from ..results.racing import SLOWER, TIED, UNKNOWN, rank_against_best
from ..results.schema import CaseResult
from .analysis import k_order, predicted_curve, recommended_among
from .dtype_view import dtype_views
from .formatting import SUSPECT_MARK, entry_with_interval
from .regret import hf_summary, interval_text, ratio_to_best, ratio_to_hf, round_times, schedule_summaries

#: the schedule compared across engines: transformers' own default against this package's cost model
AUTO = "auto"

#: family-wise level of the final ranking of one (pair, engine, prompt)
ALPHA = 0.05

#: why a (pair, engine, prompt)'s k were not ranked: rows of several runs, or rows without round data
SPLIT_ACROSS_RUNS = "its cases were measured in different runs"
NO_ROUND_DATA = "no round data"
#: why a k was not ranked although it ran: its decode speedup broke the bound speedup <= tau
SUSPECT_SPEEDUP = "suspect: a decode speedup above tau, the two runs' kernels differed"


def _measured(row: CaseResult) -> bool:
    speedup = row.decode_speedup
    return isinstance(speedup, (int, float)) and speedup > 0  # NaN and None are not


def _constant_k(row: CaseResult) -> bool:
    return isinstance(row.k, int) and not isinstance(row.k, bool)


def _interval(row: CaseResult) -> dict[str, Any]:
    return {
        "decode_speedup": row.decode_speedup,
        "decode_speedup_ci_low": row.decode_speedup_ci_low,
        "decode_speedup_ci_high": row.decode_speedup_ci_high,
    }


def prompt_answer(rows: Sequence[CaseResult]) -> dict[str, Any] | None:
    """The answer for the rows of one (pair, engine, prompt); None when no constant k ran.

    The best is the constant k with the highest decode speedup among those the race did not eliminate (all of
    them, if it eliminated every one), suspect k left out; schedules (k=auto, k=heuristic) are not raced, only set
    beside it.
    """
    rows = [row for row in rows if _measured(row)]
    measured = {row.k: row for row in rows if _constant_k(row)}
    if not measured:
        return None
    suspect = [{"k": k, "cause": row.suspect_cause} for k, row in sorted(measured.items()) if row.suspect]
    constant = {k: row for k, row in measured.items() if not row.suspect}
    if not constant:
        return _no_best(next(iter(measured.values())), suspect)
    standing = [row for row in constant.values() if row.eliminated_by is None] or list(constant.values())
    best = max(standing, key=lambda row: row.decode_speedup)
    status: dict[int, str] = {}
    eliminated = {k: row.eliminated_by for k, row in constant.items() if k != best.k and row.eliminated_by is not None}
    status.update(dict.fromkeys(eliminated, SLOWER))
    timed = {k: round_times(row) for k, row in constant.items() if k not in eliminated}
    # Rows of different runs (some replayed by --specbench-resume) were never timed in shared rounds.
    split = len({row.run_id for k, row in constant.items() if k not in eliminated}) > 1
    if split or timed[best.k] is None:
        status.update({k: UNKNOWN for k in timed if k != best.k})
    else:
        with_data = {k: rounds for k, rounds in timed.items() if rounds is not None}
        status.update(rank_against_best(with_data, best.k, alpha=ALPHA))
        status.update({k: UNKNOWN for k, rounds in timed.items() if rounds is None})
    ordered = sorted(status, key=k_order)
    # Among the k this run measured and trusts, so that its regret is a measured figure.
    recommended = recommended_among(predicted_curve(list(measured.values())), list(constant))
    at_recommended = constant.get(recommended)
    return {
        **_identity(best),
        "best_k": best.k,
        **_interval(best),
        "tied": [k for k in ordered if status[k] == TIED],
        "slower": [{"k": k, "eliminated_by": eliminated.get(k)} for k in ordered if status[k] == SLOWER],
        "unknown": [k for k in ordered if status[k] == UNKNOWN],
        "ranking": UNKNOWN if any(status[k] == UNKNOWN for k in ordered) else "tested",
        # why the k in "unknown" were not ranked; None when every k was
        "not_ranked_reason": (SPLIT_ACROSS_RUNS if split else NO_ROUND_DATA)
        if any(status[k] == UNKNOWN for k in ordered)
        else None,
        # the k not ranked because their speedup is suspect, each with its cause
        "suspect": suspect,
        "recommended_k": recommended,
        "recommended_decode_speedup": at_recommended.decode_speedup if at_recommended else None,
        # measured speedup at the recommended k / the best's: 1 when the model picks the best, None when not run
        "regret": at_recommended.decode_speedup / best.decode_speedup if at_recommended else None,
        # each schedule's decode speedup / the best's, paired over the rounds both ran (see regret.py: the best
        # is picked after the fact from the same data, so the ratio is a conservative figure)
        "schedules": [
            {"k": row.k, "decode_speedup": row.decode_speedup, "suspect": row.suspect, **ratio_to_best(row, best)}
            for row in sorted(rows, key=lambda row: k_order(row.k))
            if not _constant_k(row)
        ],
    }


def _identity(row: CaseResult) -> dict[str, Any]:
    return {"pair": row.pair, "engine": row.engine, "prompt": row.prompt, "dtype": row.dtype}


def _no_best(row: CaseResult, suspect: list[dict[str, Any]]) -> dict[str, Any]:
    """The answer where every constant k is suspect: no best, nothing ranked or recommended, and why."""
    return {
        **_identity(row),
        "best_k": None,
        **dict.fromkeys(("decode_speedup", "decode_speedup_ci_low", "decode_speedup_ci_high")),
        **{"tied": [], "slower": [], "unknown": [], "ranking": UNKNOWN, "not_ranked_reason": SUSPECT_SPEEDUP},
        **{"suspect": suspect, "recommended_k": None, "recommended_decode_speedup": None, "regret": None},
        "schedules": [],
    }


def prompt_answers(results: Sequence[CaseResult]) -> list[dict[str, Any]]:
    """:func:`prompt_answer` for every (pair, engine, prompt, dtype), in order of first appearance: each dtype
    is timed in its own block against its own greedy baseline, so its k are ranked apart."""
    groups: dict[tuple[str, str, str, str], list[CaseResult]] = {}
    for row in results:
        groups.setdefault((row.pair, row.engine, row.prompt, row.dtype), []).append(row)
    answers = [answer for answer in map(prompt_answer, groups.values()) if answer is not None]
    for answer in answers:
        answer["against_hf"] = _against_hf(answer, groups)
    return answers


def _against_hf(
    answer: dict[str, Any], groups: dict[tuple[str, str, str, str], list[CaseResult]]
) -> dict[str, Any] | None:
    """For the native engine's answer: its k=auto against the hf engine's k=auto (transformers' default schedule)
    on the same prompt and dtype, end to end (:func:`.regret.ratio_to_hf`); None where either did not run."""
    if answer["engine"] != "native":
        return None
    pair, prompt, dtype = answer["pair"], answer["prompt"], answer["dtype"]
    native = [row for row in groups[pair, "native", prompt, dtype] if row.k == AUTO and _measured(row)]
    hf = [row for row in groups.get((pair, "hf", prompt, dtype), []) if row.k == AUTO and _measured(row)]
    return ratio_to_hf(native[0], hf[0]) if native and hf else None


def pair_answers(prompts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (pair, engine, dtype), over its prompts: the k best or tied-best on most of them (then best on most,
    then the smaller), with every k's counts."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for answer in prompts:
        groups.setdefault((answer["pair"], answer["engine"], answer.get("dtype", "")), []).append(answer)
    lines = []
    for (pair, engine, dtype), answers in groups.items():
        ranked = [answer for answer in answers if answer["best_k"] is not None]  # not every k suspect
        best = Counter(answer["best_k"] for answer in ranked)
        top = Counter(k for answer in ranked for k in (answer["best_k"], *answer["tied"]))
        ks = sorted(top, key=lambda k: (-top[k], -best[k], k_order(k)))
        lines.append(
            {
                "pair": pair,
                "engine": engine,
                "dtype": dtype,
                "k": ks[0] if ks else None,  # None: every k of every prompt suspect
                "best_or_tied": top[ks[0]] if ks else 0,
                "best": best[ks[0]] if ks else 0,
                "prompts": len(answers),
                # the suspect k of each prompt (not ranked), by k: on how many prompts
                "suspect": _suspect_counts(answers),
                # prompts whose every k is suspect: no best k
                "unanswered_prompts": len(answers) - len(ranked),
                "undecided_prompts": sum(a["ranking"] == UNKNOWN for a in ranked),
                "undecided_reasons": sorted(
                    {a.get("not_ranked_reason") or NO_ROUND_DATA for a in ranked if a["ranking"] == UNKNOWN}
                ),
                "counts": [{"k": k, "best_or_tied": top[k], "best": best[k]} for k in ks],
                # over prompts: each schedule's ratio to the best constant k, native k=auto over hf k=auto
                "schedules": schedule_summaries(answers),
                "against_hf": hf_summary(answers),
            }
        )
    return lines


def _suspect_counts(answers: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    counts = Counter(item["k"] for answer in answers for item in answer.get("suspect", []))
    return [{"k": k, "prompts": counts[k]} for k in sorted(counts, key=k_order)]


def run_answer(results: Sequence[CaseResult]) -> dict[str, list[dict[str, Any]]]:
    """The answer of a run, as the JSON document keeps it under "answer": per dtype the best k; when several
    dtypes ran, under "dtypes" the fastest (dtype, k) against float32 greedy (:func:`.dtype_view.dtype_views`)."""
    prompts = prompt_answers(results)
    return {"prompts": prompts, "pairs": pair_answers(prompts), "dtypes": dtype_views(results, prompts)}


# --- tables: cells as text, for tabulate (terminal) and Markdown alike ----------------------------


def _ks(values: Sequence[Any]) -> str:
    return ", ".join(str(k) for k in values) or "-"


def _slower(answer: dict[str, Any]) -> str:
    return (
        ", ".join(
            f"{s['k']} (eliminated by {s['eliminated_by']})" if s["eliminated_by"] is not None else str(s["k"])
            for s in answer["slower"]
        )
        or "-"
    )


def prompt_table(
    answers: Sequence[dict[str, Any]], engines: bool, dtypes: bool = False
) -> tuple[list[list[str]], list[str]]:
    """(cells, headers) of the per-prompt answer; an engine column only when several engines ran, a dtype column
    only when several dtypes did."""
    cells = []
    hf = any(a.get("against_hf") for a in answers)  # a column only when both engines ran k=auto
    for a in answers:
        recommended = "" if a["recommended_k"] is None else str(a["recommended_k"])
        regret = ("not run" if a["regret"] is None else f"{a['regret']:.2f}") if recommended else ""
        best = a["best_k"] is not None
        cells.append(
            [
                a["prompt"],
                *([a["engine"]] if engines else []),
                *([a.get("dtype", "")] if dtypes else []),
                str(a["best_k"]) if best else "-",
                entry_with_interval(a) if best else "-",
                _ks(a["tied"]),
                _slower(a),
                _not_ranked(a),
                recommended,
                regret,
                ", ".join(f"{s['k']} {_schedule_ratio(s)}" for s in a["schedules"]) or "-",
                *([_hf_cell(a.get("against_hf"))] if hf else []),
            ]
        )
    headers = [
        "prompt",
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


def _not_ranked(answer: dict[str, Any]) -> str:
    parts = []
    if answer["unknown"]:
        parts.append(f"{_ks(answer['unknown'])} ({answer.get('not_ranked_reason') or NO_ROUND_DATA})")
    suspect = [item["k"] for item in answer.get("suspect", [])]
    if suspect:
        parts.append(f"{_ks(suspect)} ({SUSPECT_SPEEDUP})")
    return "; ".join(parts) or "-"


def _schedule_ratio(schedule: dict[str, Any]) -> str:
    ratio = interval_text(
        schedule["ratio_to_best"], schedule.get("ratio_to_best_ci_low"), schedule.get("ratio_to_best_ci_high")
    )
    return f"{ratio} {SUSPECT_MARK}" if schedule.get("suspect") else ratio


def _hf_cell(against: dict[str, Any] | None) -> str:
    if against is None:
        return "-"
    return interval_text(against["ratio"], against["ci_low"], against["ci_high"]) + (
        "" if against["paired"] else " (unpaired)"
    )


def pair_sentence(pair: dict[str, Any], engines: bool, dtypes: bool = False) -> str:
    """The across-prompts answer of one pair (and engine, and dtype when several ran), in words."""
    where = ([f"{pair['engine']} engine"] if engines else []) + ([pair.get("dtype", "")] if dtypes else [])
    engine = f" ({', '.join(where)})" if where else ""
    reasons = "; ".join(pair.get("undecided_reasons") or [NO_ROUND_DATA])
    undecided = (
        f"; on {pair['undecided_prompts']} prompt(s) the ties are unknown ({reasons})"
        if pair["undecided_prompts"]
        else ""
    )
    suspect = _suspect_clause(pair.get("suspect") or [])
    if pair["k"] is None:
        return f"Across {pair['prompts']} prompt(s){engine}: no k is best{suspect}."
    unanswered = pair.get("unanswered_prompts") or 0
    suspect = (f"; on {unanswered} prompt(s) no k is best" if unanswered else "") + suspect
    return (
        f"Across {pair['prompts']} prompt(s){engine}: k={pair['k']} is best or tied with the best on "
        f"{pair['best_or_tied']} (best on {pair['best']}); per k, best or tied: "
        + ", ".join(f"{c['k']}: {c['best_or_tied']}" for c in pair["counts"])
        + f"{undecided}{suspect}."
        + "".join(f" {line}" for line in regret_sentences(pair))
    )


def _suspect_clause(suspect: Sequence[dict[str, Any]]) -> str:
    """The pair's suspect k, each with on how many prompts, as a clause of its sentence; empty without any."""
    if not suspect:
        return ""
    named = ", ".join(f"k={item['k']} on {item['prompts']} prompt(s)" for item in suspect)
    return f"; not ranked ({SUSPECT_SPEEDUP}): {named}"


def regret_sentences(pair: dict[str, Any]) -> list[str]:
    """The pair's schedules over its prompts, in words: each one's share of the best constant k, and native k=auto
    over transformers' default schedule."""
    sentences = [
        f"k={s['k']} reaches {interval_text(s['ratio'], s['ci_low'], s['ci_high'])} of the best constant "
        f"k's decode speedup (geometric mean over {s['prompts']} prompt(s), 95% CI; the best is chosen "
        "after the fact, so this is conservative)."
        for s in pair.get("schedules") or []
    ]
    hf = pair.get("against_hf")
    if hf:
        unpaired = hf["prompts"] - hf["paired_prompts"]
        sentences.append(
            f"Native k={hf['k']} against transformers' default schedule (hf k={hf['k']}), end to end: "
            f"{interval_text(hf['ratio'], hf['ci_low'], hf['ci_high'])} over {hf['prompts']} prompt(s)"
            + (f" ({unpaired} without per-round wall times: unpaired, no interval of their own)" if unpaired else "")
            + "."
        )
    return sentences
