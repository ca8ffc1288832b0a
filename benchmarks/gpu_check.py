"""GPU readiness: one command that checks the whole CUDA path in minutes (issue 24).

    python benchmarks/gpu_check.py --out DIR [--device cuda:0|cpu]

Runs a fixed list of checks, each with a name, pass / fail / skip and details, writes
``DIR/summary.json`` and ``DIR/summary.md``, and exits 1 when any check failed, naming it.
Nothing needs the Hugging Face hub: the embedded Gemma 3 270M pairs (``gemma3_int8``,
``gemma3_pld``), tiny models built here in-process (written to ``DIR/legs/inproc/models`` with a
pairs TOML for the benchmark runs), and the Qwen2.5-Coder pairs when the ``qwen`` extra is
installed and converted (``--qwen``). How to run it and what to read: docs/gpu.md.

The checks (``CHECKS`` below, in the order they are reported):

- the CUDA tests of the test suite (``pytest tests`` on the tests that skip without CUDA), and
  lossless runs on the device in float32 (exact) and bfloat16 / float16 (near-ties allowed by the
  tie rule) on tiny models, plus Gemma 3 on the device;
- a small benchmark matrix through ``pytest bench_cases`` (both embedded pairs, k = 1, 4, 16, two
  prompts, 128 tokens), the same with ``--specbench-compile`` on a tiny Llama pair (Gemma 3 has
  sliding-window layers, which compiled steps refuse: that refusal is checked as expected), and
  the native engine against transformers' assisted generation at k = 4;
- that the package's clock brackets GPU work with ``torch.cuda.synchronize()``: a kernel of known
  length timed by ``engine.timing.DeviceClock`` and by CUDA events, GPU work planted in every
  forward pass of a decode, and every clock read preceded by a synchronise;
- CUDA peak memory present and positive in every benchmark row.

``--device cpu`` runs the reduced form (tiny models only, 8 or 16 tokens, k = 1, 4, one prompt;
the clock check becomes a CPU clock sanity check, the CUDA-only checks are reported as skipped):
``tests/test_gpu_check.py`` runs it so the script cannot rot between GPU runs.

The parent process imports no torch: it runs every part in a child process with a time budget
(``--budget`` in all, default 420 s on CUDA), kills a child that overruns (its process group,
SIGTERM then SIGKILL) and reports its checks as failed by timeout. The in-process checks run in
one child (this file with ``--child inproc``), which writes each result as it finishes.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import importlib.metadata
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
BENCH_CASES = REPO / "bench_cases"
TESTS = REPO / "tests"

#: the plugin's default --specbench-tie-tolerance (logits): a half-precision divergence with a smaller
#: top-2 margin at the target is a near-tie, not a failure
TIE_TOLERANCE = 0.1
#: the phrase of the package's refusal to compile a sliding-window model (engine/kv_cache.py)
SLIDING_REFUSAL = "compiled steps need a model without sliding-window layers"
#: the drafter tests' prompt (tests/factory.py): it repeats itself, so prompt lookup finds n-grams to copy
REPETITIVE_PROMPT = [5, 6, 7, 8, 9, 10] * 4 + [5, 6]
GEMMA = "embedded:gemma3-270m"

CHECKS: dict[str, str] = {
    "environment": "torch, CUDA, device, dtype support, compile back-end, the models this run needs",
    "timing_sync_clock": "DeviceClock against CUDA events on a kernel of known length (CPU: clock sanity)",
    "timing_sync_calls": "every DeviceClock read in a decode is preceded by torch.cuda.synchronize()",
    "timing_sync_decode": "decode timings cover GPU work planted in every target forward pass",
    "lossless_float32": "tiny models on the device, float32: greedy and speculative equal generate() exactly",
    "lossless_bfloat16": "tiny models on the device, bfloat16: equal to generate() or a near-tie (tie rule)",
    "lossless_float16": "tiny models on the device, float16: equal to generate() or a near-tie (tie rule)",
    "lossless_gemma": "Gemma 3 270M on the device: speculative equal to generate() (float32; bfloat16 tie rule)",
    "suite_cuda_tests": "the test suite's CUDA tests, run with pytest in a subprocess",
    "bench_matrix": "pytest bench_cases: the small benchmark matrix, every case lossless",
    "engines_native_vs_hf": "pytest bench_cases --specbench-engine=native,hf at k=4, both lossless",
    "bench_compiled": "pytest bench_cases --specbench-compile on a tiny Llama pair, lossless",
    "compile_refuses_sliding_window": "--specbench-compile refuses a sliding-window model (Gemma 3), as documented",
    "peak_memory_cuda": "every benchmark row has peak_memory_kind cuda_allocated and a positive peak",
    "qwen_pairs": "the real Qwen2.5-Coder pairs through pytest bench_cases (with the qwen extra)",
}
INPROC_CHECKS = ("timing_sync_clock", "timing_sync_calls", "timing_sync_decode", "lossless_float32",
                 "lossless_bfloat16", "lossless_float16", "lossless_gemma")


# --- the two forms ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Form:
    """What the run measures on this kind of device."""

    name: str  # "cuda" or "cpu"
    budget_s: float  # all legs together
    caps: dict[str, float]  # per leg, at most
    tiny_tokens: int
    tiny_ks: tuple[int, ...]
    gemma_tokens: int
    gemma_ks: tuple[int, ...]
    bench_pairs: tuple[str, ...]
    bench_ks: tuple[int, ...]
    bench_prompts: tuple[str, ...]
    bench_tokens: int
    hf_pairs: tuple[str, ...]
    hf_prompts: tuple[str, ...]
    compile_pairs: tuple[str, ...]  # pairs that compile
    sliding_pair: str  # a pair with sliding-window layers, refused under --specbench-compile
    compile_ks: tuple[int, ...]
    compile_prompts: tuple[str, ...]
    rounds: tuple[int, int, int, float]  # warm-up, min rounds, max rounds, case budget (s)
    hf_in_matrix: bool  # the hf engine runs inside the matrix run (one pytest start fewer)


CUDA_FORM = Form(
    name="cuda", budget_s=420,  # with kill grace and summaries, within about 8 minutes
    caps={"inproc": 240, "matrix": 150, "hf": 90, "suite": 180, "compile": 200, "qwen": 150},
    tiny_tokens=64, tiny_ks=(1, 4, 16), gemma_tokens=128, gemma_ks=(4,),
    bench_pairs=("gemma3_int8", "gemma3_pld"), bench_ks=(1, 4, 16), bench_prompts=("natural", "code_python"),
    bench_tokens=128, hf_pairs=("gemma3_int8", "gemma3_pld"), hf_prompts=("code_python",),
    compile_pairs=("tiny_llama",), sliding_pair="gemma3_pld", compile_ks=(1, 4, 16),
    compile_prompts=("natural", "code_python"), rounds=(1, 2, 4, 3.0), hf_in_matrix=False,
)  # fmt: skip
CPU_FORM = Form(
    name="cpu", budget_s=300,
    caps={"inproc": 120, "matrix": 150, "hf": 90, "suite": 90, "compile": 90, "qwen": 300},
    tiny_tokens=16, tiny_ks=(1, 4), gemma_tokens=8, gemma_ks=(4,),
    bench_pairs=("tiny_llama_int8", "tiny_llama_pld"), bench_ks=(1, 4), bench_prompts=("code_python",),
    bench_tokens=8, hf_pairs=("tiny_llama_int8", "tiny_llama_pld"), hf_prompts=("code_python",),
    compile_pairs=(), sliding_pair="tiny_gemma_pld", compile_ks=(4,), compile_prompts=("code_python",),
    rounds=(0, 1, 1, 5.0), hf_in_matrix=True,
)  # fmt: skip
QWEN_PAIRS = ("qwen_coder", "qwen_coder_pld")
QWEN_KS = (4,)
QWEN_PROMPTS = ("code_python",)


# --- results -------------------------------------------------------------------------------------


@dataclass
class Check:
    name: str
    status: str
    summary: str
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "summary": self.summary,
                "seconds": round(self.seconds, 2), "description": CHECKS.get(self.name, ""), "details": self.details}


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
    rows: list[dict[str, Any]] = field(default_factory=list)
    cases: dict[str, tuple[str, str]] = field(default_factory=dict)  # test id -> (outcome, message)

    def tail(self, chars: int = 2500) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def ended(self) -> str:
        if self.not_run:
            return f"not run: {self.not_run}"
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s (its budget: {self.budget_s:.0f} s); killed"
        if self.rc is None:
            return "stopped: this run was interrupted"
        return f"exit status {self.rc} after {self.seconds:.0f} s"

    def to_json(self) -> dict[str, Any]:
        return {"command": self.command, "budget_s": round(self.budget_s, 1), "rc": self.rc,
                "timed_out": self.timed_out, "seconds": round(self.seconds, 2), "not_run": self.not_run,
                "log": str(self.log), "rows": len(self.rows),
                "cases": {case: outcome for case, (outcome, _) in self.cases.items()}}


# --- child processes -----------------------------------------------------------------------------

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
    env = dict(os.environ)
    env.update({"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
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
            process = subprocess.Popen(leg.command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True)
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


def _interrupt(signum, frame):  # noqa: ARG001
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


def result_rows(folder: Path) -> list[dict[str, Any]]:
    """The rows of a bench run: its JSON file, or (killed before writing it) its results log."""
    path = folder / "spec_results.json"
    if path.is_file():
        try:
            return list(json.loads(path.read_text(encoding="utf-8")).get("results", []))
        except (ValueError, OSError):
            pass
    log, rows = folder / "spec_results.jsonl", []
    if log.is_file():
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut by the kill
            if isinstance(record, dict) and "case" in record and "verdict" in record:
                rows.append(record)
    return rows


# --- the parent: legs ----------------------------------------------------------------------------


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
        return not self.only or any(name in self.only for name in names)

    def budget(self, leg: str) -> float:
        left = self.deadline - time.monotonic()
        if leg == "qwen" and self.qwen == "on":  # asked for: it may convert first, so it takes what is left
            return left
        return min(self.form.caps[leg], left)

    def leg_dir(self, leg: str) -> Path:
        folder = self.out / "legs" / leg
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def start(self, name: str, command: list[str], env: dict[str, str] | None = None) -> Leg:
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


def pytest_bench(run: Run, leg: str, pairs: tuple[str, ...], ks: tuple, prompts: tuple[str, ...], tokens: int,
                 engines: str = "native", extra: tuple[str, ...] = ()) -> list[str]:
    folder = run.leg_dir(leg)
    warmup, min_rounds, max_rounds, case_budget = run.form.rounds
    command = [
        sys.executable, "-m", "pytest", str(BENCH_CASES), "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
        "-rfEs", "--benchmark-disable", f"--junitxml={folder / 'junit.xml'}",
        f"--specbench-gpu={run.device}", f"--specbench-pairs={','.join(pairs)}",
        f"--specbench-k={','.join(map(str, ks))}", f"--specbench-prompts={','.join(prompts)}",
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


def cuda_test_files() -> list[Path]:
    """Test modules with a test that skips without CUDA (``skipif(not torch.cuda.is_available()``)."""
    pattern = re.compile(r"skipif\(\s*not\s+torch\.cuda\.is_available\(\)")
    if not TESTS.is_dir():
        return []
    return [path for path in sorted(TESTS.glob("test_*.py")) if pattern.search(path.read_text(encoding="utf-8"))]


#: pytest -k over those modules: the CUDA tests are named for CUDA or the GPU
SUITE_KEYWORD = "cuda or gpu"


def run_legs(run: Run) -> None:
    form = run.form
    inproc = [name for name in INPROC_CHECKS if run.wanted(name)]
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "inproc", "--out", str(run.leg_dir("inproc")),
               "--device", run.device, "--form", form.name, "--checks", ",".join(inproc)]
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
        files = cuda_test_files()
        if files:
            folder = run.leg_dir("suite")
            run.start("suite", [sys.executable, "-m", "pytest", *map(str, files), "-k", SUITE_KEYWORD,
                                "-p", "no:cacheprovider", "-p", "no:randomly", "-rA", f"--junitxml={folder / 'junit.xml'}"],
                      # The CPU form hides any GPU: its tests must skip as they do on a CPU machine.
                      _cuda_env_for_tests(run.device) if run.cuda else child_env({"CUDA_VISIBLE_DEVICES": ""}))
    if run.wanted("bench_compiled", "compile_refuses_sliding_window") or (bench_rows_wanted and form.compile_pairs):
        # Prompts cut to 64 tokens: prompt + new tokens stay in one static-cache block (no recompilation).
        run.start("compile", pytest_bench(run, "compile", form.compile_pairs + (form.sliding_pair,), form.compile_ks,
                                          form.compile_prompts, form.bench_tokens,
                                          extra=("--specbench-compile", "--specbench-context-tokens=64")))
    if run.wanted("bench_matrix") or bench_rows_wanted or (form.hf_in_matrix and run.wanted("engines_native_vs_hf")):
        engines = "native,hf" if form.hf_in_matrix else "native"
        run.start("matrix", pytest_bench(run, "matrix", form.bench_pairs, form.bench_ks, form.bench_prompts,
                                         form.bench_tokens, engines))
    if not form.hf_in_matrix and run.wanted("engines_native_vs_hf"):
        run.start("hf", pytest_bench(run, "hf", form.hf_pairs, (4,), form.hf_prompts, form.bench_tokens, "native,hf"))
    if run.wanted("qwen_pairs") and qwen_decision(run)[0]:
        run.start("qwen", pytest_bench(run, "qwen", QWEN_PAIRS, QWEN_KS, QWEN_PROMPTS, form.bench_tokens))


def environment_fatal(run: Run) -> bool:
    """Whether the environment check failed in a way that leaves nothing else worth running (no CUDA)."""
    environment = run.checks.get("environment")
    return environment is not None and environment.status == "fail" and environment.details.get("fatal", True)


def read_inproc(run: Run) -> None:
    leg = run.legs["inproc"]
    path = run.leg_dir("inproc") / "checks.jsonl"
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            run.checks[record["name"]] = Check(record["name"], record["status"], record["summary"],
                                               record.get("seconds", 0.0), record.get("details", {}))
    if "environment" in run.checks:
        run.env = run.checks["environment"].details
    else:
        run.checks["environment"] = Check("environment", "fail", f"the in-process child reported nothing: {leg.ended()}",
                                          leg.seconds, {"output_tail": leg.tail()})
    for name in INPROC_CHECKS:
        if name not in run.checks and run.wanted(name) and not environment_fatal(run):
            run.checks[name] = Check(name, "fail", f"no result: the in-process child {leg.ended()}",
                                     details={"output_tail": leg.tail()})


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
        return False, ("installed but not converted yet (the first conversion takes minutes of CPU, beyond this "
                       "run's budget); --qwen=on converts and runs it")
    return True, "installed and converted"


def qwen_chunks_missing(models) -> list[str]:
    """The chunk distributions of ``models`` (the package's recorded table) not installed at their pinned
    version, looked up with importlib.metadata."""
    missing = []
    for model in models:
        for chunk in model.chunks:
            try:
                found = importlib.metadata.version(chunk.distribution)
            except importlib.metadata.PackageNotFoundError:
                found = None
            if found != chunk.version:
                missing.append(chunk.requirement)
    return missing


# --- the parent: judging the legs ----------------------------------------------------------------


def _leg_problem(leg: Leg | None) -> str | None:
    if leg is None:
        return "its run was not started"
    if leg.not_run:
        return leg.ended()
    if leg.timed_out:
        return leg.ended()
    return None


def _row_key(row: dict[str, Any]) -> tuple[str, str, str, str]:
    return (str(row.get("pair")), str(row.get("engine", "native")), str(row.get("k")), str(row.get("category") or row.get("prompt")))


_CASE_ID = re.compile(r"^(?P<pair>[A-Za-z][A-Za-z0-9_]*)-(?:(?P<engine>native|hf)-)?k(?P<k>[^-]+)-(?P<prompt>[^-]+)")


def _case_key(case_id: str) -> tuple[str, str, str, str] | None:
    """``(pair, engine, k, prompt category)`` of a case id ``{pair}[-{engine}]-k{k}-{prompt}``."""
    match = _CASE_ID.match(case_id)
    if not match:
        return None
    return (match["pair"], match["engine"] or "native", match["k"], match["prompt"])


def _case_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keep = ("case", "engine", "device", "dtype", "verdict", "decode_speedup", "decode_speedup_ci_low",
            "decode_speedup_ci_high", "speedup", "acceptance_rate", "tau", "rounds", "unstable",
            "baseline_matches_reference", "peak_memory_mb", "peak_memory_kind")
    return [{name: row.get(name) for name in keep} for row in rows]


def judge_rows(leg: Leg | None, pairs: tuple[str, ...], engines: tuple[str, ...], ks: tuple, prompts: tuple[str, ...],
               what: str, exit_zero: bool = True) -> Check:
    """A bench leg's rows against the cases it should hold: all there, all lossless (or a near-tie), and (with
    ``exit_zero``) pytest's exit status 0."""
    problem = _leg_problem(leg)
    if problem:
        details = {"output_tail": leg.tail()} if leg else {}
        if leg:
            details["rows"] = _case_table(leg.rows)
        return Check("", "fail", f"{what}: {problem}", leg.seconds if leg else 0.0, details)
    expected = {(pair, engine, str(k), prompt) for pair in pairs for engine in engines for k in ks for prompt in prompts}
    rows = [row for row in leg.rows if _row_key(row) in expected]
    found = {_row_key(row) for row in rows}
    missing = sorted(expected - found)
    bad = [row for row in rows if row.get("verdict") not in ("lossless", "tie-divergence")]
    failed_tests = {case: message for case, (outcome, message) in leg.cases.items()
                    if outcome in ("failed", "error") and _case_key(case) in expected}
    ties = sum(row.get("verdict") == "tie-divergence" for row in rows)
    details = {"rows": _case_table(rows), "missing_cases": ["-".join(key) for key in missing],
               "not_lossless": [row.get("case") for row in bad],
               "failed_tests": {case: message[:1500] for case, message in failed_tests.items()}, "leg": leg.ended()}
    wrong_exit = exit_zero and leg.rc != 0
    if missing or bad or failed_tests or wrong_exit:
        parts = []
        if wrong_exit:
            parts.append(f"pytest {leg.ended()}")
        if missing:
            parts.append(f"{len(missing)} of {len(expected)} cases have no row")
        if bad:
            parts.append(f"{len(bad)} not lossless ({', '.join(str(row.get('case')) for row in bad[:4])})")
        if failed_tests:
            parts.append(f"{len(failed_tests)} test(s) failed ({', '.join(list(failed_tests)[:4])})")
        details["output_tail"] = leg.tail()
        return Check("", "fail", f"{what}: " + "; ".join(parts), leg.seconds, details)
    speedups = [row["decode_speedup"] for row in rows if isinstance(row.get("decode_speedup"), (int, float))]
    span = f"; decode speedup {min(speedups):.2f} to {max(speedups):.2f}" if speedups else ""
    return Check("", "pass", f"{what}: {len(rows)} cases lossless ({ties} near-tie){span}", leg.seconds, details)


def named(check: Check, name: str) -> Check:
    check.name = name
    return check


def judge(run: Run) -> None:
    form, legs = run.form, run.legs
    if run.wanted("bench_matrix"):
        run.checks["bench_matrix"] = named(judge_rows(legs.get("matrix"), form.bench_pairs, ("native",), form.bench_ks,
                                                      form.bench_prompts, "matrix"), "bench_matrix")
    if run.wanted("engines_native_vs_hf"):
        leg = legs.get("matrix") if form.hf_in_matrix else legs.get("hf")
        prompts = form.bench_prompts if form.hf_in_matrix else form.hf_prompts
        check = named(judge_rows(leg, form.hf_pairs, ("native", "hf"), (4,), prompts, "native and hf at k=4"),
                      "engines_native_vs_hf")
        if check.status == "pass":
            check.details["native_over_hf"] = native_over_hf(check.details["rows"])
            ratios = [entry["native_over_hf"] for entry in check.details["native_over_hf"] if entry["native_over_hf"]]
            if ratios:
                check.summary += f"; native / hf end to end {min(ratios):.2f} to {max(ratios):.2f}"
        run.checks["engines_native_vs_hf"] = check
    if run.wanted("bench_compiled"):
        if not form.compile_pairs:
            run.checks["bench_compiled"] = Check("bench_compiled", "skip", "CPU form: inductor compiles for about a "
                                                 "minute on a CPU, beyond the reduced budget; the GPU form runs it")
        else:
            # exit_zero=False: the same run holds the sliding-window pair's refused (failing) cases.
            check = named(judge_rows(legs.get("compile"), form.compile_pairs, ("native",), form.compile_ks,
                                     form.compile_prompts, "compiled", exit_zero=False), "bench_compiled")
            differs = [row.get("case") for row in check.details.get("rows", [])
                       if row.get("baseline_matches_reference") is False]
            if differs:
                check.details["baseline_differs_from_generate"] = differs
                check.summary += f"; the compiled baseline differs from generate() in {len(differs)} (a near-tie?)"
            run.checks["bench_compiled"] = check
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
            run.checks["qwen_pairs"] = named(judge_rows(legs.get("qwen"), QWEN_PAIRS, ("native",), QWEN_KS,
                                                        QWEN_PROMPTS, "Qwen pairs"), "qwen_pairs")


def native_over_hf(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_key: dict[tuple, dict[str, float]] = {}
    for row in rows:
        case = str(row.get("case"))
        key = case.replace("-native-", "-").replace("-hf-", "-")
        if isinstance(row.get("speedup"), (int, float)):
            by_key.setdefault((key,), {})[str(row.get("engine"))] = row["speedup"]
    out = []
    for (key,), speedups in sorted(by_key.items()):
        native, hf = speedups.get("native"), speedups.get("hf")
        out.append({"case": key, "native_speedup": native, "hf_speedup": hf,
                    "native_over_hf": native / hf if native and hf else None})
    return out


def judge_refusal(run: Run) -> Check:
    leg, pair = run.legs.get("compile"), run.form.sliding_pair
    problem = _leg_problem(leg)
    if problem:
        return Check("compile_refuses_sliding_window", "fail", f"compiled run: {problem}", leg.seconds if leg else 0.0,
                     {"output_tail": leg.tail() if leg else ""})
    cases = {case: value for case, value in leg.cases.items() if case.startswith(pair + "-")}
    if not cases:
        return Check("compile_refuses_sliding_window", "fail", f"no {pair} case ran under --specbench-compile",
                     leg.seconds, {"output_tail": leg.tail()})
    refused = [case for case, (outcome, message) in cases.items() if outcome in ("failed", "error") and SLIDING_REFUSAL in message]
    other = {case: f"{outcome}: {message[:800]}" for case, (outcome, message) in cases.items() if case not in refused}
    details = {"pair": pair, "refused": refused, "otherwise": other}
    if other:
        passed = [case for case, (outcome, _) in cases.items() if outcome == "passed"]
        why = (f"{len(passed)} case(s) of the sliding-window pair ran compiled: the refusal is gone (docs/engines.md "
               "says such models recompiled at every step); check their speed and update docs and this script"
               if passed else f"{len(other)} case(s) ended otherwise than with the refusal")
        return Check("compile_refuses_sliding_window", "fail", why, leg.seconds, details)
    return Check("compile_refuses_sliding_window", "pass",
                 f"{len(refused)} {pair} case(s) refused as expected ({SLIDING_REFUSAL!r})", leg.seconds, details)


def judge_memory(run: Run) -> Check:
    rows = [row for name in ("matrix", "hf", "compile", "qwen") if name in run.legs for row in run.legs[name].rows]
    kinds = sorted({str(row.get("peak_memory_kind")) for row in rows})
    details = {"rows": len(rows), "kinds": kinds,
               "peak_memory_mb": {str(row.get("case")): row.get("peak_memory_mb") for row in rows}}
    if not rows:
        return Check("peak_memory_cuda", "fail", "no benchmark row to read (see bench_matrix)", details=details)
    if not run.cuda:
        bad = [row.get("case") for row in rows if row.get("peak_memory_kind") != "process_rss"
               or not (isinstance(row.get("peak_memory_mb"), (int, float)) and row["peak_memory_mb"] > 0)]
        if bad:
            return Check("peak_memory_cuda", "fail", f"CPU rows without a positive process_rss peak: {bad[:4]}",
                         details=details)
        return Check("peak_memory_cuda", "skip", f"CUDA only; the {len(rows)} CPU rows carry a positive process_rss "
                     "peak", details=details)
    bad = [row.get("case") for row in rows if row.get("peak_memory_kind") != "cuda_allocated"
           or not (isinstance(row.get("peak_memory_mb"), (int, float)) and row["peak_memory_mb"] > 0)
           or not str(row.get("device", "")).startswith("cuda")]
    if bad:
        return Check("peak_memory_cuda", "fail", f"{len(bad)} of {len(rows)} rows lack a positive cuda_allocated peak "
                     f"on a cuda device ({', '.join(map(str, bad[:4]))})", details=details)
    peaks = [row["peak_memory_mb"] for row in rows]
    return Check("peak_memory_cuda", "pass", f"{len(rows)} rows, cuda_allocated, {min(peaks):.0f} to {max(peaks):.0f} MiB",
                 details=details)


def judge_suite(run: Run) -> Check:
    files = cuda_test_files()
    if not files:
        why = "no tests/ folder next to this script" if not TESTS.is_dir() else "no test module skips without CUDA"
        return Check("suite_cuda_tests", "fail", f"nothing to run: {why} (the suite changed? update this script)")
    leg = run.legs.get("suite")
    problem = _leg_problem(leg)
    details = {"files": [str(path.relative_to(REPO)) for path in files], "keyword": SUITE_KEYWORD}
    if problem:
        details["output_tail"] = leg.tail() if leg else ""
        return Check("suite_cuda_tests", "fail", f"pytest: {problem}", leg.seconds if leg else 0.0, details)
    cases = leg.cases
    details["tests"] = {case: outcome for case, (outcome, _) in cases.items()}
    failed = {case: message[:1500] for case, (outcome, message) in cases.items() if outcome in ("failed", "error")}
    skipped = {case: message[:300] for case, (outcome, message) in cases.items() if outcome == "skipped"}
    if not cases:
        details["output_tail"] = leg.tail()
        return Check("suite_cuda_tests", "fail", f"pytest -k {SUITE_KEYWORD!r} selected no test ({leg.ended()})",
                     leg.seconds, details)
    if failed or (leg.rc not in (0, None) and not failed and run.cuda):
        details["failed"] = failed
        details["output_tail"] = leg.tail()
        return Check("suite_cuda_tests", "fail", f"{len(failed)} of {len(cases)} failed ({leg.ended()})", leg.seconds,
                     details)
    if run.cuda:
        if skipped:
            details["skipped"] = skipped
            return Check("suite_cuda_tests", "fail", f"{len(skipped)} of {len(cases)} skipped on a CUDA machine",
                         leg.seconds, details)
        return Check("suite_cuda_tests", "pass", f"{len(cases)} passed: {', '.join(cases)}", leg.seconds, details)
    details["skipped"] = skipped
    if len(skipped) != len(cases):
        return Check("suite_cuda_tests", "fail", f"{len(cases) - len(skipped)} of {len(cases)} selected test(s) ran "
                     "with CUDA hidden: they are not the suite's CUDA tests", leg.seconds, details)
    return Check("suite_cuda_tests", "skip", f"CUDA only: the {len(cases)} selected test(s) skip without CUDA, as "
                 "they should", leg.seconds, details)


# --- the parent: summaries -----------------------------------------------------------------------


def git_commit() -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def nvidia_smi() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def write_summaries(run: Run, started: datetime.datetime, seconds: float, interrupted: str | None) -> list[str]:
    checks = [run.checks[name] for name in CHECKS]
    failed = [check.name for check in checks if check.status == "fail"]
    document = {
        "passed": not failed, "failed_checks": failed, "device": run.device, "form": run.form.name,
        "started_utc": started.strftime("%Y-%m-%d %H:%M:%S"), "seconds": round(seconds, 1),
        "budget_s": run.budget_s, "interrupted": interrupted,
        "commit": git_commit(), "nvidia_smi": nvidia_smi(), "host": platform.node(), "python": sys.version.split()[0],
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "checks": [check.to_json() for check in checks],
        "legs": {name: leg.to_json() for name, leg in run.legs.items()},
    }
    (run.out / "summary.json").write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")
    (run.out / "summary.md").write_text(markdown(run, document, checks), encoding="utf-8")
    return failed


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def markdown(run: Run, document: dict[str, Any], checks: list[Check]) -> str:
    env = run.env
    verdict = "all checks passed" if document["passed"] else f"FAILED: {', '.join(document['failed_checks'])}"
    lines = [
        f"# gpu_check on {env.get('device_name') or run.device}: {verdict}", "",
        f"- command: `{' '.join(document['command'])}`",
        f"- device: {run.device} ({run.form.name} form); {env.get('device_name', '')} "
        f"{('compute capability ' + str(env['capability'])) if env.get('capability') else ''}".rstrip(),
        f"- torch {env.get('torch', '?')} (CUDA {env.get('torch_cuda') or 'none'}), transformers "
        f"{env.get('transformers', '?')}, Python {document['python']}; nvidia-smi: {document['nvidia_smi'] or 'n/a'}",
        f"- commit {document['commit'] or '?'}, started {document['started_utc']} UTC, took {document['seconds']:.0f} s"
        + (f"; interrupted: {document['interrupted']}" if document["interrupted"] else ""), "",
        "| check | status | seconds | summary |", "|---|---|---|---|",
    ]  # fmt: skip
    for check in checks:
        mark = {"pass": "pass", "fail": "**FAIL**", "skip": "skip"}[check.status]
        lines.append(f"| `{check.name}` | {mark} | {check.seconds:.0f} | {_cell(check.summary)} |")
    failed = [check for check in checks if check.status == "fail"]
    for check in failed:
        lines += ["", f"## FAILED: `{check.name}`", "", CHECKS[check.name], "", "```",
                  json.dumps({k: v for k, v in check.details.items() if k != "output_tail"}, indent=1,
                             default=str)[:6000], "```"]
        if check.details.get("output_tail"):
            lines += ["", "Output, last lines:", "", "```", str(check.details["output_tail"])[-2500:], "```"]
    rows = [(name, row) for name in ("matrix", "hf", "compile", "qwen") if name in run.legs for row in run.legs[name].rows]
    if rows:
        lines += ["", "## Benchmark rows", "",
                  "| run | case | verdict | decode speedup [95%] | e2e speedup | acceptance | tau | rounds | peak MiB (kind) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name, row in rows:
            low, high = row.get("decode_speedup_ci_low"), row.get("decode_speedup_ci_high")
            interval = f" [{low:.2f}, {high:.2f}]" if isinstance(low, (int, float)) and isinstance(high, (int, float)) else ""
            speedup = row.get("decode_speedup")
            lines.append(f"| {name} | {row.get('case')} | {row.get('verdict')} | "
                         f"{_cell(speedup)}{interval}{' !' if row.get('unstable') else ''} | {_cell(row.get('speedup'))} | "
                         f"{_cell(row.get('acceptance_rate'))} | {_cell(row.get('tau'))} | {row.get('rounds')} | "
                         f"{_cell(row.get('peak_memory_mb'))} ({row.get('peak_memory_kind')}) |")
    lines += ["", "## Legs", "", "| leg | ended | log |", "|---|---|---|"]
    for name, leg in run.legs.items():
        lines.append(f"| {name} | {_cell(leg.ended())} | `{leg.log.relative_to(run.out)}` |")
    return "\n".join(lines) + "\n"


def parent(args: argparse.Namespace) -> int:
    started = datetime.datetime.now(datetime.timezone.utc)
    start = time.monotonic()
    device = normalise_device(args.device)
    form = CPU_FORM if device == "cpu" else CUDA_FORM
    budget = args.budget if args.budget is not None else form.budget_s
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else set()
    unknown = sorted((only | ({args.plant_failure} if args.plant_failure else set())) - set(CHECKS))
    if unknown:
        print(f"gpu_check: unknown check name(s) {unknown}; known: {', '.join(CHECKS)}", file=sys.stderr)
        return 2
    run = Run(out, device, form, only, args.qwen, args.with_gemma or form.name == "cuda", start + budget, budget)
    interrupted = None
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        run_legs(run)
        if not environment_fatal(run):
            judge(run)
    except KeyboardInterrupt as error:
        interrupted = str(error) or "interrupted"
        if "inproc" in run.legs and "environment" not in run.checks:
            read_inproc(run)  # what the in-process child finished before the signal
    except Exception:  # noqa: BLE001 - a bug here must still leave the summaries and a failing exit status
        interrupted = "gpu_check internal error: " + traceback.format_exc()[-3000:]
        print(interrupted, file=sys.stderr)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for name in CHECKS:
        if name in run.checks:
            continue
        if only and name not in only and name != "environment":
            run.checks[name] = Check(name, "skip", "not selected (--only)")
        elif interrupted:
            run.checks[name] = Check(name, "fail", f"not run: {interrupted}")
        else:
            run.checks[name] = Check(name, "fail", "not run: the environment check failed: "
                                     + run.checks["environment"].summary[:300])
    if args.plant_failure:
        planted = run.checks[args.plant_failure]
        planted.status = "fail"
        planted.summary = f"planted failure (--plant-failure); it was: {planted.summary}"
    failed = write_summaries(run, started, time.monotonic() - start, interrupted)
    for check in (run.checks[name] for name in CHECKS):
        print(f"[gpu_check] {check.status.upper():4}  {check.name}: {check.summary}")
    print(f"[gpu_check] summary: {out / 'summary.md'} and {out / 'summary.json'} ({time.monotonic() - start:.0f} s)")
    if failed:
        print(f"gpu_check: FAILED: {', '.join(failed)}")
        return 1
    print("gpu_check: all checks passed (skipped: "
          f"{', '.join(c.name for c in run.checks.values() if c.status == 'skip') or 'none'})")
    return 0


def normalise_device(device: str) -> str:
    """``cpu``, ``cuda`` (= ``cuda:0``) or ``cuda:N``; anything else is refused."""
    device = device.strip().lower()
    if device == "cuda":
        return "cuda:0"
    if device == "cpu" or re.fullmatch(r"cuda:\d+", device):
        return device
    raise SystemExit(f"gpu_check: --device must be cpu, cuda or cuda:N, not {device!r}")


# =================================================================================================
# The in-process child: everything below imports torch, and runs only with --child inproc.
# =================================================================================================


class Context:
    """What the in-process checks share: the device, the form, and the tiny models built once."""

    def __init__(self, device: str, form: Form, with_gemma: bool) -> None:
        import torch

        self.device = device
        self.torch_device = torch.device(device)
        self.form = form
        self.cuda = self.torch_device.type == "cuda"
        self.with_gemma = with_gemma
        self.env: dict[str, Any] = {}
        self._tiny: tuple | None = None

    def tiny(self):
        """The float32 tiny Llama target and its noisy-copy draft, on the CPU (callers copy and move them)."""
        if self._tiny is None:
            target = tiny_llama(vocab_size=96, seed=2)
            self._tiny = (target, noisy_copy(target, 0.02, seed=102))
        return self._tiny


def tiny_llama(vocab_size: int, seed: int, **overrides):
    """A seeded, random 2-layer Llama in float32 (tests/factory.py's config: logits spread over several units,
    so greedy choices have clear margins)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = dict(vocab_size=vocab_size, pad_token_id=0, bos_token_id=1, eos_token_id=2, num_hidden_layers=2,
                  hidden_size=48, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=512, initializer_range=0.5)
    config.update(overrides)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**config))
    model.generation_config.pad_token_id = config["pad_token_id"] if config["pad_token_id"] is not None else config["eos_token_id"]
    return model.eval()


def tiny_gemma3(vocab_size: int, seed: int, **overrides):
    """A 2-layer Gemma 3 with one sliding-window layer (window 8): what --specbench-compile refuses."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = dict(vocab_size=vocab_size, num_hidden_layers=2, hidden_size=48, intermediate_size=96,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
                  sliding_window=8, layer_types=["sliding_attention", "full_attention"], tie_word_embeddings=False,
                  max_position_embeddings=512, initializer_range=0.3)
    config.update(overrides)
    torch.manual_seed(seed)
    return Gemma3ForCausalLM(Gemma3TextConfig(**config)).eval()


def noisy_copy(model, noise: float, seed: int):
    """A copy of ``model`` with seeded Gaussian noise of ``noise`` times each tensor's RMS: a partial-acceptance draft."""
    import torch

    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            rms = float(param.float().pow(2).mean().sqrt())
            if rms:
                param.add_(noise * rms * torch.randn(param.shape, generator=generator, dtype=param.dtype))
    return draft.eval()


def byte_tokenizer():
    """One token per byte plus an end-of-text token (id 256): any prompt encodes, nothing to download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: index for index, symbol in enumerate(sorted(alphabet))}
    vocab["<|endoftext|>"] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")


def write_tiny_pairs(folder: Path) -> Path:
    """Byte-level tiny models on disk and a pairs TOML naming them (docs/pairs.md): ``tiny_llama`` (a noisy
    copy drafts), ``tiny_llama_int8``, ``tiny_llama_pld`` and ``tiny_gemma_pld`` (sliding-window layers)."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = byte_tokenizer()
    ids = dict(vocab_size=257, pad_token_id=None, bos_token_id=256, eos_token_id=256, max_position_embeddings=4096)
    llama = tiny_llama(seed=2, **ids)
    for name, model in (("llama", llama), ("llama_draft", noisy_copy(llama, 0.02, seed=102)),
                        ("gemma", tiny_gemma3(seed=1, pad_token_id=256, bos_token_id=256, eos_token_id=256,
                                              vocab_size=257, max_position_embeddings=4096))):
        model.save_pretrained(folder / name)
        tokenizer.save_pretrained(folder / name)
    pairs = folder / "pairs.toml"
    pairs.write_text(
        "# written by benchmarks/gpu_check.py: random tiny models with a byte tokenizer\n"
        '[pairs.tiny_llama]\ntarget = "./llama"\ndraft = "./llama_draft"\ndescription = "tiny Llama, noisy copy drafts"\n\n'
        '[pairs.tiny_llama_int8]\ntarget = "./llama"\ndrafter = "int8"\n\n'
        '[pairs.tiny_llama_pld]\ntarget = "./llama"\ndrafter = "prompt_lookup"\n\n'
        '[pairs.tiny_gemma_pld]\ntarget = "./gemma"\ndrafter = "prompt_lookup"\n',
        encoding="utf-8",
    )
    return pairs


def shipped_prompt(category: str) -> str:
    from importlib import resources

    text = (resources.files("pytest_specbench") / "data" / "prompts.jsonl").read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            record = json.loads(line)
            if record["category"] == category:
                return record["text"]
    raise LookupError(f"no {category} prompt in the shipped suite")


def bf16_native(torch) -> bool:
    """bfloat16 in hardware (compute capability 8.0 on), not torch's emulation."""
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # an older torch without the argument
        return torch.cuda.get_device_capability()[0] >= 8


def check_environment(ctx: Context, models_folder: Path) -> tuple[str, str, dict]:
    import importlib.util

    import torch
    import transformers

    env: dict[str, Any] = {
        "python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "transformers": transformers.__version__, "cuda_available": torch.cuda.is_available(),
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0, "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(), "triton": importlib.util.find_spec("triton") is not None,
    }  # fmt: skip
    problems = []
    if ctx.cuda:
        if not env["cuda_available"]:
            problems.append(f"CUDA is not available to torch {torch.__version__} (a CPU build? install the CUDA "
                            "build first: docs/gpu.md)")
        elif (ctx.torch_device.index or 0) >= env["device_count"]:
            problems.append(f"{ctx.device} requested, {env['device_count']} device(s) visible")
        else:
            torch.cuda.set_device(ctx.torch_device)
            properties = torch.cuda.get_device_properties(ctx.torch_device)
            env.update(device_name=properties.name, capability=f"{properties.major}.{properties.minor}",
                       memory_gib=round(properties.total_memory / 2**30, 1), bf16_native=bf16_native(torch),
                       bf16_supported=bool(torch.cuda.is_bf16_supported()), cuda_sleep=hasattr(torch.cuda, "_sleep"))
            if not env["triton"]:
                problems.append("triton is not installed: torch.compile's inductor cannot compile for CUDA "
                                "(bench_compiled and the suite's CUDA-graph test will fail)")
    else:
        env.update(device_name=platform.processor() or platform.machine())
    try:
        from pytest_specbench.models import embedded, gguf_cache, qwen

        env["embedded_installed"] = embedded.GEMMA3_270M.installed()
        if env["embedded_installed"]:
            env["gemma_converted"] = gguf_cache.cached_entry(embedded.GEMMA3_270M.expected_sha256()) is not None
        qwen_models = (qwen.QWEN_CODER_1_5B, qwen.QWEN_CODER_0_5B)
        env["qwen_missing"] = qwen_chunks_missing(qwen_models)
        env["qwen_installed"] = not env["qwen_missing"]
        env["qwen_converted"] = all(gguf_cache.cached_entry(model.sha256) is not None for model in qwen_models)
    except Exception as error:  # noqa: BLE001 - reported, not fatal: the model checks say more
        env["model_lookup_error"] = f"{type(error).__name__}: {error}"
    if ctx.cuda and not env.get("embedded_installed"):
        problems.append("the embedded extra is not installed (pip install -e '.[embedded,test]'): the Gemma pairs "
                        "cannot run")
    ctx.env = env
    if not problems or ctx.cuda and env["cuda_available"]:
        write_tiny_pairs(models_folder)
        env["tiny_pairs_file"] = str(models_folder / "pairs.toml")
    if ctx.cuda and (not env["cuda_available"] or "device_name" not in env):
        env["fatal"] = True
        return "fail", "; ".join(problems), env
    if problems:
        env["problems"] = problems
        # Missing triton or the embedded extra fails the checks that need them; the rest can still run.
        env["fatal"] = False
        return "fail", "; ".join(problems), env
    where = env.get("device_name", "")
    extra = f", compute capability {env['capability']}, bf16 native: {env['bf16_native']}" if ctx.cuda else ""
    return "pass", (f"{ctx.device} ({where}{extra}); torch {env['torch']}, transformers {env['transformers']}; "
                    f"Gemma converted: {env.get('gemma_converted')}, qwen extra: {env.get('qwen_installed')}"), env


# --- timing ---------------------------------------------------------------------------------------


class GpuWork:
    """Work of a known length on the current CUDA stream: torch.cuda._sleep calibrated with CUDA events
    (a spin of N clock cycles), or, without it, repeated large matmuls calibrated the same way."""

    def __init__(self, device) -> None:
        import torch

        self.torch, self.device = torch, device
        self.how = "torch.cuda._sleep" if hasattr(torch.cuda, "_sleep") else "matmul"
        if self.how == "matmul":
            self._a = torch.randn(2048, 2048, device=device)
            self._b = torch.empty_like(self._a)
        units = 1_000_000 if self.how == "torch.cuda._sleep" else 1
        self._enqueue(units)  # warm up
        torch.cuda.synchronize(device)
        for _ in range(12):
            ms = self.events_ms(lambda: self._enqueue(units))
            if ms >= 20 or units > 10**12:
                break
            units = int(units * max(2.0, 25.0 / max(ms, 0.01)))
        self.per_ms = units / max(ms, 1e-3)

    def _enqueue(self, units: int) -> None:
        if self.how == "torch.cuda._sleep":
            self.torch.cuda._sleep(int(units))
        else:
            for _ in range(max(1, int(units))):
                self.torch.mm(self._a, self._a, out=self._b)

    def enqueue(self, milliseconds: float) -> None:
        self._enqueue(max(1, int(self.per_ms * milliseconds)))

    def events_ms(self, work: Callable[[], None]) -> float:
        start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))


