"""The summary table, the CSV and the JSON, from the schema's typed result rows; the CSV and the JSON write each
row as ``to_row()`` gives it."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Any

from tabulate import tabulate

from ..engine.cost_model import CURVE_FLOOR
from ..results.run_document import RunDocument
from ..results.schema import CaseResult, csv_columns, summary_columns
from ..settings.engines import LIBRARY_SCHEDULE_ENGINE, OWN_LOOP_ENGINE, runs_own_loop
from .analysis import (
    constant_k_rows,
    geometric_mean,
    k_order,
    median,
    pooled_position_acceptance,
    row_order,
    rows_by_pair,
    several_engines,
)
from .answer import RunAnswer, pair_sentence, prompt_table, run_answer
from .bandwidth import bandwidth_lines
from .batch import batch_answer, batch_lines, per_k_rows
from .dtype_view import TITLE, dtype_order, not_shown_lines, several_dtypes, view_table
from .engine_comparison import compare_engines, engine_table
from .formatting import SUSPECT_MARK, new_tokens_text, suspect_lines, with_interval
from .leaderboard import leaderboard_lines
from .requests import tpot_text

_MARK = {"lossless": "yes", "tie-divergence": "tie", "diverged": "NO"}
UNSTABLE_MARK = "!"


def _cell(row: CaseResult, name: str, fmt: str, interval: bool) -> str:
    value = getattr(row, name)
    if name == "verdict":
        return _MARK.get(value, value)
    if not fmt or not isinstance(value, (int, float)) or isinstance(value, bool):
        return "" if value is None else str(value)
    if not interval:
        return f"{value:{fmt}}"
    marks = ([UNSTABLE_MARK] if row.unstable else []) + ([SUSPECT_MARK] if row.suspect else [])
    return " ".join([with_interval(row, name, fmt), *marks])


def summary_lines(
    results: Sequence[CaseResult], ci_target: float = 0.05, category_groups: str = "spec_bench"
) -> list[str]:
    """The terminal summary: a table per pair, a per-k summary, the answer (best k per prompt, ties, slower k),
    the leaderboard view of a run of Spec-Bench's questions (grouped by ``category_groups``), the unstable and the
    suspect cases."""
    if not results:
        return ["no specbench case ran: nothing to summarise"]
    engines = several_engines(results)
    answer = run_answer(per_k_rows(results))
    lines: list[str] = []
    for pair, rows in rows_by_pair(results).items():
        lines += _pair_lines(pair, rows, engines, answer)
    lines += leaderboard_lines(results, category_groups)  # report/leaderboard.py: empty unless Spec-Bench's questions
    # The answer for serving (report/batch.py): only when more than one batch size ran.
    return lines + batch_lines(results) + _closing_lines(results, ci_target)


def _pair_lines(pair: str, rows: Sequence[CaseResult], engines: bool, answer: RunAnswer) -> list[str]:
    """One pair: its cases, the per-k means, the engines side by side, the answer."""
    first = rows[0]
    lines = [
        f"{pair}: target {first.target}, draft {first.draft} "
        f"({first.device}, {', '.join(dtype_order([row.dtype for row in rows]))}, {new_tokens_text(rows)}; "
        f"speedups with their 95% interval, {UNSTABLE_MARK} = unstable, {SUSPECT_MARK} = suspect)"
    ]
    batches = len({row.batch for row in rows}) > 1
    columns = tuple(
        column
        for column in summary_columns()
        if (engines or column[0] != "engine") and (batches or column[0] != "batch")
    )
    if several_dtypes(rows):  # after k: each dtype has its own rows, against its own greedy baseline
        columns = columns[:2] + (("dtype", "dtype", "", False),) + columns[2:]
    table = [
        [_cell(row, name, fmt, interval) for name, _, fmt, interval in columns] for row in sorted(rows, key=row_order)
    ]
    # Cells come formatted (a value with its interval is text): tabulate must not parse them again.
    lines += tabulate(table, headers=[header for _, header, _, _ in columns], disable_numparse=True).splitlines()
    tokenizer = cross_tokenizer_line(rows)
    lines += [tokenizer] if tokenizer else []
    lines += bandwidth_lines(rows)
    lines += ["", *_per_k_lines(per_k_rows(rows), engines)]  # several batch sizes: the smallest
    comparisons = compare_engines(rows)
    if comparisons:
        headers, table = engine_table(comparisons)
        lines += [
            "",
            "engines side by side (speedups each over a greedy baseline in its own engine, and each engine's own "
            "decode tokens per second, speculative and greedy; geometric mean over the prompts "
            "every engine measured, 95% t interval over them; the ratios paired by prompt):",
        ]
        lines += tabulate(table, headers=headers, disable_numparse=True).splitlines()
        if any({OWN_LOOP_ENGINE, LIBRARY_SCHEDULE_ENGINE} <= set(c.engines) for c in comparisons):
            lines += _kernel_lines(rows)
    lines += ["", *_answer_lines(pair, answer, engines, several_dtypes(rows))]
    lines += _dtype_view_lines(pair, answer, engines)
    positions = pooled_position_acceptance(constant_k_rows(rows))
    if positions:
        lines.append(
            "per-position acceptance (of the steps that drafted at least i tokens, the share whose "
            "i-th was accepted; all cases pooled):"
        )
        lines.append("  " + "  ".join(f"{i}: {share:.2f}" for i, _, share in positions))
    return lines + [""]


def cross_tokenizer_line(rows: Sequence[CaseResult]) -> str | None:
    """For a pair whose draft has another tokenizer: the share of the target's vocabulary it shares and the
    share of its draft time spent re-tokenising (median over the cases that timed it); None for any other pair."""
    overlaps = [row.vocabulary_overlap for row in rows if row.vocabulary_overlap is not None]
    shares = [row.translation_share for row in rows if row.translation_share is not None]
    if not overlaps and not shares:
        return None
    parts = [f"vocabulary overlap {overlaps[0]:.2f}"] if overlaps else []
    if shares:
        cases = f", median of {len(shares)} cases" if len(shares) > 1 else ""
        parts.append(f"translation {median(shares):.1%} of draft time{cases}")
    else:
        parts.append("translation not timed apart (inside transformers)")
    return (
        f"draft tokenizer differs: {', '.join(parts)}; acceptance is counted per target token, as the target "
        "verified the re-tokenised drafts"
    )


def _block_sizes(sizes: set[int]) -> str:
    return ", ".join(map(str, sorted(sizes))) or "none"


def _kernel_lines(rows: Sequence[CaseResult]) -> list[str]:
    """Why the engines' verify passes cost differently: the kernels the native engine chose."""
    native = [row for row in rows if runs_own_loop(row.engine)]
    few_rows = {size for row in native for size in row.few_rows_rows}
    columns = {size for row in native for size in row.column_head_rows}
    return [
        "the native engine's verify passes ran the kernels it measured fastest (block sizes with the few-rows "
        f"kernel: {_block_sizes(few_rows)}; with the head as weight @ hidden.T: {_block_sizes(columns)}); the hf "
        "engine runs transformers' own (docs/engines.md, \"The verify pass's kernels\")"
    ]


