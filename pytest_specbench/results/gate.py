"""Baselines and the regression gate: save a run's results, compare a later run with them.

Typed result rows in (the schema's :class:`.schema.CaseResult`), plain baseline documents in and out, no pytest:
the plugin decides when to save, when to compare and how to fail the session. This module reads and writes
the baseline file and runs the gate; the comparison itself is ``gate_compare.py`` (typed, pure) and the
gate's text ``gate_text.py``. Their public names are importable from here too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..atomic import write_atomic
from ..engine.numbers import is_finite_number
from ..settings.config import result_settings, result_settings_from_raw
from .gate_compare import (
    CASE_SETTINGS,
    CROSS_MACHINE_Z,
    CompareSettings,
    Comparison,
    GatedResult,
    Regression,
    SettingDifference,
    SettingsCheck,
    case_settings,
    check_settings,
    compare,
    compared_count,
    new_cases,
    pair_tolerance,
    pooled_acceptance,
    settings_differences,
    sort_regressions,
)
from .gate_text import StrPath, gate_summary_lines, settings_lines, settings_refusal_text
from .schema import CaseResult, gate_fields
from .strict_json import strict_json

__all__ = [
    "BASELINE_FORMAT",
    "CASE_SETTINGS",
    "CROSS_MACHINE_Z",
    "READABLE_FORMATS",
    "BaselineError",
    "CompareSettings",
    "Comparison",
    "GateOutcome",
    "GatedResult",
    "Regression",
    "SettingDifference",
    "SettingsCheck",
    "baseline_document",
    "case_settings",
    "check_baseline_settings",
    "compare",
    "compared_count",
    "gate_summary_lines",
    "load_baseline",
    "new_cases",
    "pair_tolerance",
    "pooled_acceptance",
    "run_gate",
    "save_baseline",
    "settings_differences",
    "settings_refusal",
]

#: 3: the baseline records the run's result-changing settings ("settings", by option) and each case's own
#: ("settings" of each case entry); 2: neither (read still, with a warning that settings cannot be checked).
BASELINE_FORMAT = 3
READABLE_FORMATS = (2, 3)

# A baseline keeps the schema's gate="compared" fields, checked run to run, and its gate="info"
# timing fields, kept only so a reader sees what the machine did (speed is gated only on request).
# "not-checked": the hf engine under sampling, whose own acceptance rule the per-case check does not re-run.
_VERDICTS = ("lossless", "tie-divergence", "diverged", "not-checked")


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message names the file, the fault and what is expected."""


def _info_number(value: Any) -> float | None:
    # Informational timings: strict JSON has no NaN/Infinity, so anything odd is stored as null.
    return float(value) if is_finite_number(value) else None


def _case_problem(entry: Any) -> str | None:
    """What is wrong with one baseline case entry, or None when it is usable."""
    if not isinstance(entry, dict):
        return f"is {type(entry).__name__}, expected an object"
    if "acceptance_rate" not in entry:
        return "has no acceptance_rate, expected a number in [0, 1]"
    rate = entry["acceptance_rate"]
    if not is_finite_number(rate) or not 0.0 <= rate <= 1.0:
        return f"has acceptance_rate {rate!r}, expected a number in [0, 1]"
    if "tau" not in entry:
        return "has no tau, expected a number"
    if not is_finite_number(entry["tau"]):
        return f"has tau {entry['tau']!r}, expected a number"
    if "lossless" not in entry:
        return "has no lossless, expected true, false, or null for not checked"
    if entry["lossless"] is not None and not isinstance(entry["lossless"], bool):
        return f"has lossless {entry['lossless']!r}, expected true, false, or null for not checked"
    for count in ("accepted_tokens", "drafted_tokens"):
        value = entry.get(count)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"has {count} {value!r}, expected a whole number >= 0"
    if entry["accepted_tokens"] > entry["drafted_tokens"]:
        return "has more accepted_tokens than drafted_tokens"
    if entry.get("verdict") is not None and entry["verdict"] not in _VERDICTS:
        return f"has verdict {entry['verdict']!r}, expected one of {', '.join(_VERDICTS)}"
    if entry.get("speedup") is not None and not is_finite_number(entry["speedup"]):
        return f"has speedup {entry['speedup']!r}, expected a number or null"
    if "settings" in entry and not isinstance(entry["settings"], dict):
        return f"has settings {entry['settings']!r}, expected an object"
    return None


