"""The view a user deploys on, when several dtypes ran: decode speed of every (dtype, k) against the float32
greedy baseline, and the fastest (dtype, k) per (pair, engine, prompt, batch), with its interval and the (dtype, k)
tied with it.

Each dtype is timed in its own block against its own greedy baseline, so a row's own speedup answers "which k in
this dtype". Against float32 greedy, a float32 row keeps its own paired speedup; any other row is its own paired
speedup times its dtype's greedy speed over float32's, the two baselines' per-round times (each round's mean over
the block's cases: the same computation, shared by every k) compared *unpaired*, as they were never timed in the
same rounds (:func:`..results.statistics.chained_speedup_interval`). Reaching float32 greedy through the dtype's
own baseline keeps the row's paired precision and puts the unpaired step where a block has many runs: a row's
own runs against the float32 rounds would be two to three runs a side under a budget.

The fastest is the fastest against float32 among each dtype's best k (report/answer.py). The others: in the
fastest's own dtype, tied or slower as that dtype's paired ranking says; in another dtype, a k slower than its own
dtype's best is slower (the fastest is no slower than that best), and the rest are tested one-sided against the
fastest on their speedups against float32 greedy (:func:`..results.statistics.slower_p_from_intervals`), with the
race's step-down (family-wise 5%,
corrected for the fastest being picked from the same data). A suspect (dtype, k) (results/invariants.py: its own
decode speedup above tau) is none of these: its dtype's answer never names it best, and the view lists it apart
(``suspect``), its speedup marked in the report's table. A diverged one is not in the view at all: which rows it
reads is :func:`.analysis.speedup_left_out`'s to say, as for the answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..results.racing import SLOWER, TIED, UNKNOWN, step_down
from ..results.schema import CaseResult
from ..results.statistics import (
    Interval,
    PooledSpread,
    chained_speedup_interval,
    pooled_spread,
    slower_p_from_intervals,
    with_log_se,
)
from .analysis import SUSPECT, further_cells, further_columns, further_values, k_order, speedup_left_out
from .formatting import SUSPECT_MARK, entry_with_interval
from .records import JsonRecord

if TYPE_CHECKING:
    from .answer_types import PromptAnswer

FLOAT32 = "float32"

#: family-wise level of the tests across dtypes, as within one (answer.ALPHA)
ALPHA = 0.05

#: why a group of several dtypes has no view
NO_FLOAT32 = "float32 did not run, so there is no float32 greedy baseline to set every dtype against"

#: the summary's and the report's title of the view
TITLE = "fastest (dtype, k) against float32 greedy"


@dataclass(frozen=True)
class DtypeEntry(JsonRecord):
    """One (dtype, k) against float32 greedy: its decode speedup and interval (None without the rounds to compute
    it), paired for float32's own rows, unpaired for the others'; ``suspect``: its own speedup above tau."""

    dtype: str
    k: int | str
    case: str
    decode_tps: float
    decode_speedup: float | None
    decode_speedup_ci_low: float | None
    decode_speedup_ci_high: float | None
    paired: bool
    suspect: bool


@dataclass(frozen=True)
class DtypeK(JsonRecord):
    """A (dtype, k), as the view's tied, slower, unknown and suspect lists name one."""

    dtype: str
    k: int | str


@dataclass(frozen=True)
class DtypeView(JsonRecord):
    """The view of one (pair, engine, prompt, batch) where several dtypes ran; see the module docstring.
    ``shown`` False (with ``not_shown_reason``) where float32 did not run; ``fastest`` None where no dtype has a
    best k with a speedup against float32."""

    pair: str
    engine: str
    prompt: str
    batch: int
    dtypes: tuple[str, ...]
    shown: bool
    not_shown_reason: str | None
    fastest: DtypeEntry | None
    tied: tuple[DtypeK, ...]
    slower: tuple[DtypeK, ...]
    unknown: tuple[DtypeK, ...]
    float32_best: DtypeEntry | None
    entries: tuple[DtypeEntry, ...]
    suspect: tuple[DtypeK, ...]
    # (axis, value) of each axis the report groups by beyond these (answer.further): each value a view of its own
    further: tuple[tuple[str, object], ...] = ()


