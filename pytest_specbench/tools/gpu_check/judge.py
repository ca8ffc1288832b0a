"""Judging what the benchmark parts left: their rows (typed, :class:`CaseResult`), their per-case outcomes, their
exit status.

Imports no torch: the parent process judges.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...results.schema import CaseResult
from .legs import Leg, leg_problem
from .plan import QWEN_KS, QWEN_PAIRS, QWEN_PROMPTS, SLIDING_REFUSAL, Check
from .run import Run, qwen_decision, vllm_decision
from .suite import judge_suite

#: the row fields the summaries show of each case
SHOWN = (
    "case",
    "engine",
    "device",
    "dtype",
    "verdict",
    "decode_speedup",
    "decode_speedup_ci_low",
    "decode_speedup_ci_high",
    "speedup",
    "acceptance_rate",
    "tau",
    "rounds",
    "unstable",
    "baseline_matches_reference",
    "peak_memory_mb",
    "peak_memory_kind",
)
_CASE_ID = re.compile(r"^(?P<pair>[A-Za-z][A-Za-z0-9_]*)-(?:(?P<engine>native|hf)-)?k(?P<k>[^-]+)-(?P<prompt>[^-]+)")

CaseKey = tuple[str, str, str, str]  # (pair, engine, k, prompt category)


def row_key(row: CaseResult) -> CaseKey:
    """``(pair, engine, k, prompt category)`` of a row."""
    return row.pair, row.engine, str(row.k), row.category or row.prompt


def case_key(case_id: str) -> CaseKey | None:
    """``(pair, engine, k, prompt category)`` of a case id ``{pair}[-{engine}]-k{k}-{prompt}``, as JUnit names it."""
    match = _CASE_ID.match(case_id)
    if not match:
        return None
    return match["pair"], match["engine"] or "native", match["k"], match["prompt"]


def case_table(rows: Sequence[CaseResult]) -> list[dict[str, Any]]:
    """The fields the summaries show (:data:`SHOWN`) of each row."""
    return [{name: getattr(row, name) for name in SHOWN} for row in rows]


@dataclass(frozen=True)
class Cases:
    """The cases a benchmark part should hold: every pair, engine, k and prompt category together."""

    pairs: tuple[str, ...]
    engines: tuple[str, ...]
    ks: tuple
    prompts: tuple[str, ...]

    def keys(self) -> set[CaseKey]:
        """Every expected case's key."""
        return {(p, e, str(k), c) for p in self.pairs for e in self.engines for k in self.ks for c in self.prompts}

    def rows_of(self, leg: Leg) -> list[CaseResult]:
        """The part's rows of these cases."""
        keys = self.keys()
        return [row for row in leg.rows if row_key(row) in keys]


def judge_rows(name: str, leg: Leg | None, cases: Cases, what: str, exit_zero: bool = True) -> Check:
    """Check ``name``: a bench leg's rows against the cases it should hold: all there, all lossless (or a
    near-tie), and (with ``exit_zero``) pytest's exit status 0."""
    problem = leg_problem(leg)
    if problem:
        details = {"output_tail": leg.tail(), "rows": case_table(leg.rows)} if leg else {}
        return Check(name, "fail", f"{what}: {problem}", leg.seconds if leg else 0.0, details)
    expected = cases.keys()
    rows = cases.rows_of(leg)
    missing = sorted(expected - {row_key(row) for row in rows})
    bad = [row for row in rows if row.verdict not in ("lossless", "tie-divergence")]
    failed_tests = {
        case: message
        for case, (outcome, message) in leg.cases.items()
        if outcome in ("failed", "error") and case_key(case) in expected
    }
    details = {
        "rows": case_table(rows),
        "missing_cases": ["-".join(key) for key in missing],
        "not_lossless": [row.case for row in bad],
        "failed_tests": {case: message[:1500] for case, message in failed_tests.items()},
        "leg": leg.ended(),
    }
    parts = []
    if exit_zero and leg.rc != 0:
        parts.append(f"pytest {leg.ended()}")
    if missing:
        parts.append(f"{len(missing)} of {len(expected)} cases have no row")
    if bad:
        parts.append(f"{len(bad)} not lossless ({', '.join(row.case for row in bad[:4])})")
    if failed_tests:
        parts.append(f"{len(failed_tests)} test(s) failed ({', '.join(list(failed_tests)[:4])})")
    if parts:
        details["output_tail"] = leg.tail()
        return Check(name, "fail", f"{what}: " + "; ".join(parts), leg.seconds, details)
    ties = sum(row.verdict == "tie-divergence" for row in rows)
    speedups = [row.decode_speedup for row in rows if math.isfinite(row.decode_speedup)]
    span = f"; decode speedup {min(speedups):.2f} to {max(speedups):.2f}" if speedups else ""
    return Check(name, "pass", f"{what}: {len(rows)} cases lossless ({ties} near-tie){span}", leg.seconds, details)