def check_timing_sync_clock(ctx: Context) -> tuple[str, str, dict]:
    import statistics

    from pytest_specbench.engine.timing import DeviceClock

    clock = DeviceClock(ctx.device)
    if not ctx.cuda:
        readings = []
        for _ in range(3):
            t0 = clock.now()
            time.sleep(0.05)
            readings.append((clock.now() - t0) * 1000)
        reads = [clock.now() for _ in range(1000)]
        monotonic = all(b >= a for a, b in zip(reads, reads[1:]))
        ms = statistics.median(readings)
        details = {"sleep_ms": 50, "clock_ms": readings, "monotonic": monotonic}
        ok = monotonic and 49.0 <= ms <= 250.0
        return ("pass" if ok else "fail"), f"CPU clock sanity: a 50 ms sleep read {ms:.1f} ms; monotonic: {monotonic}", details
    import torch

    work = GpuWork(ctx.torch_device)
    target_ms = 200.0
    trials = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = clock.now()
        start.record()
        work.enqueue(target_ms)
        end.record()
        t1 = clock.now()
        end.synchronize()
        trials.append({"clock_ms": (t1 - t0) * 1000, "events_ms": float(start.elapsed_time(end))})
    # The same work read without a synchronise: the launch alone, which shows the kernel runs asynchronously.
    t0 = time.perf_counter()
    work.enqueue(target_ms)
    launch_ms = (time.perf_counter() - t0) * 1000
    torch.cuda.synchronize(ctx.torch_device)
    clock_ms = statistics.median(t["clock_ms"] for t in trials)
    events_ms = statistics.median(t["events_ms"] for t in trials)
    details = {"work": work.how, "units_per_ms": work.per_ms, "trials": trials, "unsynchronised_launch_ms": launch_ms}
    asynchronous = launch_ms < 0.5 * events_ms
    ok = events_ms >= 0.25 * target_ms and clock_ms >= 0.98 * events_ms - 0.5 and clock_ms <= 1.10 * events_ms + 5.0
    note = "" if asynchronous else (" (but the launch itself took as long: launches are synchronous here, "
                                    "CUDA_LAUNCH_BLOCKING?, so a missing synchronise would not show)")
    return ("pass" if ok else "fail"), (f"{work.how} work of {events_ms:.1f} ms by CUDA events read {clock_ms:.1f} ms "
                                        f"by DeviceClock; its launch alone {launch_ms:.2f} ms{note}"), details


