"""The regression gate's comparison: a run's typed result rows against a baseline's cases, pure.

Rows and baseline entries are read once into :class:`GatedResult` (the schema's fields the gate reads; a
baseline entry, read from its file, through :func:`.schema.row_value`); what the comparison allows is one
:class:`CompareSettings`; what it finds is a
:class:`Comparison` of :class:`Regression` s. No files, no machine probe, no terminal text: ``gate.py`` reads
and writes baselines and runs the gate, ``gate_text.py`` words its outcome.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine.numbers import is_finite_number
from .schema import CaseResult, row_value

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

# Absorbs floating noise so a drop of exactly the allowed amount (0.812 - 0.792 is
# 0.0200000000000000018) is not flagged.
_EPSILON = 1e-9

#: the check a suspect speedup fails under speed gating (results/invariants.py: above tau, not a measured gain)
SUSPECT_SPEEDUP = "suspect speedup"

# Regressions of one case are listed in this order (the most serious first).
_KIND_ORDER = {
    "settings": 0,
    "lossless": 1,
    "acceptance": 2,
    "pair acceptance": 3,
    SUSPECT_SPEEDUP: 4,
    "speedup": 5,
    "missing": 6,
}


def _read(entry: Mapping[str, Any], name: str) -> Any:
    """Field ``name`` of a baseline entry, as the schema reads it; None where a field every full row has is
    absent (a baseline entry keeps only the gated fields)."""
    try:
        return row_value(entry, name)
    except KeyError:
        return None


#: the fields :class:`GatedResult` reads besides the case key and the verdict
_GATED_FIELDS = (
    "pair",
    "k",
    "prompt",
    "acceptance_rate",
    "lossless",
    "accepted_tokens",
    "drafted_tokens",
    "speedup",
    "first_divergence",
    "suspect",
    "suspect_cause",
)


@dataclass(frozen=True)
class GatedResult:
    """What the gate reads of one case, a result row of this run or an entry of the baseline: the schema's
    fields of that name and type, values kept as found (the checks say which are unusable)."""

    case: str
    pair: str | None
    k: int | str | None
    prompt: str | None
    acceptance_rate: float | None
    lossless: bool | None
    # Rows always carry a verdict; a baseline entry without one gates by ``lossless``.
    verdict: str
    accepted_tokens: int | None
    drafted_tokens: int | None
    speedup: float | None
    first_divergence: int | None
    # A baseline entry keeps neither: the schema's defaults (not suspect).
    suspect: bool
    suspect_cause: str | None

    @classmethod
    def from_row(cls, entry: Mapping[str, Any], case: str) -> GatedResult:
        """Read a baseline entry (``case``: its key); an entry without a verdict gates by ``lossless``."""
        verdict = _read(entry, "verdict")
        if verdict is None:
            verdict = "lossless" if _read(entry, "lossless") else "diverged"
        return cls(case=case, verdict=str(verdict), **{name: _read(entry, name) for name in _GATED_FIELDS})

    @classmethod
    def from_result(cls, row: CaseResult) -> GatedResult:
        """Read a result row of this run."""
        return cls(case=row.case, verdict=row.verdict, **{name: getattr(row, name) for name in _GATED_FIELDS})


@dataclass(frozen=True)
class CompareSettings:
    """What the comparison allows, and of what.

    ``max_acceptance_drop``: a case's acceptance may fall by this much (absolute); ``max_speedup_drop``: its
    speedup by this fraction of the old one (None: speed is not gated); ``allow_missing``: a baseline case with no
    result is no regression; ``same_machine``: False when the fingerprints differ (acceptance is then judged per
    pair, speed not at all); ``run_ks``: the run's k list, to say why a case is missing; ``excluded``: cases left
    out of the comparison (measured with other settings), neither gated nor missing.
    """

    max_acceptance_drop: float = 0.02
    max_speedup_drop: float | None = None
    allow_missing: bool = False
    same_machine: bool = True
    run_ks: Sequence[int | str] | None = None
    excluded: Collection[str] = ()

    def __post_init__(self) -> None:
        if not is_finite_number(self.max_acceptance_drop) or self.max_acceptance_drop < 0:
            raise ValueError(f"max_acceptance_drop must be a number >= 0, got {self.max_acceptance_drop!r}")
        drop = self.max_speedup_drop
        if drop is not None and (not is_finite_number(drop) or drop < 0):
            raise ValueError(f"max_speedup_drop must be a number >= 0 or None, got {drop!r}")


@dataclass(frozen=True)
class Regression:
    """One check a case failed against its baseline."""

    case: str
    kind: str  # "acceptance" | "pair acceptance" | "lossless" | "missing" | "speedup" | "suspect speedup" | "settings"
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
        old, new = shown_value(self.kind, self.old), shown_value(self.kind, self.new)
        return f"{self.case}: {self.kind} {old} -> {new} ({self.detail})"


def shown_value(kind: str, value: float | bool | str | None) -> str:
    """A regression's old or new value as the gate shows it: speedups to 2 places, rates to 3, yes/no, -."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.2f}" if kind in ("speedup", SUSPECT_SPEEDUP) else f"{value:.3f}"


