"""Peak memory of a case (CUDA's allocator on a GPU, the process's resident set on a CPU), the bytes of weights a
set of models holds, and the memory a machine has free."""

from __future__ import annotations

from collections.abc import Iterable

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


def held_weight_bytes(models: Iterable[torch.nn.Module]) -> int:
    """Bytes of the models' parameters, buffers and packed quantised weights, each storage once (a draft that shares
    its target's tensors adds only its own)."""
    from ..kernels.bandwidth import packed_bytes

    storages: dict[int, int] = {}
    packed = 0
    for model in models:
        for tensor in (*model.parameters(), *model.buffers()):
            storage = tensor.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        packed += packed_bytes(model)
    return sum(storages.values()) + packed


def available_memory_bytes() -> int | None:
    """The memory the system says it can give without swapping (Linux ``MemAvailable``), or None where unknown."""
    from ..models.weight_pages import proc_field_bytes

    return proc_field_bytes("/proc/meminfo", "MemAvailable")