def check_timing_sync_calls(ctx: Context) -> tuple[str, str, dict]:
    """On a CPU the same instrumented runs go through (so this code cannot rot), with nothing to synchronise."""
    import torch

    import pytest_specbench.engine.timing as timing
    from pytest_specbench.engine.decoding import greedy_generate, speculative_generate
    from pytest_specbench.engine.drafters import ModelDrafter, PromptLookupDrafter
    from pytest_specbench.engine.hf_assisted import hf_assisted_generate

    base, noisy = ctx.tiny()
    target, draft = copy.deepcopy(base).to(ctx.torch_device), copy.deepcopy(noisy).to(ctx.torch_device)
    ids = torch.tensor([REPETITIVE_PROMPT], device=ctx.torch_device)
    events: list[str] = []
    real_synchronize, real_time = torch.cuda.synchronize, timing.time

    def synchronize(*args, **kwargs):
        events.append("sync")
        return real_synchronize(*args, **kwargs)

    class Clock:
        @staticmethod
        def perf_counter() -> float:
            events.append("read")
            return real_time.perf_counter()

    runs = {}
    torch.cuda.synchronize, timing.time = synchronize, Clock
    try:
        for name, call in (("greedy_generate", lambda: greedy_generate(target, ids, 16)),
                           ("speculative_generate (draft model)", lambda: speculative_generate(target, ModelDrafter(draft), ids, 4, 16)),
                           ("speculative_generate (prompt lookup)", lambda: speculative_generate(target, PromptLookupDrafter(3), ids, 4, 16)),
                           ("hf_assisted_generate", lambda: hf_assisted_generate(target, ModelDrafter(draft), ids, 4, 16))):
            events.clear()
            call()
            reads = [i for i, event in enumerate(events) if event == "read"]
            bare = [i for i in reads if i == 0 or events[i - 1] != "sync"]
            runs[name] = {"clock_reads": len(reads), "synchronises": events.count("sync"), "reads_without_sync": len(bare)}
    finally:
        torch.cuda.synchronize, timing.time = real_synchronize, real_time
    summary = ", ".join(f"{name}: {c['clock_reads']} reads, {c['reads_without_sync']} bare" for name, c in runs.items())
    if not ctx.cuda:
        unread = [name for name, counts in runs.items() if counts["clock_reads"] < 2]
        if unread:
            return "fail", f"the instrumented clock saw no reads in {', '.join(unread)}: {summary}", {"runs": runs}
        return "skip", f"CUDA only (a CPU has nothing to synchronise); the instrumented CPU runs: {summary}", {"runs": runs}
    bad = [name for name, counts in runs.items() if counts["reads_without_sync"] or counts["clock_reads"] < 2]
    return ("fail" if bad else "pass"), summary, {"runs": runs}