def sort_regressions(regressions: Iterable[Regression]) -> list[Regression]:
    """By case, then the most serious check first; stable, so deterministic whatever order the results
    arrived in (xdist finishes at random)."""
    return sorted(regressions, key=lambda r: (r.case, _KIND_ORDER.get(r.kind, len(_KIND_ORDER))))


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` found: the regressions (sorted), how many cases were gated, and this run's cases
    the baseline does not have (sorted; not gated)."""

    regressions: list[Regression]
    compared: int
    new_cases: list[str] = field(default_factory=list)


def compare(
    baseline: Mapping[str, Any], results: Sequence[CaseResult], settings: CompareSettings | None = None
) -> Comparison:
    """The regressions of ``results`` against ``baseline`` (a ``load_baseline`` document), by case key.

    - lossless: lossless in the baseline, "diverged" now (a half-precision tie-divergence is not a bug); any machine;
    - acceptance, same machine: a case's old - new > max_acceptance_drop (absolute);
    - pair acceptance, across machines (``same_machine=False``): a pair's acceptance pooled over the cases both
      runs have dropped by more than ``pair_tolerance`` (other kernels flip near-tied tokens: cases move, pairs don't);
    - speedup, same machine and only when max_speedup_drop is given: old - new > max_speedup_drop * old; a
      suspect row (its decode speedup above tau: results/invariants.py) fails as "suspect speedup" instead,
      whatever its speedup, since that speedup credits speculation with a kernel's gain and measures nothing;
    - missing: a baseline case with no result, unless allow_missing; its detail says why.
    Cases absent from the baseline (``new_cases``) and the ``excluded`` ones (other settings, left out by
    ``--specbench-gate-differing=compare-matching``) are neither gated nor missing. ``settings`` defaults to
    :class:`CompareSettings`'s defaults. See docs/ci-gating.md.
    """
    settings = settings or CompareSettings()
    cases = {key: GatedResult.from_row(entry, key) for key, entry in baseline["cases"].items()}
    rows = [GatedResult.from_result(row) for row in results]
    same = settings.same_machine
    regressions: list[Regression] = []
    seen: set[str] = set(settings.excluded)
    gated = [row for row in rows if row.case not in seen]
    for row in gated:
        seen.add(row.case)
        old = cases.get(row.case)
        if old is None:
            continue
        regressions += _check_lossless(old, row)
        if same:
            regressions += _check_acceptance(old, row, settings.max_acceptance_drop)
            regressions += _check_speedup(old, row, settings.max_speedup_drop)
    if not same:
        regressions += _check_pairs(cases, gated, settings.max_acceptance_drop)
    if not settings.allow_missing:
        regressions += [_missing(cases[key], rows, settings.run_ks) for key in cases if key not in seen]
    kept = [row for row in results if row.case not in settings.excluded]
    return Comparison(sort_regressions(regressions), compared_count(baseline, kept), new_cases(baseline, results))


def new_cases(baseline: Mapping[str, Any], results: Sequence[CaseResult]) -> list[str]:
    """Case keys of this run that the baseline does not have (sorted, each once): not gated."""
    cases = baseline["cases"]
    return sorted({row.case for row in results if row.case not in cases})


def compared_count(baseline: Mapping[str, Any], results: Sequence[CaseResult]) -> int:
    """How many of this run's cases the baseline has, i.e. how many were gated."""
    cases = baseline["cases"]
    return len({row.case for row in results if row.case in cases})


def _missing(entry: GatedResult, results: Sequence[GatedResult], run_ks: Sequence[int | str] | None) -> Regression:
    """A baseline case with no result in this run, saying why: in two words (the cause) and in a sentence."""
    pairs = {row.pair for row in results}
    prompts = {row.prompt for row in results}
    k, pair, prompt = entry.k, entry.pair, entry.prompt
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
    short, sentence = ", ".join(short for short, _ in causes), "; ".join(long for _, long in causes)
    return Regression(entry.case, "missing", None, None, f"in the baseline, not in this run: {sentence}", cause=short)


def pair_tolerance(acceptance: float, drafted: int, floor: float) -> float:
    """The pooled-acceptance drop allowed across machines: CROSS_MACHINE_Z standard errors, at least ``floor``."""
    if drafted <= 0:
        return floor
    return max(floor, CROSS_MACHINE_Z * math.sqrt(acceptance * (1 - acceptance) / drafted))


def pooled_acceptance(results: Iterable[GatedResult]) -> tuple[float, int]:
    """Accepted / drafted tokens over ``results``, and the drafted count."""
    accepted = drafted = 0
    for result in results:
        accepted += int(result.accepted_tokens or 0)
        drafted += int(result.drafted_tokens or 0)
    return (accepted / drafted if drafted else 0.0), drafted


def _check_pairs(cases: Mapping[str, GatedResult], results: Sequence[GatedResult], floor: float) -> list[Regression]:
    found = []
    both = [row for row in results if row.case in cases]
    for pair in sorted({row.pair for row in both}):
        now_rows = [row for row in both if row.pair == pair]
        old_rate, old_drafted = pooled_acceptance(cases[row.case] for row in now_rows)
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


def _check_lossless(old: GatedResult, row: GatedResult) -> list[Regression]:
    if not (old.lossless and row.verdict == "diverged"):
        return []
    at = f" at token {row.first_divergence}" if row.first_divergence is not None else ""
    return [Regression(row.case, "lossless", True, False, f"lossless in the baseline, now diverged{at}")]


def _check_acceptance(old: GatedResult, row: GatedResult, allowed: float) -> list[Regression]:
    old_rate, new_rate = float(old.acceptance_rate), row.acceptance_rate
    if not is_finite_number(new_rate):
        detail = f"no usable acceptance rate now ({new_rate!r})"
        return [Regression(row.case, "acceptance", old_rate, None, detail, allowed)]
    drop = old_rate - new_rate
    if drop <= allowed + _EPSILON:
        return []
    detail = f"drop {drop:.3f} > allowed {allowed:.3f}"
    return [Regression(row.case, "acceptance", old_rate, float(new_rate), detail, allowed)]


def _check_speedup(old: GatedResult, row: GatedResult, allowed: float | None) -> list[Regression]:
    old_speedup, new_speedup = old.speedup, row.speedup
    if allowed is not None and row.suspect:  # not a measured speedup: never passed, however high
        return [_suspect(old, row)]
    if allowed is None or not is_finite_number(old_speedup) or old_speedup <= 0:
        return []
    if not is_finite_number(new_speedup):
        detail = f"no usable speedup now ({new_speedup!r})"
        return [Regression(row.case, "speedup", float(old_speedup), None, detail, allowed)]
    if old_speedup - new_speedup <= allowed * old_speedup + _EPSILON:
        return []
    detail = f"drop {(old_speedup - new_speedup) / old_speedup:.1%} > allowed {allowed:.1%}"
    return [Regression(row.case, "speedup", float(old_speedup), float(new_speedup), detail, allowed)]


def _suspect(old: GatedResult, row: GatedResult) -> Regression:
    """The speed check's failure of a suspect row: its speedup is no measurement to hold against the baseline."""
    old_speedup = float(old.speedup) if is_finite_number(old.speedup) else None
    new_speedup = float(row.speedup) if is_finite_number(row.speedup) else None
    detail = f"not passed as measured: {row.suspect_cause or 'a decode speedup above tau'}"
    return Regression(row.case, SUSPECT_SPEEDUP, old_speedup, new_speedup, detail)


# --- the settings a gate compares ------------------------------------------------------------------


def case_settings(row: CaseResult) -> dict[str, Any]:
    """The settings one case ran under, from its row: :data:`CASE_SETTINGS`, the device by kind, and for a
    schedule how many positions the cost probe measured."""
    settings = {name: getattr(row, name) for name in CASE_SETTINGS}
    if isinstance(settings["device"], str):
        settings["device"] = settings["device"].split(":")[0]
    if isinstance(row.k, str):
        settings[_SCHEDULE_SETTING] = len(row.verify_costs_ms or [])
    return settings


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
    """The run settings that differ, and the options of this run the baseline did not record (not checked). A setting
    recorded under an option's earlier name (``--specbench-head-kernel``) is compared as the option's."""
    from ..settings.options import current_setting_names

    recorded = current_setting_names(recorded)
    differences, unrecorded = [], []
    for name, value in current.items():
        if name in _PER_CASE_ONLY:
            continue
        if name not in recorded:
            unrecorded.append(name)
        elif recorded[name] != value:
            differences.append(SettingDifference(name, recorded[name], value))
    return differences, unrecorded


def _case_differences(entry: Mapping[str, Any], row: CaseResult) -> list[SettingDifference]:
    recorded = entry.get("settings")
    if not isinstance(recorded, dict):
        return []
    now = case_settings(row)
    return [
        SettingDifference(name, recorded[name], now[name])
        for name in now
        if name in recorded and recorded[name] != now[name]
    ]


@dataclass(frozen=True)
class SettingsCheck:
    """The settings part of the gate. ``recorded``: the baseline records run settings; ``run_differences`` and
    ``unrecorded``: how this run's differ, and which it has that the baseline lacks; ``refused``: they differ
    under ``--specbench-gate-differing=refuse``, so nothing is compared; ``regressions``: the cases measured with
    their own other settings (under ``refuse``); ``excluded``: the cases left out, with their differences
    (under ``compare-matching``)."""

    recorded: bool
    run_differences: list[SettingDifference] = field(default_factory=list)
    unrecorded: list[str] = field(default_factory=list)
    refused: bool = False
    regressions: list[Regression] = field(default_factory=list)
    excluded: dict[str, list[SettingDifference]] = field(default_factory=dict)


def check_settings(
    baseline: Mapping[str, Any], results: Sequence[CaseResult], current: Mapping[str, Any] | None, policy: str
) -> SettingsCheck:
    """Compare the run's settings (``current``, as ``result_settings``; None: not known, not checked) and each
    case's with those ``baseline`` recorded, under ``policy`` (``refuse`` or ``compare-matching``)."""
    cases: Mapping[str, Mapping[str, Any]] = baseline["cases"]
    recorded = baseline.get("settings")
    run_differences: list[SettingDifference] = []
    unrecorded: list[str] = []
    if recorded and current is not None:
        run_differences, unrecorded = settings_differences(recorded, current)
    per_case = {row.case: _case_differences(cases[row.case], row) for row in results if row.case in cases}
    per_case = {case: differences for case, differences in per_case.items() if differences}
    known = (bool(recorded), run_differences, unrecorded)
    if policy == "refuse":
        if run_differences:
            return SettingsCheck(*known, refused=True)
        regressions = [_settings_regression(case, differences) for case, differences in per_case.items()]
        return SettingsCheck(*known, regressions=regressions)
    # A run setting that no case records (the seed, the kernels, ...) leaves no case in agreement.
    everywhere = [d for d in run_differences if d.name not in CASE_SETTINGS.values()]
    excluded = {
        row.case: everywhere + per_case.get(row.case, [])
        for row in results
        if row.case in cases and (everywhere or row.case in per_case)
    }
    return SettingsCheck(*known, excluded=excluded)


def _settings_regression(case: str, differences: Sequence[SettingDifference]) -> Regression:
    return Regression(
        case,
        "settings",
        ", ".join(f"{d.name} {d.baseline!r}" for d in differences),
        ", ".join(f"{d.name} {d.now!r}" for d in differences),
        "; ".join(d.describe() for d in differences),
    )
