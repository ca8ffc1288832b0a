"""The output head over a verify block: torch's ``linear`` against ``weight @ hidden.T``, and what it does to v(m).

    python benchmarks/output_head.py --out output_head.json

Part 1 times both forms of a vocabulary head alone (a random weight of Gemma 3 270M's head shape,
262,144 x 640, and of GPT-2's, 50,257 x 768; nothing downloaded) for 1 to 17 rows, interleaved,
median of ``--repeats``. Part 2, when the embedded Gemma 3 270M is installed, measures the
target's verify-cost curve v(m) with the plugin's own probe (``engine.cost_probe.verify_costs``)
under ``kernels="linear"`` and ``"column"``, alternating, median of the sweeps. Every
contestant's argmax is checked equal. Not a test: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_specbench.engine.cost_probe import verify_costs  # noqa: E402
from pytest_specbench.kernels.output_head import column_logits  # noqa: E402

HEADS = {"gemma3-270m": (262_144, 640), "gpt2": (50_257, 768)}
ROWS = (1, 2, 3, 5, 9, 17)


@torch.inference_mode()
def head_forms(shape: tuple[int, int], repeats: int) -> dict[int, dict[str, float]]:
    head = torch.nn.Linear(shape[1], shape[0], bias=False)
    results = {}
    for rows in ROWS:
        hidden = torch.randn(1, rows, shape[1])
        forms = {"linear": lambda: head(hidden), "column": lambda: column_logits(head, hidden)}
        assert torch.equal(forms["linear"]().argmax(-1), forms["column"]().argmax(-1))
        times: dict[str, list[float]] = {name: [] for name in forms}
        for _ in range(repeats):
            for name, form in forms.items():
                start = time.perf_counter()
                form()
                times[name].append(time.perf_counter() - start)
        results[rows] = {name: 1000 * statistics.median(values) for name, values in times.items()}
    return results


def gemma_curves(sweeps: int, positions: int) -> dict[str, list[float]] | None:
    try:
        from pytest_specbench.cases.prompts import load_prompts, select_prompts
        from pytest_specbench.measure.inputs import prompt_input_ids
        from pytest_specbench.models.loading import load_model

        loaded = load_model("embedded:gemma3-270m")
    except Exception as error:  # the embedded model is optional here
        print(f"part 2 skipped: {error}")
        return None
    suite = load_prompts()
    ids = prompt_input_ids(loaded.tokenizer, select_prompts(suite, ["list_items"], 1)[0], suite, None, "cpu")
    samples: dict[str, list[list[float]]] = {"linear": [], "column": []}
    for _ in range(sweeps):
        for kernel in samples:
            samples[kernel].append(verify_costs(loaded.model, ids, positions, repeats=3, kernels=kernel))
    return {
        kernel: [1000 * statistics.median(sweep[m] for sweep in runs) for m in range(positions)]
        for kernel, runs in samples.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sweeps", type=int, default=3)
    parser.add_argument("--positions", type=int, default=17)
    parser.add_argument("--out", default="output_head.json")
    args = parser.parse_args(argv)
    print(
        f"{platform.processor() or platform.machine()}, torch {torch.__version__} "
        f"(CPU capability {torch.backends.cpu.get_cpu_capability()}), {torch.get_num_threads()} threads"
    )
    document: dict = {"args": vars(args), "heads": {}, "gemma3_verify_costs_ms": None}
    for name, shape in HEADS.items():
        results = head_forms(shape, args.repeats)
        document["heads"][name] = results
        print(f"{name} head {shape[0]} x {shape[1]}, ms (linear / weight @ hidden.T):")
        print("  " + ", ".join(f"{rows} rows {r['linear']:.1f} / {r['column']:.1f}" for rows, r in results.items()))
    curves = gemma_curves(args.sweeps, args.positions)
    if curves:
        document["gemma3_verify_costs_ms"] = curves
        print(f"Gemma 3 270M v(m)/v(1), m = 1..{args.positions} (linear head / column head):")
        for kernel, curve in curves.items():
            print(f"  {kernel}: v(1) {curve[0]:.0f} ms; " + " ".join(f"{v / curve[0]:.2f}" for v in curve))
    Path(args.out).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