def check_timing_sync_decode(ctx: Context) -> tuple[str, str, dict]:
    """A forward hook on the target queues work after every pass (GPU work on CUDA, a sleep on a CPU); each
    planted piece is itself timed (CUDA events; on a CPU the sleep's own clock), and the decode's timings
    must hold the pieces that fall inside them. On CUDA nothing in a greedy decode waits for the GPU between
    its clock reads, so a read without a synchronise would come back early."""
    import torch

    from pytest_specbench.engine.decoding import greedy_generate, speculative_generate
    from pytest_specbench.engine.drafters import PromptLookupDrafter

    base, _ = ctx.tiny()
    target = copy.deepcopy(base).to(ctx.torch_device)
    ids = torch.tensor([REPETITIVE_PROMPT], device=ctx.torch_device)
    per_pass_ms = 20.0 if ctx.cuda else 5.0
    planted: list[Callable[[], float]] = []  # per target pass: its planted work's real duration (ms)
    if ctx.cuda:
        work = GpuWork(ctx.torch_device)
        how = f"{work.how} on the GPU, {per_pass_ms:.0f} ms a pass"

        def plant(*_) -> None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            work.enqueue(per_pass_ms)
            end.record()
            planted.append(lambda: float(start.elapsed_time(end)))
    else:
        how = f"time.sleep, {per_pass_ms:.0f} ms a pass (CPU sanity form)"

        def plant(*_) -> None:
            t0 = time.perf_counter()
            time.sleep(per_pass_ms / 1000)
            took = (time.perf_counter() - t0) * 1000
            planted.append(lambda: took)

    handle = target.register_forward_hook(plant)
    try:
        planted.clear()
        greedy = greedy_generate(target, ids, 8).stats
        greedy_work = [piece() for piece in planted]  # the clock's last read synchronised: all recorded
        planted.clear()
        speculative = speculative_generate(target, PromptLookupDrafter(3), ids, 4, 8).stats
        speculative_work = [piece() for piece in planted]
    finally:
        handle.remove()
    checks = {
        "greedy wall": (greedy.wall_time_s * 1000, sum(greedy_work)),
        "greedy prefill": (greedy.prefill_time_s * 1000, greedy_work[0] if greedy_work else 0.0),
        "speculative wall": (speculative.wall_time_s * 1000, sum(speculative_work)),
        "speculative prefill": (speculative.prefill_time_s * 1000, speculative_work[0] if speculative_work else 0.0),
        "speculative verify": (speculative.verify_time_s * 1000, sum(speculative_work[1:])),
    }  # fmt: skip
    passes = {"greedy": (greedy.target_forward_passes, len(greedy_work)),
              "speculative": (speculative.target_forward_passes, len(speculative_work))}
    short = [name for name, (measured, work_ms) in checks.items() if measured < 0.98 * work_ms - 0.5]
    uncounted = [name for name, (counted, hooked) in passes.items() if counted != hooked or hooked < 2]
    details = {"per_pass_ms": per_pass_ms, "how": how, "passes (counted, hooked)": passes,
               "measured_vs_planted_ms": {name: [round(m, 2), round(w, 2)] for name, (m, w) in checks.items()}}
    summary = "; ".join(f"{name} {m:.0f} ms {'<' if name in short else '>='} {w:.0f} ms planted"
                        for name, (m, w) in checks.items())
    if uncounted:
        summary += f"; target passes counted by the stats and seen by the hook differ: {passes}"
    return ("fail" if short or uncounted else "pass"), f"{how}: {summary}", details