def _per_k_lines(rows: Sequence[CaseResult], engines: bool) -> list[str]:
    """Per k (and dtype, and engine, when more than one ran): geometric mean speedups, mean acceptance and tau,
    and the time per output token at p50 and p99 over the requests of every prompt."""
    per_k = []
    dtypes = dtype_order([row.dtype for row in rows])
    order = sorted(rows, key=lambda row: (k_order(row.k), dtypes.index(row.dtype), row.engine))
    for k, dtype, engine in dict.fromkeys((row.k, row.dtype, row.engine) for row in order):
        at_k = [row for row in rows if (row.k, row.dtype, row.engine) == (k, dtype, engine)]
        per_k.append(
            [k, *([dtype] if len(dtypes) > 1 else []), *([engine] if engines else [])]
            + [
                len(at_k),
                geometric_mean([row.decode_speedup for row in at_k]),
                geometric_mean([row.speedup for row in at_k]),
                sum(row.acceptance_rate for row in at_k) / len(at_k),
                sum(row.tau for row in at_k) / len(at_k),
                tpot_text(at_k),  # report/requests.py: over every prompt's requests
            ]
        )
    lead = ("k", *(["dtype"] if len(dtypes) > 1 else []), *(["engine"] if engines else []))
    return tabulate(
        per_k,
        headers=(*lead, "cases", "geomean decode speedup", "geomean e2e speedup", "mean accept", "mean tau")
        + ("TPOT p50 / p99 ms",),
        floatfmt=("",) * len(lead) + ("", ".2f", ".2f", ".3f", ".2f", ""),
    ).splitlines()


