"""Baselines and the regression gate: save a run's results, compare a later run with them.

Plain data in and out (result rows are the dicts ``runner.run_case`` returns), no pytest:
the plugin decides when to save, when to compare and how to fail the session.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from os import PathLike
from pathlib import Path
from typing import Any

from tabulate import tabulate

from ..atomic import write_atomic
from .schema import gate_fields
from .strict_json import strict_json

BASELINE_FORMAT = 2

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
_KIND_ORDER = {"lossless": 0, "acceptance": 1, "pair acceptance": 2, "speedup": 3, "missing": 4}

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
    return None


def baseline_document(results: Sequence[dict[str, Any]], environment: dict[str, Any], *,
                      created: str | None = None) -> dict[str, Any]:
    """The baseline of a run: one entry per case key, sorted, plus the fingerprint of the machine it ran on.

    ``created`` (ISO 8601) defaults to now, in UTC. Raises ValueError for a result row that
    would make an unusable baseline (a duplicate case key, a missing or invalid gated value),
    so a bad baseline is refused when written rather than when next read.
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
        problem = _case_problem(entry)
        if problem:
            raise ValueError(f"result of case {key} {problem}")
        cases[key] = entry
    return {
        "format": BASELINE_FORMAT,
        "created": created or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "fingerprint": environment.get("fingerprint", {}),
        "versions": environment.get("versions", {}),
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
        raise BaselineError(f"baseline {path}: not valid JSON ({error.msg} at line {error.lineno}, "
                            f"column {error.colno}); {expected}") from None
    if not isinstance(document, dict):
        raise BaselineError(f"baseline {path}: the top level is {type(document).__name__}, "
                            f"expected an object; {expected}")
    found = document.get("format")
    if isinstance(found, bool) or found != BASELINE_FORMAT:
        shown = "no format" if "format" not in document else f"format {found!r}"
        raise BaselineError(f"baseline {path}: has {shown}, expected format {BASELINE_FORMAT} "
                            f"(write a new one with this version of pytest-specbench)")
    cases = document.get("cases")
    if not isinstance(cases, dict):
        shown = "no cases" if "cases" not in document else f"cases of type {type(cases).__name__}"
        raise BaselineError(f"baseline {path}: has {shown}, expected \"cases\" to be an object "
                            f"mapping case keys to results")
    if not cases:
        raise BaselineError(f"baseline {path}: has no cases, so it would gate nothing; expected a baseline saved "
                            "from a run with results (--specbench-save-baseline)")
    for key, entry in cases.items():
        problem = _case_problem(entry)
        if problem:
            raise BaselineError(f"baseline {path}: case {key} {problem}")
    return document


@dataclass(frozen=True)
class Regression:
    """One check a case failed against its baseline."""

    case: str
    kind: str  # "acceptance" | "lossless" | "missing" | "speedup"
    old: float | bool | None
    new: float | bool | None
    detail: str
    # The allowed drop (absolute for acceptance, a fraction of the old speedup for speedup);
    # None for the checks that have no tolerance.
    limit: float | None = None

    def describe(self) -> str:
        """One line, e.g. ``k8-code: acceptance 0.812 -> 0.640 (drop 0.172 > allowed 0.020)``."""
        if self.kind == "missing":
            return f"{self.case}: missing ({self.detail})"
        return f"{self.case}: {self.kind} {_show(self.kind, self.old)} -> {_show(self.kind, self.new)} ({self.detail})"


def _show(kind: str, value: float | bool | None) -> str:
    if value is None:
        return "-"
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
        return "present"
    return ""


def _verdict(row: Mapping[str, Any]) -> str:
    # Rows always carry a verdict; a hand-made row with only ``lossless`` still gates.
    verdict = row.get("verdict")
    if verdict is None:
        return "lossless" if row.get("lossless") else "diverged"
    return str(verdict)


def compare(baseline: dict[str, Any], results: Sequence[dict[str, Any]], *,
            max_acceptance_drop: float = 0.02, max_speedup_drop: float | None = None,
            allow_missing: bool = False, same_machine: bool = True) -> list[Regression]:
    """The regressions of ``results`` against ``baseline`` (a ``load_baseline`` document), by case key.

    - lossless: lossless in the baseline, verdict "diverged" now (a tie-divergence under
      half precision is a rounding tie, not a bug, so it does not fail the gate); on any machine;
    - acceptance, on the same machine: a case's old - new > max_acceptance_drop (absolute);
    - pair acceptance, across machines (``same_machine=False``): per pair, the acceptance pooled
      over the cases both runs have (accepted / drafted tokens) dropped by more than
      ``pair_tolerance``: other kernels flip near-tied tokens, which moves single cases, not pairs;
    - speedup (only when max_speedup_drop is given, same machine only): old - new > max_speedup_drop * old;
    - missing: a baseline case with no result, unless allow_missing.
    Cases absent from the baseline are not gated: see ``new_cases``.
    """
    if not _is_number(max_acceptance_drop) or max_acceptance_drop < 0:
        raise ValueError(f"max_acceptance_drop must be a number >= 0, got {max_acceptance_drop!r}")
    if max_speedup_drop is not None and (not _is_number(max_speedup_drop) or max_speedup_drop < 0):
        raise ValueError(f"max_speedup_drop must be a number >= 0 or None, got {max_speedup_drop!r}")
    cases: dict[str, dict[str, Any]] = baseline["cases"]
    regressions: list[Regression] = []
    seen: set[str] = set()
    for row in results:
        key = row["case"]
        seen.add(key)
        old = cases.get(key)
        if old is None:
            continue
        regressions += _check_case(key, old, row, max_acceptance_drop if same_machine else None,
                                   max_speedup_drop if same_machine else None)
    if not same_machine:
        regressions += _check_pairs(cases, results, max_acceptance_drop)
    if not allow_missing:
        regressions += [Regression(key, "missing", None, None, "in the baseline, not in this run")
                        for key in cases if key not in seen]
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


def _check_pairs(cases: Mapping[str, Mapping[str, Any]], results: Sequence[Mapping[str, Any]],
                 floor: float) -> list[Regression]:
    found = []
    both = [row for row in results if row["case"] in cases]
    for pair in sorted({row["pair"] for row in both}):
        now_rows = [row for row in both if row["pair"] == pair]
        old_rate, old_drafted = pooled_acceptance(cases[row["case"]] for row in now_rows)
        new_rate, _ = pooled_acceptance(now_rows)
        limit = pair_tolerance(old_rate, old_drafted, floor)
        if old_rate - new_rate > limit + _EPSILON:
            found.append(Regression(f"{pair} (pair, {len(now_rows)} cases)", "pair acceptance", old_rate, new_rate,
                                    f"drop {old_rate - new_rate:.3f} > allowed {limit:.3f}", limit))
    return found


def _check_case(key: str, old: Mapping[str, Any], row: Mapping[str, Any],
                max_acceptance_drop: float, max_speedup_drop: float | None) -> list[Regression]:
    found: list[Regression] = []
    verdict = _verdict(row)
    if old["lossless"] and verdict == "diverged":
        where = row.get("first_divergence")
        at = f" at token {where}" if where is not None else ""
        found.append(Regression(key, "lossless", True, False,
                                f"lossless in the baseline, now diverged{at}"))
    old_rate = float(old["acceptance_rate"])
    new_rate = row.get("acceptance_rate")
    if max_acceptance_drop is None:
        pass  # judged per pair (another machine)
    elif not _is_number(new_rate):
        found.append(Regression(key, "acceptance", old_rate, None,
                                f"no usable acceptance rate now ({new_rate!r})", max_acceptance_drop))
    elif old_rate - new_rate > max_acceptance_drop + _EPSILON:
        drop = old_rate - new_rate
        found.append(Regression(key, "acceptance", old_rate, float(new_rate),
                                f"drop {drop:.3f} > allowed {max_acceptance_drop:.3f}", max_acceptance_drop))
    old_speedup = old.get("speedup")
    if max_speedup_drop is not None and _is_number(old_speedup) and old_speedup > 0:
        new_speedup = row.get("speedup")
        if not _is_number(new_speedup):
            found.append(Regression(key, "speedup", float(old_speedup), None,
                                    f"no usable speedup now ({new_speedup!r})", max_speedup_drop))
        elif old_speedup - new_speedup > max_speedup_drop * old_speedup + _EPSILON:
            fraction = (old_speedup - new_speedup) / old_speedup
            found.append(Regression(key, "speedup", float(old_speedup), float(new_speedup),
                                    f"drop {fraction:.1%} > allowed {max_speedup_drop:.1%}", max_speedup_drop))
    return found


def new_cases(baseline: dict[str, Any], results: Sequence[dict[str, Any]]) -> list[str]:
    """Case keys of this run that the baseline does not have (sorted, each once): not gated."""
    cases = baseline["cases"]
    return sorted({row["case"] for row in results if row["case"] not in cases})


def compared_count(baseline: dict[str, Any], results: Sequence[dict[str, Any]]) -> int:
    """How many of this run's cases the baseline has, i.e. how many were gated."""
    cases = baseline["cases"]
    return len({row["case"] for row in results if row["case"] in cases})


def gate_summary_lines(regressions: Sequence[Regression], new_cases: Sequence[str], compared: int,
                       baseline_path: StrPath, machine_differences: Sequence[str] = ()) -> list[str]:
    """The terminal section of the gate: the machine check, the verdict, a table of regressions, the ungated cases."""
    lines = []
    if machine_differences:
        lines.append(f"the baseline was recorded on another machine ({'; '.join(machine_differences)}): "
                     "acceptance is compared per pair, pooled over its cases, within "
                     f"{CROSS_MACHINE_Z:g} binomial standard errors; losslessness per case; speed not at all")
    if not regressions:
        lines.append(f"compared {compared} case(s) with {baseline_path}: no regression")
    else:
        failing = len({regression.case for regression in regressions})
        lines.append(f"compared {compared} case(s) with {baseline_path}: "
                     f"{len(regressions)} regression(s) in {failing} case(s)")
        table = [(r.case, r.kind, _show(r.kind, r.old), _show(r.kind, r.new), _allowed(r)) for r in regressions]
        # disable_numparse: values are already formatted; tabulate must not reformat "0.640".
        lines += tabulate(table, headers=("case", "check", "baseline", "now", "allowed"),
                          disable_numparse=True).splitlines()
    if new_cases:
        shown = ", ".join(new_cases[:10])
        more = f" and {len(new_cases) - 10} more" if len(new_cases) > 10 else ""
        lines.append(f"{len(new_cases)} case(s) not in the baseline, not gated: {shown}{more}")
    return lines


@dataclass(frozen=True)
class GateOutcome:
    """The gate's verdict on a run: the regressions found, and the lines the terminal summary shows."""

    regressions: list[Regression]
    lines: list[str]

    @property
    def failed(self) -> bool:
        return bool(self.regressions)


def run_gate(baseline: Mapping[str, Any], results: Sequence[Mapping[str, Any]], baseline_path: StrPath, *,
             max_acceptance_drop: float, max_speedup_drop: float | None, allow_missing: bool) -> GateOutcome:
    """Compare a finished run with its baseline, across machines when the fingerprints differ."""
    from .fingerprint import fingerprint_differences, machine_fingerprint

    differences = fingerprint_differences(baseline.get("fingerprint", {}), machine_fingerprint())
    regressions = compare(baseline, results, max_acceptance_drop=max_acceptance_drop,
                          max_speedup_drop=max_speedup_drop, allow_missing=allow_missing, same_machine=not differences)
    lines = gate_summary_lines(regressions, new_cases(baseline, results), compared_count(baseline, results),
                               baseline_path, differences)
    return GateOutcome(list(regressions), lines)
