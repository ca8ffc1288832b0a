"""The regression gate's words: the terminal section of its outcome, and the notes and refusals about settings.

Text only, from the typed outcome of ``gate_compare.py``; ``gate.py`` runs the gate and keeps these lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any

from tabulate import tabulate

from .gate_compare import (
    CROSS_MACHINE_Z,
    SUSPECT_SPEEDUP,
    Regression,
    SettingDifference,
    SettingsCheck,
    shown_value,
)

StrPath = str | PathLike[str]

_ADVICE = (
    "gate against a baseline saved with this run's settings (--specbench-save-baseline), run with the "
    "baseline's, or pass --specbench-gate-differing=compare-matching to gate only the cases whose settings "
    "agree"
)


def _described(differences: Sequence[SettingDifference]) -> str:
    return "; ".join(difference.describe() for difference in differences)


def settings_refusal_text(baseline_path: StrPath, differences: Sequence[SettingDifference]) -> str:
    """The usage error of a run whose settings differ from its baseline's, before any model loads."""
    return (
        f"--specbench-baseline={baseline_path}: the baseline was measured with other settings "
        f"({_described(differences)}), so its numbers are not this run's to compare with; {_ADVICE}"
    )


def settings_lines(check: SettingsCheck, baseline_path: StrPath, baseline_format: Any) -> tuple[list[str], list[str]]:
    """The notes (what could not be checked, what is left out) and the refusals of the settings check."""
    notes, refusals = [], []
    if not check.recorded:
        notes.append(
            f"the baseline {baseline_path} records no settings (format {baseline_format}, written "
            "by an older pytest-specbench): whether it was measured with this run's settings cannot be "
            "checked; save it again with --specbench-save-baseline to have them checked"
        )
    elif check.unrecorded:
        notes.append(f"the baseline {baseline_path} does not record {', '.join(check.unrecorded)}: not checked")
    if check.refused:
        refusals.append(
            f"the baseline {baseline_path} was measured with other settings "
            f"({_described(check.run_differences)}): not compared; {_ADVICE}"
        )
    elif check.run_differences:
        notes.append(
            f"the baseline {baseline_path} was measured with other settings "
            f"({_described(check.run_differences)}): only the cases whose own settings "
            "agree are compared (--specbench-gate-differing=compare-matching)"
        )
    return notes, refusals


def _allowed(regression: Regression) -> str:
    if regression.kind in ("acceptance", "pair acceptance") and regression.limit is not None:
        return f"drop <= {regression.limit:.3f}"
    if regression.kind == "speedup" and regression.limit is not None:
        return f"drop <= {regression.limit:.1%}"
    if regression.kind == SUSPECT_SPEEDUP:
        return "decode speedup <= tau"
    if regression.kind == "lossless":
        return "lossless"
    if regression.kind == "missing":
        return "present, or --specbench-allow-missing"
    if regression.kind == "settings":
        return "the same settings"
    return ""


def _listed(items: Sequence[str], shown: int = 10) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def _verdict_line(regressions: Sequence[Regression], compared: int, baseline_path: StrPath) -> str:
    if compared == 0:
        return (
            f"compared 0 case(s) with {baseline_path}: the gate checked nothing, which fails it, "
            "--specbench-allow-missing or not (no case of this run has a result and a baseline entry "
            "measured alike): gate against a baseline of this matrix, or leave --specbench-baseline off"
        )
    if not regressions:
        return f"compared {compared} case(s) with {baseline_path}: no regression"
    failing = len({regression.case for regression in regressions})
    return f"compared {compared} case(s) with {baseline_path}: {len(regressions)} regression(s) in {failing} case(s)"


def _table(regressions: Sequence[Regression]) -> list[str]:
    if not regressions:
        return []
    table = [
        (
            r.case,
            r.kind,
            *(
                ("present", r.cause or "-")
                if r.kind == "missing"
                else (shown_value(r.kind, r.old), shown_value(r.kind, r.new))
            ),
            _allowed(r),
        )
        for r in regressions
    ]
    # disable_numparse: values are already formatted; tabulate must not reformat "0.640".
    return tabulate(table, headers=("case", "check", "baseline", "now", "allowed"), disable_numparse=True).splitlines()


def _missing_lines(regressions: Sequence[Regression]) -> list[str]:
    missing = [r for r in regressions if r.kind == "missing"]
    if not missing:
        return []
    causes: dict[str, int] = {}
    for regression in missing:
        for cause in regression.cause.split(", "):
            causes[cause] = causes.get(cause, 0) + 1
    counted = ", ".join(f"{cause}: {count}" for cause, count in causes.items())
    return [
        f"{len(missing)} baseline case(s) have no result in this run ({counted}): "
        f"{'; '.join(r.describe() for r in missing[:3])}{' ...' if len(missing) > 3 else ''}; "
        "pass --specbench-allow-missing to gate only the cases both runs have"
    ]


def _ungated_lines(excluded: Mapping[str, Sequence[SettingDifference]] | None, new_cases: Sequence[str]) -> list[str]:
    lines = []
    if excluded:
        shown = [f"{case} ({', '.join(d.describe() for d in differences)})" for case, differences in excluded.items()]
        lines.append(
            f"{len(excluded)} case(s) not compared, measured with other settings than the baseline's "
            f"(--specbench-gate-differing=compare-matching): {_listed(shown, 3)}"
        )
    if new_cases:
        lines.append(f"{len(new_cases)} case(s) not in the baseline, not gated: {_listed(list(new_cases))}")
    return lines


def gate_summary_lines(
    regressions: Sequence[Regression],
    new_cases: Sequence[str],
    compared: int,
    baseline_path: StrPath,
    machine_differences: Sequence[str] = (),
    *,
    notes: Sequence[str] = (),
    refusals: Sequence[str] = (),
    excluded: Mapping[str, Sequence[SettingDifference]] | None = None,
) -> list[str]:
    """The terminal section of the gate: what could not be checked and what differs, the machine check, the
    verdict (a refusal, or a count and a table of regressions), the missing cases' causes, the ungated cases."""
    lines = list(notes)
    if machine_differences:
        lines.append(
            f"the baseline was recorded on another machine ({'; '.join(machine_differences)}): "
            "acceptance is compared per pair, pooled over its cases, within "
            f"{CROSS_MACHINE_Z:g} binomial standard errors; losslessness per case; speed not at all"
        )
    lines += refusals
    if refusals:
        return lines
    lines.append(_verdict_line(regressions, compared, baseline_path))
    return lines + _table(regressions) + _missing_lines(regressions) + _ungated_lines(excluded, new_cases)
