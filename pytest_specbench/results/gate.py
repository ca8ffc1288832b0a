"""Baselines and the regression gate: save a run's results, compare a later run with them.

Plain data in and out (result rows are the dicts ``runner.run_case`` returns), no pytest:
the plugin decides when to save, when to compare and how to fail the session.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from os import PathLike
from pathlib import Path
from typing import Any

from tabulate import tabulate

from ..atomic import write_atomic
from ..settings.config import result_settings, result_settings_from_raw
from .schema import gate_fields
from .strict_json import strict_json

#: 3: the baseline records the run's result-changing settings ("settings", by option) and each case's own
#: ("settings" of each case entry); 2: neither (read still, with a warning that settings cannot be checked).
BASELINE_FORMAT = 3
READABLE_FORMATS = (2, 3)

#: What each case entry records of the settings it ran under, from its row: they may differ case to case (a pair's
#: own dtype, the engine, the device) or follow from a run's option, named here, which is then checked per case.
CASE_SETTINGS: dict[str, str | None] = {
    "engine": None,
    "new_tokens": "--specbench-max-new-tokens",
    "prompt_tokens": "--specbench-context-tokens",
    "temperature": "--specbench-temperature",
    "top_p": "--specbench-top-p",
    "top_k": "--specbench-top-k",
    "dtype": "--specbench-dtype",
    "device": "--specbench-gpu",
}
#: A schedule's case (k=auto, heuristic) also depends on how far the cost probe measured: the k list and new tokens.
_SCHEDULE_SETTING = "verify_positions"
#: Run settings not compared run to run: the devices by kind per case (cuda:0 and cuda:1 agree; an empty list means
#: the machine's default), as each case's "device" records it.
_PER_CASE_ONLY = ("--specbench-gpu",)

#: Across machines a pair's pooled acceptance may drop by this many binomial standard errors,
#: sqrt(p(1-p)/drafted), before the gate fails (and never by less than --specbench-max-acceptance-drop).
#: Chosen from the measured cross-capability spread: see docs/ci-gating.md, "Gating across machines".
CROSS_MACHINE_Z = 3.0

# A baseline keeps the schema's gate="compared" fields, checked run to run, and its gate="info"
# timing fields, kept only so a reader sees what the machine did (speed is gated only on request).
# "not-checked": the hf engine under sampling, whose own acceptance rule the per-case check does not re-run.
_VERDICTS = ("lossless", "tie-divergence", "diverged", "not-checked")

# Absorbs floating noise so a drop of exactly the allowed amount (0.812 - 0.792 is
# 0.0200000000000000018) is not flagged.
_EPSILON = 1e-9

# Regressions of one case are listed in this order (the most serious first).
_KIND_ORDER = {"settings": 0, "lossless": 1, "acceptance": 2, "pair acceptance": 3, "speedup": 4, "missing": 5}

StrPath = str | PathLike[str]


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message names the file, the fault and what is expected."""


def _is_number(value: Any) -> bool:
    # bool is an int to Python, but ``true`` is no acceptance rate; NaN/inf never compare sensibly.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _info_number(value: Any) -> float | None:
    # Informational timings: strict JSON has no NaN/Infinity, so anything odd is stored as null.
    return float(value) if _is_number(value) else None


def _case_problem(entry: Any) -> str | None:
    """What is wrong with one baseline case entry, or None when it is usable."""
    if not isinstance(entry, dict):
        return f"is {type(entry).__name__}, expected an object"
    if "acceptance_rate" not in entry:
        return "has no acceptance_rate, expected a number in [0, 1]"
    rate = entry["acceptance_rate"]
    if not _is_number(rate) or not 0.0 <= rate <= 1.0:
        return f"has acceptance_rate {rate!r}, expected a number in [0, 1]"
    if "tau" not in entry:
        return "has no tau, expected a number"
    if not _is_number(entry["tau"]):
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
    if entry.get("speedup") is not None and not _is_number(entry["speedup"]):
        return f"has speedup {entry['speedup']!r}, expected a number or null"
    if "settings" in entry and not isinstance(entry["settings"], dict):
        return f"has settings {entry['settings']!r}, expected an object"
    return None


