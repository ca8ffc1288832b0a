"""``python -m pytest_specbench gpu-check`` (pytest_specbench/tools/gpu_check), the GPU readiness command
(docs/gpu.md), in its CPU form: it must keep running between the rare GPU runs. Each test runs the command as a
user would, in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

COMMAND = (sys.executable, "-m", "pytest_specbench", "gpu-check")

pytestmark = pytest.mark.slow  # each test runs the command in a subprocess; the CPU form takes a minute or two

#: every check, in the order the summaries list them; renaming one is a change to docs/gpu.md too
CHECKS = [
    "environment", "timing_sync_clock", "timing_sync_calls", "timing_sync_decode", "lossless_float32",
    "lossless_bfloat16", "lossless_float16", "lossless_gemma", "suite_cuda_tests", "bench_matrix",
    "engines_native_vs_hf", "bench_compiled", "compile_refuses_sliding_window", "peak_memory_cuda", "qwen_pairs",
    "engines_vllm",
]  # fmt: skip
#: what the CPU form measures for real
PASS_ON_CPU = {
    "environment",
    "timing_sync_clock",
    "timing_sync_decode",
    "lossless_float32",
    "lossless_bfloat16",
    "lossless_float16",
    "bench_matrix",
    "engines_native_vs_hf",
    "compile_refuses_sliding_window",
}
#: CUDA only, or left out of the reduced form: reported as skipped, never as passed
SKIPPED_ON_CPU = {
    "timing_sync_calls",
    "suite_cuda_tests",
    "bench_compiled",
    "peak_memory_cuda",
    "lossless_gemma",
    "qwen_pairs",
    "engines_vllm",  # no vLLM environment in the suite's
}


#: the suite's environment without a vLLM interpreter: engines_vllm is the vLLM lane's (test_served_engine_vllm.py)
NO_VLLM = {name: value for name, value in os.environ.items() if name != "SPECBENCH_VLLM_PYTHON"}


def _gpu_check(out: Path, *args: str) -> subprocess.CompletedProcess:
    # The command bounds itself (--budget, 300 s on CPU); this timeout only guards against a hang.
    return subprocess.run(
        [*COMMAND, "--out", str(out), "--device", "cpu", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=NO_VLLM,
    )


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))


def test_the_cpu_form_passes_and_writes_both_summaries(tmp_path):
    out = tmp_path / "out"
    result = _gpu_check(out)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    summary = _summary(out)
    statuses = {check["name"]: check["status"] for check in summary["checks"]}
    assert list(statuses) == CHECKS
    assert set(CHECKS) == PASS_ON_CPU | SKIPPED_ON_CPU
    assert {name for name, status in statuses.items() if status == "pass"} == PASS_ON_CPU, statuses
    assert {name for name, status in statuses.items() if status == "skip"} == SKIPPED_ON_CPU, statuses
    assert summary["passed"] is True and summary["failed_checks"] == [] and summary["form"] == "cpu"
    assert summary["command"][:4] == ["python", "-m", "pytest_specbench", "gpu-check"]
    markdown = (out / "summary.md").read_text(encoding="utf-8")
    assert "all checks passed" in markdown
    assert all(f"`{name}`" in markdown for name in CHECKS)
    assert "gpu_check: all checks passed" in result.stdout
    # The benchmark runs went through pytest bench_cases, and their rows are in the summary's legs.
    assert summary["legs"]["matrix"]["rows"] > 0 and (out / "legs" / "matrix" / "spec_results.json").is_file()


def test_a_planted_failure_exits_non_zero_naming_the_check(tmp_path):
    out = tmp_path / "out"
    result = _gpu_check(out, "--only", "timing_sync_clock", "--plant-failure", "timing_sync_clock")
    assert result.returncode == 1, result.stdout[-6000:] + result.stderr[-3000:]
    assert "gpu_check: FAILED: timing_sync_clock" in result.stdout
    summary = _summary(out)
    assert summary["failed_checks"] == ["timing_sync_clock"] and summary["passed"] is False
    statuses = {check["name"]: check["status"] for check in summary["checks"]}
    assert list(statuses) == CHECKS
    assert statuses["environment"] == "pass"
    assert all(statuses[name] == "skip" for name in CHECKS if name not in ("environment", "timing_sync_clock"))
    assert "FAILED: `timing_sync_clock`" in (out / "summary.md").read_text(encoding="utf-8")


def _refused(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*COMMAND, "--out", str(out), "--device", "cpu", *args], capture_output=True, text=True, timeout=60
    )


def test_an_unknown_check_name_is_refused(tmp_path):
    result = _refused(tmp_path, "--only", "no_such_check")
    assert result.returncode == 2 and "unknown check name" in result.stderr


def test_without_gemma_the_cuda_form_benchmarks_the_tiny_pairs_at_its_own_size():
    from pytest_specbench.tools.gpu_check.plan import CPU_FORM, CUDA_FORM, without_gemma

    form = without_gemma(CUDA_FORM)
    assert not any("gemma3" in pair for pair in (*form.bench_pairs, *form.hf_pairs, form.sliding_pair))
    assert (form.bench_pairs, form.sliding_pair) == (CPU_FORM.bench_pairs, CPU_FORM.sliding_pair)
    assert (form.name, form.bench_tokens, form.bench_ks, form.compile_pairs) == (
        "cuda",
        CUDA_FORM.bench_tokens,
        CUDA_FORM.bench_ks,
        CUDA_FORM.compile_pairs,
    )


def test_a_vllm_interpreter_that_is_no_file_is_refused_before_any_part_runs(tmp_path):
    result = _refused(tmp_path, "--vllm-python", str(tmp_path / "no-such-python"))
    assert result.returncode == 2 and "--vllm-python names" in result.stderr and "no-such-python" in result.stderr
    assert not (tmp_path / "legs").exists()


def test_with_and_without_gemma_together_are_refused(tmp_path):
    result = _refused(tmp_path, "--with-gemma", "--without-gemma")
    assert result.returncode == 2 and "--with-gemma and --without-gemma" in result.stderr
