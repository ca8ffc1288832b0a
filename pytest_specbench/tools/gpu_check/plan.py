"""What the GPU check checks and how much: the table of checks, the CUDA and CPU forms, and a check's result.

Imports no torch: the parent process reads it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

#: the checkout the package runs from (installed editable, as the README's install line does): the benchmark
#: parts run its bench_cases/, the suite part its tests/
REPO = Path(__file__).resolve().parents[3]
BENCH_CASES = REPO / "bench_cases"
TESTS = REPO / "tests"
#: the command users run is ``python -m pytest_specbench gpu-check``; the in-process child is that command again
CHILD_COMMAND = ("-m", "pytest_specbench", "gpu-check", "--child", "inproc")

#: the plugin's default --specbench-tie-tolerance (logits): a half-precision divergence with a smaller
#: top-2 margin at the target is a near-tie, not a failure
TIE_TOLERANCE = 0.1
#: the phrase of the package's refusal to compile a sliding-window model (engine/kv_cache.py)
SLIDING_REFUSAL = "compiled steps need a model without sliding-window layers"
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
    "engines_vllm": "pytest bench_cases --specbench-engine=native,vllm at k=4 with prompt lookup, every row lossless "
    "(with a vLLM environment)",
}
INPROC_CHECKS = (
    "timing_sync_clock",
    "timing_sync_calls",
    "timing_sync_decode",
    "lossless_float32",
    "lossless_bfloat16",
    "lossless_float16",
    "lossless_gemma",
)


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
    vllm_pairs: tuple[str, ...]  # prompt-lookup pairs: vLLM's ngram needs no draft model


CUDA_FORM = Form(
    name="cuda", budget_s=420,  # with kill grace and summaries, within about 8 minutes (12 with the vllm part)
    caps={"inproc": 240, "matrix": 150, "hf": 90, "suite": 180, "compile": 200, "qwen": 150, "vllm": 240},
    tiny_tokens=64, tiny_ks=(1, 4, 16), gemma_tokens=128, gemma_ks=(4,),
    bench_pairs=("gemma3_int8", "gemma3_pld"), bench_ks=(1, 4, 16), bench_prompts=("natural", "code_python"),
    bench_tokens=128, hf_pairs=("gemma3_int8", "gemma3_pld"), hf_prompts=("code_python",),
    compile_pairs=("tiny_llama",), sliding_pair="gemma3_pld", compile_ks=(1, 4, 16),
    compile_prompts=("natural", "code_python"), rounds=(1, 2, 4, 3.0), hf_in_matrix=False,
    vllm_pairs=("gemma3_pld",),
)  # fmt: skip
#: the benchmark parts' pairs built from the tiny models alone (context.write_tiny_pairs)
TINY_BENCH = dict(
    bench_pairs=("tiny_llama_int8", "tiny_llama_pld"),
    hf_pairs=("tiny_llama_int8", "tiny_llama_pld"),
    sliding_pair="tiny_gemma_pld",
    vllm_pairs=("tiny_served_pld",),
)
CPU_FORM = Form(
    name="cpu", budget_s=300,
    caps={"inproc": 120, "matrix": 150, "hf": 90, "suite": 90, "compile": 90, "qwen": 300, "vllm": 420},
    tiny_tokens=16, tiny_ks=(1, 4), gemma_tokens=8, gemma_ks=(4,),
    bench_ks=(1, 4), bench_prompts=("code_python",), bench_tokens=8, hf_prompts=("code_python",),
    compile_pairs=(), compile_ks=(4,), compile_prompts=("code_python",), **TINY_BENCH,
    rounds=(0, 1, 1, 5.0), hf_in_matrix=True,
)  # fmt: skip


def without_gemma(form: Form) -> Form:
    """``form`` with the tiny pairs in the benchmark parts: for a GPU machine that cannot install the embedded
    Gemma (no package index there, say); its CUDA path is still checked at ``form``'s tokens, k and prompts."""
    return replace(form, **TINY_BENCH)


QWEN_PAIRS = ("qwen_coder", "qwen_coder_pld")
QWEN_KS = (4,)
QWEN_PROMPTS = ("code_python",)


# --- results -------------------------------------------------------------------------------------


@dataclass
class Check:
    """One check's result: pass, fail or skip, a one-line summary and the details behind it."""

    name: str
    status: str
    summary: str
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The check as summary.json lists it, with its description from :data:`CHECKS`."""
        return {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "seconds": round(self.seconds, 2),
            "description": CHECKS.get(self.name, ""),
            "details": self.details,
        }
