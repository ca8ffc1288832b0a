"""Judging what the benchmark parts left: their rows, their per-case outcomes, their exit status.

Imports no torch: the parent process judges.
"""

from __future__ import annotations

import re
from typing import Any

from .legs import Leg, leg_problem
from .parent import Run, qwen_decision
from .plan import QWEN_KS, QWEN_PAIRS, QWEN_PROMPTS, SLIDING_REFUSAL, Check
from .suite import judge_suite


def _row_key(row: dict[str, Any]) -> tuple[str, str, str, str]:
    return (
        str(row.get("pair")),
        str(row.get("engine", "native")),
        str(row.get("k")),
        str(row.get("category") or row.get("prompt")),
    )


_CASE_ID = re.compile(r"^(?P<pair>[A-Za-z][A-Za-z0-9_]*)-(?:(?P<engine>native|hf)-)?k(?P<k>[^-]+)-(?P<prompt>[^-]+)")


def _case_key(case_id: str) -> tuple[str, str, str, str] | None:
    """``(pair, engine, k, prompt category)`` of a case id ``{pair}[-{engine}]-k{k}-{prompt}``."""
    match = _CASE_ID.match(case_id)
    if not match:
        return None
    return (match["pair"], match["engine"] or "native", match["k"], match["prompt"])


def _case_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The row fields the summaries show."""
    keep = (
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
    return [{name: row.get(name) for name in keep} for row in rows]


def judge_rows(
    leg: Leg | None,
    pairs: tuple[str, ...],
    engines: tuple[str, ...],
    ks: tuple,
    prompts: tuple[str, ...],
    what: str,
    exit_zero: bool = True,
) -> Check:
    """A bench leg's rows against the cases it should hold: all there, all lossless (or a near-tie), and (with
    ``exit_zero``) pytest's exit status 0."""
    problem = leg_problem(leg)
    if problem:
        details = {"output_tail": leg.tail()} if leg else {}
        if leg:
            details["rows"] = _case_table(leg.rows)
        return Check("", "fail", f"{what}: {problem}", leg.seconds if leg else 0.0, details)
    expected = {
        (pair, engine, str(k), prompt) for pair in pairs for engine in engines for k in ks for prompt in prompts
    }
    rows = [row for row in leg.rows if _row_key(row) in expected]
    missing = sorted(expected - {_row_key(row) for row in rows})
    bad = [row for row in rows if row.get("verdict") not in ("lossless", "tie-divergence")]
    failed_tests = {
        case: message
        for case, (outcome, message) in leg.cases.items()
        if outcome in ("failed", "error") and _case_key(case) in expected
    }
    details = {
        "rows": _case_table(rows),
        "missing_cases": ["-".join(key) for key in missing],
        "not_lossless": [row.get("case") for row in bad],
        "failed_tests": {case: message[:1500] for case, message in failed_tests.items()},
        "leg": leg.ended(),
    }
    parts = []
    if exit_zero and leg.rc != 0:
        parts.append(f"pytest {leg.ended()}")
    if missing:
        parts.append(f"{len(missing)} of {len(expected)} cases have no row")
    if bad:
        parts.append(f"{len(bad)} not lossless ({', '.join(str(row.get('case')) for row in bad[:4])})")
    if failed_tests:
        parts.append(f"{len(failed_tests)} test(s) failed ({', '.join(list(failed_tests)[:4])})")
    if parts:
        details["output_tail"] = leg.tail()
        return Check("", "fail", f"{what}: " + "; ".join(parts), leg.seconds, details)
    ties = sum(row.get("verdict") == "tie-divergence" for row in rows)
    speedups = [row["decode_speedup"] for row in rows if isinstance(row.get("decode_speedup"), (int, float))]
    span = f"; decode speedup {min(speedups):.2f} to {max(speedups):.2f}" if speedups else ""
    summary = f"{what}: {len(rows)} cases lossless ({ties} near-tie){span}"
    return Check("", "pass", summary, leg.seconds, details)


def named(check: Check, name: str) -> Check:
    """``check`` under the check name ``name`` (judge_rows serves several checks)."""
    check.name = name
    return check


def judge(run: Run) -> None:
    """Judge every wanted check that the parts' outputs decide, into ``run.checks``."""
    form, legs = run.form, run.legs
    if run.wanted("bench_matrix"):
        run.checks["bench_matrix"] = named(
            judge_rows(legs.get("matrix"), form.bench_pairs, ("native",), form.bench_ks, form.bench_prompts, "matrix"),
            "bench_matrix",
        )
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
            run.checks["qwen_pairs"] = named(
                judge_rows(legs.get("qwen"), QWEN_PAIRS, ("native",), QWEN_KS, QWEN_PROMPTS, "Qwen pairs"),
                "qwen_pairs",
            )


