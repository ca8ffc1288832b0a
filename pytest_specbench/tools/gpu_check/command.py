"""GPU readiness: one command that checks the whole CUDA path in minutes.

    python -m pytest_specbench gpu-check --out DIR [--device cuda:0|cpu]

Runs a fixed list of checks, each with a name, pass / fail / skip and details, writes
``DIR/summary.json`` and ``DIR/summary.md``, and exits 1 when any check failed, naming it.
Nothing needs the Hugging Face hub: the embedded Gemma 3 270M pairs (``gemma3_int8``,
``gemma3_pld``), tiny models built here in-process (written to ``DIR/legs/inproc/models`` with a
pairs TOML for the benchmark runs), and the Qwen2.5-Coder pairs when the ``qwen`` extra is
installed and converted (``--qwen``). It runs the checkout's ``bench_cases/`` and ``tests/``, so run it
from a clone with the package installed editable. How to run it and what to read: docs/gpu.md.

The checks (``CHECKS`` in ``plan.py``, in the order they are reported):

- the CUDA tests of the test suite (``pytest tests`` on the tests that skip without CUDA), and
  lossless runs on the device in float32 (exact) and bfloat16 / float16 (near-ties allowed by the
  tie rule) on tiny models, plus Gemma 3 on the device;
- a small benchmark matrix through ``pytest bench_cases`` (both embedded pairs, k = 1, 4, 16, two
  prompts, 128 tokens), the same with ``--specbench-compile`` on a tiny Llama pair (Gemma 3 has
  sliding-window layers, which compiled steps refuse: that refusal is checked as expected), and
  the native engine against transformers' assisted generation at k = 4;
- that the package's clock brackets GPU work with ``torch.cuda.synchronize()``: a kernel of known
  length timed by ``kernels.timing.DeviceClock`` and by CUDA events, GPU work planted in every
  forward pass of a decode, and every clock read preceded by a synchronise;
- CUDA peak memory present and positive in every benchmark row;
- with a vLLM environment (``--vllm-python``, ``SPECBENCH_VLLM_PYTHON`` or the checkout's ``.venv-vllm``), the
  vllm engine beside the native one at k = 4 with prompt lookup, every row lossless; its time is added to the
  default budget. Without one it is skipped, saying how to make one.

``--device cpu`` runs the reduced form (tiny models only, 8 or 16 tokens, k = 1, 4, one prompt;
the clock check becomes a CPU clock sanity check, the CUDA-only checks are reported as skipped):
``tests/test_gpu_check.py`` runs it so the check cannot rot between GPU runs.

The parent process imports no torch: it runs every part in a child process with a time budget
(``--budget`` in all, default 420 s on CUDA), kills a child that overruns (its process group,
SIGTERM then SIGKILL) and reports its checks as failed by timeout. The in-process checks run in
one child (this command with ``--child inproc``), which writes each result as it finishes.

"""

# This module: the command line and the parent's course: run the parts, judge them, fill in what did not run, write
# the summaries, exit 1 naming any failed check.

from __future__ import annotations

import argparse
import datetime
import os
import re
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .judge import judge
from .legs import interrupt
from .parts import read_inproc, run_legs
from .plan import CHECKS, CPU_FORM, CUDA_FORM, REPO, Check, without_gemma
from .report import write_summaries
from .run import CHECKOUT_VLLM_PYTHON, Run, environment_fatal, vllm_decision


def parent(args: argparse.Namespace) -> int:
    """The parent process: every part in a child, then the summaries; the exit status 0, 1, or 2 (usage)."""
    started = datetime.datetime.now(datetime.UTC)
    start = time.monotonic()
    run = new_run(args, start)
    if run is None:
        return 2
    interrupted = run_and_judge(run)
    fill_unrun_checks(run, interrupted)
    if args.plant_failure:
        planted = run.checks[args.plant_failure]
        planted.status = "fail"
        planted.summary = f"planted failure (--plant-failure); it was: {planted.summary}"
    failed = write_summaries(run, started, time.monotonic() - start, interrupted)
    for check in (run.checks[name] for name in CHECKS):
        print(f"[gpu_check] {check.status.upper():4}  {check.name}: {check.summary}")
    print(
        f"[gpu_check] summary: {run.out / 'summary.md'} and {run.out / 'summary.json'} "
        f"({time.monotonic() - start:.0f} s)"
    )
    if failed:
        print(f"gpu_check: FAILED: {', '.join(failed)}")
        return 1
    print(
        "gpu_check: all checks passed (skipped: "
        f"{', '.join(c.name for c in run.checks.values() if c.status == 'skip') or 'none'})"
    )
    return 0


