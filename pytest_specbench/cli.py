"""``python -m pytest_specbench``: merge runs, compare two runs, and the tools (verify-curve, gpu-check).

merge: the JSON of several runs (the shards of a CI job matrix) become one JSON, CSV, report and
set of figures, refused when the runs' options make their numbers incomparable.
compare: per case and per pair, acceptance and decode speedup (with intervals) of an old and a new run.
verify-curve, gpu-check: the tools a user runs (tools/); each registers its own subcommand here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from .report.analysis import geometric_mean
from .report.formatting import with_interval
from .report.summary import run_document
from .results.log import row_problem
from .results.run_document import RunDocument
from .results.schema import CaseResult
from .settings.options import OPTIONS, Option, current_setting_names, default_of, parse_output_path
from .tools import gpu_check, verify_curve

# What merge compares comes from the option table: every option marked ``changes_results`` (it changes what a
# case measures), by the value it parses to. Shards of one sweep split the matrix by pair, so what may differ
# between them picks or places their part: --specbench-pairs and --specbench-shard (not result-changing, so
# never compared), the output paths, the gating options, --specbench-resume, the cache folder, and the device
# number below.
#: --specbench-gpu is result-changing, but it names devices of the shard's own machine: one sweep over the GPUs
#: of a machine gives each shard its own (cuda:0, cuda:1). So only the kinds must agree (cpu, cuda, mps).
DEVICE_OPTION = "specbench_gpu"
COMPARED_OPTIONS: tuple[Option, ...] = tuple(option for option in OPTIONS if option.changes_results)
_K_OPTION = next(option for option in OPTIONS if option.dest == "specbench_k")


class MergeError(ValueError):
    """Runs that cannot be merged, with the reason."""


def load_run(path: Path) -> dict[str, Any]:
    """A run's JSON, each row checked against the schema as ``--specbench-resume`` checks a log's
    (:func:`~.results.log.row_problem`): MergeError names the file, the row and the field. :func:`run_results`
    then reads its rows typed."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise MergeError(f"{path}: not a readable specbench JSON ({error})") from None
    if not isinstance(document, dict) or not isinstance(document.get("results"), list):
        raise MergeError(f"{path}: no 'results' list; is it a --specbench-json file?")
    accepted = "accepted: the JSON of a pytest-specbench run (--specbench-json, or merge --json)"
    for index, row in enumerate(document["results"]):
        if not isinstance(row, dict):
            raise MergeError(f"{path}: results[{index}]: a {type(row).__name__}, not an object; {accepted}")
        problem = row_problem(row)
        if problem:
            raise MergeError(f"{path}: results[{index}] (case {row.get('case')!r}): {problem}; {accepted}")
    return document


def run_results(document: dict[str, Any]) -> list[CaseResult]:
    """The rows of a run's JSON (checked by :func:`load_run`) as the schema's typed results."""
    return [CaseResult.from_row(row) for row in document["results"]]


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
    if option.dest == DEVICE_OPTION:
        return sorted({device.split(":")[0] for device in value})
    return sorted(value, key=repr) if option.order_free else value


def differing_options(
    first: dict[str, Any], other: dict[str, Any], options: Sequence[Option] = COMPARED_OPTIONS
) -> list[Option]:
    """The ``options`` to which two runs' recorded options (their JSON's ``options``) give different meanings; a
    value recorded under an option's earlier name reads as the option's."""
    first, other = current_setting_names(first.get("options", {})), current_setting_names(other.get("options", {}))
    return [
        option
        for option in options
        if compared_value(option, other.get(option.dest)) != compared_value(option, first.get(option.dest))
    ]


def setting_differences(
    first: dict[str, Any],
    other: dict[str, Any],
    first_name: str,
    other_name: str,
    options: Sequence[Option] = COMPARED_OPTIONS,
) -> list[str]:
    """``"specbench_k: a has '1,4', b has '1,2'"`` for each of :func:`differing_options`."""
    recorded = current_setting_names(first.get("options", {})), current_setting_names(other.get("options", {}))
    return [
        f"{option.dest}: {first_name} has {recorded[0].get(option.dest)!r}, "
        f"{other_name} has {recorded[1].get(option.dest)!r}"
        for option in differing_options(first, other, options)
    ]


