"""The summary table, the CSV and the JSON, from result rows (plain dicts of the schema's fields)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from typing import Any

from tabulate import tabulate

from .analysis import (analyse_prompts, compare_engines, constant_k_rows, geometric_mean, k_order,
                       pooled_position_acceptance, row_order)
from ..results.schema import csv_columns, summary_columns


_MARK = {"lossless": "yes", "tie-divergence": "tie", "diverged": "NO"}
UNSTABLE_MARK = "!"


def _cell(row: dict[str, Any], name: str, fmt: str, interval: bool) -> str:
    value = row.get(name)
    if name == "verdict":
        return _MARK.get(value, value)
    if not fmt or not isinstance(value, (int, float)) or isinstance(value, bool):
        return "" if value is None else str(value)
    if not interval:
        return f"{value:{fmt}}"
    low, high = row.get(f"{name}_ci_low"), row.get(f"{name}_ci_high")
    shown = f"{value:{fmt}}" + (f" [{low:{fmt}}, {high:{fmt}}]" if low is not None else " [no interval]")
    return shown + (f" {UNSTABLE_MARK}" if row.get("unstable") else "")


def summary_lines(results: Sequence[dict[str, Any]], ci_target: float = 0.05) -> list[str]:
    """The terminal summary: a table per pair, a per-k summary, the best k per prompt, the unstable cases."""
    if not results:
        return ["no specbench case ran: nothing to summarise"]
    lines: list[str] = []
    columns = summary_columns()
    engines = {row.get("engine", "native") for row in results}
    if len(engines) == 1:
        columns = tuple(column for column in columns if column[0] != "engine")
    for pair in dict.fromkeys(row["pair"] for row in results):
        rows = [row for row in results if row["pair"] == pair]
        first = rows[0]
        lines.append(f"{pair}: target {first['target']}, draft {first['draft']} "
                     f"({first['device']}, {first['dtype']}, {first['new_tokens']} new tokens; "
                     f"speedups with their 95% interval, {UNSTABLE_MARK} = unstable)")
        table = [[_cell(row, name, fmt, interval) for name, _, fmt, interval in columns]
                 for row in sorted(rows, key=row_order)]
        # Cells come formatted (a value with its interval is text): tabulate must not parse them again.
        lines += tabulate(table, headers=[header for _, header, _, _ in columns], disable_numparse=True).splitlines()
        lines.append("")
        per_k = []
        groups = dict.fromkeys((row["k"], row.get("engine", "native"))
                               for row in sorted(rows, key=lambda row: (k_order(row["k"]), row.get("engine", ""))))
        for k, engine in groups:
            at_k = [row for row in rows if row["k"] == k and row.get("engine", "native") == engine]
            per_k.append(([k, engine] if len(engines) > 1 else [k])
                         + [len(at_k), geometric_mean([row["decode_speedup"] for row in at_k]),
                            geometric_mean([row["speedup"] for row in at_k]),
                            sum(row["acceptance_rate"] for row in at_k) / len(at_k),
                            sum(row["tau"] for row in at_k) / len(at_k)])
        lead = ("k", "engine") if len(engines) > 1 else ("k",)
        lines += tabulate(per_k, headers=(*lead, "cases", "geomean decode speedup", "geomean e2e speedup",
                                          "mean accept", "mean tau"),
                          floatfmt=("",) * len(lead) + ("", ".2f", ".2f", ".3f", ".2f")).splitlines()
        comparisons = compare_engines(rows)
        if comparisons:
            lines.append("")
            lines.append("engines side by side (end-to-end speedup over the same greedy baseline, geometric mean "
                         "over prompts):")
            lines += tabulate([(c.k, c.prompts, c.native_speedup, c.hf_speedup, c.ratio) for c in comparisons],
                              headers=("k", "prompts", "native", "hf", "native / hf"),
                              floatfmt=("", "", ".2f", ".2f", ".2f")).splitlines()
        lines.append("")
        best = []
        for analysis in sorted(analyse_prompts(rows), key=lambda analysis: analysis.prompt):
            top = analysis.best_row
            best.append((analysis.prompt, top["k"], _cell(top, "decode_speedup", ".2f", True),
                         f"{top['acceptance_rate']:.3f}",
                         "" if analysis.alpha is None else f"{analysis.alpha:.3f}",
                         "" if analysis.recommended_k is None else str(analysis.recommended_k)))
        lines += tabulate(best, headers=("prompt", "best k", "decode speedup", "accept", "pooled alpha",
                                         "recommended k"), disable_numparse=True).splitlines()
        positions = pooled_position_acceptance(constant_k_rows(rows))
        if positions:
            lines.append("per-position acceptance (of the steps that drafted at least i tokens, the share whose "
                         "i-th was accepted; all cases pooled):")
            lines.append("  " + "  ".join(f"{i}: {share:.2f}" for i, _, share in positions))
        lines.append("")
    failed = [row["case"] for row in results if row["verdict"] == "diverged"]
    ties = [row["case"] for row in results if row["verdict"] == "tie-divergence"]
    lines.append(f"{len(results)} case(s): {len(results) - len(failed) - len(ties)} lossless, "
                 f"{len(ties)} tie-divergence, {len(failed)} diverged")
    single = [row for row in results if row.get("rounds", 0) < 2]
    if single:
        lines.append(f"{len(single)} case(s) timed in one round: no interval (raise --specbench-max-rounds)")
    unstable = [row for row in results if row.get("unstable") and row.get("rounds", 0) >= 2]
    if unstable:
        threads = sorted({row.get("threads") for row in unstable if row.get("threads")})
        lines.append(
            f"{len(unstable)} case(s) unstable ({UNSTABLE_MARK}): their 95% interval stayed wider than "
            f"+/-{ci_target:.0%} within the rounds allowed, so their speedups are noise-bound. "
            "Try a quieter machine, fewer xdist workers, a fixed --specbench-threads"
            f"{f' (ran with {threads[0]})' if len(threads) == 1 else ''}, or a larger --specbench-case-budget."
        )
    return lines


def csv_text(results: Iterable[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=csv_columns(), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in results:
        writer.writerow(row)
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


def json_text(results: Sequence[dict[str, Any]], options: dict[str, Any], env: dict[str, Any],
              missing: Sequence[str] = (), *, interrupted: str | None = None, resumed: Sequence[str] = ()) -> str:
    """Strict JSON (no NaN): the environment, the options used, how the run ended, missing cases and the rows.

    ``interrupted`` says what stopped the run early (a signal, a failure limit), ``resumed`` lists the
    cases taken from a results log instead of being run again.
    """
    document = {**env, "options": options, "interrupted": interrupted, "missing_cases": list(missing),
                "resumed_cases": list(resumed), "results": list(results)}
    return json.dumps(document, indent=2, allow_nan=False, default=str) + "\n"