def baseline_document(
    results: Sequence[CaseResult], environment: dict[str, Any], *, created: str | None = None
) -> dict[str, Any]:
    """The baseline of a run: one entry per case key, sorted, with the settings each ran under, plus the run's
    result-changing settings and the fingerprint of the machine it ran on.

    ``environment`` holds ``fingerprint`` and ``versions``, and ``settings`` (as :func:`result_settings`) or the
    run's raw ``options`` (its JSON's, from which they are derived); with neither, no settings are recorded and a
    gate says it cannot check them. ``created`` (ISO 8601) defaults to now, in UTC. Raises ValueError for a result
    row that would make an unusable baseline (a duplicate case key, a missing or invalid gated value), so a bad
    baseline is refused when written rather than when next read.
    """
    cases: dict[str, dict[str, Any]] = {}
    for row in results:
        key = row.case
        if not isinstance(key, str) or not key:
            raise ValueError(f"result row without a case key: {row!r}")
        if key in cases:
            raise ValueError(f"case {key} appears twice in the results; a baseline needs one row per case")
        entry = {field: getattr(row, field) for field in gate_fields("compared")}
        entry.update({field: _info_number(getattr(row, field)) for field in gate_fields("info")})
        entry["settings"] = case_settings(row)
        problem = _case_problem(entry)
        if problem:
            raise ValueError(f"result of case {key} {problem}")
        cases[key] = entry
    settings = environment.get("settings")
    if settings is None and "options" in environment:
        settings = result_settings_from_raw(environment["options"] or {})
    return {
        "format": BASELINE_FORMAT,
        "created": created or datetime.now(UTC).isoformat(timespec="seconds"),
        "fingerprint": environment.get("fingerprint", {}),
        "versions": environment.get("versions", {}),
        "settings": dict(settings or {}),
        "cases": {key: cases[key] for key in sorted(cases)},
    }


def save_baseline(path: StrPath, results: Sequence[CaseResult], environment: dict[str, Any]) -> None:
    """Write the baseline of ``results`` to ``path`` atomically (a reader never sees half a file)."""
    write_atomic(Path(path), strict_json(baseline_document(results, environment)))


def load_baseline(path: StrPath) -> dict[str, Any]:
    """Read and check a baseline written by ``save_baseline``; BaselineError says what is wrong."""
    path = Path(path)
    expected = f"expected a specbench baseline (JSON, format {BASELINE_FORMAT})"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BaselineError(f"baseline {path}: no such file; {expected}") from None
    except UnicodeDecodeError as error:
        raise BaselineError(f"baseline {path}: not UTF-8 text ({error.reason}); {expected}") from None
    except OSError as error:
        raise BaselineError(f"baseline {path}: cannot be read ({error.strerror or error}); {expected}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise BaselineError(
            f"baseline {path}: not valid JSON ({error.msg} at line {error.lineno}, column {error.colno}); {expected}"
        ) from None
    if not isinstance(document, dict):
        raise BaselineError(
            f"baseline {path}: the top level is {type(document).__name__}, expected an object; {expected}"
        )
    found = document.get("format")
    if isinstance(found, bool) or found not in READABLE_FORMATS:
        shown = "no format" if "format" not in document else f"format {found!r}"
        raise BaselineError(
            f"baseline {path}: has {shown}, expected format {BASELINE_FORMAT} "
            f"(write a new one with this version of pytest-specbench)"
        )
    if found >= 3 and not isinstance(document.get("settings"), dict):
        shown = (
            "no settings" if "settings" not in document else f"settings of type {type(document['settings']).__name__}"
        )
        raise BaselineError(
            f'baseline {path}: has {shown}, expected "settings" to be an object mapping options '
            f"to the values the baseline was measured with (format {found})"
        )
    cases = document.get("cases")
    if not isinstance(cases, dict):
        shown = "no cases" if "cases" not in document else f"cases of type {type(cases).__name__}"
        raise BaselineError(
            f'baseline {path}: has {shown}, expected "cases" to be an object mapping case keys to results'
        )
    if not cases:
        raise BaselineError(
            f"baseline {path}: has no cases, so it would gate nothing; expected a baseline saved "
            "from a run with results (--specbench-save-baseline)"
        )
    for key, entry in cases.items():
        problem = _case_problem(entry)
        if problem:
            raise BaselineError(f"baseline {path}: case {key} {problem}")
    return document


