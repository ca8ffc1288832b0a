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
from typing import Any

from ..results.schema import CaseResult
from .formatting import entry_with_interval

NONE = "none"
BEYOND = "beyond the largest batch run"


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
    """A measured gain: the decode speedup and its interval's low end both above 1."""
    low = row.decode_speedup_ci_low
    return row.decode_speedup > 1 and low is not None and low > 1


def _predicted_gains(row: CaseResult) -> bool:
    predicted = row.predicted_speedup
    return predicted is not None and predicted > 1


def _break_even(by_batch: dict[int, list[CaseResult]], gains: Callable[[CaseResult], bool]) -> dict[str, Any]:
    """The largest batch size at which some row ``gains``, and how to say it."""
    sizes = sorted(by_batch)
    gaining = [size for size in sizes if any(gains(row) for row in by_batch[size])]
    if not gaining:
        return {"batch": None, "text": NONE, "beyond_largest": False}
    largest = gaining[-1]
    text = f"{BEYOND} ({largest})" if largest == sizes[-1] else str(largest)
    return {"batch": largest, "text": text, "beyond_largest": largest == sizes[-1]}


#: the fields of a row that a point of the batch answer keeps
_POINT_FIELDS = (
    "batch",
    "k",
    "case",
    "decode_speedup",
    "decode_speedup_ci_low",
    "decode_speedup_ci_high",
    "predicted_speedup",
    "verdict",
    "row_acceptance_min",
    "row_acceptance_max",
)


def _point(row: CaseResult) -> dict[str, Any]:
    """One (batch, k) of the answer: plain values, as the JSON keeps them."""
    return {name: getattr(row, name) for name in _POINT_FIELDS}


def _best_at(rows: list[CaseResult]) -> dict[str, Any]:
    """The best k of one batch size as the answer states it (:func:`.answer.prompt_answer`: the race's survivors,
    the k tied with it by the race's test over the block's rounds), and the cost model's best."""
    from .answer import prompt_answer

    stated = prompt_answer(rows)
    top = (
        next(row for row in rows if row.k == stated["best_k"])
        if stated and stated["best_k"] is not None
        else max([row for row in rows if not row.suspect] or rows, key=lambda row: row.decode_speedup)
    )
    predicted = [row for row in rows if row.predicted_speedup is not None]
    top_predicted = max(predicted, key=lambda row: row.predicted_speedup) if predicted else None
    return {
        **_point(top),
        "gains": _gains(top),
        "tied": stated["tied"] if stated else [],
        "predicted_best_k": top_predicted.k if top_predicted else None,
        "predicted_best_speedup": top_predicted.predicted_speedup if top_predicted else None,
    }


def batch_answer(results: Sequence[CaseResult]) -> list[dict[str, Any]]:
    """Per (pair, prompt, engine) with more than one batch size: every (batch, k) point, the best k per batch size
    (measured and predicted), and the measured and predicted break-even batch size."""
    if not several_batches(results):
        return []
    groups: dict[tuple, list[CaseResult]] = {}
    for row in results:
        if isinstance(row.k, int):
            groups.setdefault((row.pair, row.prompt, row.engine), []).append(row)
    answers = []
    for (pair, prompt, engine), rows in groups.items():
        by_batch: dict[int, list[CaseResult]] = {}
        for row in rows:
            by_batch.setdefault(row.batch, []).append(row)
        if len(by_batch) < 2:
            continue
        best = [_best_at(by_batch[size]) for size in sorted(by_batch)]
        answers.append(
            {
                "pair": pair,
                "prompt": prompt,
                "engine": engine,
                "batches": sorted(by_batch),
                "ks": sorted({row.k for row in rows}),
                "points": [_point(row) for row in sorted(rows, key=lambda row: (row.batch, row.k))],
                "best": best,
                "break_even": _break_even(by_batch, _gains),
                "predicted_break_even": _break_even(by_batch, _predicted_gains),
            }
        )
    return answers


def _cell(point: dict[str, Any] | None) -> str:
    if point is None:
        return ""
    predicted = point["predicted_speedup"]
    return entry_with_interval(point) + (f" (pred {predicted:.2f})" if predicted is not None else "")


def _table_rows(answer: dict[str, Any]) -> tuple[list[list[str]], list[str]]:
    points = {(point["batch"], point["k"]): point for point in answer["points"]}
    best = {item["batch"]: item for item in answer["best"]}
    headers = ["batch", *(f"k={k}" for k in answer["ks"]), "best k", "tied", "predicted best k", "row accept min-max"]
    cells = []
    for size in answer["batches"]:
        item = best[size]
        spread = ""
        if item["row_acceptance_min"] is not None:
            spread = f"{item['row_acceptance_min']:.2f}-{item['row_acceptance_max']:.2f}"
        cells.append(
            [
                str(size),
                *(_cell(points.get((size, k))) for k in answer["ks"]),
                f"{item['k']}" + ("" if item["gains"] else " (no gain)"),
                ", ".join(str(k) for k in item["tied"]) or "-",
                "" if item["predicted_best_k"] is None else str(item["predicted_best_k"]),
                spread,
            ]
        )
    return cells, headers


def _title(answer: dict[str, Any], several_engines: bool) -> str:
    engine = f", {answer['engine']} engine" if several_engines else ""
    return f"{answer['pair']}, {answer['prompt']}{engine}"


def _break_even_sentence(answer: dict[str, Any]) -> str:
    measured, predicted = answer["break_even"], answer["predicted_break_even"]
    sentence = f"break-even batch size: {measured['text']}"
    if measured["batch"] is not None:
        item = next(item for item in answer["best"] if item["batch"] == measured["batch"])
        sentence += f" (k={item['k']}: {entry_with_interval(item)})"
    return sentence + f"; the cost model predicts {predicted['text']}"


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
    engines = len({answer["engine"] for answer in answers}) > 1
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
    engines = len({answer["engine"] for answer in answers}) > 1
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