def dtype_order(dtypes: Sequence[str]) -> list[str]:
    """The dtypes that ran, float32 first, the others in order of first appearance."""
    seen = list(dict.fromkeys(dtypes))
    return sorted(seen, key=lambda dtype: (dtype != FLOAT32, seen.index(dtype)))


def several_dtypes(results: Sequence[CaseResult]) -> bool:
    """More than one dtype ran: only then is there a view against float32 greedy, and a dtype column."""
    return len({row.dtype for row in results}) > 1


def baseline_rounds(rows: Sequence[CaseResult], dtype: str = FLOAT32) -> list[float]:
    """The ``dtype`` greedy baseline's seconds per decode token, one per round of that dtype's rows' block(s): the
    geometric mean over the rows of the baseline each paired with in that round (rows of one round share its
    baseline, each interpolated at its own run, or each interleaved with its own)."""
    per_round: dict[tuple[Any, ...], list[float]] = {}
    for row in rows:
        if row.dtype != dtype:
            continue
        times = row.baseline_round_decode_token_s
        rounds = row.block_rounds if len(row.block_rounds) == len(times) else range(len(times))
        for r, seconds in zip(rounds, times):
            if isinstance(seconds, (int, float)) and seconds > 0:
                per_round.setdefault((row.run_id, row.block, r), []).append(float(seconds))
    return [math.exp(sum(map(math.log, values)) / len(values)) for values in per_round.values()]


def speedup_against_float32(
    row: CaseResult,
    float32_rounds: Sequence[float],
    own_rounds: Sequence[float],
    baseline_spread: PooledSpread | None = None,
) -> Interval | None:
    """The row's decode speedup over float32 greedy decoding with its 95% interval: a float32 row's own (paired);
    any other's own paired speedup chained through ``own_rounds`` (its dtype's baseline rounds) to
    ``float32_rounds`` (``baseline_spread``: :func:`baseline_spread`). None without the rounds to compute it from."""
    own = Interval(row.decode_speedup, row.decode_speedup_ci_low, row.decode_speedup_ci_high)
    own = with_log_se(own, row.interval_dof)
    if row.dtype == FLOAT32:
        return own
    if not float32_rounds or not own_rounds or not row.decode_speedup or not row.decode_speedup > 0:
        return None
    return chained_speedup_interval(own, row.interval_dof, float32_rounds, own_rounds, baseline_spread)


def baseline_spread(results: Sequence[CaseResult]) -> dict[str, PooledSpread | None]:
    """By target: the spread of its greedy baselines' log round times, each block's around its own mean, pooled
    over every block of that target in the run (every prompt and dtype: one machine, one model, so one noise, as
    Bartlett's test checks at 1%). A block times two or three rounds under a budget; pooled, a dtype's ratio to
    float32 greedy has the degrees of freedom of all of them."""
    blocks: dict[str, dict[str, list[CaseResult]]] = {}
    for row in results:
        if speedup_left_out(row) in (None, SUSPECT):
            blocks.setdefault(row.target, {}).setdefault(row.block, []).append(row)
    spreads = {}
    for target, by_block in blocks.items():
        samples = [[math.log(value) for value in baseline_rounds(rows, rows[0].dtype)] for rows in by_block.values()]
        spreads[target] = pooled_spread(samples)
    return spreads


def _entry(row: CaseResult, speedup: Interval | None) -> DtypeEntry:
    return DtypeEntry(
        dtype=row.dtype,
        k=row.k,
        case=row.case,
        decode_tps=row.decode_tps,
        decode_speedup=None if speedup is None else speedup.estimate,
        decode_speedup_ci_low=None if speedup is None else speedup.low,
        decode_speedup_ci_high=None if speedup is None else speedup.high,
        paired=row.dtype == FLOAT32,  # float32's own paired speedup; the others unpaired
        suspect=row.suspect,  # its own speedup above tau: not ranked
    )


