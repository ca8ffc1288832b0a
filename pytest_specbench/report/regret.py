"""What a draft-length schedule gives up, with intervals: k=auto (or k=heuristic) against the best constant k,
and native k=auto against transformers' own default schedule (the hf engine's k=auto).

:func:`ratio_to_best` is the schedule's decode speedup as a share of the best constant k's, paired over the rounds
both ran in their block (keys (run, block, round)): the geometric mean of the per-round ratios, with Student's t
95% interval. Pairing makes it tight, since a round's drift hits both; rows without shared rounds give no interval
rather than a wrong one. :func:`ratio_to_hf` compares end to end (prefill included: transformers' first target pass
also verifies a draft block), paired over ``round_wall_s``. :func:`over_prompts` takes the geometric mean over
prompts, each weighing the same. Why the ratio to the best is conservative: docs/measuring.md, "The answer".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..results.schema import CaseResult
from ..results.statistics import speedup_interval


def round_times(row: CaseResult, field: str = "round_decode_token_s") -> dict[tuple[Any, ...], float] | None:
    """The row's per-round ``field`` keyed by (run, block, round); None without usable round data. Round i of
    one run and round i of another (a row replayed by --specbench-resume beside one measured now) never pair.

    Seconds per decode token are read over the baseline each run was paired with, where the row has one per
    round: the machine's drift between two cases' runs then cancels (rows of one round's single baseline rank
    the same either way, the baseline dividing both)."""
    rounds, block, times = row.block_rounds, row.block, getattr(row, field)
    if not block or not rounds or not times or len(rounds) != len(times):
        return None
    if field == "round_decode_token_s":
        baselines = row.baseline_round_decode_token_s
        if baselines and len(baselines) == len(times) and all(_positive(value) for value in baselines):
            times = [value / base if _positive(value) else value for value, base in zip(times, baselines)]
    if not all(_positive(t) for t in times):
        return None
    return {(row.run_id, block, r): float(t) for r, t in zip(rounds, times)}


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and value > 0


def paired_ratio(
    faster_if_above: dict[tuple[Any, ...], float] | None, reference: dict[tuple[Any, ...], float] | None
) -> dict[str, Any] | None:
    """Reference seconds over ``faster_if_above``'s, paired over the (run, block, round) keys both hold; None
    when they share none (two blocks or two runs never pair). Above 1: the first is faster."""
    if faster_if_above is None or reference is None:
        return None
    common = [key for key in reference if key in faster_if_above]
    if not common:
        return None
    interval = speedup_interval(
        [reference[key] for key in common], [faster_if_above[key] for key in common], paired=True
    )
    return {"ratio": interval.estimate, "ci_low": interval.low, "ci_high": interval.high, "rounds": len(common)}


def ratio_to_best(schedule: CaseResult, best: CaseResult) -> dict[str, Any]:
    """The schedule row's decode speedup as a share of the best constant k's row (see the module docstring).

    Keys: ``ratio_to_best`` (the paired estimate when the rows share rounds, else the ratio of their decode
    speedups), ``ratio_to_best_ci_low``/``_high`` (None without shared rounds, or with one) and
    ``ratio_to_best_rounds`` (the rounds paired; 0 when none could be).
    """
    paired = paired_ratio(round_times(schedule), round_times(best))
    if paired is None:
        return {
            "ratio_to_best": schedule.decode_speedup / best.decode_speedup,
            "ratio_to_best_ci_low": None,
            "ratio_to_best_ci_high": None,
            "ratio_to_best_rounds": 0,
        }
    return {
        "ratio_to_best": paired["ratio"],
        "ratio_to_best_ci_low": paired["ci_low"],
        "ratio_to_best_ci_high": paired["ci_high"],
        "ratio_to_best_rounds": paired["rounds"],
    }


def ratio_to_hf(native: CaseResult, hf: CaseResult) -> dict[str, Any]:
    """Native k=auto's end-to-end speed over the hf engine's k=auto on one prompt: hf wall seconds / native's,
    paired over rounds (``round_wall_s``). Without per-round wall times: the ratio of the rows' end-to-end
    speedups (``paired`` False, no interval), or None when either lacks it."""
    paired = paired_ratio(round_times(native, "round_wall_s"), round_times(hf, "round_wall_s"))
    if paired is not None:
        return {"k": native.k, **paired, "paired": True}
    a, b = native.speedup, hf.speedup
    ratio = a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0 else None
    return {"k": native.k, "ratio": ratio, "ci_low": None, "ci_high": None, "rounds": 0, "paired": False}


def over_prompts(ratios: Sequence[dict[str, Any]], prefix: str = "") -> dict[str, Any] | None:
    """Geometric mean of per-prompt ratios (keys ``{prefix}ratio``, ``{prefix}ci_low``, ``{prefix}ci_high``),
    with a t interval over the prompts' log ratios; one prompt keeps its own interval. None without any."""
    items = [
        item for item in ratios if isinstance(item.get(f"{prefix}ratio"), (int, float)) and item[f"{prefix}ratio"] > 0
    ]
    if not items:
        return None
    if len(items) == 1:
        (item,) = items
        return {
            "prompts": 1,
            "ratio": item[f"{prefix}ratio"],
            "ci_low": item.get(f"{prefix}ci_low"),
            "ci_high": item.get(f"{prefix}ci_high"),
        }
    # A paired interval of 1 against 1/ratio is the t interval of the mean log ratio.
    interval = speedup_interval([1.0] * len(items), [1.0 / item[f"{prefix}ratio"] for item in items], paired=True)
    return {"prompts": len(items), "ratio": interval.estimate, "ci_low": interval.low, "ci_high": interval.high}