# --- lossless ------------------------------------------------------------------------------------


def _verdicts(target, tokenizer, ids, reference, runs: dict[str, list[int]], half: bool) -> list[dict[str, Any]]:
    from pytest_specbench.measure.verdicts import diagnose

    out = []
    for name, tokens in runs.items():
        info = diagnose(target, tokenizer, ids, tokens, reference, half, TIE_TOLERANCE)
        out.append({"run": name, "verdict": info["verdict"], "first_divergence": info.get("first_divergence"),
                    "top2_margin": info.get("top2_margin")})
    return out


def _judge_verdicts(verdicts: list[dict[str, Any]], half: bool, what: str) -> tuple[str, str]:
    counts = {v: sum(entry["verdict"] == v for entry in verdicts) for v in ("lossless", "tie-divergence", "diverged")}
    bad = [entry["run"] for entry in verdicts if entry["verdict"] == "diverged" or (not half and entry["verdict"] != "lossless")]
    summary = (f"{what}: {len(verdicts)} runs, {counts['lossless']} lossless, {counts['tie-divergence']} near-tie "
               f"(margin < {TIE_TOLERANCE}), {counts['diverged']} diverged")
    if bad:
        summary += f" ({', '.join(bad[:4])})"
    return ("fail" if bad else "pass"), summary


