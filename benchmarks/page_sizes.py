"""The engine's few-rows kernel at one row over the same weights in 4 KB and in 2 MB pages, timed in turn in one
process (ten 8960 x 1536 and ten 1536 x 1536 weights, the 1.5B's MLP and attention shapes), with the read probe.

Run alone, from the repository root, in the project's environment (Linux, transparent huge pages madvise or always):
    python benchmarks/page_sizes.py
"""

import statistics
import time

import torch

from pytest_specbench.kernels import few_rows
from pytest_specbench.kernels.bandwidth import memory_read_gbps
from pytest_specbench.models.weight_pages import huge_page_copy


def main() -> None:
    torch.set_num_threads(2)
    engine = few_rows.kernel()
    for dtype in (torch.float32, torch.bfloat16):
        small = [torch.randn(8960, 1536, dtype=dtype) for _ in range(10)]
        small += [torch.randn(1536, 1536, dtype=dtype) for _ in range(10)]
        huge = [huge_page_copy(w) for w in small]
        nbytes = sum(w.numel() * w.element_size() for w in small)
        for round_index in range(4):
            probe = memory_read_gbps("cpu", 1 << 30, fresh=True)
            result = {}
            pairs = [("4 KB", small), ("2 MB", huge)]
            for name, weights in pairs if round_index % 2 == 0 else pairs[::-1]:
                x = torch.randn(1, 1536, dtype=dtype)
                times = []
                for _ in range(5):
                    start = time.perf_counter()
                    for w in weights:
                        engine.linear(x, w, None, "rows")
                    times.append(time.perf_counter() - start)
                result[name] = nbytes / statistics.median(times) / 1e9
            print(
                f"{str(dtype).removeprefix('torch.'):8} probe {probe:5.1f} GB/s; one row: "
                + ", ".join(
                    f"{name} pages {gbps:5.1f} GB/s ({gbps / probe:.0%})"
                    for name, gbps in sorted(result.items(), reverse=True)
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
