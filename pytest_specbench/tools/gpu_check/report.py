"""The GPU check's report: summary.json for programs and summary.md for people, both from the same document.

Imports no torch: the parent process writes them.
"""

from __future__ import annotations

import datetime
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ...results.schema import CaseResult
from .plan import CHECKS, REPO, Check
from .run import Run


def _first_output(command: list[str], timeout: float) -> str | None:
    """What ``command`` prints, stripped, or None when it cannot run, times out or prints nothing."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def git_commit() -> str | None:
    """The checkout's short commit, or None outside git."""
    return _first_output(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], timeout=10)


def nvidia_smi() -> str | None:
    """The GPU's name, driver and memory as nvidia-smi reports them, or None without it."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    return _first_output(query, timeout=15)


def invoked_command() -> list[str]:
    """The command as typed: ``python -m pytest_specbench gpu-check ...`` when run as the package's command."""
    first = Path(sys.argv[0])
    if first.name == "__main__.py" and first.parent.name == "pytest_specbench":
        return ["python", "-m", "pytest_specbench", *sys.argv[1:]]
    return [first.name, *sys.argv[1:]]


def write_summaries(run: Run, started: datetime.datetime, seconds: float, interrupted: str | None) -> list[str]:
    """Write summary.json and summary.md into the output folder; return the failed checks' names."""
    checks = [run.checks[name] for name in CHECKS]
    failed = [check.name for check in checks if check.status == "fail"]
    document = {
        "passed": not failed,
        "failed_checks": failed,
        "device": run.device,
        "form": run.form.name,
        "started_utc": started.strftime("%Y-%m-%d %H:%M:%S"),
        "seconds": round(seconds, 1),
        "budget_s": run.budget_s,
        "interrupted": interrupted,
        "commit": git_commit(),
        "nvidia_smi": nvidia_smi(),
        "host": platform.node(),
        "python": sys.version.split()[0],
        "command": invoked_command(),
        "checks": [check.to_json() for check in checks],
        "legs": {name: leg.to_json() for name, leg in run.legs.items()},
    }
    (run.out / "summary.json").write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")
    (run.out / "summary.md").write_text(markdown(run, document, checks), encoding="utf-8")
    return failed


def _cell(value: Any) -> str:
    """A value as one Markdown table cell."""
    if isinstance(value, float):
        return f"{value:.3g}"
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def markdown(run: Run, document: dict[str, Any], checks: list[Check]) -> str:
    """summary.md: the header, a table of every check, a section per failed check, the rows, the parts."""
    env = run.env
    verdict = "all checks passed" if document["passed"] else f"FAILED: {', '.join(document['failed_checks'])}"
    lines = [
        f"# gpu_check on {env.get('device_name') or run.device}: {verdict}", "",
        f"- command: `{' '.join(document['command'])}`",
        f"- device: {run.device} ({run.form.name} form); {env.get('device_name', '')} "
        f"{('compute capability ' + str(env['capability'])) if env.get('capability') else ''}".rstrip(),
        f"- torch {env.get('torch', '?')} (CUDA {env.get('torch_cuda') or 'none'}), transformers "
        f"{env.get('transformers', '?')}, Python {document['python']}; "
        f"nvidia-smi: {document['nvidia_smi'] or 'n/a'}",
        f"- commit {document['commit'] or '?'}, started {document['started_utc']} UTC, "
        f"took {document['seconds']:.0f} s"
        + (f"; interrupted: {document['interrupted']}" if document["interrupted"] else ""), "",
        "| check | status | seconds | summary |", "|---|---|---|---|",
    ]  # fmt: skip
    for check in checks:
        mark = {"pass": "pass", "fail": "**FAIL**", "skip": "skip"}[check.status]
        lines.append(f"| `{check.name}` | {mark} | {check.seconds:.0f} | {_cell(check.summary)} |")
    for check in checks:
        if check.status == "fail":
            lines += _failure_section(check)
    lines += _row_table(run.bench_rows())
    lines += ["", "## Legs", "", "| leg | ended | log |", "|---|---|---|"]
    for name, leg in run.legs.items():
        lines.append(f"| {name} | {_cell(leg.ended())} | `{leg.log.relative_to(run.out)}` |")
    return "\n".join(lines) + "\n"


def _failure_section(check: Check) -> list[str]:
    """A failed check's section: what it checks, its details, and its part's last output lines."""
    lines = [
        "",
        f"## FAILED: `{check.name}`",
        "",
        CHECKS[check.name],
        "",
        "```",
        json.dumps({k: v for k, v in check.details.items() if k != "output_tail"}, indent=1, default=str)[:6000],
        "```",
    ]
    if check.details.get("output_tail"):
        lines += ["", "Output, last lines:", "", "```", str(check.details["output_tail"])[-2500:], "```"]
    return lines


def _row_table(rows: list[tuple[str, CaseResult]]) -> list[str]:
    """The benchmark rows of every part, one line each (none: no section)."""
    if not rows:
        return []
    lines = [
        "",
        "## Benchmark rows",
        "",
        "| run | case | verdict | decode speedup [95%] | e2e speedup | acceptance | tau | rounds | peak MiB (kind) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rows:
        low, high = row.decode_speedup_ci_low, row.decode_speedup_ci_high
        interval = f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
        lines.append(
            f"| {name} | {row.case} | {row.verdict} | "
            f"{_cell(row.decode_speedup)}{interval}{' !' if row.unstable else ''} | "
            f"{_cell(row.speedup)} | {_cell(row.acceptance_rate)} | {_cell(row.tau)} | {row.rounds} | "
            f"{_cell(row.peak_memory_mb)} ({row.peak_memory_kind}) |"
        )
    return lines
