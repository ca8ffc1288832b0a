"""A model's linear layers at one row, shape by shape, back to back: the few-rows kernel and torch's own linear.

Builds, for each weight shape of a model (as many copies as the model has layers of it), fresh layers of that shape
in the chosen dtype and times one row through every copy in turn, in each form, the median of 5 rounds after one
untimed; prints each shape's time, GB/s (weight bytes over time) and time per call, and the sum over shapes. Set
beside a model's one-row step (``verify-curve``'s split), the sum says how much of the step the kernels alone take
and how much the rest of the step (transformers' operations, each layer's stream starting again) adds.
Run alone, from the repository root, in the project's environment:
    python benchmarks/layer_shapes.py --model qwen2.5-coder-0.5b --dtype bfloat16,float32
"""

import argparse
import statistics
import time

import torch

from pytest_specbench.kernels import few_rows

#: (output width, input width, copies) of each model's linear layers, its head last (read off its config)
MODELS = {
    "qwen2.5-coder-0.5b": [(896, 896, 48), (128, 896, 48), (4864, 896, 48), (896, 4864, 24), (151936, 896, 1)],
    "qwen2.5-coder-1.5b": [(1536, 1536, 56), (256, 1536, 56), (8960, 1536, 56), (1536, 8960, 28), (151936, 1536, 1)],
}
ROUNDS = 5


def timed(layers: list[torch.nn.Linear], hidden: torch.Tensor, form: str) -> float:
    start = time.perf_counter()
    for layer in layers:
        few_rows.few_rows_linear(layer, hidden, "rows") if form == "rows" else layer(hidden)
    return time.perf_counter() - start


def name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(MODELS), default="qwen2.5-coder-0.5b")
    parser.add_argument("--dtype", default="bfloat16,float32")
    args = parser.parse_args()
    if few_rows.kernel() is None:
        raise SystemExit(f"the few-rows kernel cannot run here: {few_rows.unavailable_reason()}")
    torch.manual_seed(0)
    for dtype in [getattr(torch, name) for name in args.dtype.split(",")]:
        totals = {"rows": [0.0, 0], "own": [0.0, 0]}
        for out_features, in_features, copies in MODELS[args.model]:
            layers = [torch.nn.Linear(in_features, out_features).to(dtype) for _ in range(copies)]
            hidden = torch.randn(1, 1, in_features, dtype=dtype)
            nbytes = sum(layer.weight.numel() * layer.weight.element_size() for layer in layers)
            with torch.inference_mode():
                for form in ("rows", "own"):
                    seconds = statistics.median([timed(layers, hidden, form) for _ in range(ROUNDS + 1)][1:])
                    totals[form][0] += seconds
                    totals[form][1] += nbytes
                    rate, call = nbytes / seconds / 1e9, 1e6 * seconds / copies
                    print(
                        f"{name(dtype)} {out_features}x{in_features} x{copies} {form}: "
                        f"{1e3 * seconds:.2f} ms, {rate:.1f} GB/s, {call:.1f} us a call"
                    )
            del layers
        for form, (seconds, nbytes) in totals.items():
            print(f"{name(dtype)} all shapes, {form}: {1e3 * seconds:.1f} ms, {nbytes / seconds / 1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
