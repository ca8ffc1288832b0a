"""Running the GPU check's parts in child processes, each in its own process group with a time budget, and
reading what a part left behind (pytest's JUnit XML, the plugin's result rows, typed).

Imports no torch: the parent process runs it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...results.log import ResultsLogError, read_log, row_problem
from ...results.schema import CaseResult


@dataclass
class Leg:
    """One child process: its command, how it ended, and what it left (rows, per-case outcomes)."""

    name: str
    command: list[str]
    budget_s: float
    log: Path
    rc: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    not_run: str | None = None  # why it never started
    rows: list[CaseResult] = field(default_factory=list)
    cases: dict[str, tuple[str, str]] = field(default_factory=dict)  # test id -> (outcome, message)

    def tail(self, chars: int = 2500) -> str:
        """The end of the part's output, for a failed check's details."""
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def ended(self) -> str:
        """How the part ended, in words: not run, timed out, interrupted, or its exit status."""
        if self.not_run:
            return f"not run: {self.not_run}"
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s (its budget: {self.budget_s:.0f} s); killed"
        if self.rc is None:
            return "stopped: this run was interrupted"
        return f"exit status {self.rc} after {self.seconds:.0f} s"

    def to_json(self) -> dict[str, Any]:
        """The part as summary.json's ``legs`` lists it."""
        return {
            "command": self.command,
            "budget_s": round(self.budget_s, 1),
            "rc": self.rc,
            "timed_out": self.timed_out,
            "seconds": round(self.seconds, 2),
            "not_run": self.not_run,
            "log": str(self.log),
            "rows": len(self.rows),
            "cases": {case: outcome for case, (outcome, _) in self.cases.items()},
        }


def leg_problem(leg: Leg | None) -> str | None:
    """Why a part's output cannot be judged (not started, not run, timed out), or None."""
    if leg is None:
        return "its run was not started"
    return leg.ended() if leg.not_run or leg.timed_out else None


_RUNNING: subprocess.Popen | None = None


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the child's process group (the plugin then writes what finished), SIGKILL after 20 s."""
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait()


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment for a child: offline, unbuffered, quiet, plus ``extra``."""
    env = dict(os.environ)
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }
    )
    env.update(extra or {})
    return env


def run_leg(leg: Leg, cwd: Path, env: dict[str, str]) -> Leg:
    """Run ``leg.command`` in its own process group with its output in ``leg.log``; kill it at its budget."""
    global _RUNNING
    cwd.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(leg.log, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(leg.command) + "\n")
        log.flush()
        try:
            process = subprocess.Popen(
                leg.command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        except OSError as error:
            leg.not_run = f"could not start: {error}"
            return leg
        _RUNNING = process
        try:
            leg.rc = process.wait(timeout=max(1.0, leg.budget_s))
        except subprocess.TimeoutExpired:
            leg.timed_out = True
            _stop(process)
            leg.rc = process.returncode
        finally:
            _RUNNING = None
    leg.seconds = time.monotonic() - start
    return leg


def interrupt(signum, frame):  # noqa: ARG001
    """Signal handler of the parent: stop the running child's process group, then interrupt the parent."""
    if _RUNNING is not None:
        _stop(_RUNNING)
    raise KeyboardInterrupt(f"signal {signum}")


def junit_cases(path: Path) -> dict[str, tuple[str, str]]:
    """Per test, from pytest's JUnit XML: ``id -> (passed | failed | error | skipped, message)``; the id is
    the parametrisation (a benchmark case id) when there is one, else ``file::name``."""
    if not path.is_file():
        return {}
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return {}
    cases = {}
    for testcase in root.iter("testcase"):
        name = testcase.get("name", "")
        match = re.search(r"\[(.*)\]$", name)
        key = match.group(1) if match else f"{testcase.get('classname', '')}::{name}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            element = testcase.find(tag)
            if element is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = f"{element.get('message', '')}\n{element.text or ''}".strip()
                break
        cases[key] = (outcome, message)
    return cases


def result_rows(folder: Path) -> list[CaseResult]:
    """The rows of a bench run, typed: its JSON file, or (killed before writing it) its results log. A row the
    schema refuses is left out, so the part's check counts its case as missing."""
    path = folder / "spec_results.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (ValueError, OSError):
        document = None
    if isinstance(document, dict) and isinstance(document.get("results"), list):
        rows = document["results"]
        return [CaseResult.from_row(row) for row in rows if isinstance(row, dict) and row_problem(row) is None]
    log = folder / "spec_results.jsonl"
    try:
        return list(read_log(log).rows.values()) if log.is_file() else []
    except ResultsLogError:
        return []
