"""The summary table, the CSV and the JSON, from result rows (plain dicts of the schema's fields)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import platform
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from .schema import csv_columns, summary_columns


_MARK = {"lossless": "yes", "tie-divergence": "tie", "diverged": "NO"}


def _geometric_mean(values: Sequence[float]) -> float:
    positive = [value for value in values if value > 0]
    return math.exp(sum(map(math.log, positive)) / len(positive)) if positive else 0.0


def summary_lines(results: Sequence[dict[str, Any]]) -> list[str]:
    """The terminal summary: a table per pair, a per-k summary, the best k per prompt."""
    if not results:
        return ["no specbench case ran: nothing to summarise"]
    lines: list[str] = []
    for pair in dict.fromkeys(row["pair"] for row in results):
        rows = [row for row in results if row["pair"] == pair]
        first = rows[0]
        lines.append(f"{pair}: target {first['target']}, draft {first['draft']} "
                     f"({first['device']}, {first['dtype']}, {first['new_tokens']} new tokens)")
        columns = summary_columns()
        table = [[_MARK.get(row[name], row[name]) if name == "verdict" else row.get(name) for name, _, _ in columns]
                 for row in sorted(rows, key=lambda row: (row["prompt"], row["k"]))]
        lines += tabulate(table, headers=[header for _, header, _ in columns],
                          floatfmt=[fmt for _, _, fmt in columns]).splitlines()
        lines.append("")
        per_k = []
        for k in sorted({row["k"] for row in rows}):
            at_k = [row for row in rows if row["k"] == k]
            per_k.append((k, len(at_k), _geometric_mean([row["speedup"] for row in at_k]),
                          sum(row["acceptance_rate"] for row in at_k) / len(at_k),
                          sum(row["tau"] for row in at_k) / len(at_k)))
        lines += tabulate(per_k, headers=("k", "cases", "geomean speedup", "mean accept", "mean tau"),
                          floatfmt=("", "", ".2f", ".3f", ".2f")).splitlines()
        lines.append("")
        best = []
        for prompt in sorted({row["prompt"] for row in rows}):
            top = max((row for row in rows if row["prompt"] == prompt), key=lambda row: row["speedup"])
            best.append((prompt, top["k"], top["speedup"], top["acceptance_rate"]))
        lines += tabulate(best, headers=("prompt", "best k", "speedup", "accept"),
                          floatfmt=("", "", ".2f", ".3f")).splitlines()
        lines.append("")
    failed = [row["case"] for row in results if row["verdict"] == "diverged"]
    ties = [row["case"] for row in results if row["verdict"] == "tie-divergence"]
    lines.append(f"{len(results)} case(s): {len(results) - len(failed) - len(ties)} lossless, "
                 f"{len(ties)} tie-divergence, {len(failed)} diverged")
    return lines


def csv_text(results: Iterable[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=csv_columns(), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in results:
        writer.writerow(row)
    return buffer.getvalue()


def environment() -> dict[str, Any]:
    """The machine and library versions, for the JSON record."""
    import importlib.metadata as metadata

    versions = {}
    for name in ("torch", "transformers", "pytest", "pytest-specbench", "pytest-benchmark", "pytest-xdist"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    machine = {"platform": platform.platform(), "python": platform.python_version(),
               "processor": platform.processor() or platform.machine(), "cpu_count": os.cpu_count()}
    try:
        import torch

        if torch.cuda.is_available():
            machine["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        pass
    return {"machine": machine, "versions": versions}


def json_text(results: Sequence[dict[str, Any]], options: dict[str, Any], env: dict[str, Any],
              missing: Sequence[str] = ()) -> str:
    """Strict JSON (no NaN): the environment, the options used, missing cases and the rows."""
    document = {**env, "options": options, "missing_cases": list(missing), "results": list(results)}
    return json.dumps(document, indent=2, allow_nan=False, default=str) + "\n"