def _machines(document: dict[str, Any], name: str) -> list[tuple[str, dict[str, Any]]]:
    """The fingerprints a run's numbers come from: each merged run's, or the run's own; then the machine of
    each earlier run whose rows --specbench-resume replayed (``resumed_from``)."""
    merged = [
        (f"{name} ({source.get('run')})", source.get("fingerprint") or {})
        for source in document.get("merged_from") or []
        if isinstance(source, dict)
    ]
    resumed = [
        (
            f"{name} (rows resumed from {group.get('log')}, started {group.get('started')})",
            group.get("fingerprint") or {},
        )
        for group in document.get("resumed_from") or []
        if isinstance(group, dict)
    ]
    return (merged or [(name, document.get("fingerprint") or {})]) + resumed


def machine_differences(documents: Sequence[dict[str, Any]], names: Sequence[str]) -> list[str]:
    """``"b ran on another machine than a: cpu_capability 'AVX2' -> 'AVX512'"`` for each fingerprint that differs
    from the first run's (a merged run's sources included), in the entries that decide numerics."""
    from .results.fingerprint import fingerprint_differences

    machines = [machine for document, name in zip(documents, names) for machine in _machines(document, name)]
    (first_name, first), lines = machines[0], []
    for name, fingerprint in machines[1:]:
        differences = fingerprint_differences(first, fingerprint)
        if differences:
            lines.append(f"{name} ran on another machine than {first_name}: {'; '.join(differences)}")
    return lines


def _few_rows_states(document: dict[str, Any]) -> set[str]:
    """Whether the run's native rows ran the few-rows kernel: ``"ran"``, or each reason it did not."""
    from .kernels.names import few_rows_built

    recorded = {row.few_rows_kernel for row in run_results(document) if row.few_rows_kernel}
    return {"ran" if few_rows_built(value) else value for value in recorded}


def kernel_differences(first: dict[str, Any], other: dict[str, Any], first_name: str, other_name: str) -> list[str]:
    """``"few-rows kernel: a ran it, b did not (could not build ...)"`` where one run's rows ran the few-rows
    kernel and the other's fell back to torch's kernels (another build on another machine is the machine's
    difference, named apart)."""
    states = _few_rows_states(first), _few_rows_states(other)
    if not states[0] or not states[1] or states[0] == states[1]:
        return []

    def said(state: set[str]) -> str:
        return "; ".join("ran it" if key == "ran" else f"did not ({key})" for key in sorted(state))

    return [f"few-rows kernel: {first_name} {said(states[0])}, {other_name} {said(states[1])}"]


def check_comparable(
    documents: Sequence[dict[str, Any]],
    names: Sequence[str],
    action: str = "merge",
    force: bool = False,
    refusals: Sequence[str] = (),
) -> list[str]:
    """Merge's and compare's one check: the result-changing settings in which each run differs from the first,
    which make their numbers incomparable. MergeError naming them (after ``refusals``, compare's other reasons)
    unless ``force``."""
    found = []
    for document, name in zip(documents[1:], names[1:]):
        differing = setting_differences(documents[0], document, names[0], name)
        differing += kernel_differences(documents[0], document, names[0], name)
        reasons = [*refusals, f"the numbers are not comparable ({'; '.join(differing)})"] if differing else refusals
        if reasons and not force:
            raise MergeError(
                f"cannot {action} {name} with {names[0]}: {'; and '.join(reasons)}; pass --force to {action} them "
                "anyway"
            )
        found += differing
    return found


