"""One decode step's worth of a model's linear layers in bfloat16 (random weights of the real shapes, in 2 MB
pages), timed in one process: torch's own linear, the few-rows kernel's dot products (``rows``) and its AMX tiles
(``tiles``), at several row counts, the forms interleaved round by round, with the read probe before and after.

Run alone, from the repository root, in the project's environment, on a CPU with AMX:
    python benchmarks/tiles_form.py --model qwen2.5-coder-1.5b --rows 1,2,5,9,16 --rounds 5 --json F
"""

import argparse
import json
import statistics
import time

import torch

from pytest_specbench.kernels import few_rows
from pytest_specbench.kernels.bandwidth import memory_read_gbps
from pytest_specbench.models.weight_pages import huge_page_copy

# (out features, in features, layers): every linear layer of one step, the head last
SHAPES = {
    "qwen2.5-coder-1.5b": [(1536, 1536, 56), (256, 1536, 56), (8960, 1536, 56), (1536, 8960, 28), (151936, 1536, 1)],
    "gemma3-270m": [
        (1024, 640, 18),
        (256, 640, 36),
        (640, 1024, 18),
        (2048, 640, 36),
        (640, 2048, 18),
        (262144, 640, 1),
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=sorted(SHAPES), default="qwen2.5-coder-1.5b")
    parser.add_argument("--rows", default="1,2,5,9,16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(2)
    if not few_rows.tiles_available():
        raise SystemExit(f"no AMX tiles here: {few_rows.tiles_unavailable_reason() or 'this CPU has no AMX'}")
    engine = few_rows.kernel()
    weights = [huge_page_copy(torch.randn(n, k).bfloat16()) for n, k, count in SHAPES[args.model] for _ in range(count)]
    gigabytes = sum(w.numel() * w.element_size() for w in weights) / 1e9
    forms = {
        "own": lambda x, w: torch.nn.functional.linear(x, w),
        "rows": lambda x, w: engine.linear(x, w, None, "rows"),
        "tiles": lambda x, w: engine.linear(x, w, None, "tiles"),
    }
    read_before = memory_read_gbps(torch.device("cpu"), 1 << 30, fresh=True)
    print(f"{args.model}: {gigabytes:.2f} GB of bfloat16 weights; read probe {read_before:.1f} GB/s")
    results = []
    for rows in [int(r) for r in args.rows.split(",")]:
        inputs = {w.shape[1]: torch.randn(rows, w.shape[1]).bfloat16() for w in weights}
        times: dict[str, list[float]] = {form: [] for form in forms}
        for repeat in range(args.rounds + 1):  # the first round warms up and is not kept
            order = list(forms)[repeat % len(forms) :] + list(forms)[: repeat % len(forms)]
            for form in order:
                start = time.perf_counter()
                for w in weights:
                    forms[form](inputs[w.shape[1]], w)
                if repeat:
                    times[form].append(time.perf_counter() - start)
        medians = {form: statistics.median(seconds) for form, seconds in times.items()}
        print(
            f"rows {rows}: "
            + "; ".join(
                f"{form} {medians[form] * 1e3:.1f} ms [{min(times[form]) * 1e3:.1f}, {max(times[form]) * 1e3:.1f}], "
                f"{gigabytes / medians[form]:.1f} GB/s"
                for form in forms
            ),
            flush=True,
        )
        results.append({"rows": rows, "seconds": times})
    read_after = memory_read_gbps(torch.device("cpu"), 1 << 30, fresh=True)
    print(f"read probe after: {read_after:.1f} GB/s")
    if args.json:
        document = {
            "model": args.model,
            "weight_gb": gigabytes,
            "read_gbps": [read_before, read_after],
            "few_rows_kernel": few_rows.recorded_state(),
            "results": results,
        }
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump(document, file, indent=1)


if __name__ == "__main__":
    main()