def judge_engines(run: Run) -> Check:
    """Both engines' rows at k=4 lossless; native / hf end to end per case."""
    form = run.form
    leg = run.legs.get("matrix") if form.hf_in_matrix else run.legs.get("hf")
    prompts = form.bench_prompts if form.hf_in_matrix else form.hf_prompts
    check = named(
        judge_rows(leg, form.hf_pairs, ("native", "hf"), (4,), prompts, "native and hf at k=4"),
        "engines_native_vs_hf",
    )
    if check.status == "pass":
        check.details["native_over_hf"] = native_over_hf(check.details["rows"])
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
    check = named(
        judge_rows(
            run.legs.get("compile"),
            form.compile_pairs,
            ("native",),
            form.compile_ks,
            form.compile_prompts,
            "compiled",
            exit_zero=False,
        ),
        "bench_compiled",
    )
    differs = [
        row.get("case") for row in check.details.get("rows", []) if row.get("baseline_matches_reference") is False
    ]
    if differs:
        check.details["baseline_differs_from_generate"] = differs
        check.summary += f"; the compiled baseline differs from generate() in {len(differs)} (a near-tie?)"
    return check


def native_over_hf(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case: the native and hf end-to-end speedups and their ratio."""
    by_key: dict[tuple, dict[str, float]] = {}
    for row in rows:
        case = str(row.get("case"))
        key = case.replace("-native-", "-").replace("-hf-", "-")
        if isinstance(row.get("speedup"), (int, float)):
            by_key.setdefault((key,), {})[str(row.get("engine"))] = row["speedup"]
    out = []
    for (key,), speedups in sorted(by_key.items()):
        native, hf = speedups.get("native"), speedups.get("hf")
        out.append(
            {
                "case": key,
                "native_speedup": native,
                "hf_speedup": hf,
                "native_over_hf": native / hf if native and hf else None,
            }
        )
    return out


def judge_refusal(run: Run) -> Check:
    """The sliding-window pair's cases under --specbench-compile all fail with the documented refusal."""
    leg, pair = run.legs.get("compile"), run.form.sliding_pair
    problem = leg_problem(leg)
    if problem:
        return Check(
            "compile_refuses_sliding_window",
            "fail",
            f"compiled run: {problem}",
            leg.seconds if leg else 0.0,
            {"output_tail": leg.tail() if leg else ""},
        )
    cases = {case: value for case, value in leg.cases.items() if case.startswith(pair + "-")}
    if not cases:
        return Check(
            "compile_refuses_sliding_window",
            "fail",
            f"no {pair} case ran under --specbench-compile",
            leg.seconds,
            {"output_tail": leg.tail()},
        )
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
            "and this script"
            if passed
            else f"{len(other)} case(s) ended otherwise than with the refusal"
        )
        return Check("compile_refuses_sliding_window", "fail", why, leg.seconds, details)
    return Check(
        "compile_refuses_sliding_window",
        "pass",
        f"{len(refused)} {pair} case(s) refused as expected ({SLIDING_REFUSAL!r})",
        leg.seconds,
        details,
    )


def _lacks_peak(row: dict[str, Any], kind: str, device_prefix: str) -> bool:
    """Whether a row lacks a positive ``kind`` peak on a device whose name starts with ``device_prefix``."""
    peak = row.get("peak_memory_mb")
    return (
        row.get("peak_memory_kind") != kind
        or not (isinstance(peak, (int, float)) and peak > 0)
        or not str(row.get("device", "")).startswith(device_prefix)
    )


def judge_memory(run: Run) -> Check:
    """Every benchmark row carries a positive CUDA peak (on a CPU: a positive process_rss peak, then skip)."""
    rows = [row for _, row in run.bench_rows()]
    kinds = sorted({str(row.get("peak_memory_kind")) for row in rows})
    details = {
        "rows": len(rows),
        "kinds": kinds,
        "peak_memory_mb": {str(row.get("case")): row.get("peak_memory_mb") for row in rows},
    }
    if not rows:
        return Check("peak_memory_cuda", "fail", "no benchmark row to read (see bench_matrix)", details=details)
    if not run.cuda:
        bad = [row.get("case") for row in rows if _lacks_peak(row, "process_rss", "")]
        if bad:
            return Check(
                "peak_memory_cuda",
                "fail",
                f"CPU rows without a positive process_rss peak: {bad[:4]}",
                details=details,
            )
        return Check(
            "peak_memory_cuda",
            "skip",
            f"CUDA only; the {len(rows)} CPU rows carry a positive process_rss peak",
            details=details,
        )
    bad = [row.get("case") for row in rows if _lacks_peak(row, "cuda_allocated", "cuda")]
    if bad:
        return Check(
            "peak_memory_cuda",
            "fail",
            f"{len(bad)} of {len(rows)} rows lack a positive cuda_allocated peak "
            f"on a cuda device ({', '.join(map(str, bad[:4]))})",
            details=details,
        )
    peaks = [row["peak_memory_mb"] for row in rows]
    return Check(
        "peak_memory_cuda",
        "pass",
        f"{len(rows)} rows, cuda_allocated, {min(peaks):.0f} to {max(peaks):.0f} MiB",
        details=details,
    )