def _shared_options(documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The options every run recorded alike; what differs (the shard, a shard's own pairs, devices or paths)
    would be one run's value in the merged record, so it stays under each run's ``merged_from`` or is left out."""
    first = documents[0].get("options", {})
    return {
        key: value
        for key, value in first.items()
        if key != "specbench_shard" and all(document.get("options", {}).get(key) == value for document in documents[1:])
    }


def merge_runs(documents: Sequence[dict[str, Any]], names: Sequence[str], *, force: bool = False) -> RunDocument:
    """One document from several; raises MergeError on incomparable options (unless ``force``: the merged record
    then keeps only the options the runs share) or a case in two runs. Each row keeps its machine: its run's
    (``merged_from``), or, for a row a run replayed from a results log, the earlier run's
    (``resumed_from``)."""
    check_comparable(documents, names, force=force)
    rows = [run_results(document) for document in documents]
    seen: dict[str, str] = {}
    results = []
    for run_rows, name in zip(rows, names):
        for row in run_rows:
            if row.case in seen:
                raise MergeError(
                    f"case {row.case} is in both {seen[row.case]} and {name}; "
                    "merge the shards of one sweep, not overlapping runs"
                )
            seen[row.case] = name
            results.append(row)
    env = {"fingerprint": documents[0].get("fingerprint", {}), "versions": documents[0].get("versions", {})}
    missing = [case for document in documents for case in document.get("missing_cases", [])]
    resumed = [case for document in documents for case in document.get("resumed_cases") or []]
    merged = run_document(results, _shared_options(documents), env, missing, resumed=resumed)
    merged.merged_from = [
        {
            "run": name,
            "fingerprint": document.get("fingerprint", {}),
            "shard": document.get("options", {}).get("specbench_shard"),
            "pairs": sorted({row.pair for row in run_rows}),
        }
        for document, run_rows, name in zip(documents, rows, names)
    ]
    # A replayed row keeps the machine of the run that measured it, not its shard's: each group names its run.
    merged.resumed_from = [
        {**group, "run": group.get("run", name)}
        for document, name in zip(documents, names)
        for group in document.get("resumed_from") or []
        if isinstance(group, dict)
    ]
    return merged


def _with_interval(row: CaseResult | None) -> str:
    return "-" if row is None else with_interval(row)


def _change(old: CaseResult, new: CaseResult) -> str:
    """Whether the decode speedup moved beyond noise: the two 95% intervals do not overlap."""
    if old.decode_speedup_ci_low is None or new.decode_speedup_ci_low is None:
        return "no interval"
    if new.decode_speedup_ci_low > old.decode_speedup_ci_high:
        return "faster"
    if new.decode_speedup_ci_high < old.decode_speedup_ci_low:
        return "slower"
    return "within noise"


def compare_lines(old: Sequence[CaseResult], new: Sequence[CaseResult], incomparable: Sequence[str] = ()) -> list[str]:
    """Per case, then per pair: acceptance and decode speedup, the old run's rows against the new run's.
    ``incomparable`` (what differs, compared anyway under --force) is named on every line that sets one run's
    numbers against the other's, so no such line is read alone as a change."""
    old_rows = {row.case: row for row in old}
    new_rows = {row.case: row for row in new}
    pairs = list(dict.fromkeys(row.pair for row in [*old, *new]))
    in_both = [case in old_rows and case in new_rows for case in dict.fromkeys([*old_rows, *new_rows])]
    cases = _warned(*_case_lines(old_rows, new_rows), incomparable, in_both)
    per_pair = _pair_lines(old_rows, new_rows, pairs)  # each row over the cases both runs have
    return [*cases, "", *_warned(*per_pair, incomparable, [True] * len(per_pair[0]))]


def _warned(
    rows: list[list[Any]], headers: Sequence[str], incomparable: Sequence[str], in_both: Sequence[bool]
) -> list[str]:
    """The table as text; with ``incomparable``, a last column naming it on each row that sets both runs' numbers
    side by side (``in_both``)."""
    if incomparable:
        warning = f"not comparable: {', '.join(incomparable)}"
        rows = [[*row, warning if both else ""] for row, both in zip(rows, in_both)]
        headers = (*headers, "warning")
    return tabulate(rows, headers=headers, disable_numparse=True).splitlines()


def _case_lines(old: dict[str, CaseResult], new: dict[str, CaseResult]) -> tuple[list[list[Any]], Sequence[str]]:
    """One row per case of either run: acceptance old, new and its change; decode speedup old, new, their ratio
    and whether it moved beyond noise."""
    table = []
    for case in dict.fromkeys([*old, *new]):
        a, b = old.get(case), new.get(case)
        accept = (
            f"{a.acceptance_rate:.3f}" if a else "-",
            f"{b.acceptance_rate:.3f}" if b else "-",
            f"{b.acceptance_rate - a.acceptance_rate:+.3f}" if a and b else "",
        )
        ratio = f"{b.decode_speedup / a.decode_speedup:.2f}" if a and b and a.decode_speedup else ""
        change = _change(a, b) if a and b else ("new case" if b else "missing")
        table.append([case, *accept, _with_interval(a), _with_interval(b), ratio, change])
    headers = (
        "case",
        "accept old",
        "accept new",
        "change",
        "decode speedup old",
        "decode speedup new",
        "new/old",
        "speed",
    )
    return table, headers


def _pair_lines(
    old: dict[str, CaseResult], new: dict[str, CaseResult], pairs: Sequence[str]
) -> tuple[list[list[Any]], Sequence[str]]:
    """One row per pair over the cases both runs have: mean acceptance and geometric-mean decode speedup."""
    per_pair = []
    for pair in pairs:
        common = [case for case in old if case in new and old[case].pair == pair]
        if not common:
            continue
        old_speed = geometric_mean([old[case].decode_speedup for case in common])
        new_speed = geometric_mean([new[case].decode_speedup for case in common])
        old_accept = sum(old[case].acceptance_rate for case in common) / len(common)
        new_accept = sum(new[case].acceptance_rate for case in common) / len(common)
        per_pair.append(
            [
                pair,
                len(common),
                f"{old_accept:.3f}",
                f"{new_accept:.3f}",
                f"{new_accept - old_accept:+.3f}",
                f"{old_speed:.2f}" if old_speed else "-",
                f"{new_speed:.2f}" if new_speed else "-",
                f"{new_speed / old_speed:.2f}" if old_speed and new_speed else "",
            ]
        )
    headers = (
        "pair",
        "cases in both",
        "mean accept old",
        "mean accept new",
        "change",
        "geomean decode speedup old",
        "new",
        "new/old",
    )
    return per_pair, headers


def _sampling(document: dict[str, Any]) -> float:
    """The run's temperature (0: greedy), from its options, else its rows."""
    option = next(option for option in OPTIONS if option.dest == "specbench_temperature")
    value = compared_value(option, document.get("options", {}).get(option.dest))
    if value is None:
        value = next((row.temperature for row in run_results(document) if row.temperature), 0.0)
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")  # unreadable: differs from any other, so it is named


def comparison_header(
    old: dict[str, Any], new: dict[str, Any], old_name: str, new_name: str, force: bool = False
) -> list[str]:
    """The lines ``compare`` prints first: every setting and machine entry in which the runs differ. Raises
    MergeError for what cannot be compared (greedy against sampled decoding; speed timed on other machines)
    unless ``force``; result-changing settings that differ are refused as merge refuses them
    (:func:`check_comparable`)."""
    machines = machine_differences([old, new], [old_name, new_name])
    modes = ["greedily" if t == 0 else f"by sampling (temperature {t:g})" for t in (_sampling(old), _sampling(new))]
    refusals = []
    if (modes[0] == "greedily") != (modes[1] == "greedily"):
        refusals.append(
            f"{old_name} decoded {modes[0]} and {new_name} {modes[1]}, so acceptance and speed measure different things"
        )
    if machines:
        refusals.append(f"their speedups were timed on different machines ({'; '.join(machines)})")
    settings = check_comparable([old, new], [old_name, new_name], "compare", force, refusals)
    lines = [f"settings differ (compared anyway: --force): {difference}" for difference in settings]
    lines += [
        f"k lists differ ({difference}): they choose the cases, and each case's k is in its id; how far each run's "
        "cost probe measured, which the list sets, is in its rows (a recommended k, a schedule's range)"
        for difference in setting_differences(old, new, old_name, new_name, [_K_OPTION])
    ]
    lines += [f"machines differ: {difference}" for difference in machines]
    lines += [f"compared anyway (--force): {refusal}" for refusal in refusals]
    return (lines or ["same settings and machine: every result-changing option and the fingerprint agree"]) + [""]


def incomparable(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What makes two runs' numbers incomparable, as each compared line names it: the differing result-changing
    settings, and ``machine`` when the speedups were timed on different machines."""
    machine = ["machine"] if machine_differences([old, new], ["old", "new"]) else []
    kernel = ["few_rows_kernel"] if kernel_differences(old, new, "old", "new") else []
    return [option.dest for option in differing_options(old, new)] + kernel + _forms_differ(old, new) + machine


def _forms_differ(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``["kernel_forms"]`` where a case of both runs ran other forms in each (other bits: tokens and acceptance
    may differ for that alone)."""
    before = {row.case: row.kernel_forms for row in run_results(old) if row.kernel_forms}
    after = {row.case: row.kernel_forms for row in run_results(new) if row.kernel_forms}
    return ["kernel_forms"] if any(before[case] != after[case] for case in before.keys() & after.keys()) else []


_OUTPUTS = (("--json", "json"), ("--csv", "csv"), ("--report", "report"), ("--plots", "plots"))


def check_merge_outputs(runs: Sequence[Path], outputs: dict[str, Path | None], require: bool = True) -> None:
    """MergeError, before anything is written, for two outputs on one path, an output on one of the runs it
    merges (symbolic links followed), or (``require``) a merge that would write nothing."""
    given = [(flag, path) for flag, path in outputs.items() if path is not None]
    if not given and require:
        raise MergeError(
            "nothing written: give at least one of --json, --csv, --report and --plots (the runs "
            "merge; merge writes only the outputs it is asked for)"
        )
    inputs = {os.path.realpath(run): run for run in runs}
    seen: dict[str, str] = {}
    for flag, path in given:
        where = os.path.realpath(path)
        if where in inputs:
            raise MergeError(
                f"{flag} {path} is {inputs[where]}, one of the runs merged, and would overwrite it; "
                "give the merged output a path of its own"
            )
        if where in seen:
            raise MergeError(
                f"{seen[where]} and {flag} name the same file, {path}, and one would overwrite the other; "
                "give each output a path of its own"
            )
        seen[where] = flag


def _output_file(raw: str) -> Path:
    """argparse type of a file output: a folder (a trailing slash, an existing one) or a path no system takes
    is a usage error, as the same option is in pytest."""
    try:
        path = parse_output_path(raw)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).replace(", or empty to disable", "")) from None
    if path is None:
        raise argparse.ArgumentTypeError(f"{raw!r} names no file; accepted: a file path")
    return path


def _merge(args: argparse.Namespace) -> int:
    from .report.outputs import OutputPaths, write_outputs

    outputs = {flag: getattr(args, name) for flag, name in _OUTPUTS}
    check_merge_outputs(args.runs, outputs, require=False)
    documents = [load_run(path) for path in args.runs]
    names = [str(path) for path in args.runs]
    merged = merge_runs(documents, names, force=args.force)
    check_merge_outputs(args.runs, outputs)  # after the runs are checked: a merge with no output still checks them
    for line in check_comparable(documents, names, force=True):
        print(f"settings differ (merged anyway: --force): {line}")
    for line in machine_differences(documents, names):
        print(f"machines differ: {line}")
    command = "python -m pytest_specbench merge " + " ".join(str(path) for path in args.runs)
    paths = OutputPaths(csv=args.csv, json=args.json, figures=args.plots, report=args.report)
    _, errors = write_outputs(paths, merged, command)
    print(f"merged {len(merged.results)} case(s) from {len(documents)} run(s)")
    for error in errors:
        print(f"pytest_specbench merge: {error}", file=sys.stderr)
    return 2 if errors else 0


def compared_runs(names: Sequence[str], last: bool, history_dir: Path) -> tuple[Path, Path]:
    """The JSON files of the two runs ``compare`` names, each a JSON file, a run folder, or a run number of the
    history (``3``, ``0003``); ``--last`` alone is :func:`last_readable_runs`'. Raises MergeError."""
    from .results import history

    try:
        if last:
            raise MergeError("give --last or two runs, not both")
        if len(names) != 2:
            raise MergeError(
                f"give two runs to compare (JSON files, run folders or run numbers of the history "
                f"{history_dir}), or --last; got {len(names)}"
            )
        paths = []
        for name in names:
            path = Path(name)
            if path.is_dir():
                path = path / history.JSON
            elif name.isdigit() and not path.exists():
                path = history.find_run(history_dir, name)
            paths.append(path)
        return paths[0], paths[1]
    except history.HistoryError as error:
        raise MergeError(str(error)) from None


def last_readable_runs(history_dir: Path) -> tuple[list[tuple[Path, dict[str, Any]]], list[str]]:
    """``compare --last``: the two latest runs of the history whose JSON reads, oldest first, and a line for each
    later one that does not (a damaged entry must not stop every later comparison). Raises MergeError."""
    from .results import history

    try:
        history.last_runs(history_dir)  # fewer than two runs: its message
        jsons = history.run_jsons(history_dir)
    except history.HistoryError as error:
        raise MergeError(str(error)) from None
    found: list[tuple[Path, dict[str, Any]]] = []
    skipped: list[str] = []
    for path in reversed(jsons):
        try:
            found.insert(0, (path, load_run(path)))
        except MergeError as error:
            skipped.append(f"skipped {history.number_of(path.parent):04d}: {error}")
        if len(found) == 2:
            return found, skipped
    raise MergeError(
        f"the history {history_dir} holds fewer than 2 readable runs ({'; '.join(skipped)}); name two runs to "
        "compare by number or path"
    )


def _compare(args: argparse.Namespace) -> int:
    if args.last and not args.runs:
        runs, skipped = last_readable_runs(args.history)
        (old_path, old), (new_path, new) = runs
        for line in skipped:
            print(f"{line}; compared the latest readable runs (name two runs by number to choose others)")
    else:
        old_path, new_path = compared_runs(args.runs, args.last, args.history)
        old, new = load_run(old_path), load_run(new_path)
    print(f"old: {old_path}\nnew: {new_path}")
    header = comparison_header(old, new, str(old_path), str(new_path), force=getattr(args, "force", False))
    print("\n".join(header + compare_lines(run_results(old), run_results(new), incomparable(old, new))))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_specbench", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    merge = commands.add_parser("merge", help="merge the JSON of several runs into one set of results")
    merge.add_argument("runs", nargs="+", type=Path, metavar="RUN.json")
    merge.add_argument("--json", type=_output_file, help="merged JSON")
    merge.add_argument("--csv", type=_output_file, help="merged CSV")
    merge.add_argument("--report", type=_output_file, help="Markdown report")
    merge.add_argument("--plots", type=Path, metavar="DIR", help="figures (needs matplotlib)")
    merge.add_argument(
        "--force",
        action="store_true",
        help="merge runs whose result-changing options differ (the differences are printed first)",
    )
    merge.set_defaults(run=_merge)
    compare = commands.add_parser("compare", help="per-case and per-pair differences between two runs")
    compare.add_argument(
        "runs",
        nargs="*",
        metavar="RUN",
        help="two runs, old then new: each a JSON file, a run folder, or a run number of the history (0003)",
    )
    compare.add_argument("--last", action="store_true", help="the two latest runs of the history")
    history = default_of("history_dir")
    compare.add_argument(
        "--history",
        type=Path,
        default=Path(history),
        metavar="DIR",
        help=f"the run history (default {history}, as --specbench-history)",
    )
    compare.add_argument(
        "--force",
        action="store_true",
        help="compare greedy with sampled runs, or runs of "
        "different machines (the differences are printed first either way)",
    )
    compare.set_defaults(run=_compare)
    for tool in (verify_curve, gpu_check):
        tool.add_parser(commands)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (MergeError, ImportError, OSError) as error:
        print(f"pytest_specbench {args.command}: {error}", file=sys.stderr)
        return 2
