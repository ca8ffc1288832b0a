"""What the int8 self-draft's token costs, and how much of it its linear layers take: Gemma 3 270M's one-token
decode step (float32, the engine's forms) against its int8 copy's (``int8_copy``), each timed whole and with its
linear layers answering zeros (what is left: norms, attention, the cache, Python), in alternating rounds.

    python benchmarks/int8_draft_step.py --rounds 5

Where the linear layers take little of the draft's step, a faster int8 kernel buys little of its cost. Not a test:
run it alone, on a quiet machine; it needs the embedded model (the ``embedded`` extra).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_specbench.engine.derived_models import int8_copy  # noqa: E402
from pytest_specbench.kernels.bandwidth import memory_read_gbps, packed_bytes  # noqa: E402
from pytest_specbench.kernels.verify_forms import KernelForms  # noqa: E402
from pytest_specbench.models.loading import load_model  # noqa: E402

PROMPT = "def fibonacci(n):\n    if n < 2:\n        return n\n"


@contextmanager
def linear_layers_answer_zeros(model: torch.nn.Module) -> Iterator[None]:
    """Every linear layer (plain or dynamically quantised) answers zeros of its output's shape."""
    layers = [m for m in model.modules() if "Linear" in type(m).__name__ and hasattr(m, "out_features")]
    for layer in layers:
        layer.forward = (lambda width: lambda x: x.new_zeros(*x.shape[:-1], width))(layer.out_features)
    try:
        yield
    finally:
        for layer in layers:
            vars(layer).pop("forward", None)


@torch.inference_mode()
def step_seconds(model: torch.nn.Module, forms: KernelForms, ids: torch.Tensor, steps: int) -> float:
    """The median seconds of one-token steps on a warm cache after ``ids``."""
    from transformers import DynamicCache

    with forms.applied():
        cache = DynamicCache(config=model.config)
        token = model(ids, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            token = model(token, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
            times.append(time.perf_counter() - start)
    return statistics.median(times[3:] or times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    loaded = load_model("embedded:gemma3-270m")
    target = loaded.model
    draft = int8_copy(target)
    ids = loaded.tokenizer(PROMPT, return_tensors="pt").input_ids
    forms = {"target": KernelForms(target, "auto"), "int8 draft": KernelForms(draft, "auto")}
    for each in forms.values():
        each.settle(2)
    models = {"target": target, "int8 draft": draft}
    runs: dict[tuple[str, str], list[float]] = {}
    contestants: dict[tuple[str, str], Callable[[], float]] = {}
    for name, model in models.items():
        contestants[name, "whole"] = lambda m=model, n=name: step_seconds(m, forms[n], ids, args.steps)

        def without(m: torch.nn.Module = model, n: str = name) -> float:
            with linear_layers_answer_zeros(m):
                return step_seconds(m, forms[n], ids, args.steps)

        contestants[name, "without linear layers"] = without
    for round_index in range(args.rounds):
        order = list(contestants)
        order = order[round_index % len(order) :] + order[: round_index % len(order)]
        for key in order:
            runs.setdefault(key, []).append(contestants[key]())
    gbps = memory_read_gbps("cpu", 1 << 30)
    int8_bytes = packed_bytes(draft)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"memory read {gbps:.1f} GB/s; the draft's int8 weights {int8_bytes / 1e9:.3f} GB, at the read: "
          f"{int8_bytes / gbps / 1e6:.1f} ms; its forms: {forms['int8 draft'].described(1)}")  # fmt: skip
    for name in models:
        whole, rest = (runs[name, part] for part in ("whole", "without linear layers"))
        linear = [w - r for w, r in zip(whole, rest, strict=True)]
        print(
            f"{name}: step {statistics.median(whole) * 1e3:.1f} ms ({min(whole) * 1e3:.1f} to "
            f"{max(whole) * 1e3:.1f}); without its linear layers {statistics.median(rest) * 1e3:.1f} ms; "
            f"linear layers {statistics.median(linear) * 1e3:.1f} ms"
        )
    ratio = [d / t for d, t in zip(runs["int8 draft", "whole"], runs["target", "whole"], strict=True)]
    print(f"draft step / target step, per round: {', '.join(f'{r:.2f}' for r in ratio)}")


if __name__ == "__main__":
    main()
