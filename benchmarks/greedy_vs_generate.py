"""Throughput of ``greedy_generate`` against transformers' ``generate(do_sample=False)``.

The baseline that speculative decoding is measured against must not be
slower than the library's own greedy loop, or every speed-up is inflated.
This builds a randomly initialised GPT-2 of the default (124M) size on CPU,
runs both loops interleaved (ABBA order, so drift in machine load hits both
alike) after a warm-up, checks every pair of outputs is token-equal, and
reports medians, spread and the ratio, of wall time and of process CPU time
(with one thread the CPU time hardly depends on what else the machine runs).

    python benchmarks/greedy_vs_generate.py --new-tokens 64 --repeats 7 --threads 1

Nothing is downloaded. Not a test: run it by hand on a quiet machine.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_specbench import greedy_generate  # noqa: E402


def build_model(seed: int) -> GPT2LMHeadModel:
    """GPT2Config() defaults: 12 layers, 768 wide, vocabulary 50257, random weights."""
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config()).eval()


def run_generate(model: GPT2LMHeadModel, ids: torch.Tensor, new_tokens: int) -> list[int]:
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=new_tokens,
        eos_token_id=None,  # never stop early: both loops make exactly new_tokens
        pad_token_id=model.config.eos_token_id,
    )
    return out[0, ids.shape[1] :].tolist()


def run_ours(model: GPT2LMHeadModel, ids: torch.Tensor, new_tokens: int) -> list[int]:
    return greedy_generate(model, ids, new_tokens).token_ids


def timed(fn: Callable[[], list[int]]) -> tuple[float, float, list[int]]:
    """Wall seconds, process CPU seconds and the tokens of one run."""
    start, cpu_start = time.perf_counter(), time.process_time()
    tokens = fn()
    return time.perf_counter() - start, time.process_time() - cpu_start, tokens


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):7.2f}  min {min(values):7.2f}  max {max(values):7.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompt-length", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7, help="timed runs of each loop")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs of each loop first")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    model = build_model(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(0, model.config.vocab_size, (1, args.prompt_length), generator=gen)
    loops: dict[str, Callable[[], list[int]]] = {
        "generate": lambda: run_generate(model, ids, args.new_tokens),
        "greedy_generate": lambda: run_ours(model, ids, args.new_tokens),
    }
    print(
        f"GPT-2 {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M params, float32, CPU "
        f"({platform.processor() or platform.machine()}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; prompt {args.prompt_length}, new tokens {args.new_tokens}, "
        f"warm-up {args.warmup}, repeats {args.repeats}"
    )

    for _ in range(args.warmup):
        for fn in loops.values():
            fn()

    times: dict[str, list[float]] = {name: [] for name in loops}
    cpu_times: dict[str, list[float]] = {name: [] for name in loops}
    reference: list[int] | None = None
    for repeat in range(args.repeats):
        # ABBA: alternate which loop goes first.
        order = list(loops) if repeat % 2 == 0 else list(reversed(loops))
        for name in order:
            seconds, cpu_seconds, tokens = timed(loops[name])
            reference = reference or tokens
            assert tokens == reference, f"{name} diverged from the other loop on repeat {repeat}"
            assert len(tokens) == args.new_tokens
            times[name].append(seconds)
            cpu_times[name].append(cpu_seconds)
            print(
                f"  repeat {repeat}  {name:16s} {seconds:7.3f} s wall  {cpu_seconds:7.3f} s CPU  "
                f"{args.new_tokens / seconds:7.2f} tok/s",
                flush=True,
            )

    # Throughput ratio > 1 means greedy_generate is faster.
    for label, table in (("wall", times), ("CPU", cpu_times)):
        rates = {name: [args.new_tokens / s for s in values] for name, values in table.items()}
        for name in loops:
            print(f"{name:16s} tok/s ({label:4s}): {spread(rates[name])}")
        ratio = statistics.median(rates["greedy_generate"]) / statistics.median(rates["generate"])
        paired = [g / o for g, o in zip(table["generate"], table["greedy_generate"])]
        print(f"greedy_generate / generate throughput ({label}): ratio of medians {ratio:.3f}")
        print(f"  per-pair ratios ({label}): {spread(paired)}")
    print("outputs token-equal on every run: yes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
