"""The machine's memory read bandwidth, measured in-process, and a pass's effective bandwidth.

A one-row decode step reads every weight once and does little else, so its floor is the weights' bytes
over the bandwidth at which this process can read memory. The read is timed on a buffer as large as
the weights (capped at :data:`MAX_BUFFER_BYTES`, far past any cache), with the threads the run uses, by
three of torch's reductions (its largest float32 element, its sum, its dot product with itself), and the fastest
is kept: which one reads fastest depends on the CPU (the largest element on an AMD EPYC, the sum on a Xeon; see
docs/results/2026-12-05-one-row-bounds.md). A pass's effective bandwidth is the target's weight bytes over its
time; its share of the read bandwidth says how far a kernel is from the memory limit.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Iterator

import torch

from .timing import DeviceClock

__all__ = ["MAX_BUFFER_BYTES", "effective_gbps", "memory_read_gbps", "packed_bytes", "packed_linears", "weight_bytes"]

#: the largest buffer the read is timed on: well past any cache, and small beside the models
MAX_BUFFER_BYTES = 1 << 30
_REPEATS = 7


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters and buffers (tied weights once), and of the weights a quantised linear keeps
    packed, that a one-row pass reads: all but an input embedding the output head does not share, of which a pass
    reads only its tokens' rows."""
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    embeddings, head = (
        _embedding_weight(model, "get_input_embeddings"),
        _embedding_weight(model, "get_output_embeddings"),
    )
    if embeddings is not None and embeddings is not head:
        tensors.pop(id(embeddings), None)
    return sum(t.numel() * t.element_size() for t in tensors.values()) + packed_bytes(model)


def packed_linears(model: torch.nn.Module) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    """(weight, bias) of each dynamically quantised linear of ``model`` (torch.ao's), which keeps them packed,
    outside its parameters and buffers."""
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if callable(weight) and not isinstance(weight, torch.nn.Module):
            bias = getattr(module, "bias", None)
            yield weight(), bias() if callable(bias) else None


def packed_bytes(model: torch.nn.Module) -> int:
    """Bytes of the weights dynamically quantised linears keep packed (a byte a weight in int8), and their biases."""
    return sum(
        weight.numel() * weight.element_size() + (0 if bias is None else bias.numel() * bias.element_size())
        for weight, bias in packed_linears(model)
    )


def _embedding_weight(model: torch.nn.Module, getter: str) -> torch.Tensor | None:
    module = getattr(model, getter, lambda: None)()
    return getattr(module, "weight", None)


def effective_gbps(nbytes: int, seconds: float) -> float | None:
    """``nbytes`` read in ``seconds``, in GB/s (10**9 bytes); None for a time that is not positive."""
    return nbytes / seconds / 1e9 if seconds > 0 else None


@torch.inference_mode()
def memory_read_gbps(device: torch.device | str, nbytes: int, fresh: bool = False) -> float:
    """GB/s of one read of ``nbytes`` (capped at :data:`MAX_BUFFER_BYTES`) on ``device``: the fastest of the
    reads' medians over several timed rounds after one untimed, with torch's current thread count; measured
    once per (device, size, threads) unless ``fresh``."""
    size = max(min(int(nbytes), MAX_BUFFER_BYTES) // 4 * 4, 1 << 20)
    key = (str(torch.device(device)), size, torch.get_num_threads())
    return _time_read(*key) if fresh else _read_gbps(*key)


@functools.cache
def _read_gbps(device: str, size: int, threads: int) -> float:
    return _time_read(device, size, threads)


#: the reads timed, in turn; each reads every byte of the buffer once
_READS: dict[str, Callable[[torch.Tensor], object]] = {
    "largest element": torch.amax,
    "sum": torch.sum,
    "dot product": lambda buffer: torch.dot(buffer, buffer),
}


def _time_read(device: str, size: int, threads: int) -> float:
    buffer = torch.ones(size // 4, dtype=torch.float32, device=device)
    clock = DeviceClock(device)
    times: dict[str, list[float]] = {name: [] for name in _READS}
    for repeat in range(_REPEATS + 1):  # the first round faults the pages in and is not kept
        for name, read in _READS.items():
            start = clock.now()
            read(buffer)
            if repeat:
                times[name].append(clock.now() - start)
    del buffer
    return size / min(statistics.median(kept) for kept in times.values()) / 1e9