def check_lossless_tiny(ctx: Context, dtype_name: str) -> tuple[str, str, dict]:
    import torch

    from pytest_specbench.engine.decoding import greedy_generate, speculative_generate
    from pytest_specbench.engine.derived_models import int8_copy
    from pytest_specbench.engine.drafters import ModelDrafter, PromptLookupDrafter
    from pytest_specbench.measure.verdicts import reference_tokens

    dtype = getattr(torch, dtype_name)
    if ctx.cuda and dtype is torch.bfloat16 and not ctx.env.get("bf16_native"):
        return "skip", f"{ctx.env.get('device_name')} has no native bfloat16 (compute capability < 8.0)", {}
    base, noisy = ctx.tiny()
    target = copy.deepcopy(base).to(device=ctx.torch_device, dtype=dtype).eval()
    draft = copy.deepcopy(noisy).to(device=ctx.torch_device, dtype=dtype).eval()
    ids = torch.tensor([REPETITIVE_PROMPT], device=ctx.torch_device)
    n, half = ctx.form.tiny_tokens, dtype is not torch.float32
    reference = reference_tokens(target, ids, n, None)
    drafters = {"draft model": ModelDrafter(draft), "prompt lookup": PromptLookupDrafter(3)}
    # The self-draft: int8 on a CPU (float32 only there), a bfloat16/float16 copy on CUDA.
    if ctx.cuda or not half:
        low = int8_copy(target)
        drafters[f"self-draft ({'int8' if not ctx.cuda else next(low.parameters()).dtype})"] = ModelDrafter(low)
    runs = {"greedy_generate": greedy_generate(target, ids, n).token_ids}
    acceptance = {}
    for name, drafter in drafters.items():
        for k in ctx.form.tiny_ks:
            result = speculative_generate(target, drafter, ids, k, n)
            runs[f"{name} k={k}"] = result.token_ids
            acceptance[f"{name} k={k}"] = round(result.stats.accepted_tokens / max(result.stats.drafted_tokens, 1), 3)
    verdicts = _verdicts(target, None, ids, reference, runs, half)
    status, summary = _judge_verdicts(verdicts, half, f"tiny Llama, {dtype_name}, {n} tokens, k={list(ctx.form.tiny_ks)}")
    return status, summary, {"verdicts": verdicts, "acceptance": acceptance, "device": ctx.device}


