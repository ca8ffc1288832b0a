"""Device names: check what was asked for, and pick one per xdist worker."""

from __future__ import annotations

from collections.abc import Sequence


def check_devices(devices: Sequence[str]) -> None:
    """Raise ValueError when a requested device does not exist on this machine."""
    wanted = [device for device in devices if device.startswith("cuda")]
    if wanted:
        import torch

        if not torch.cuda.is_available():
            raise ValueError(
                f"{', '.join(wanted)} requested but CUDA is not available "
                f"(torch {torch.__version__}); accepted here: cpu"
            )
        count = torch.cuda.device_count()
        for device in wanted:
            if ":" in device and int(device.split(":")[1]) >= count:
                raise ValueError(
                    f"{device} requested but only {count} CUDA device(s) are visible: cuda:0..cuda:{count - 1}"
                )
    if "mps" in devices:
        import torch

        if not torch.backends.mps.is_available():
            raise ValueError("mps requested but this torch build has no MPS support; accepted here: cpu")


def resolve_device(devices: Sequence[str], worker_index: int = 0) -> str:
    """The device for one worker: devices[index modulo the list]; ``cuda`` alone spreads over all GPUs."""
    import torch

    if not devices:
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    device = devices[worker_index % len(devices)]
    if device == "cuda":
        count = max(torch.cuda.device_count(), 1)
        return f"cuda:{worker_index % count}" if len(devices) == 1 else "cuda:0"
    return device


def threads_per_worker(worker_count: int, cores: int | None = None) -> int | None:
    """torch's threads in each of ``worker_count`` processes on ``cores`` (the machine's, by default): the cores
    shared out, at least one each; None for one process, which keeps torch's own count.

    Several processes each running as many OpenMP threads as there are cores
    oversubscribe them, and spinning threads then slow every matmul manyfold.
    """
    import os

    if worker_count < 2:
        return None
    return max(1, (cores if cores is not None else os.cpu_count() or 1) // worker_count)


def set_cpu_threads(threads: int | None, device: str, worker_count: int = 1) -> None:
    """Give torch ``threads`` CPU threads; by default share the cores between CPU workers
    (:func:`threads_per_worker`)."""
    import torch

    if threads is None and device == "cpu":
        threads = threads_per_worker(worker_count)
    if threads is not None:
        torch.set_num_threads(threads)