def _answer_lines(pair: str, answer: RunAnswer, engines: bool, dtypes: bool = False) -> list[str]:
    """The pair's answer: per prompt the best constant k, the k tied with it and those slower (by the race's test
    over the block's rounds), the cost model's recommended k; then the k best on most prompts."""
    answers = [a for a in answer.prompts if a.pair == pair]
    if not answers:
        return []
    cells, headers = prompt_table(sorted(answers, key=lambda a: (a.prompt, a.engine)), engines, dtypes)
    unpaired = any(not a.paired for a in answers)
    lines = [
        "the answer (best constant k per prompt; tied / slower: tested within the block's rounds, family-wise 95%"
        + (
            "; (unpaired): each k ran in a block of its own, as on a served engine, and is compared over its"
            " rounds' speedups without pairing"
            if unpaired
            else ""
        )
        + "):",
        *tabulate(cells, headers=headers, disable_numparse=True).splitlines(),
    ]
    return lines + [pair_sentence(p, engines, dtypes) for p in answer.pairs if p.pair == pair]


def _dtype_view_lines(pair: str, answer: RunAnswer, engines: bool) -> list[str]:
    """When several dtypes ran: per prompt the fastest (dtype, k) against float32 greedy, float32's own best k
    beside it (report/dtype_view.py); one line saying why where float32 did not run."""
    views = sorted((v for v in answer.dtypes if v.pair == pair), key=lambda v: (v.prompt, v.engine))
    shown = [view for view in views if view.shown]
    lines = not_shown_lines(views)
    if shown:
        cells, headers = view_table(shown, engines)
        lines += [
            f"{TITLE} (decode speedup over the float32 target's greedy decoding; float32's own paired, the other "
            "dtypes' own paired times their greedy baseline's speed over float32's, unpaired; 95%; tied: not told "
            "apart from the fastest, family-wise 95%):",
            *tabulate(cells, headers=headers, disable_numparse=True).splitlines(),
        ]
    return ["", *lines] if lines else []


def _closing_lines(results: Sequence[CaseResult], ci_target: float) -> list[str]:
    """The verdict counts, and what to do about cases with no interval or too wide a one."""
    failed = [row.case for row in results if row.verdict == "diverged"]
    ties = [row.case for row in results if row.verdict == "tie-divergence"]
    lines = [
        f"{len(results)} case(s): {len(results) - len(failed) - len(ties)} lossless, "
        f"{len(ties)} tie-divergence, {len(failed)} diverged"
    ]
    single = [row for row in results if row.rounds < 2]
    if single:
        lines.append(f"{len(single)} case(s) timed in one round: no interval (raise --specbench-max-rounds)")
    unstable = [row for row in results if row.unstable and row.rounds >= 2]
    if unstable:
        threads = sorted({row.threads for row in unstable if row.threads})
        lines.append(
            f"{len(unstable)} case(s) unstable ({UNSTABLE_MARK}): their 95% interval stayed wider than "
            f"+/-{ci_target:.0%} within the rounds allowed, so their speedups are noise-bound. "
            "Try a quieter machine, fewer xdist workers, a fixed --specbench-threads"
            f"{f' (ran with {threads[0]})' if len(threads) == 1 else ''}, or a longer --specbench-budget."
        )
    return lines + _memory_lines(results) + _suspect_lines(results) + _prediction_fault_lines(results)