def case_settings(row: Mapping[str, Any]) -> dict[str, Any]:
    """The settings one case ran under, from its row: :data:`CASE_SETTINGS`, the device by kind, and for a
    schedule how many positions the cost probe measured."""
    settings = {name: row.get(name) for name in CASE_SETTINGS}
    if isinstance(settings["device"], str):
        settings["device"] = settings["device"].split(":")[0]
    if isinstance(row.get("k"), str):
        settings[_SCHEDULE_SETTING] = len(row.get("verify_costs_ms") or [])
    return settings


def baseline_document(
    results: Sequence[dict[str, Any]], environment: dict[str, Any], *, created: str | None = None
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
        key = row.get("case")
        if not isinstance(key, str) or not key:
            raise ValueError(f"result row without a case key: {row!r}")
        if key in cases:
            raise ValueError(f"case {key} appears twice in the results; a baseline needs one row per case")
        entry = {field: row.get(field) for field in gate_fields("compared")}
        entry.update({field: _info_number(row.get(field)) for field in gate_fields("info")})
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


def save_baseline(path: StrPath, results: Sequence[dict[str, Any]], environment: dict[str, Any]) -> None:
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


@dataclass(frozen=True)
class Regression:
    """One check a case failed against its baseline."""

    case: str
    kind: str  # "acceptance" | "pair acceptance" | "lossless" | "missing" | "speedup" | "settings"
    old: float | bool | str | None
    new: float | bool | str | None
    detail: str
    # The allowed drop (absolute for acceptance, a fraction of the old speedup for speedup);
    # None for the checks that have no tolerance.
    limit: float | None = None
    # For a missing case, why it has no result, in two words: other k, other pairs, other prompts, no result.
    cause: str = ""

    def describe(self) -> str:
        """One line, e.g. ``k8-code: acceptance 0.812 -> 0.640 (drop 0.172 > allowed 0.020)``."""
        if self.kind == "missing":
            return f"{self.case}: missing ({self.detail})"
        if self.kind == "settings":
            return f"{self.case}: measured with other settings than the baseline's ({self.detail})"
        return f"{self.case}: {self.kind} {_show(self.kind, self.old)} -> {_show(self.kind, self.new)} ({self.detail})"


def _show(kind: str, value: float | bool | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.2f}" if kind == "speedup" else f"{value:.3f}"


def _allowed(regression: Regression) -> str:
    if regression.kind in ("acceptance", "pair acceptance") and regression.limit is not None:
        return f"drop <= {regression.limit:.3f}"
    if regression.kind == "speedup" and regression.limit is not None:
        return f"drop <= {regression.limit:.1%}"
    if regression.kind == "lossless":
        return "lossless"
    if regression.kind == "missing":
        return "present, or --specbench-allow-missing"
    if regression.kind == "settings":
        return "the same settings"
    return ""


def _verdict(row: Mapping[str, Any]) -> str:
    # Rows always carry a verdict; a hand-made row with only ``lossless`` still gates.
    verdict = row.get("verdict")
    if verdict is None:
        return "lossless" if row.get("lossless") else "diverged"
    return str(verdict)


def _missing_cause(
    entry: Mapping[str, Any], results: Sequence[Mapping[str, Any]], run_ks: Sequence[int | str] | None
) -> tuple[str, str]:
    """(two words, the sentence) of why a baseline case has no result in this run."""
    pairs = {row.get("pair") for row in results}
    prompts = {row.get("prompt") for row in results}
    k, pair, prompt = entry.get("k"), entry.get("pair"), entry.get("prompt")
    causes = []
    if run_ks is not None and k is not None and str(k) not in {str(item) for item in run_ks}:
        causes.append(("other k", f"k={k} is not in this run's --specbench-k"))
    if pair is not None and pair not in pairs:
        causes.append(
            (
                "other pairs",
                f"pair {pair} has no result in this run (not selected, skipped, failed or on another shard)",
            )
        )
    if prompt is not None and prompt not in prompts:
        causes.append(("other prompts", f"prompt {prompt} did not run (other --specbench-prompts or prompt file)"))
    if not causes:
        causes.append(
            ("no result", "the case has no result (it failed, was skipped or deselected, or the run stopped before it)")
        )
    return ", ".join(short for short, _ in causes), "; ".join(long for _, long in causes)


def compare(
    baseline: dict[str, Any],
    results: Sequence[dict[str, Any]],
    *,
    max_acceptance_drop: float = 0.02,
    max_speedup_drop: float | None = None,
    allow_missing: bool = False,
    same_machine: bool = True,
    run_ks: Sequence[int | str] | None = None,
    excluded: Collection[str] = (),
) -> list[Regression]:
    """The regressions of ``results`` against ``baseline`` (a ``load_baseline`` document), by case key.

    - lossless: lossless in the baseline, verdict "diverged" now (a tie-divergence under
      half precision is a rounding tie, not a bug, so it does not fail the gate); on any machine;
    - acceptance, on the same machine: a case's old - new > max_acceptance_drop (absolute);
    - pair acceptance, across machines (``same_machine=False``): per pair, the acceptance pooled
      over the cases both runs have (accepted / drafted tokens) dropped by more than
      ``pair_tolerance``: other kernels flip near-tied tokens, which moves single cases, not pairs;
    - speedup (only when max_speedup_drop is given, same machine only): old - new > max_speedup_drop * old;
    - missing: a baseline case with no result, unless allow_missing; its detail says why (other k, given
      ``run_ks``, the run's k list; other pairs; other prompts; or no result).
    Cases absent from the baseline are not gated: see ``new_cases``; nor are the ``excluded`` cases (measured
    with other settings, left out by ``--specbench-gate-differing=compare-matching``), which are not missing either.
    """
    if not _is_number(max_acceptance_drop) or max_acceptance_drop < 0:
        raise ValueError(f"max_acceptance_drop must be a number >= 0, got {max_acceptance_drop!r}")
    if max_speedup_drop is not None and (not _is_number(max_speedup_drop) or max_speedup_drop < 0):
        raise ValueError(f"max_speedup_drop must be a number >= 0 or None, got {max_speedup_drop!r}")
    cases: dict[str, dict[str, Any]] = baseline["cases"]
    regressions: list[Regression] = []
    seen: set[str] = set(excluded)
    gated = [row for row in results if row["case"] not in seen]
    for row in gated:
        key = row["case"]
        seen.add(key)
        old = cases.get(key)
        if old is None:
            continue
        regressions += _check_case(
            key, old, row, max_acceptance_drop if same_machine else None, max_speedup_drop if same_machine else None
        )
    if not same_machine:
        regressions += _check_pairs(cases, gated, max_acceptance_drop)
    if not allow_missing:
        for key in cases:
            if key not in seen:
                short, sentence = _missing_cause(cases[key], results, run_ks)
                regressions.append(
                    Regression(key, "missing", None, None, f"in the baseline, not in this run: {sentence}", cause=short)
                )
    # Stable sort: deterministic whatever order the results arrived in (xdist finishes at random).
    return sorted(regressions, key=lambda r: (r.case, _KIND_ORDER.get(r.kind, len(_KIND_ORDER))))


def pair_tolerance(acceptance: float, drafted: int, floor: float) -> float:
    """The pooled-acceptance drop allowed across machines: CROSS_MACHINE_Z standard errors, at least ``floor``."""
    if drafted <= 0:
        return floor
    return max(floor, CROSS_MACHINE_Z * math.sqrt(acceptance * (1 - acceptance) / drafted))


def pooled_acceptance(rows: Iterable[Mapping[str, Any]]) -> tuple[float, int]:
    """Accepted / drafted tokens over ``rows``, and the drafted count."""
    accepted = drafted = 0
    for row in rows:
        accepted += int(row.get("accepted_tokens") or 0)
        drafted += int(row.get("drafted_tokens") or 0)
    return (accepted / drafted if drafted else 0.0), drafted


def _check_pairs(
    cases: Mapping[str, Mapping[str, Any]], results: Sequence[Mapping[str, Any]], floor: float
) -> list[Regression]:
    found = []
    both = [row for row in results if row["case"] in cases]
    for pair in sorted({row["pair"] for row in both}):
        now_rows = [row for row in both if row["pair"] == pair]
        old_rate, old_drafted = pooled_acceptance(cases[row["case"]] for row in now_rows)
        new_rate, _ = pooled_acceptance(now_rows)
        limit = pair_tolerance(old_rate, old_drafted, floor)
        if old_rate - new_rate > limit + _EPSILON:
            found.append(
                Regression(
                    f"{pair} (pair, {len(now_rows)} cases)",
                    "pair acceptance",
                    old_rate,
                    new_rate,
                    f"drop {old_rate - new_rate:.3f} > allowed {limit:.3f}",
                    limit,
                )
            )
    return found


def _check_case(
    key: str, old: Mapping[str, Any], row: Mapping[str, Any], max_acceptance_drop: float, max_speedup_drop: float | None
) -> list[Regression]:
    found: list[Regression] = []
    verdict = _verdict(row)
    if old["lossless"] and verdict == "diverged":
        where = row.get("first_divergence")
        at = f" at token {where}" if where is not None else ""
        found.append(Regression(key, "lossless", True, False, f"lossless in the baseline, now diverged{at}"))
    old_rate = float(old["acceptance_rate"])
    new_rate = row.get("acceptance_rate")
    if max_acceptance_drop is None:
        pass  # judged per pair (another machine)
    elif not _is_number(new_rate):
        found.append(
            Regression(
                key, "acceptance", old_rate, None, f"no usable acceptance rate now ({new_rate!r})", max_acceptance_drop
            )
        )
    elif old_rate - new_rate > max_acceptance_drop + _EPSILON:
        drop = old_rate - new_rate
        found.append(
            Regression(
                key,
                "acceptance",
                old_rate,
                float(new_rate),
                f"drop {drop:.3f} > allowed {max_acceptance_drop:.3f}",
                max_acceptance_drop,
            )
        )
    old_speedup = old.get("speedup")
    if max_speedup_drop is not None and _is_number(old_speedup) and old_speedup > 0:
        new_speedup = row.get("speedup")
        if not _is_number(new_speedup):
            found.append(
                Regression(
                    key,
                    "speedup",
                    float(old_speedup),
                    None,
                    f"no usable speedup now ({new_speedup!r})",
                    max_speedup_drop,
                )
            )
        elif old_speedup - new_speedup > max_speedup_drop * old_speedup + _EPSILON:
            fraction = (old_speedup - new_speedup) / old_speedup
            found.append(
                Regression(
                    key,
                    "speedup",
                    float(old_speedup),
                    float(new_speedup),
                    f"drop {fraction:.1%} > allowed {max_speedup_drop:.1%}",
                    max_speedup_drop,
                )
            )
    return found


def new_cases(baseline: dict[str, Any], results: Sequence[dict[str, Any]]) -> list[str]:
    """Case keys of this run that the baseline does not have (sorted, each once): not gated."""
    cases = baseline["cases"]
    return sorted({row["case"] for row in results if row["case"] not in cases})


def compared_count(baseline: dict[str, Any], results: Sequence[dict[str, Any]]) -> int:
    """How many of this run's cases the baseline has, i.e. how many were gated."""
    cases = baseline["cases"]
    return len({row["case"] for row in results if row["case"] in cases})


# --- the settings a gate compares ------------------------------------------------------------------


@dataclass(frozen=True)
class SettingDifference:
    """One setting the baseline recorded with another value than this run's."""

    name: str  # an option (--specbench-max-new-tokens) or a case setting (new_tokens)
    baseline: Any
    now: Any

    def describe(self) -> str:
        return f"{self.name} {self.baseline!r} in the baseline, {self.now!r} now"


def settings_differences(
    recorded: Mapping[str, Any], current: Mapping[str, Any]
) -> tuple[list[SettingDifference], list[str]]:
    """The run settings that differ, and the options of this run the baseline did not record (not checked)."""
    differences, unrecorded = [], []
    for name, value in current.items():
        if name in _PER_CASE_ONLY:
            continue
        if name not in recorded:
            unrecorded.append(name)
        elif recorded[name] != value:
            differences.append(SettingDifference(name, recorded[name], value))
    return differences, unrecorded


def _case_differences(entry: Mapping[str, Any], row: Mapping[str, Any]) -> list[SettingDifference]:
    recorded = entry.get("settings")
    if not isinstance(recorded, dict):
        return []
    now = case_settings(row)
    return [
        SettingDifference(name, recorded[name], now[name])
        for name in now
        if name in recorded and recorded[name] != now[name]
    ]


_ADVICE = (
    "gate against a baseline saved with this run's settings (--specbench-save-baseline), run with the "
    "baseline's, or pass --specbench-gate-differing=compare-matching to gate only the cases whose settings "
    "agree"
)


def settings_refusal(baseline: Mapping[str, Any], config: Any, baseline_path: StrPath) -> str | None:
    """Why this run may not be gated against ``baseline`` (its run settings differ, under the default
    ``--specbench-gate-differing=refuse``), or None; for a usage error before any model loads."""
    recorded = baseline.get("settings")
    if not recorded or config.gate_differing != "refuse":
        return None
    differences, _ = settings_differences(recorded, result_settings(config))
    if not differences:
        return None
    return (
        f"--specbench-baseline={baseline_path}: the baseline was measured with other settings "
        f"({'; '.join(difference.describe() for difference in differences)}), so its numbers are not this "
        f"run's to compare with; {_ADVICE}"
    )


def check_baseline_settings(baseline: Mapping[str, Any], config: Any, baseline_path: StrPath) -> None:
    """Raise BaselineError with :func:`settings_refusal`'s reason, if any."""
    refusal = settings_refusal(baseline, config, baseline_path)
    if refusal:
        raise BaselineError(refusal)


def _listed(items: Sequence[str], shown: int = 10) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


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
    if compared == 0:
        lines.append(
            f"compared 0 case(s) with {baseline_path}: the gate checked nothing, which fails it, "
            "--specbench-allow-missing or not (no case of this run has a result and a baseline entry "
            "measured alike): gate against a baseline of this matrix, or leave --specbench-baseline off"
        )
    elif not regressions:
        lines.append(f"compared {compared} case(s) with {baseline_path}: no regression")
    else:
        failing = len({regression.case for regression in regressions})
        lines.append(
            f"compared {compared} case(s) with {baseline_path}: {len(regressions)} regression(s) in {failing} case(s)"
        )
    if regressions:
        table = [
            (
                r.case,
                r.kind,
                *(("present", r.cause or "-") if r.kind == "missing" else (_show(r.kind, r.old), _show(r.kind, r.new))),
                _allowed(r),
            )
            for r in regressions
        ]
        # disable_numparse: values are already formatted; tabulate must not reformat "0.640".
        lines += tabulate(
            table, headers=("case", "check", "baseline", "now", "allowed"), disable_numparse=True
        ).splitlines()
    missing = [r for r in regressions if r.kind == "missing"]
    if missing:
        causes: dict[str, int] = {}
        for regression in missing:
            for cause in regression.cause.split(", "):
                causes[cause] = causes.get(cause, 0) + 1
        counted = ", ".join(f"{cause}: {count}" for cause, count in causes.items())
        lines.append(
            f"{len(missing)} baseline case(s) have no result in this run ({counted}): "
            f"{'; '.join(r.describe() for r in missing[:3])}{' ...' if len(missing) > 3 else ''}; "
            "pass --specbench-allow-missing to gate only the cases both runs have"
        )
    if excluded:
        shown = [f"{case} ({', '.join(d.describe() for d in differences)})" for case, differences in excluded.items()]
        lines.append(
            f"{len(excluded)} case(s) not compared, measured with other settings than the baseline's "
            f"(--specbench-gate-differing=compare-matching): {_listed(shown, 3)}"
        )
    if new_cases:
        lines.append(f"{len(new_cases)} case(s) not in the baseline, not gated: {_listed(list(new_cases))}")
    return lines


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


def _settings_check(
    baseline: Mapping[str, Any], results: Sequence[Mapping[str, Any]], baseline_path: StrPath, config: Any
) -> tuple[list[str], list[str], list[Regression], dict[str, list[SettingDifference]]]:
    """The settings part of the gate: notes, refusals, per-case "settings" regressions (under ``refuse``), and
    the cases left out of the comparison with their differences (under ``compare-matching``)."""
    policy = getattr(config, "gate_differing", "refuse")
    cases: Mapping[str, Mapping[str, Any]] = baseline["cases"]
    notes, refusals = [], []
    recorded = baseline.get("settings")
    run_differences: list[SettingDifference] = []
    if not recorded:
        notes.append(
            f"the baseline {baseline_path} records no settings (format {baseline.get('format')}, written "
            "by an older pytest-specbench): whether it was measured with this run's settings cannot be "
            "checked; save it again with --specbench-save-baseline to have them checked"
        )
    elif config is not None:
        run_differences, unrecorded = settings_differences(recorded, result_settings(config))
        if unrecorded:
            notes.append(f"the baseline {baseline_path} does not record {', '.join(unrecorded)}: not checked")
    per_case = {row["case"]: _case_differences(cases[row["case"]], row) for row in results if row["case"] in cases}
    per_case = {case: differences for case, differences in per_case.items() if differences}
    excluded: dict[str, list[SettingDifference]] = {}
    regressions: list[Regression] = []
    if run_differences and policy == "refuse":
        refusals.append(
            f"the baseline {baseline_path} was measured with other settings "
            f"({'; '.join(d.describe() for d in run_differences)}): not compared; {_ADVICE}"
        )
    elif policy == "refuse":
        regressions += [
            Regression(
                case,
                "settings",
                ", ".join(f"{d.name} {d.baseline!r}" for d in differences),
                ", ".join(f"{d.name} {d.now!r}" for d in differences),
                "; ".join(d.describe() for d in differences),
            )
            for case, differences in per_case.items()
        ]
    else:
        if run_differences:
            notes.append(
                f"the baseline {baseline_path} was measured with other settings "
                f"({'; '.join(d.describe() for d in run_differences)}): only the cases whose own settings "
                "agree are compared (--specbench-gate-differing=compare-matching)"
            )
        # A run setting that no case records (the seed, the head kernel, ...) leaves no case in agreement.
        everywhere = [d for d in run_differences if d.name not in CASE_SETTINGS.values()]
        for row in results:
            if row["case"] in cases and (everywhere or row["case"] in per_case):
                excluded[row["case"]] = everywhere + per_case.get(row["case"], [])
    return notes, refusals, regressions, excluded


def run_gate(
    baseline: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
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
    max_acceptance_drop = 0.02 if max_acceptance_drop is None else max_acceptance_drop
    cases: Mapping[str, Mapping[str, Any]] = baseline["cases"]
    notes, refusals, regressions, excluded = _settings_check(baseline, results, baseline_path, config)
    differences = fingerprint_differences(baseline.get("fingerprint", {}), machine_fingerprint())
    compared = 0
    if not refusals:
        settings_cases = {r.case for r in regressions}
        regressions += compare(
            baseline,
            results,
            max_acceptance_drop=max_acceptance_drop,
            max_speedup_drop=max_speedup_drop,
            allow_missing=bool(allow_missing),
            same_machine=not differences,
            run_ks=getattr(config, "ks", None),
            excluded=[*excluded, *settings_cases],
        )
        regressions.sort(key=lambda r: (r.case, _KIND_ORDER.get(r.kind, len(_KIND_ORDER))))
        compared = len(
            {
                row["case"]
                for row in results
                if row["case"] in cases and row["case"] not in excluded and row["case"] not in settings_cases
            }
        )
    lines = gate_summary_lines(
        regressions,
        new_cases(baseline, results),
        compared,
        baseline_path,
        differences,
        notes=notes,
        refusals=refusals,
        excluded=excluded,
    )
    if not refusals and compared == 0 and not regressions:
        refusals.append(f"compared 0 case(s) with {baseline_path}: the gate checked nothing")
    return GateOutcome(list(regressions), lines, refusals)
