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
from .report.formatting import with_interval
from .results.schema import row_value
from .settings.options import OPTIONS, Option

# What merge compares comes from the option table: every option marked ``changes_results`` (it changes what a
# case measures), by the value it parses to. Shards of one sweep split the matrix by pair, so what may differ
# between them picks or places their part: --specbench-pairs and --specbench-shard (not result-changing, so
# never compared), the output paths, the gating options, --specbench-resume, the cache folder, and the device
# number below.
#: --specbench-gpu is result-changing, but it names devices of the shard's own machine: one sweep over the GPUs
#: of a machine gives each shard its own (cuda:0, cuda:1). So only the kinds must agree (cpu, cuda, mps).
DEVICE_OPTION = "specbench_gpu"
#: The k list sets how far the cost probe measures v(m) (measure/costs.probed_k), hence every row's recommended
#: k and what k=auto may choose, though the option table does not mark it ``changes_results`` (yet).
ALSO_COMPARED = ("specbench_k",)
COMPARED_OPTIONS: tuple[Option, ...] = tuple(option for option in OPTIONS
                                             if option.changes_results or option.dest in ALSO_COMPARED)


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


def compared_value(option: Option, raw: Any) -> Any:
    """What two runs must agree on for ``option``, from the raw value their JSON records (``settings.raw``: as
    given, or the default): the parsed value, so ``0`` and ``0.0`` agree; for the devices, their kinds."""
    if option.flag:
        return bool(raw)  # a flag left out is recorded as absent, one given as true
    if raw is None:
        return None
    try:
        value = option.parse(str(raw).strip())
    except ValueError:
        return raw  # a file that is not on this machine (--specbench-prompt-file): its name must agree
    return sorted({device.split(":")[0] for device in value}) if option.dest == DEVICE_OPTION else value


def _check_comparable(documents: Sequence[dict[str, Any]], names: Sequence[str]) -> None:
    first = documents[0].get("options", {})
    for document, name in zip(documents[1:], names[1:]):
        options = document.get("options", {})
        differing = [option.dest for option in COMPARED_OPTIONS if compared_value(option, options.get(option.dest))
                     != compared_value(option, first.get(option.dest))]
        if differing:
            details = "; ".join(f"{key}: {names[0]} has {first.get(key)!r}, {name} has {options.get(key)!r}"
                                for key in differing)
            raise MergeError(f"cannot merge {name} with {names[0]}: the numbers are not comparable ({details})")


def _shared_options(documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The options every run recorded alike; what differs (the shard, a shard's own pairs, devices or paths)
    would be one run's value in the merged record, so it stays under each run's ``merged_from`` or is left out."""
    first = documents[0].get("options", {})
    return {key: value for key, value in first.items() if key != "specbench_shard"
            and all(document.get("options", {}).get(key) == value for document in documents[1:])}


def merge_runs(documents: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """One document from several; raises MergeError on incomparable options or a case in two runs."""
    _check_comparable(documents, names)
    seen: dict[str, str] = {}
    results = []
    for document, name in zip(documents, names):
        for row in document["results"]:
            if row["case"] in seen:
                raise MergeError(f"case {row['case']} is in both {seen[row['case']]} and {name}; "
                                 "merge the shards of one sweep, not overlapping runs")
            seen[row["case"]] = name
            results.append(row)
    return {"fingerprint": documents[0].get("fingerprint", {}), "versions": documents[0].get("versions", {}),
            "options": _shared_options(documents),
            "merged_from": [{"run": name, "fingerprint": document.get("fingerprint", {}),
                             "shard": document.get("options", {}).get("specbench_shard"),
                             "pairs": sorted({row["pair"] for row in document["results"]})}
                            for document, name in zip(documents, names)],
            "missing_cases": [case for document in documents for case in document.get("missing_cases", [])],
            "results": results}


def _with_interval(row: dict[str, Any] | None) -> str:
    return "-" if row is None else with_interval(row)


def _change(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Whether the decode speedup moved beyond noise: the two 95% intervals do not overlap."""
    lows = (row_value(old, "decode_speedup_ci_low"), row_value(new, "decode_speedup_ci_low"))
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
    from .report.outputs import OutputPaths, write_outputs

    documents = [load_run(path) for path in args.runs]
    merged = merge_runs(documents, [str(path) for path in args.runs])
    command = "python -m pytest_specbench merge " + " ".join(str(path) for path in args.runs)
    paths = OutputPaths(csv=args.csv, json=args.json, figures=args.plots, report=args.report)
    _, errors = write_outputs(paths, merged, command)
    print(f"merged {len(merged['results'])} case(s) from {len(documents)} run(s)")
    for error in errors:
        print(f"pytest_specbench merge: {error}", file=sys.stderr)
    return 2 if errors else 0


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