def check_lossless_gemma(ctx: Context) -> tuple[str, str, dict]:
    import torch

    from pytest_specbench.engine.decoding import greedy_generate, speculative_generate
    from pytest_specbench.engine.derived_models import int8_copy
    from pytest_specbench.engine.drafters import ModelDrafter, PromptLookupDrafter
    from pytest_specbench.measure.verdicts import reference_tokens
    from pytest_specbench.models import embedded
    from pytest_specbench.models.loading import load_model

    if not ctx.with_gemma:
        return "skip", "CPU form: tiny models only (Gemma at 8 tokens adds about a minute on a 2-core CPU); --with-gemma runs it", {}
    if not embedded.GEMMA3_270M.installed():
        return "fail", "the embedded extra is not installed: pip install -e '.[embedded,test]'", {}
    n = ctx.form.gemma_tokens
    dtypes = ["float32"] + (["bfloat16"] if ctx.cuda and ctx.env.get("bf16_native") else [])
    text = shipped_prompt("code_python")
    parts, details, status = [], {"tokens": n, "prompt": text[:80], "dtypes": {}}, "pass"
    for dtype_name in dtypes:
        loaded = load_model(GEMMA, device=ctx.device, dtype=dtype_name)
        model, tokenizer = loaded.model, loaded.tokenizer
        ids = tokenizer(text, return_tensors="pt").input_ids.to(ctx.torch_device)
        half = dtype_name != "float32"
        reference = reference_tokens(model, ids, n, None)
        drafters = {"prompt lookup": PromptLookupDrafter(3)}
        if ctx.cuda:
            low = int8_copy(model)
            drafters[f"self-draft ({next(low.parameters()).dtype})"] = ModelDrafter(low)
        head = "auto" if ctx.cuda else "linear"
        runs = {"greedy_generate": greedy_generate(model, ids, n).token_ids}
        acceptance = {}
        for name, drafter in drafters.items():
            for k in ctx.form.gemma_ks:
                result = speculative_generate(model, drafter, ids, k, n, head_kernel=head)
                runs[f"{name} k={k}"] = result.token_ids
                acceptance[f"{name} k={k}"] = round(result.stats.accepted_tokens / max(result.stats.drafted_tokens, 1), 3)
        verdicts = _verdicts(model, tokenizer, ids, reference, runs, half)
        one, summary = _judge_verdicts(verdicts, half, dtype_name)
        status = "fail" if one == "fail" else status
        parts.append(summary)
        details["dtypes"][dtype_name] = {"load_s": round(loaded.load_time_s, 1), "source": loaded.source,
                                         "verdicts": verdicts, "acceptance": acceptance, "head_kernel": head}
        del model, loaded, drafters
        if ctx.cuda:
            torch.cuda.empty_cache()
    return status, f"Gemma 3 270M on {ctx.device}, {n} tokens: " + "; ".join(parts), details