def new_run(args: argparse.Namespace, start: float) -> Run | None:
    """The run the options ask for, or None (after saying why) when they name an unknown check."""
    device = normalise_device(args.device)
    form = CPU_FORM if device == "cpu" else CUDA_FORM
    if args.with_gemma and args.without_gemma:
        print("gpu_check: --with-gemma and --without-gemma contradict each other; give one", file=sys.stderr)
        return None
    if args.without_gemma:
        form = without_gemma(form)
    vllm_python, found_by = find_vllm_python(args.vllm_python)
    if vllm_python is not None and found_by != "checkout" and not vllm_python.is_file():
        print(f"gpu_check: {found_by} names {vllm_python}, which is no file: give vLLM's interpreter", file=sys.stderr)
        return None
    budget = args.budget if args.budget is not None else form.budget_s
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else set()
    unknown = sorted((only | ({args.plant_failure} if args.plant_failure else set())) - set(CHECKS))
    if unknown:
        print(f"gpu_check: unknown check name(s) {unknown}; known: {', '.join(CHECKS)}", file=sys.stderr)
        return None
    with_gemma = args.with_gemma or form.name == "cuda" and not args.without_gemma
    run = Run(out, device, form, only, args.qwen, with_gemma, start + budget, budget, vllm_python, found_by)
    if args.budget is None and run.wanted("engines_vllm") and vllm_decision(run)[0]:
        run.deadline, run.budget_s = run.deadline + form.caps["vllm"], budget + form.caps["vllm"]
    return run


def find_vllm_python(given: str | None) -> tuple[Path | None, str]:
    """vLLM's interpreter and where it was named: --vllm-python, SPECBENCH_VLLM_PYTHON, or the checkout's
    environment that scripts/make-vllm-env.sh makes by default; (None, "") where none is."""
    # Absolute, not resolved: the parts run in folders of their own, and a venv's python is a link to keep.
    if given:
        return Path(given).expanduser().absolute(), "--vllm-python"
    if os.environ.get("SPECBENCH_VLLM_PYTHON"):
        return Path(os.environ["SPECBENCH_VLLM_PYTHON"]).expanduser().absolute(), "SPECBENCH_VLLM_PYTHON"
    checkout = REPO / CHECKOUT_VLLM_PYTHON
    return (checkout, "checkout") if checkout.is_file() else (None, "")


def run_and_judge(run: Run) -> str | None:
    """Run the parts and judge them; a signal or an internal error ends it early and is returned as text."""
    interrupted = None
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
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
    return interrupted


def fill_unrun_checks(run: Run, interrupted: str | None) -> None:
    """Every check without a result: skipped when --only left it out, else failed, saying why."""
    for name in CHECKS:
        if name in run.checks:
            continue
        if run.only and name not in run.only and name != "environment":
            run.checks[name] = Check(name, "skip", "not selected (--only)")
        elif interrupted:
            run.checks[name] = Check(name, "fail", f"not run: {interrupted}")
        else:
            run.checks[name] = Check(
                name,
                "fail",
                "not run: the environment check failed: " + run.checks["environment"].summary[:300],
            )


def normalise_device(device: str) -> str:
    """``cpu``, ``cuda`` (= ``cuda:0``) or ``cuda:N``; anything else is refused."""
    device = device.strip().lower()
    if device == "cuda":
        return "cuda:0"
    if device == "cpu" or re.fullmatch(r"cuda:\d+", device):
        return device
    raise SystemExit(f"gpu_check: --device must be cpu, cuda or cuda:N, not {device!r}")


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``gpu-check`` on ``commands`` (the subparsers of ``python -m pytest_specbench``)."""
    parser = commands.add_parser(
        "gpu-check",
        help="GPU readiness: check the whole CUDA path in minutes (docs/gpu.md)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", required=True, help="folder for summary.json, summary.md and each part's output")
    parser.add_argument("--device", default="cuda:0", help="cuda:N (default cuda:0) or cpu (the reduced CPU form)")
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds for all parts together (default 420 on CUDA, 300 on CPU)",
    )
    parser.add_argument(
        "--qwen",
        choices=("auto", "on", "off"),
        default="auto",
        help="the Qwen pairs: auto runs them on CUDA when the qwen extra is installed and converted",
    )
    parser.add_argument(
        "--vllm-python",
        default=None,
        metavar="PATH",
        help="vLLM's own environment's interpreter (default: SPECBENCH_VLLM_PYTHON, else the checkout's .venv-vllm):"
        " engines_vllm runs the vllm engine beside the native one; without one it is skipped",
    )
    parser.add_argument("--with-gemma", action="store_true", help="CPU form: run the Gemma lossless check too")
    parser.add_argument(
        "--without-gemma",
        action="store_true",
        help="leave out the embedded Gemma (a GPU machine that cannot install it): the benchmark parts run the tiny"
        " pairs and lossless_gemma is skipped",
    )
    parser.add_argument("--only", default="", help="comma list of checks to run; the others are reported skipped")
    parser.add_argument(
        "--plant-failure",
        default=None,
        metavar="CHECK",
        help="report CHECK as failed whatever it measured (tests the exit status)",
    )
    parser.add_argument("--child", choices=("inproc",), help=argparse.SUPPRESS)
    parser.add_argument("--form", choices=("cpu", "cuda"), help=argparse.SUPPRESS)
    parser.add_argument("--checks", default="", help=argparse.SUPPRESS)
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """The parent, or the in-process child when called with --child inproc (the only one that imports torch)."""
    if args.child == "inproc":
        from .inproc import child_inproc

        return child_inproc(args)
    return parent(args)