def _statuses(
    fastest: DtypeEntry,
    rows: dict[tuple[str, Any], CaseResult],
    answers: dict[str, PromptAnswer],
    speedups: dict[tuple[str, Any], Interval | None],
) -> dict[tuple[str, Any], str]:
    """Every constant-k (dtype, k) but the fastest and the suspect: tied, slower or unknown against it (the
    module's rule)."""
    status: dict[tuple[str, Any], str] = {}
    p_values: dict[tuple[str, Any], float | None] = {}
    for (dtype, k), row in rows.items():
        if (dtype, k) == (fastest.dtype, fastest.k) or not isinstance(k, int) or speedup_left_out(row) is not None:
            continue
        own = answers.get(dtype)
        if own is None:  # no answer of its own to rank it by
            status[dtype, k] = UNKNOWN
        elif k in {s.k for s in own.slower}:
            status[dtype, k] = SLOWER
        elif dtype == fastest.dtype:
            status[dtype, k] = TIED if k in own.tied else UNKNOWN
        else:
            best, other = speedups.get((fastest.dtype, fastest.k)), speedups.get((dtype, k))
            p_values[dtype, k] = None if best is None or other is None else slower_p_from_intervals(best, other)
    slower = step_down(p_values, ALPHA, 1, len(p_values) + 1)
    status.update({key: SLOWER if key in slower else UNKNOWN if p is None else TIED for key, p in p_values.items()})
    return status


def group_view(
    rows: Sequence[CaseResult], answers: Sequence[PromptAnswer], spread: PooledSpread | None = None
) -> DtypeView | None:
    """The view of one (pair, engine, prompt, batch) from its rows and each dtype's answer; None for one dtype.
    It reads the rows whose speedup is measured and, marked and never ranked, the suspect ones
    (:func:`.analysis.speedup_left_out`): a diverged (dtype, k) is not in it."""
    rows = [row for row in rows if speedup_left_out(row) in (None, SUSPECT)]
    dtypes = dtype_order([row.dtype for row in rows])
    if len(dtypes) < 2:
        return None
    shown = FLOAT32 in dtypes
    entries: list[DtypeEntry] = []
    fastest = float32_best = None
    status: dict[tuple[str, Any], str] = {}
    if shown:
        base = {dtype: baseline_rounds(rows, dtype) for dtype in dtypes}
        ordered = sorted(rows, key=lambda row: (k_order(row.k), dtypes.index(row.dtype)))
        speedups = {
            (row.dtype, row.k): speedup_against_float32(row, base[FLOAT32], base[row.dtype], spread) for row in ordered
        }
        entries = [_entry(row, speedups[row.dtype, row.k]) for row in ordered]
        by_key = {(entry.dtype, entry.k): entry for entry in entries}
        own = {answer.dtype: answer for answer in answers}
        # A dtype whose every k is suspect has no best (answer.py), so nothing of it to be fastest.
        bests = [by_key[dtype, own[dtype].best_k] for dtype in dtypes if dtype in own and own[dtype].best_k is not None]
        float32_best = next((entry for entry in bests if entry.dtype == FLOAT32), None)
        timed = [entry for entry in bests if entry.decode_speedup is not None]
        if timed:
            fastest = max(timed, key=lambda entry: entry.decode_speedup)
            status = _statuses(fastest, {(row.dtype, row.k): row for row in ordered}, own, speedups)
    order = sorted(status, key=lambda key: (dtypes.index(key[0]), k_order(key[1])))
    first = rows[0]
    return DtypeView(
        pair=first.pair,
        engine=first.engine,
        prompt=first.prompt,
        batch=first.batch,
        dtypes=tuple(dtypes),
        shown=shown,
        not_shown_reason=None if shown else NO_FLOAT32,
        fastest=fastest,
        tied=tuple(DtypeK(dtype, k) for dtype, k in order if status[dtype, k] == TIED),
        slower=tuple(DtypeK(dtype, k) for dtype, k in order if status[dtype, k] == SLOWER),
        unknown=tuple(DtypeK(dtype, k) for dtype, k in order if status[dtype, k] == UNKNOWN),
        float32_best=float32_best,
        entries=tuple(entries),
        suspect=tuple(DtypeK(row.dtype, row.k) for row in rows if row.suspect and isinstance(row.k, int)),
        further=further_values(first),
    )


