"""The answer for serving: per pair and prompt, decode speedup against batch size for each k, the best k per batch
size, and the break-even batch size, with the cost model's prediction beside each.

From typed result rows (:class:`CaseResult`), of constant k only, and only where more than one batch size
ran for a (pair, prompt, engine). The break-even batch size is the largest batch run at which some k still gains:
decode speedup above 1 with its 95% interval's low end above 1 too. It reads "none" when no batch size gains, and
"beyond the largest batch run" when the largest one still does. The predicted break-even is the same over the cost
model's ``predicted_speedup`` (no interval).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from ..results.schema import CaseResult
from .analysis import Further, best_row, further_values, speedup_left_out, with_further
from .formatting import entry_with_interval
from .records import JsonRecord

NONE = "none"
BEYOND = "beyond the largest batch run"


@dataclass(frozen=True)
class BatchPoint(JsonRecord):
    """One (batch, k) of the answer: the row's own fields, under its names."""

    batch: int
    k: int | str
    case: str
    decode_speedup: float
    decode_speedup_ci_low: float | None
    decode_speedup_ci_high: float | None
    predicted_speedup: float | None
    verdict: str
    row_acceptance_min: float | None
    row_acceptance_max: float | None


@dataclass(frozen=True)
class BatchBest(BatchPoint):
    """The best k of one batch size (its point), whether it gains, the k tied with it, and the cost model's best."""

    gains: bool
    tied: tuple[int | str, ...]
    predicted_best_k: int | str | None
    predicted_best_speedup: float | None


@dataclass(frozen=True)
class BreakEven(JsonRecord):
    """The largest batch size at which some k gains (None: none does), in words, and whether it is the largest run."""

    batch: int | None
    text: str
    beyond_largest: bool


@dataclass(frozen=True)
class BatchAnswer(JsonRecord):
    """One (pair, prompt, engine) that ran more than one batch size: every point, the best k per batch size, and the
    measured and predicted break-even batch sizes."""

    pair: str
    prompt: str
    engine: str
    batches: tuple[int, ...]
    ks: tuple[int | str, ...]
    points: tuple[BatchPoint, ...]
    best: tuple[BatchBest, ...]
    break_even: BreakEven
    predicted_break_even: BreakEven
    further: Further = ()  # its value on each further axis the report groups by


def batch_sizes(results: Sequence[CaseResult]) -> list[int]:
    """The batch sizes that ran, smallest first."""
    return sorted({row.batch for row in results})


def several_batches(results: Sequence[CaseResult]) -> bool:
    """More than one batch size ran: only then is there a batch table."""
    return len(batch_sizes(results)) > 1


def per_k_rows(results: Sequence[CaseResult]) -> list[CaseResult]:
    """The rows the answers and figures against k read: when several batch sizes ran, those of the smallest (each
    batch size has its own baseline, so speedups of different batch sizes are no alternatives of one k); the batch
    section (:func:`batch_answer`) reads them all."""
    if not several_batches(results):
        return list(results)
    smallest = batch_sizes(results)[0]
    return [row for row in results if row.batch == smallest]


def _gains(row: CaseResult) -> bool:
    """A measured gain (:func:`.analysis.speedup_left_out`: not diverged, not suspect): the decode speedup and its
    interval's low end both above 1."""
    low = row.decode_speedup_ci_low
    return speedup_left_out(row) is None and row.decode_speedup > 1 and low is not None and low > 1


def _predicted_gains(row: CaseResult) -> bool:
    predicted = row.predicted_speedup
    return predicted is not None and predicted > 1


def _break_even(by_batch: dict[int, list[CaseResult]], gains: Callable[[CaseResult], bool]) -> BreakEven:
    """The largest batch size at which some row ``gains``, and how to say it."""
    sizes = sorted(by_batch)
    gaining = [size for size in sizes if any(gains(row) for row in by_batch[size])]
    if not gaining:
        return BreakEven(None, NONE, False)
    largest = gaining[-1]
    text = f"{BEYOND} ({largest})" if largest == sizes[-1] else str(largest)
    return BreakEven(largest, text, largest == sizes[-1])


def _point_fields(row: CaseResult) -> dict[str, object]:
    """The fields of a row that a point of the batch answer keeps, under their names."""
    return {field.name: getattr(row, field.name) for field in fields(BatchPoint)}


def _best_at(rows: list[CaseResult]) -> BatchBest:
    """The best k of one batch size as the answer states it (:func:`.answer.prompt_answer`: the race's survivors,
    the k tied with it by the race's test over the block's rounds), and the cost model's best."""
    from .answer import prompt_answer

    stated = prompt_answer(rows)
    top = (
        next(row for row in rows if row.k == stated.best_k) if stated and stated.best_k is not None else best_row(rows)
    )
    predicted = [row for row in rows if row.predicted_speedup is not None]
    top_predicted = max(predicted, key=lambda row: row.predicted_speedup) if predicted else None
    return BatchBest(
        **_point_fields(top),
        gains=_gains(top),
        tied=stated.tied if stated else (),
        predicted_best_k=top_predicted.k if top_predicted else None,
        predicted_best_speedup=top_predicted.predicted_speedup if top_predicted else None,
    )


