"""Where the cost model's efficiency (measured decode speedup / predicted) comes from, per pair and dtype.

    python benchmarks/efficiency_parts.py results.json [more.json ...]

The prediction prices each decode step as the probe measured its passes: verify v(d + 1), d drafted
tokens at the draft's one-token cost, the catch-up after a block accepted whole, and the run's own
other time; the tokens come from the acceptance rate alpha (``predicted_tau``), the baseline from
v(1). Each part below is measured over predicted for the native rows of a constant k (median over
rows, with the lowest and highest): a part above 1 costs more than the model carries.

- ``verify``: the run's verify time over the sum of the probe's v(d + 1);
- ``draft``: the run's draft time over the drafted tokens' and catch-ups' probe cost;
- ``baseline``: v(1) of the probe over the greedy baseline's time per decode token (below 1: the
  baseline ran slower than the probe's one-token pass, which raises the speedup);
- ``tokens``: the run's tokens per step over ``predicted_tau``;
- ``efficiency``: the row's own.

Reads rows only: nothing is timed here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_specbench.results.schema import CaseResult  # noqa: E402

PARTS = ("verify", "draft", "baseline", "tokens", "efficiency")


def row_parts(row: CaseResult) -> dict[str, float] | None:
    """Measured over predicted per part for one native constant-k row with cost-model fields; None otherwise."""
    if row.engine != "native" or not isinstance(row.k, int) or row.efficiency is None or not row.verify_costs_ms:
        return None
    steps = list(row.drafted_per_step[1:])
    accepted = list(row.accepted_per_step[1:])
    curve = [ms / 1000 for ms in row.verify_costs_ms]
    if not steps or max(steps) >= len(curve):
        return None
    token_s = (row.draft_token_ms or 0.0) / 1000
    extra_s = max(((row.draft_catch_up_ms or row.draft_token_ms or 0.0) / 1000) - token_s, 0.0)
    # A catch-up follows a step whose block was accepted whole, when the next step drafts.
    catch_ups = sum(
        1 for before, now in zip(zip(steps, accepted), steps[1:]) if before[0] and before[0] == before[1] and now
    )
    predicted_draft = sum(steps) * token_s + catch_ups * extra_s
    parts = {
        "verify": row.verify_time_s / sum(curve[d] for d in steps),
        "draft": row.draft_time_s / predicted_draft if predicted_draft > 0 else float("nan"),
        "baseline": curve[0] * row.baseline_decode_tps if row.baseline_decode_tps else float("nan"),
        "tokens": row.tau / row.predicted_tau if row.predicted_tau else float("nan"),
        "efficiency": row.efficiency,
    }
    return parts


def summarise(rows: Sequence[CaseResult]) -> list[list[Any]]:
    """One line per (pair, dtype): each part's median over rows, with its lowest and highest."""
    groups: dict[tuple[str, str], list[dict[str, float]]] = {}
    for row in rows:
        parts = row_parts(row)
        if parts is not None:
            groups.setdefault((row.pair, row.dtype), []).append(parts)
    lines = []
    for (pair, dtype), members in sorted(groups.items()):
        cells = []
        for part in PARTS:
            values = [member[part] for member in members if member[part] == member[part]]
            cells.append(f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]" if values else "n/a")
        lines.append([pair, dtype, len(members), *cells])
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="--specbench-json files")
    args = parser.parse_args(argv)
    rows = [
        CaseResult.from_row(row)
        for path in args.results
        for row in json.loads(path.read_text(encoding="utf-8"))["results"]
    ]
    print(tabulate(summarise(rows), headers=["pair", "dtype", "rows", *PARTS], disable_numparse=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
