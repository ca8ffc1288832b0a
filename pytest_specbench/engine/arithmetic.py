"""The machine's matmul arithmetic rate, measured in-process, and the least time a pass over the weights can take.

A pass over m rows multiplies every weight m times. At one row the weights' bytes bound it (the memory read
bandwidth, :mod:`.bandwidth`); at enough rows the multiplies do. The rate is torch's own matrix product on
square operands that fit the caches, with the threads the run uses: what a well-tuned GEMM reaches here,
not a datasheet peak. With both rates, a pass of m rows takes at least the larger of its bytes over the
bandwidth and its multiplies over the rate. That floor at m rows over the one at one row is the v(m)/v(1) of a
kernel at both floors: a one-row step above its floor reads less, and only a matmul faster than torch's (up to
the CPU's peak) goes under it at both.
"""

from __future__ import annotations

import functools
import statistics

import torch

from ..kernels.timing import DeviceClock

__all__ = ["matmul_gflops", "pass_floor_s"]

_SIDE = {"cpu": 512, "cuda": 4096}  # square operands: in cache on a CPU, large enough to fill a GPU
_REPEATS = 5


def matmul_gflops(device: torch.device | str, dtype: torch.dtype) -> float:
    """GFLOP/s of torch's matrix product of two square ``dtype`` operands on ``device``: the median of several
    timed batches after one untimed; measured once per (device, dtype, threads)."""
    return _gflops(str(torch.device(device)), dtype, torch.get_num_threads())


@functools.cache
@torch.inference_mode()
def _gflops(device: str, dtype: torch.dtype, threads: int) -> float:
    side = _SIDE.get(torch.device(device).type, 1024)
    left, right = (torch.randn(side, side, device=device).to(dtype) for _ in range(2))
    clock, products = DeviceClock(device), 8
    times = []
    for repeat in range(_REPEATS + 1):  # the first batch warms the kernels and caches and is not kept
        start = clock.now()
        for _ in range(products):
            torch.mm(left, right)
        if repeat:
            times.append((clock.now() - start) / products)
    return 2 * side**3 / statistics.median(times) / 1e9


def pass_floor_s(weight_bytes: int, element_size: int, rows: int, read_gbps: float, gflops: float) -> float:
    """The least seconds a pass of ``rows`` rows over ``weight_bytes`` of weights can take: the weights read
    once at ``read_gbps``, or each weight's ``rows`` multiply-adds at ``gflops``, whichever is longer."""
    reading = weight_bytes / (read_gbps * 1e9)
    multiplying = 2 * rows * (weight_bytes / element_size) / (gflops * 1e9)
    return max(reading, multiplying)