def judge(run: Run) -> None:
    """Judge every wanted check that the parts' outputs decide, into ``run.checks``."""
    form, legs = run.form, run.legs
    if run.wanted("bench_matrix"):
        cases = Cases(form.bench_pairs, ("native",), form.bench_ks, form.bench_prompts)
        run.checks["bench_matrix"] = judge_rows("bench_matrix", legs.get("matrix"), cases, "matrix")
    if run.wanted("engines_native_vs_hf"):
        run.checks["engines_native_vs_hf"] = judge_engines(run)
    if run.wanted("bench_compiled"):
        run.checks["bench_compiled"] = judge_compiled(run)
    if run.wanted("compile_refuses_sliding_window"):
        run.checks["compile_refuses_sliding_window"] = judge_refusal(run)
    if run.wanted("peak_memory_cuda"):
        run.checks["peak_memory_cuda"] = judge_memory(run)
    if run.wanted("suite_cuda_tests"):
        run.checks["suite_cuda_tests"] = judge_suite(run)
    if run.wanted("qwen_pairs"):
        go, why = qwen_decision(run)
        if not go:
            run.checks["qwen_pairs"] = Check("qwen_pairs", "skip", f"not run: {why}")
        else:
            cases = Cases(QWEN_PAIRS, ("native",), QWEN_KS, QWEN_PROMPTS)
            run.checks["qwen_pairs"] = judge_rows("qwen_pairs", legs.get("qwen"), cases, "Qwen pairs")
    if run.wanted("engines_vllm"):
        go, why = vllm_decision(run)
        if not go:
            run.checks["engines_vllm"] = Check("engines_vllm", "skip", f"not run: {why}")
        else:
            cases = Cases(form.vllm_pairs, ("native", "vllm"), (4,), form.hf_prompts)
            check = judge_rows("engines_vllm", legs.get("vllm"), cases, "native and vllm at k=4")
            check.details["vllm_python"] = why
            run.checks["engines_vllm"] = check


def judge_engines(run: Run) -> Check:
    """Both engines' rows at k=4 lossless; native / hf end to end per case."""
    form = run.form
    leg = run.legs.get("matrix") if form.hf_in_matrix else run.legs.get("hf")
    cases = Cases(form.hf_pairs, ("native", "hf"), (4,), form.bench_prompts if form.hf_in_matrix else form.hf_prompts)
    check = judge_rows("engines_native_vs_hf", leg, cases, "native and hf at k=4")
    if check.status == "pass":
        check.details["native_over_hf"] = native_over_hf(cases.rows_of(leg))
        ratios = [entry["native_over_hf"] for entry in check.details["native_over_hf"] if entry["native_over_hf"]]
        if ratios:
            check.summary += f"; native / hf end to end {min(ratios):.2f} to {max(ratios):.2f}"
    return check


def judge_compiled(run: Run) -> Check:
    """The compiled pairs' rows lossless (CPU form: skipped); a compiled baseline that differs is named."""
    form = run.form
    if not form.compile_pairs:
        return Check(
            "bench_compiled",
            "skip",
            "CPU form: inductor compiles for about a minute on a CPU, beyond the reduced budget; the GPU form runs it",
        )
    # exit_zero=False: the same run holds the sliding-window pair's refused (failing) cases.
    leg, cases = run.legs.get("compile"), Cases(form.compile_pairs, ("native",), form.compile_ks, form.compile_prompts)
    check = judge_rows("bench_compiled", leg, cases, "compiled", exit_zero=False)
    differs = [row.case for row in cases.rows_of(leg) if row.baseline_matches_reference is False] if leg else []
    if differs:
        check.details["baseline_differs_from_generate"] = differs
        check.summary += f"; the compiled baseline differs from generate() in {len(differs)} (a near-tie?)"
    return check


