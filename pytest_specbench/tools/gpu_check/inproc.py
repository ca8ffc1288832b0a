"""The in-process child (``gpu-check --child inproc``): the environment check, then the timing and
lossless checks in one torch process, each result appended to checks.jsonl as soon as it is known, so a
child killed at its time limit still reports what it finished."""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from .context import Context
from .environment import check_environment
from .lossless_checks import check_lossless_gemma, check_lossless_tiny
from .plan import CPU_FORM, CUDA_FORM
from .timing_checks import check_timing_sync_calls, check_timing_sync_clock, check_timing_sync_decode

#: the in-process checks by name (plan.INPROC_CHECKS lists them in order)
FUNCTIONS: dict[str, Callable[[Context], tuple[str, str, dict]]] = {
    "timing_sync_clock": check_timing_sync_clock,
    "timing_sync_calls": check_timing_sync_calls,
    "timing_sync_decode": check_timing_sync_decode,
    "lossless_float32": lambda ctx: check_lossless_tiny(ctx, "float32"),
    "lossless_bfloat16": lambda ctx: check_lossless_tiny(ctx, "bfloat16"),
    "lossless_float16": lambda ctx: check_lossless_tiny(ctx, "float16"),
    "lossless_gemma": check_lossless_gemma,
}


def _emit(results: Path, name: str, status: str, summary: str, seconds: float, details: dict) -> None:
    """Append one result to checks.jsonl (fsynced) and print it."""
    record = {"name": name, "status": status, "summary": summary, "seconds": seconds, "details": details}
    with open(results, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, default=str) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    print(f"[inproc] {status.upper():4} {name}: {summary}", flush=True)


def _run_check(results: Path, name: str, function: Callable[[], tuple[str, str, dict]]) -> str:
    """Run one check and emit its result; an exception is a failed result with its traceback."""
    start = time.monotonic()
    try:
        status, summary, details = function()
    except Exception as error:  # noqa: BLE001 - every failure is a result
        status, summary = "fail", f"{type(error).__name__}: {str(error)[:600]}"
        details = {"traceback": traceback.format_exc()[-4000:]}
    _emit(results, name, status, summary, time.monotonic() - start, details)
    return status


def child_inproc(args: argparse.Namespace) -> int:
    """The environment check, then the checks named by --checks; exit 1 when the environment is fatal."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "checks.jsonl"
    results.write_text("", encoding="utf-8")
    form = CPU_FORM if args.form == "cpu" else CUDA_FORM
    try:
        ctx = Context(args.device, form, args.with_gemma)
    except Exception as error:  # noqa: BLE001
        _emit(
            results,
            "environment",
            "fail",
            f"{type(error).__name__}: {error}",
            0.0,
            {"traceback": traceback.format_exc()},
        )
        return 1
    _run_check(results, "environment", lambda: check_environment(ctx, out / "models"))
    if ctx.env.get("fatal"):
        return 1
    for name in [name for name in args.checks.split(",") if name]:
        _run_check(results, name, lambda: FUNCTIONS[name](ctx))
    return 0