def batch_answer(results: Sequence[CaseResult]) -> list[BatchAnswer]:
    """Per (pair, prompt, engine) with more than one batch size: every (batch, k) point, the best k per batch size
    (measured and predicted), and the measured and predicted break-even batch size."""
    if not several_batches(results):
        return []
    groups: dict[tuple[str, str, str, Further], list[CaseResult]] = {}
    for row in results:
        if isinstance(row.k, int):
            groups.setdefault((row.pair, row.prompt, row.engine, further_values(row)), []).append(row)
    answers = []
    for (pair, prompt, engine, further), rows in groups.items():
        by_batch: dict[int, list[CaseResult]] = {}
        for row in rows:
            by_batch.setdefault(row.batch, []).append(row)
        if len(by_batch) < 2:
            continue
        answers.append(
            BatchAnswer(
                pair=pair,
                prompt=prompt,
                engine=engine,
                batches=tuple(sorted(by_batch)),
                ks=tuple(sorted({row.k for row in rows})),
                points=tuple(
                    BatchPoint(**_point_fields(row)) for row in sorted(rows, key=lambda row: (row.batch, row.k))
                ),
                best=tuple(_best_at(by_batch[size]) for size in sorted(by_batch)),
                break_even=_break_even(by_batch, _gains),
                predicted_break_even=_break_even(by_batch, _predicted_gains),
                further=further,
            )
        )
    return answers


def _cell(point: BatchPoint | None) -> str:
    if point is None:
        return ""
    predicted = point.predicted_speedup
    return entry_with_interval(point) + (f" (pred {predicted:.2f})" if predicted is not None else "")


def _table_rows(answer: BatchAnswer) -> tuple[list[list[str]], list[str]]:
    points = {(point.batch, point.k): point for point in answer.points}
    best = {item.batch: item for item in answer.best}
    headers = ["batch", *(f"k={k}" for k in answer.ks), "best k", "tied", "predicted best k", "row accept min-max"]
    cells = []
    for size in answer.batches:
        item = best[size]
        spread = ""
        if item.row_acceptance_min is not None:
            spread = f"{item.row_acceptance_min:.2f}-{item.row_acceptance_max:.2f}"
        cells.append(
            [
                str(size),
                *(_cell(points.get((size, k))) for k in answer.ks),
                f"{item.k}" + ("" if item.gains else " (no gain)"),
                ", ".join(str(k) for k in item.tied) or "-",
                "" if item.predicted_best_k is None else str(item.predicted_best_k),
                spread,
            ]
        )
    return cells, headers


def _title(answer: BatchAnswer, several_engines: bool) -> str:
    engine = f", {answer.engine} engine" if several_engines else ""
    return f"{with_further(answer.pair, answer.further)}, {answer.prompt}{engine}"


def _break_even_sentence(answer: BatchAnswer) -> str:
    measured, predicted = answer.break_even, answer.predicted_break_even
    sentence = f"break-even batch size: {measured.text}"
    if measured.batch is not None:
        item = next(item for item in answer.best if item.batch == measured.batch)
        sentence += f" (k={item.k}: {entry_with_interval(item)})"
    return sentence + f"; the cost model predicts {predicted.text}"


_INTRO = (
    "decode speedup by batch size (each batch against the target's batched greedy decoding; 95% interval; "
    "pred: the cost model's prediction from the batch's own v(m) and draft costs). Break-even: the largest batch "
    "run at which some k still gains, its interval's low end above 1."
)


def batch_lines(results: Sequence[CaseResult]) -> list[str]:
    """The terminal section: empty unless more than one batch size ran."""
    from tabulate import tabulate

    answers = batch_answer(results) if several_batches(results) else []
    if not answers:
        return []
    engines = len({answer.engine for answer in answers}) > 1
    lines = [_INTRO]
    for answer in answers:
        cells, headers = _table_rows(answer)
        lines += [
            "",
            f"{_title(answer, engines)}:",
            *tabulate(cells, headers=headers, disable_numparse=True).splitlines(),
            _break_even_sentence(answer),
        ]
    return lines + [""]


def batch_markdown(results: Sequence[CaseResult], figures: dict[str, str] | None = None) -> list[str]:
    """The report's section ("## Batch size"), empty unless more than one batch size ran; ``figures`` maps a pair
    to the link of its speedup-against-batch-size figure."""
    answers = batch_answer(results) if several_batches(results) else []
    if not answers:
        return []
    engines = len({answer.engine for answer in answers}) > 1
    lines = ["## Batch size", "", _INTRO[0].upper() + _INTRO[1:], ""]
    for answer in answers:
        cells, headers = _table_rows(answer)
        lines += [
            f"### {_title(answer, engines)}",
            "",
            "| " + " | ".join(headers) + " |",
            "|" + "---|" * len(headers),
            *("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in cells),
            "",
            _break_even_sentence(answer)[0].upper() + _break_even_sentence(answer)[1:] + ".",
            "",
        ]
    for pair, link in (figures or {}).items():
        lines += [f"![decode speedup against batch size for {pair}]({link})", ""]
    return lines
