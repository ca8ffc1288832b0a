"""A model's one-row step and 9-row pass with the few-rows kernel called through its torch custom op and
straight to the extension, the two alternated in one process (7 kept rounds of 5 passes each).

Run alone, from the repository root, in the project's environment:
    python benchmarks/kernel_call_route.py embedded:gemma3-270m bfloat16
"""

import statistics
import sys
import time

import torch

from pytest_specbench.engine.cost_probe import prefilled_cache
from pytest_specbench.engine.kv_cache import cache_length, crop_to
from pytest_specbench.kernels import few_rows
from pytest_specbench.kernels.verify_forms import KernelForms
from pytest_specbench.models.loading import load_model


def through_op(module, hidden, variant="rows"):
    return few_rows._linear_op(hidden, module.weight, module.bias, variant)


def main() -> None:
    torch.set_num_threads(2)
    loaded = load_model(sys.argv[1], dtype=sys.argv[2])
    model = loaded.model
    ids = loaded.tokenizer(
        "def fibonacci(n):\n    if n < 2:\n        return n\n    return", return_tensors="pt"
    ).input_ids
    direct = few_rows.few_rows_linear

    forms, times = KernelForms(model, "auto"), {}
    with torch.inference_mode():
        forms.settle(9)
        cache = prefilled_cache(model, ids)
        length = cache_length(cache)
        with forms.applied():
            for round_index in range(8):  # the first round warms up and is not kept
                routes = [("custom op", through_op), ("direct", direct)]
                for name, route in routes if round_index % 2 else routes[::-1]:
                    few_rows.few_rows_linear = route
                    for m in (1, 9):
                        start = time.perf_counter()
                        for _ in range(5):
                            model(input_ids=ids[:, -m:], cache=cache, use_cache=True, logits_to_keep=m)
                            crop_to(cache, length)
                        if round_index:
                            times.setdefault((name, m), []).append((time.perf_counter() - start) / 5)
    few_rows.few_rows_linear = direct
    for m in (1, 9):
        ratios = sorted(d / o for d, o in zip(times["direct", m], times["custom op", m]))
        print(
            f"{sys.argv[1]} {sys.argv[2]} m={m}: custom op {1e3 * statistics.median(times['custom op', m]):.2f} ms, "
            f"direct {1e3 * statistics.median(times['direct', m]):.2f} ms, "
            f"per-round ratio {ratios[len(ratios) // 2]:.3f} [{ratios[0]:.3f}, {ratios[-1]:.3f}]"
        )


if __name__ == "__main__":
    main()