def settings_refusal(baseline: Mapping[str, Any], config: Any, baseline_path: StrPath) -> str | None:
    """Why this run may not be gated against ``baseline`` (its run settings differ, under the default
    ``--specbench-gate-differing=refuse``), or None; for a usage error before any model loads."""
    recorded = baseline.get("settings")
    if not recorded or config.gate_differing != "refuse":
        return None
    differences, _ = settings_differences(recorded, result_settings(config))
    if not differences:
        return None
    return settings_refusal_text(baseline_path, differences)


def check_baseline_settings(baseline: Mapping[str, Any], config: Any, baseline_path: StrPath) -> None:
    """Raise BaselineError with :func:`settings_refusal`'s reason, if any."""
    refusal = settings_refusal(baseline, config, baseline_path)
    if refusal:
        raise BaselineError(refusal)


@dataclass(frozen=True)
class GateOutcome:
    """The gate's verdict on a run: the regressions found, what refused the comparison (settings that differ,
    no case compared), and the lines the terminal summary shows."""

    regressions: list[Regression]
    lines: list[str]
    refusals: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.regressions or self.refusals)


def run_gate(
    baseline: Mapping[str, Any],
    results: Sequence[CaseResult],
    baseline_path: StrPath,
    *,
    max_acceptance_drop: float | None = None,
    max_speedup_drop: float | None = None,
    allow_missing: bool | None = None,
    config: Any = None,
) -> GateOutcome:
    """Compare a finished run with its baseline, across machines when the fingerprints differ.

    With ``config`` (the run's SpecbenchConfig), the settings are checked too: the run's result-changing settings
    against those the baseline recorded, and each case's own (:data:`CASE_SETTINGS`). Under
    ``--specbench-gate-differing=refuse`` (the default) any difference fails the gate, listed; under
    ``compare-matching`` only the cases whose settings agree are compared (none, when a run setting no case
    records differs). The limits and ``allow_missing`` default to the config's. A gate that compared no case fails.
    """
    from .fingerprint import fingerprint_differences, machine_fingerprint

    if config is not None:
        max_acceptance_drop = config.max_acceptance_drop if max_acceptance_drop is None else max_acceptance_drop
        max_speedup_drop = config.max_speedup_drop if max_speedup_drop is None else max_speedup_drop
        allow_missing = config.allow_missing if allow_missing is None else allow_missing
    current = result_settings(config) if config is not None else None
    check = check_settings(baseline, results, current, getattr(config, "gate_differing", "refuse"))
    notes, refusals = settings_lines(check, baseline_path, baseline.get("format"))
    differences = fingerprint_differences(baseline.get("fingerprint", {}), machine_fingerprint())
    regressions, compared = list(check.regressions), 0
    if not check.refused:
        limits = CompareSettings(
            max_acceptance_drop=0.02 if max_acceptance_drop is None else max_acceptance_drop,
            max_speedup_drop=max_speedup_drop,
            allow_missing=bool(allow_missing),
            same_machine=not differences,
            run_ks=getattr(config, "ks", None),
            excluded={*check.excluded, *(r.case for r in regressions)},
        )
        comparison = compare(baseline, results, limits)
        regressions, compared = sort_regressions(regressions + comparison.regressions), comparison.compared
    lines = gate_summary_lines(
        regressions,
        new_cases(baseline, results),
        compared,
        baseline_path,
        differences,
        notes=notes,
        refusals=refusals,
        excluded=check.excluded,
    )
    if not refusals and compared == 0 and not regressions:
        refusals.append(f"compared 0 case(s) with {baseline_path}: the gate checked nothing")
    return GateOutcome(regressions, lines, refusals)
