"""How far greedy acceptance moves when the CPU's kernels change: the data behind the gate's cross-machine rule.

Run the embedded pairs once per CPU capability (each run is one process, since torch reads
ATEN_CPU_CAPABILITY at start-up), then compare the two files:

    ATEN_CPU_CAPABILITY=avx2    python benchmarks/acceptance_spread.py run --out avx2.json
    ATEN_CPU_CAPABILITY=default python benchmarks/acceptance_spread.py run --out default.json
    python benchmarks/acceptance_spread.py compare avx2.json default.json

``run`` records, per (pair, k, prompt category), accepted and drafted tokens and the generated
tokens; ``compare`` prints per pair and k: how many cases moved, the largest per-case change,
whether the target's output stayed the same, and the acceptance pooled over all prompts and over
the example gate's four, with the drop in binomial standard errors (what gate.pair_tolerance uses).
"""

from __future__ import annotations

import argparse
import json
import math
import time

GATE_PROMPTS = ("natural", "code_python", "repetitive", "list_items")


def run(out: str, ks: list[int], new_tokens: int, categories: list[str] | None) -> None:
    import torch

    from pytest_specbench.cases.prompts import load_prompts, select_prompts
    from pytest_specbench.engine.decoding import speculative_generate
    from pytest_specbench.engine.derived_models import int8_copy
    from pytest_specbench.engine.drafters import ModelDrafter, PromptLookupDrafter
    from pytest_specbench.measure.inputs import prompt_input_ids
    from pytest_specbench.models.loading import load_model

    loaded = load_model("embedded:gemma3-270m")
    prompts = load_prompts()
    drafters = {"gemma3_int8": ModelDrafter(int8_copy(loaded.model)), "gemma3_pld": PromptLookupDrafter(3)}
    record = {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "quantized_engine": torch.backends.quantized.engine,
        "new_tokens": new_tokens,
        "cases": {},
    }
    start = time.perf_counter()
    for pair, drafter in drafters.items():
        for prompt in select_prompts(prompts, categories, 1):
            ids = prompt_input_ids(loaded.tokenizer, prompt, prompts, None, "cpu")
            for k in ks:
                stats = (result := speculative_generate(loaded.model, drafter, ids, k, new_tokens)).stats
                record["cases"][f"{pair}-k{k}-{prompt.category}"] = {
                    "accepted": stats.accepted_tokens,
                    "drafted": stats.drafted_tokens,
                    "tokens": result.token_ids,
                }
                print(
                    f"{pair} k={k} {prompt.category}: {stats.accepted_tokens}/{stats.drafted_tokens} "
                    f"({time.perf_counter() - start:.0f} s)",
                    flush=True,
                )
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(record, handle)


def _pooled(rows: list[tuple[dict, dict]]) -> str:
    accepted, drafted = sum(a["accepted"] for a, _ in rows), sum(a["drafted"] for a, _ in rows)
    accepted_now, drafted_now = sum(b["accepted"] for _, b in rows), sum(b["drafted"] for _, b in rows)
    old, new = accepted / drafted, accepted_now / drafted_now
    standard_error = math.sqrt(old * (1 - old) / drafted)
    return f"{old:.3f} -> {new:.3f} (drop {old - new:+.3f}, {(old - new) / standard_error:+.2f} SE)"


def compare(first: str, second: str) -> None:
    from tabulate import tabulate

    a, b = (json.load(open(path, encoding="utf-8")) for path in (first, second))
    print(f"{first}: {a['cpu_capability']}, {second}: {b['cpu_capability']}")
    groups: dict[tuple[str, str], list[tuple[str, dict, dict]]] = {}
    for key, old in a["cases"].items():
        if key in b["cases"]:
            pair, k, prompt = key.split("-", 2)
            groups.setdefault((pair, k), []).append((prompt, old, b["cases"][key]))
    table = []
    for (pair, k), rows in sorted(groups.items()):
        changes = [old["accepted"] / old["drafted"] - new["accepted"] / new["drafted"] for _, old, new in rows]
        table.append(
            (
                pair,
                k,
                len(rows),
                sum(abs(c) > 1e-12 for c in changes),
                f"{max(map(abs, changes)):.3f}",
                sum(old["tokens"] == new["tokens"] for _, old, new in rows),
                _pooled([(old, new) for _, old, new in rows]),
                _pooled([(old, new) for prompt, old, new in rows if prompt in GATE_PROMPTS]),
            )
        )
    print(
        tabulate(
            table,
            headers=(
                "pair",
                "k",
                "cases",
                "moved",
                "largest case change",
                "same target output",
                "pooled, all prompts",
                "pooled, the gate's 4 prompts",
            ),
            tablefmt="github",
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run", help="record acceptance under this process's CPU capability")
    runner.add_argument("--out", required=True)
    runner.add_argument("--k", default="4,8", help="comma list of k (default 4,8)")
    runner.add_argument("--new-tokens", type=int, default=32)
    runner.add_argument("--prompts", help="comma list of prompt categories (default: all twelve)")
    comparer = commands.add_parser("compare", help="compare two recorded runs")
    comparer.add_argument("first")
    comparer.add_argument("second")
    args = parser.parse_args()
    if args.command == "run":
        run(
            args.out,
            [int(k) for k in args.k.split(",")],
            args.new_tokens,
            args.prompts.split(",") if args.prompts else None,
        )
    else:
        compare(args.first, args.second)


if __name__ == "__main__":
    main()
