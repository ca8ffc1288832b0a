"""GPU readiness: one command that checks the whole CUDA path in minutes.

    python benchmarks/gpu_check.py --out DIR [--device cuda:0|cpu]

Runs a fixed list of checks, each with a name, pass / fail / skip and details, writes
``DIR/summary.json`` and ``DIR/summary.md``, and exits 1 when any check failed, naming it.
Nothing needs the Hugging Face hub: the embedded Gemma 3 270M pairs (``gemma3_int8``,
``gemma3_pld``), tiny models built here in-process (written to ``DIR/legs/inproc/models`` with a
pairs TOML for the benchmark runs), and the Qwen2.5-Coder pairs when the ``qwen`` extra is
installed and converted (``--qwen``). How to run it and what to read: docs/gpu.md.

The checks (``CHECKS`` in ``gpu_checks/plan.py``, in the order they are reported):

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

This file is the command; the code is in the package next to it, ``benchmarks/gpu_checks/``.
"""

import sys
from pathlib import Path

# Run as a script, this folder is on sys.path already; imported otherwise, put it there.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_checks.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
