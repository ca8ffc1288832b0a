"""Device-correct wall-clock timing.

CUDA kernels run asynchronously, so a clock read without a synchronise
measures launch time, not work. Every clock read here synchronises first.
"""

from __future__ import annotations

import time

import torch


def synchronize(device: torch.device | str) -> None:
    """Wait for all queued work on ``device`` to finish (no-op on CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


class DeviceClock:
    """A monotonic clock that synchronises ``device`` before every reading."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)

    def now(self) -> float:
        synchronize(self.device)
        return time.perf_counter()