def child_inproc(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "checks.jsonl"
    results.write_text("", encoding="utf-8")
    form = CPU_FORM if args.form == "cpu" else CUDA_FORM

    def emit(name: str, status: str, summary: str, seconds: float, details: dict) -> None:
        record = {"name": name, "status": status, "summary": summary, "seconds": seconds, "details": details}
        with open(results, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, default=str) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        print(f"[inproc] {status.upper():4} {name}: {summary}", flush=True)

    def run_check(name: str, function: Callable[[], tuple[str, str, dict]]) -> str:
        start = time.monotonic()
        try:
            status, summary, details = function()
        except Exception as error:  # noqa: BLE001 - every failure is a result
            status, summary = "fail", f"{type(error).__name__}: {str(error)[:600]}"
            details = {"traceback": traceback.format_exc()[-4000:]}
        emit(name, status, summary, time.monotonic() - start, details)
        return status

    try:
        ctx = Context(args.device, form, args.with_gemma)
    except Exception as error:  # noqa: BLE001
        emit("environment", "fail", f"{type(error).__name__}: {error}", 0.0, {"traceback": traceback.format_exc()})
        return 1
    run_check("environment", lambda: check_environment(ctx, out / "models"))
    if ctx.env.get("fatal"):
        return 1
    functions = {
        "timing_sync_clock": lambda: check_timing_sync_clock(ctx),
        "timing_sync_calls": lambda: check_timing_sync_calls(ctx),
        "timing_sync_decode": lambda: check_timing_sync_decode(ctx),
        "lossless_float32": lambda: check_lossless_tiny(ctx, "float32"),
        "lossless_bfloat16": lambda: check_lossless_tiny(ctx, "bfloat16"),
        "lossless_float16": lambda: check_lossless_tiny(ctx, "float16"),
        "lossless_gemma": lambda: check_lossless_gemma(ctx),
    }
    for name in [name for name in args.checks.split(",") if name]:
        run_check(name, functions[name])
    return 0


# --- entry point ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for summary.json, summary.md and each part's output")
    parser.add_argument("--device", default="cuda:0", help="cuda:N (default cuda:0) or cpu (the reduced CPU form)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for all parts together (default 420 on CUDA, 300 on CPU)")
    parser.add_argument("--qwen", choices=("auto", "on", "off"), default="auto",
                        help="the Qwen pairs: auto runs them on CUDA when the qwen extra is installed and converted")
    parser.add_argument("--with-gemma", action="store_true", help="CPU form: run the Gemma lossless check too")
    parser.add_argument("--only", default="", help="comma list of checks to run; the others are reported skipped")
    parser.add_argument("--plant-failure", default=None, metavar="CHECK",
                        help="report CHECK as failed whatever it measured (tests the exit status)")
    parser.add_argument("--child", choices=("inproc",), help=argparse.SUPPRESS)
    parser.add_argument("--form", choices=("cpu", "cuda"), help=argparse.SUPPRESS)
    parser.add_argument("--checks", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "inproc":
        return child_inproc(args)
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