def native_over_hf(rows: Sequence[CaseResult]) -> list[dict[str, Any]]:
    """Per case: the native and hf end-to-end speedups and their ratio."""
    by_case: dict[str, dict[str, float]] = {}
    for row in rows:
        case = row.case.replace("-native-", "-").replace("-hf-", "-")
        by_case.setdefault(case, {})[row.engine] = row.speedup
    out = []
    for case, speedups in sorted(by_case.items()):
        native, hf = speedups.get("native"), speedups.get("hf")
        out.append(
            {
                "case": case,
                "native_speedup": native,
                "hf_speedup": hf,
                "native_over_hf": native / hf if native and hf else None,
            }
        )
    return out


def judge_refusal(run: Run) -> Check:
    """The sliding-window pair's cases under --specbench-compile all fail with the documented refusal."""
    name, leg, pair = "compile_refuses_sliding_window", run.legs.get("compile"), run.form.sliding_pair
    problem = leg_problem(leg)
    if problem:
        details = {"output_tail": leg.tail() if leg else ""}
        return Check(name, "fail", f"compiled run: {problem}", leg.seconds if leg else 0.0, details)
    cases = {case: value for case, value in leg.cases.items() if case.startswith(pair + "-")}
    if not cases:
        details = {"output_tail": leg.tail()}
        return Check(name, "fail", f"no {pair} case ran under --specbench-compile", leg.seconds, details)
    refused = [
        case
        for case, (outcome, message) in cases.items()
        if outcome in ("failed", "error") and SLIDING_REFUSAL in message
    ]
    other = {case: f"{outcome}: {message[:800]}" for case, (outcome, message) in cases.items() if case not in refused}
    details = {"pair": pair, "refused": refused, "otherwise": other}
    if other:
        passed = [case for case, (outcome, _) in cases.items() if outcome == "passed"]
        why = (
            f"{len(passed)} case(s) of the sliding-window pair ran compiled: the refusal is gone "
            "(docs/engines.md says such models recompiled at every step); check their speed and update docs "
            "and this check"
            if passed
            else f"{len(other)} case(s) ended otherwise than with the refusal"
        )
        return Check(name, "fail", why, leg.seconds, details)
    summary = f"{len(refused)} {pair} case(s) refused as expected ({SLIDING_REFUSAL!r})"
    return Check(name, "pass", summary, leg.seconds, details)


def _lacks_peak(row: CaseResult, kind: str, device_prefix: str) -> bool:
    """Whether a row lacks a positive ``kind`` peak on a device whose name starts with ``device_prefix``."""
    positive = row.peak_memory_mb is not None and row.peak_memory_mb > 0
    return row.peak_memory_kind != kind or not positive or not row.device.startswith(device_prefix)


def judge_memory(run: Run) -> Check:
    """Every benchmark row carries a positive CUDA peak (on a CPU: a positive process_rss peak, then skip)."""
    name, rows = "peak_memory_cuda", [row for _, row in run.bench_rows()]
    details = {
        "rows": len(rows),
        "kinds": sorted({row.peak_memory_kind for row in rows}),
        "peak_memory_mb": {row.case: row.peak_memory_mb for row in rows},
    }
    if not rows:
        return Check(name, "fail", "no benchmark row to read (see bench_matrix)", details=details)
    if not run.cuda:
        bad = [row.case for row in rows if _lacks_peak(row, "process_rss", "")]
        if bad:
            return Check(name, "fail", f"CPU rows without a positive process_rss peak: {bad[:4]}", details=details)
        summary = f"CUDA only; the {len(rows)} CPU rows carry a positive process_rss peak"
        return Check(name, "skip", summary, details=details)
    bad = [row.case for row in rows if _lacks_peak(row, "cuda_allocated", "cuda")]
    if bad:
        summary = (
            f"{len(bad)} of {len(rows)} rows lack a positive cuda_allocated peak "
            f"on a cuda device ({', '.join(bad[:4])})"
        )
        return Check(name, "fail", summary, details=details)
    peaks = [row.peak_memory_mb for row in rows]
    summary = f"{len(rows)} rows, cuda_allocated, {min(peaks):.0f} to {max(peaks):.0f} MiB"
    return Check(name, "pass", summary, details=details)
