"""The suite_cuda_tests part: which of the test suite's tests need CUDA, the pytest command that runs them
on the chosen device (with CUDA hidden in the CPU form), and the judging of their outcomes.

Imports no torch: the parent process runs it.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from .legs import child_env, leg_problem
from .plan import REPO, TESTS, Check
from .run import Run

#: pytest -k over those modules: the CUDA tests are named for CUDA or the GPU
SUITE_KEYWORD = "cuda or gpu"


def cuda_test_files() -> list[Path]:
    """Test modules with a test that skips without CUDA (``skipif(not torch.cuda.is_available()``)."""
    pattern = re.compile(r"skipif\(\s*not\s+torch\.cuda\.is_available\(\)")
    if not TESTS.is_dir():
        return []
    files = sorted(TESTS.glob("test_*.py"))
    return [path for path in files if pattern.search(path.read_text(encoding="utf-8"))]


def _cuda_env_for_tests(device: str) -> dict[str, str]:
    """The suite's CUDA tests use ``"cuda"``: make the chosen device the one they see."""
    index = device.partition(":")[2] or "0"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
        if int(index) < len(entries):
            return child_env({"CUDA_VISIBLE_DEVICES": entries[int(index)]})
        return child_env()
    return child_env({"CUDA_VISIBLE_DEVICES": index})


def run_suite(run: Run) -> None:
    """Run the suite's CUDA tests in a child pytest (none found: nothing runs; judge_suite says so)."""
    files = cuda_test_files()
    if not files:
        return
    folder = run.leg_dir("suite")
    command = [
        sys.executable,
        "-m",
        "pytest",
        *map(str, files),
        "-k",
        SUITE_KEYWORD,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-rA",
        f"--junitxml={folder / 'junit.xml'}",
    ]
    # The CPU form hides any GPU: its tests must skip as they do on a CPU machine.
    env = _cuda_env_for_tests(run.device) if run.cuda else child_env({"CUDA_VISIBLE_DEVICES": ""})
    run.start("suite", command, env)


def judge_suite(run: Run) -> Check:
    """The suite's CUDA tests pass on CUDA; on a CPU (CUDA hidden) they all skip, and the check is skipped."""
    files = cuda_test_files()
    if not files:
        why = f"no tests/ folder in the checkout {REPO}" if not TESTS.is_dir() else "no test module skips without CUDA"
        return Check("suite_cuda_tests", "fail", f"nothing to run: {why} (the suite changed? update this check)")
    leg = run.legs.get("suite")
    problem = leg_problem(leg)
    details = {"files": [str(path.relative_to(REPO)) for path in files], "keyword": SUITE_KEYWORD}
    if problem:
        details["output_tail"] = leg.tail() if leg else ""
        return Check("suite_cuda_tests", "fail", f"pytest: {problem}", leg.seconds if leg else 0.0, details)
    cases = leg.cases
    details["tests"] = {case: outcome for case, (outcome, _) in cases.items()}
    failed = {case: message[:1500] for case, (outcome, message) in cases.items() if outcome in ("failed", "error")}
    skipped = {case: message[:300] for case, (outcome, message) in cases.items() if outcome == "skipped"}

    def verdict(status: str, summary: str) -> Check:
        return Check("suite_cuda_tests", status, summary, leg.seconds, details)

    if not cases:
        details["output_tail"] = leg.tail()
        return verdict("fail", f"pytest -k {SUITE_KEYWORD!r} selected no test ({leg.ended()})")
    if failed or (leg.rc not in (0, None) and not failed and run.cuda):
        details["failed"] = failed
        details["output_tail"] = leg.tail()
        return verdict("fail", f"{len(failed)} of {len(cases)} failed ({leg.ended()})")
    if run.cuda:
        if skipped:
            details["skipped"] = skipped
            return verdict("fail", f"{len(skipped)} of {len(cases)} skipped on a CUDA machine")
        return verdict("pass", f"{len(cases)} passed: {', '.join(cases)}")
    details["skipped"] = skipped
    if len(skipped) != len(cases):
        return verdict(
            "fail",
            f"{len(cases) - len(skipped)} of {len(cases)} selected test(s) ran with CUDA "
            "hidden: they are not the suite's CUDA tests",
        )
    return verdict("skip", f"CUDA only: the {len(cases)} selected test(s) skip without CUDA, as they should")
