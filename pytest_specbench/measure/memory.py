"""Peak memory of a case: CUDA's allocator on a GPU, the process's resident set on a CPU."""

from __future__ import annotations

import torch


def reset_peak_memory(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: str) -> tuple[float, str]:
    """Peak CUDA memory allocated since the reset, or on CPU the process's peak resident set (MiB)."""
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_allocated"
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (2**20 if sys.platform == "darwin" else 2**10), "process_rss"