def schedule_summaries(answers: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per schedule in the answers of one (pair, engine): :func:`over_prompts` of its ratio to the best, over the
    prompts where its speedup is not suspect (results/invariants.py: above tau, not a measured gain)."""
    by_k: dict[Any, list[dict[str, Any]]] = {}
    for answer in answers:
        for schedule in answer["schedules"]:
            if not schedule.get("suspect"):
                by_k.setdefault(schedule["k"], []).append(schedule)
    summaries = []
    for k, items in by_k.items():
        summary = over_prompts(
            [
                {
                    "ratio": s["ratio_to_best"],
                    "ci_low": s["ratio_to_best_ci_low"],
                    "ci_high": s["ratio_to_best_ci_high"],
                }
                for s in items
            ]
        )
        if summary is not None:
            summaries.append({"k": k, **summary})
    return summaries


def hf_summary(answers: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """:func:`over_prompts` of native k=auto over hf k=auto, over the answers that hold the comparison; with
    how many of them were paired over rounds."""
    items = [answer["against_hf"] for answer in answers if answer.get("against_hf")]
    summary = over_prompts(items)
    if summary is None:
        return None
    return {"k": items[0]["k"], **summary, "paired_prompts": sum(item["paired"] for item in items)}


def interval_text(ratio: float | None, low: float | None, high: float | None) -> str:
    """``0.97 [0.93, 1.01]``; the estimate alone without an interval; ``unknown`` without an estimate."""
    if ratio is None:
        return "unknown"
    return f"{ratio:.2f}" + (f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else "")


# --- the report's section -----------------------------------------------------------------------------------


_SECTION_INTRO = (
    "Each schedule's decode speedup as a share of the best constant k's on the same prompt, paired over the "
    "rounds both ran in their block (geometric mean of the per-round ratios, 95% t interval). The best "
    "constant k is chosen after the fact from the same data, so the ratio is biased against the schedule: "
    "a conservative figure; 1 or more means the schedule did as well as the sweep, without the sweep. "
    "Where both engines ran k=auto, native k=auto against transformers' default schedule (hf k=auto), end "
    "to end, paired over rounds. Over prompts: geometric mean, t interval over the prompts."
)


def regret_markdown(answer: dict[str, Any], figures: dict[str, str] | None = None) -> list[str]:
    """The report's "k=auto against the best constant k" section from a run's answer (:func:`.answer.run_answer`):
    per pair, each prompt's schedules as a share of the best constant k and, over prompts, their geometric means;
    ``figures`` maps a pair to its figure's link. Empty when no schedule ran beside constant k."""
    with_schedules = [a for a in answer["prompts"] if a["schedules"]]
    if not with_schedules:
        return []
    lines = ["## k=auto against the best constant k", "", _SECTION_INTRO, ""]
    dtypes = len({a.get("dtype", "") for a in answer["prompts"]}) > 1  # then each answer is one dtype's
    for pair in dict.fromkeys(a["pair"] for a in with_schedules):
        answers = sorted((a for a in with_schedules if a["pair"] == pair), key=lambda a: (a["prompt"], a["engine"]))
        lines += [f"### Pair `{pair}`", "", _prompts_table(answers, dtypes), ""]
        summary = _over_prompts_cells(answer["pairs"], pair, dtypes)
        if summary:
            lines += ["Over prompts:", "", _github_table(summary, ["engine", "schedule", "prompts", _MEAN]), ""]
        if figures and pair in figures:
            lines += [f"![schedules against the best constant k for {pair}]({figures[pair]})", ""]
    return lines


_MEAN = "geometric mean [95% CI]"


def _github_table(cells: list[list[Any]], headers: list[str]) -> str:
    from tabulate import tabulate

    return tabulate(cells, headers=headers, tablefmt="github", disable_numparse=True)


def _engine_text(answer: dict[str, Any], dtypes: bool) -> str:
    """The engine of an answer, and its dtype when several ran."""
    return f"{answer['engine']}, {answer.get('dtype', '')}" if dtypes else answer["engine"]


def _prompts_table(answers: Sequence[dict[str, Any]], dtypes: bool = False) -> str:
    """One pair's prompts: each schedule against the best constant k, and native auto against hf auto where both
    engines ran it; the engine's dtype beside it when several ran."""
    hf = any(a["against_hf"] for a in answers)
    cells = [
        [
            a["prompt"],
            _engine_text(a, dtypes),
            s["k"],
            interval_text(s["ratio_to_best"], s["ratio_to_best_ci_low"], s["ratio_to_best_ci_high"]),
            s["ratio_to_best_rounds"] or "unpaired",
            a["best_k"],
            *([_hf_text(a["against_hf"]) if s["k"] == "auto" else "-"] if hf else []),
        ]
        for a in answers
        for s in a["schedules"]
    ]
    headers = ["prompt", "engine", "schedule", "/ best constant k [95% CI]", "rounds paired", "best k"]
    return _github_table(cells, headers + (["native auto / hf auto"] if hf else []))


def _over_prompts_cells(pairs: Sequence[dict[str, Any]], pair: str, dtypes: bool = False) -> list[list[Any]]:
    """One pair's schedules over its prompts, then native auto over hf auto, per engine (and dtype)."""
    ours = [p for p in pairs if p["pair"] == pair]
    cells = [
        [_engine_text(p, dtypes), s["k"], s["prompts"], interval_text(s["ratio"], s["ci_low"], s["ci_high"])]
        for p in ours
        for s in p["schedules"]
    ]
    return cells + [
        [
            _engine_text(p, dtypes),
            f"{hf['k']} / hf {hf['k']} (end to end)",
            hf["prompts"],
            interval_text(hf["ratio"], hf["ci_low"], hf["ci_high"]),
        ]
        for p in ours
        if (hf := p["against_hf"])
    ]


def _hf_text(against: dict[str, Any] | None) -> str:
    if against is None:
        return "-"
    return interval_text(against["ratio"], against["ci_low"], against["ci_high"]) + (
        "" if against["paired"] else " (unpaired: no per-round wall times)"
    )


def regret_pairs(answer: dict[str, Any]) -> list[str]:
    """The pairs whose answer holds a schedule beside constant k: those with a regret figure."""
    return list(dict.fromkeys(a["pair"] for a in answer["prompts"] if a["schedules"]))
