"""The machine's memory read bandwidth, measured in-process, and a pass's effective bandwidth.

A one-row decode step reads every weight once and does little else, so its floor is the weights' bytes
over the bandwidth at which this process can read memory. The read is timed on a buffer as large as
the weights, capped (:func:`read_buffer_bytes`) where a larger one reads no slower: on a CPU at eight times its
last-level cache (a buffer the size of the weights doubled the run's peak memory for a second), with the threads
the run uses, by
three of torch's reductions (its largest float32 element, its sum, its dot product with itself), and the fastest
is kept: which one reads fastest depends on the CPU (the largest element on an AMD EPYC, the sum on a Xeon; see
docs/results/2026-12-05-one-row-bounds.md). A pass's effective bandwidth is the target's weight bytes over its
time; its share of the read bandwidth says how far a kernel is from the memory limit.
"""

from __future__ import annotations

import functools
import os
import statistics
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from .timing import DeviceClock

__all__ = [
    "MAX_BUFFER_BYTES",
    "PackedLinear",
    "effective_gbps",
    "memory_read_gbps",
    "packed_bytes",
    "packed_linears",
    "read_buffer_bytes",
    "weight_bytes",
]

#: the largest buffer the read is timed on: well past any cache, and small beside the models
MAX_BUFFER_BYTES = 1 << 30
#: a CPU's buffer is this many times its last-level cache, and at least CPU_MIN_BUFFER_BYTES: from 4x on, the
#: read is within a few percent of a 1 GiB buffer's (docs/results/2026-12-07-epyc-read-buffer.md)
CACHE_MULTIPLE = 8
CPU_MIN_BUFFER_BYTES = 256 << 20
#: where the kernel describes each CPU and its caches (Linux)
CPU_ROOT = Path("/sys/devices/system/cpu")
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


@dataclass(frozen=True)
class PackedLinear:
    """The sizes of a dynamically quantised linear's packed weight and bias (torch.ao's keeps them outside its
    parameters and buffers, and hands out a new copy each time they are asked for)."""

    weight_numel: int
    weight_bytes: int
    bias_numel: int
    bias_bytes: int


#: each packed linear's sizes, read once: unpacking copies the weight (a 170 MB head's, each time it was asked)
_PACKED: weakref.WeakKeyDictionary[torch.nn.Module, PackedLinear] = weakref.WeakKeyDictionary()


def packed_linears(model: torch.nn.Module) -> Iterator[PackedLinear]:
    """The packed weight's and bias's sizes of each dynamically quantised linear of ``model`` (torch.ao's)."""
    for module in model.modules():
        unpack = getattr(module, "_weight_bias", None)
        if not callable(getattr(module, "weight", None)) or isinstance(module.weight, torch.nn.Module):
            continue
        if module not in _PACKED:
            bias = getattr(module, "bias", None)
            weight, bias = unpack() if callable(unpack) else (module.weight(), bias() if callable(bias) else None)
            _PACKED[module] = PackedLinear(
                weight.numel(),
                weight.numel() * weight.element_size(),
                0 if bias is None else bias.numel(),
                0 if bias is None else bias.numel() * bias.element_size(),
            )
            del weight, bias
        yield _PACKED[module]


def packed_bytes(model: torch.nn.Module) -> int:
    """Bytes of the weights dynamically quantised linears keep packed (a byte a weight in int8), and their biases."""
    return sum(linear.weight_bytes + linear.bias_bytes for linear in packed_linears(model))


def _embedding_weight(model: torch.nn.Module, getter: str) -> torch.Tensor | None:
    module = getattr(model, getter, lambda: None)()
    return getattr(module, "weight", None)


def effective_gbps(nbytes: int, seconds: float) -> float | None:
    """``nbytes`` read in ``seconds``, in GB/s (10**9 bytes); None for a time that is not positive."""
    return nbytes / seconds / 1e9 if seconds > 0 else None


def last_level_cache_bytes(cpus: Iterable[int] | None = None) -> int | None:
    """Bytes of the last-level caches that ``cpus`` (the process's, by default) read through, from the kernel's
    description under :data:`CPU_ROOT`: each CPU's largest data or unified cache, each instance counted once (a CPU
    of several core complexes has one a complex); None where none is described."""
    instances: dict[str, int] = {}  # the CPUs that share an instance -> its bytes
    for cpu in sorted(os.sched_getaffinity(0)) if cpus is None else cpus:
        largest: tuple[int, str] | None = None
        for index in (CPU_ROOT / f"cpu{cpu}" / "cache").glob("index*"):
            try:
                if (index / "type").read_text().strip() == "Instruction":
                    continue
                size = _cache_size((index / "size").read_text().strip())
                shared = (index / "shared_cpu_list").read_text().strip() if (index / "shared_cpu_list").exists() else ""
            except OSError:
                continue
            if size is not None and (largest is None or size > largest[0]):
                largest = (size, shared or f"cpu{cpu}")
        if largest is not None:
            instances[largest[1]] = largest[0]
    return sum(instances.values()) or None


def _cache_size(text: str) -> int | None:
    """A cache's size as the kernel writes it (``32768K``), in bytes; None for a form it does not use."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1:] in units and text[:-1].isdigit():
        return int(text[:-1]) * units[text[-1]]
    return int(text) if text.isdigit() else None


def read_buffer_bytes(device: torch.device | str, nbytes: int) -> int:
    """The buffer the read of ``nbytes`` is timed on: ``nbytes``, at most :data:`MAX_BUFFER_BYTES`, and on a CPU
    at most :data:`CACHE_MULTIPLE` times the last-level caches its threads read through (not below
    :data:`CPU_MIN_BUFFER_BYTES`); 1 MiB or more, a whole number of floats."""
    cap = MAX_BUFFER_BYTES
    if torch.device(device).type == "cpu":
        cache = last_level_cache_bytes()
        if cache is not None:
            cap = min(cap, max(CACHE_MULTIPLE * cache, CPU_MIN_BUFFER_BYTES))
    return max(min(int(nbytes), cap) // 4 * 4, 1 << 20)


@torch.inference_mode()
def memory_read_gbps(device: torch.device | str, nbytes: int, fresh: bool = False) -> float:
    """GB/s of one read of ``nbytes`` (capped: :func:`read_buffer_bytes`) on ``device``: the fastest of the
    reads' medians over several timed rounds after one untimed, with torch's current thread count; measured
    once per (device, size, threads) unless ``fresh``."""
    size = read_buffer_bytes(device, nbytes)
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
