"""The 1.5B's linear layers, one decode step's worth (28 layers and the head, random weights of the real shapes),
timed in one process: the engine's few-rows kernel over row-major weights against the panel-layout experiment
(benchmarks/panel_layout.cpp), at 1 and 9 rows, with the read probe before and after each round.

Run alone, from the repository root, in the project's environment:
    python benchmarks/weight_layouts.py --rounds 5 --json F [--pages 2MB]

--pages 2MB moves both layouts' weights into 2 MB pages (models/weight_pages.py) before timing.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

from pytest_specbench.kernels import few_rows
from pytest_specbench.kernels.bandwidth import memory_read_gbps
from pytest_specbench.models.weight_pages import huge_page_copy

HERE = Path(__file__).resolve().parent
# (name, out features, in features, layers): Qwen2.5-Coder-1.5B
SHAPES = [
    ("q, o", 1536, 1536, 56),
    ("k, v", 256, 1536, 56),
    ("gate, up", 8960, 1536, 56),
    ("down", 1536, 8960, 28),
    ("head", 151936, 1536, 1),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", default="1,9")
    parser.add_argument("--json")
    parser.add_argument("--pages", choices=("4KB", "2MB"), default="4KB")
    args = parser.parse_args()
    torch.set_num_threads(2)
    engine = few_rows.kernel()
    panel = load(
        "specbench_panel_layout_experiment",
        [str(HERE / "panel_layout.cpp")],
        extra_cflags=["-O3", "-march=native", "-fopenmp"],
        extra_ldflags=["-fopenmp"],
    )
    results = []
    for dtype in (torch.float32, torch.bfloat16):
        weights = {name: [torch.randn(n, k, dtype=dtype) for _ in range(count)] for name, n, k, count in SHAPES}
        packed = {name: [panel.pack(w) for w in ws] for name, ws in weights.items()}
        if args.pages == "2MB":
            weights = {name: [huge_page_copy(w) for w in ws] for name, ws in weights.items()}
            packed = {name: [huge_page_copy(p) for p in ps] for name, ps in packed.items()}
        for rows in [int(r) for r in args.rows.split(",")]:
            forms = {
                "rows": lambda w, p, x: engine.linear(x, w, None, "rows"),
                "panels": lambda w, p, x: panel.linear(x, p, w.shape[0]),
            }
            if dtype == torch.float32 and rows > 1:
                forms["rows_held"] = lambda w, p, x: engine.linear(x, w, None, "held")
            times = {(form, name): [] for form in forms for name in weights}
            probes = []
            for round_index in range(args.rounds):
                probes.append(memory_read_gbps("cpu", 1 << 30, fresh=True))
                order = list(forms)[round_index % len(forms) :] + list(forms)[: round_index % len(forms)]
                for form in order:
                    for name, ws in weights.items():
                        x = torch.randn(rows, ws[0].shape[1], dtype=dtype)
                        start = time.perf_counter()
                        for w, p in zip(ws, packed[name]):
                            forms[form](w, p, x)
                        times[form, name].append(time.perf_counter() - start)
            probes.append(memory_read_gbps("cpu", 1 << 30, fresh=True))
            for form in forms:
                per_shape = {}
                for name, ws in weights.items():
                    nbytes = sum(w.numel() * w.element_size() for w in ws)
                    t = statistics.median(times[form, name])
                    per_shape[name] = {"ms": t * 1e3, "gbps": nbytes / t / 1e9}
                total_bytes = sum(w.numel() * w.element_size() for ws in weights.values() for w in ws)
                total = sum(statistics.median(times[form, name]) for name in weights)
                row = {
                    "dtype": str(dtype).removeprefix("torch."),
                    "rows": rows,
                    "form": form,
                    "probes_gbps": probes,
                    "total_ms": total * 1e3,
                    "total_gbps": total_bytes / total / 1e9,
                    "shapes": per_shape,
                }
                results.append(row)
                shares = ", ".join(f"{n} {v['gbps']:.1f}" for n, v in per_shape.items())
                print(
                    f"{row['dtype']:8} {rows} rows {form:9}: {total * 1e3:6.1f} ms, {row['total_gbps']:5.1f} GB/s "
                    f"(probe {min(probes):.1f} to {max(probes):.1f}); by shape GB/s: {shares}",
                    flush=True,
                )
        del weights, packed
    if args.json:
        Path(args.json).write_text(json.dumps({"torch": torch.__version__, "results": results}, indent=1))


if __name__ == "__main__":
    main()