def _memory_lines(results: Sequence[CaseResult]) -> list[str]:
    """The run's peak memory beside the most bytes of weights its models held at once (per worker, the largest)."""
    rows = [row for row in results if row.peak_memory_mb and row.weights_held_mb]
    if not rows:
        return []
    peak = max(rows, key=lambda row: row.peak_memory_mb or 0.0)
    held = max(row.weights_held_mb or 0.0 for row in rows if row.worker == peak.worker)
    what = "peak resident memory" if peak.peak_memory_kind == "process_rss" else "peak memory allocated"
    return [
        f"memory: {what} {peak.peak_memory_mb / 1024:.2f} GiB, {peak.peak_memory_mb / held:.1f}x the "
        f"{held / 1024:.2f} GiB of weights its models held at once"
    ]


#: the flagged predictions named one by one, at most; the rest counted
FAULTS_NAMED = 5


def _prediction_fault_lines(results: Sequence[CaseResult]) -> list[str]:
    """The cases whose predicted speedup is no figure (measure/costs.py ``prediction_fault``): counted, the first
    few named with their cause."""
    flagged = [row for row in results if row.prediction_fault]
    if not flagged:
        return []
    more = len(flagged) - FAULTS_NAMED
    return [
        f"{len(flagged)} prediction(s) flagged, not figures (no predicted speedup, no efficiency): priced on a probe "
        f"curve whose v(m)/v(1) fell below {CURVE_FLOOR} (or, a guard, above the run's tau, which equal kernels "
        "forbid):",
        *(f"  {row.case}: {row.prediction_fault}" for row in flagged[:FAULTS_NAMED]),
        *([f"  and {more} more (the JSON's prediction_fault)"] if more > 0 else []),
    ]


def _suspect_lines(results: Sequence[CaseResult]) -> list[str]:
    """The cases whose decode speedup exceeds tau (results/invariants.py), each with its cause: not ranked."""
    named = suspect_lines(results)
    if not named:
        return []
    return [
        f"{len(named)} case(s) suspect ({SUSPECT_MARK}): a decode speedup above tau, which only unequal kernels in "
        "the speculative run and its greedy baseline explain; not ranked in the answer (docs/measuring.md, "
        '"Suspect speedups"):',
        *(f"  {line}" for line in named),
    ]


def csv_text(results: Iterable[CaseResult]) -> str:
    """The CSV of the rows: the schema's CSV columns, the first seed's leading."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=csv_columns(), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in results:
        writer.writerow(row.to_row())
    return buffer.getvalue()


def environment() -> dict[str, Any]:
    """The machine fingerprint and library versions, for the JSON record and the baseline."""
    import importlib.metadata as metadata

    from ..results.fingerprint import machine_fingerprint

    versions = {}
    for name in ("torch", "transformers", "pytest", "pytest-specbench", "pytest-benchmark", "pytest-xdist"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {"fingerprint": machine_fingerprint(), "versions": versions}


def run_document(
    results: Sequence[CaseResult],
    options: dict[str, Any],
    env: dict[str, Any],
    missing: Sequence[str] = (),
    *,
    interrupted: str | None = None,
    resumed: Sequence[str] = (),
) -> RunDocument:
    """The record of a run: the environment, the options used, how the run ended, missing cases, the answer
    (:func:`.answer.run_answer`), the answer for serving (:func:`.batch.batch_answer`) and the rows; the typed
    answers as plain built-in types (their ``to_json()``), so the document's :meth:`~RunDocument.to_json` is JSON
    as it stands.

    ``interrupted`` says what stopped the run early (a signal, a failure limit), ``resumed`` lists the
    cases taken from a results log instead of being run again.
    """
    return RunDocument(
        fingerprint=env.get("fingerprint", {}),
        versions=env.get("versions", {}),
        options=options,
        interrupted=interrupted,
        missing_cases=list(missing),
        resumed_cases=list(resumed),
        answer=run_answer(per_k_rows(results)).to_json(),
        batch=[answer.to_json() for answer in batch_answer(results)],
        results=list(results),
    )