def dtype_views(results: Sequence[CaseResult], answers: Sequence[PromptAnswer]) -> list[DtypeView]:
    """:func:`group_view` of every (pair, engine, prompt, batch) where several dtypes ran, in order of first
    appearance; ``answers``: the run's per-dtype prompt answers (:func:`.answer.prompt_answers` of ``results``)."""
    groups: dict[tuple, list[CaseResult]] = {}
    for row in results:
        groups.setdefault((row.pair, row.engine, row.prompt, row.batch, further_values(row)), []).append(row)
    spreads = baseline_spread(results)
    views = []
    for (pair, engine, prompt, _, further), rows in groups.items():
        own = [a for a in answers if (a.pair, a.engine, a.prompt, a.further) == (pair, engine, prompt, further)]
        view = group_view(rows, own, spreads.get(rows[0].target))
        if view is not None:
            views.append(view)
    return views


# --- text: the summary's section and the report's table ---------------------------------------------------


def _key_text(entry: DtypeEntry) -> str:
    return f"{entry.dtype}, k={entry.k}"


def _speedup_text(entry: DtypeEntry | None) -> str:
    return "-" if entry is None or entry.decode_speedup is None else entry_with_interval(entry)


def view_table(views: Sequence[DtypeView], engines: bool) -> tuple[list[list[str]], list[str]]:
    """(cells, headers) of the fastest (dtype, k) per prompt, float32's own best k beside it."""
    cells = []
    further = further_columns(views)
    for view in views:
        fastest, float32 = view.fastest, view.float32_best
        cells.append(
            [
                view.prompt,
                *further_cells(view, further),
                *([view.engine] if engines else []),
                "-" if fastest is None else _key_text(fastest),
                _speedup_text(fastest),
                ", ".join(f"{t.dtype} k={t.k}" for t in view.tied) or "-",
                "-" if float32 is None else f"k={float32.k} {_speedup_text(float32)}",
            ]
        )
    headers = ["prompt", *further, *(["engine"] if engines else []), "fastest (dtype, k)", "decode speedup", "tied"]
    return cells, headers + ["float32's best k"]


def not_shown_lines(views: Sequence[DtypeView]) -> list[str]:
    """One line per reason the view is not shown for some of ``views``."""
    reasons = dict.fromkeys(view.not_shown_reason for view in views if not view.shown)
    return [f"{TITLE}: not shown, {reason}." for reason in reasons]


def speed_table(view: DtypeView) -> tuple[list[list[str]], list[str]]:
    """(cells, headers) of every (dtype, k) of one view against float32 greedy: a row per k, a column per dtype,
    the fastest in bold (Markdown)."""
    cells: dict[Any, dict[str, str]] = {}
    fastest = view.fastest
    for entry in view.entries:
        text = _speedup_text(entry) + (f" {SUSPECT_MARK}" if entry.suspect else "")
        if fastest is not None and (entry.dtype, entry.k) == (fastest.dtype, fastest.k):
            text = f"**{text}**"
        cells.setdefault(entry.k, {})[entry.dtype] = text
    rows = [[str(k), *(by_dtype.get(dtype, "") for dtype in view.dtypes)] for k, by_dtype in cells.items()]
    return rows, ["k", *view.dtypes]
