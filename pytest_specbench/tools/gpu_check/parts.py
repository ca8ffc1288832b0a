"""The parts of a run: the command of each, the parts in their order, and the reading of the in-process
child's results.

Imports no torch: every part runs in a child process (legs.py).
"""

from __future__ import annotations

import json
import sys

from .plan import (
    BENCH_CASES,
    CHILD_COMMAND,
    INPROC_CHECKS,
    QWEN_KS,
    QWEN_PAIRS,
    QWEN_PROMPTS,
    Check,
)
from .run import Run, environment_fatal, qwen_decision, vllm_decision
from .suite import run_suite


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
        *CHILD_COMMAND,
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
    if run.wanted("engines_vllm") and vllm_decision(run)[0]:
        # Eager servers: this checks the served path and losslessness, and CUDA graphs add a minute to each start.
        served = (f"--specbench-vllm-python={run.vllm_python}", "--specbench-vllm-args=--enforce-eager")
        prompts, tokens = form.hf_prompts, form.bench_tokens
        run.start("vllm", pytest_bench(run, "vllm", form.vllm_pairs, (4,), prompts, tokens, "native,vllm", served))


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
