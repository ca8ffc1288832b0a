"""``python -m pytest_specbench merge|compare``: one report from many runs, and the change between two runs.

merge: the JSON of several runs (the shards of a CI job matrix) become one JSON, CSV, report and
set of figures, refused when the runs' options make their numbers incomparable.
compare: per case and per pair, acceptance and decode speedup (with intervals) of an old and a new run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from .report.analysis import geometric_mean

#: options whose difference changes what a number means (output paths, gating and shards do not)
COMPARABLE_OPTIONS = ("specbench_k", "specbench_max_new_tokens", "specbench_dtype", "specbench_context_tokens",
                      "specbench_prompt_file", "specbench_prompts_per_category", "specbench_stop_at_eos",
                      "specbench_baseline_once", "specbench_warmup")


class MergeError(ValueError):
    """Runs that cannot be merged, with the reason."""


def load_run(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise MergeError(f"{path}: not a readable specbench JSON ({error})") from None
    if not isinstance(document, dict) or not isinstance(document.get("results"), list):
        raise MergeError(f"{path}: no 'results' list; is it a --specbench-json file?")
    return document


def merge_runs(documents: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """One document from several; raises MergeError on incomparable options or a case in two runs."""
    first_options = documents[0].get("options", {})
    for document, name in zip(documents[1:], names[1:]):
        options = document.get("options", {})
        differing = [key for key in COMPARABLE_OPTIONS if options.get(key) != first_options.get(key)]
        if differing:
            details = "; ".join(f"{key}: {names[0]} has {first_options.get(key)!r}, {name} has "
                                f"{options.get(key)!r}" for key in differing)
            raise MergeError(f"cannot merge {name} with {names[0]}: the numbers are not comparable ({details})")
    seen: dict[str, str] = {}
    results = []
    for document, name in zip(documents, names):
        for row in document["results"]:
            if row["case"] in seen:
                raise MergeError(f"case {row['case']} is in both {seen[row['case']]} and {name}; "
                                 "merge the shards of one sweep, not overlapping runs")
            seen[row["case"]] = name
            results.append(row)
    options = {key: value for key, value in first_options.items() if key != "specbench_shard"}
    return {"fingerprint": documents[0].get("fingerprint", {}), "versions": documents[0].get("versions", {}),
            "options": options,
            "merged_from": [{"run": name, "fingerprint": document.get("fingerprint", {}),
                             "shard": document.get("options", {}).get("specbench_shard"),
                             "pairs": sorted({row["pair"] for row in document["results"]})}
                            for document, name in zip(documents, names)],
            "missing_cases": [case for document in documents for case in document.get("missing_cases", [])],
            "results": results}


def _with_interval(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    low, high = row.get("decode_speedup_ci_low"), row.get("decode_speedup_ci_high")
    return f"{row['decode_speedup']:.2f}" + (f" [{low:.2f}, {high:.2f}]" if low is not None else "")


def _change(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Whether the decode speedup moved beyond noise: the two 95% intervals do not overlap."""
    lows = (old.get("decode_speedup_ci_low"), new.get("decode_speedup_ci_low"))
    if None in lows:
        return "no interval"
    if new["decode_speedup_ci_low"] > old["decode_speedup_ci_high"]:
        return "faster"
    if new["decode_speedup_ci_high"] < old["decode_speedup_ci_low"]:
        return "slower"
    return "within noise"


