"""The verify-cost curve v(m) of a small random GPT-2 under 1 and 2 torch threads.

Shows why ``--specbench-threads`` matters on a shared CPU: passes over several positions run
intra-op parallel and, when the OS schedules a thread away, wait for it. Uses the plugin's own
probe (``engine.cost_probe.verify_costs``: median of 5 repeats on a warm cache of the prompt).

    python benchmarks/verify_cost_threads.py --positions 5

Nothing is downloaded. Not a test: run it by hand, and note the machine's load average.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_specbench.engine.cost_probe import verify_costs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, default=5)
    parser.add_argument("--prompt-tokens", type=int, default=57)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=259, bos_token_id=0, eos_token_id=1)
    ).eval()
    ids = torch.arange(3, 3 + args.prompt_tokens).unsqueeze(0)
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    for threads in (2, 1):
        torch.set_num_threads(threads)
        curve = verify_costs(model, ids, args.positions)
        print(
            f"{threads} thread(s): v(m) ms for m = 1..{args.positions}: " + ", ".join(f"{1000 * v:.1f}" for v in curve)
        )


if __name__ == "__main__":
    main()