def compare_lines(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Per case, then per pair: acceptance and decode speedup, old against new."""
    old_rows = {row["case"]: row for row in old["results"]}
    new_rows = {row["case"]: row for row in new["results"]}
    cases = list(dict.fromkeys([*old_rows, *new_rows]))
    table = []
    for case in cases:
        a, b = old_rows.get(case), new_rows.get(case)
        accept = (f"{a['acceptance_rate']:.3f}" if a else "-", f"{b['acceptance_rate']:.3f}" if b else "-",
                  f"{b['acceptance_rate'] - a['acceptance_rate']:+.3f}" if a and b else "")
        ratio = f"{b['decode_speedup'] / a['decode_speedup']:.2f}" if a and b and a["decode_speedup"] else ""
        table.append([case, *accept, _with_interval(a), _with_interval(b), ratio,
                      _change(a, b) if a and b else ("new case" if b else "missing")])
    lines = tabulate(table, headers=("case", "accept old", "accept new", "change", "decode speedup old",
                                     "decode speedup new", "new/old", "speed"), disable_numparse=True).splitlines()
    lines.append("")
    pairs = list(dict.fromkeys(row["pair"] for row in [*old["results"], *new["results"]]))
    per_pair = []
    for pair in pairs:
        common = [case for case in cases if case in old_rows and case in new_rows and old_rows[case]["pair"] == pair]
        if not common:
            continue
        old_speed = geometric_mean([old_rows[case]["decode_speedup"] for case in common])
        new_speed = geometric_mean([new_rows[case]["decode_speedup"] for case in common])
        old_accept = sum(old_rows[case]["acceptance_rate"] for case in common) / len(common)
        new_accept = sum(new_rows[case]["acceptance_rate"] for case in common) / len(common)
        per_pair.append([pair, len(common), f"{old_accept:.3f}", f"{new_accept:.3f}", f"{new_accept - old_accept:+.3f}",
                         f"{old_speed:.2f}" if old_speed else "-", f"{new_speed:.2f}" if new_speed else "-",
                         f"{new_speed / old_speed:.2f}" if old_speed and new_speed else ""])
    lines += tabulate(per_pair, headers=("pair", "cases in both", "mean accept old", "mean accept new", "change",
                                         "geomean decode speedup old", "new", "new/old"),
                      disable_numparse=True).splitlines()
    return lines


def _merge(args: argparse.Namespace) -> int:
    from .atomic import write_atomic
    from .report.summary import csv_text
    from .report.markdown import report_markdown

    documents = [load_run(path) for path in args.runs]
    merged = merge_runs(documents, [str(path) for path in args.runs])
    results, env = merged["results"], {"fingerprint": merged["fingerprint"], "versions": merged["versions"]}
    if args.json:
        write_atomic(args.json, json.dumps(merged, indent=2, allow_nan=False, default=str) + "\n")
    if args.csv:
        write_atomic(args.csv, csv_text(results))
    if args.plots:
        from .report.outputs import write_figures

        write_figures(args.plots, results)
    if args.report:
        command = "python -m pytest_specbench merge " + " ".join(str(path) for path in args.runs)
        write_atomic(args.report, report_markdown(results, merged["options"], env, args.plots, args.report, command))
    print(f"merged {len(results)} case(s) from {len(documents)} run(s)")
    return 0


def _compare(args: argparse.Namespace) -> int:
    print("\n".join(compare_lines(load_run(args.old), load_run(args.new))))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_specbench", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    merge = commands.add_parser("merge", help="merge the JSON of several runs into one set of results")
    merge.add_argument("runs", nargs="+", type=Path, metavar="RUN.json")
    merge.add_argument("--json", type=Path, help="merged JSON")
    merge.add_argument("--csv", type=Path, help="merged CSV")
    merge.add_argument("--report", type=Path, help="Markdown report")
    merge.add_argument("--plots", type=Path, metavar="DIR", help="figures (needs matplotlib)")
    merge.set_defaults(run=_merge)
    compare = commands.add_parser("compare", help="per-case and per-pair differences between two runs")
    compare.add_argument("old", type=Path, metavar="OLD.json")
    compare.add_argument("new", type=Path, metavar="NEW.json")
    compare.set_defaults(run=_compare)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (MergeError, ImportError, OSError) as error:
        print(f"pytest_specbench {args.command}: {error}", file=sys.stderr)
        return 2
