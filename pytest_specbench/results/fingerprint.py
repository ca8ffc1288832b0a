"""The machine fingerprint: the facts that decide a run's numerics, recorded in every JSON and baseline.

Greedy acceptance is deterministic on one machine, not across machines: the CPU's
kernel set (``torch.backends.cpu.get_cpu_capability()``: AVX2, AVX512, ...), the
quantized engine, the thread count and the GPU pick different kernels, near-tied
logits flip, and the generated text, hence acceptance, moves. The gate compares
the baseline's fingerprint with the run's and says when they differ.

``native_dtypes`` (per device: the CPU, each CUDA device, any device the run names) says which
dtypes run natively there (kernels/native_dtypes.py); a bfloat16 case on a machine that emulates
bfloat16 measures other kernels, so it counts among the entries that differ, when both sides
record it (fingerprints written before it was recorded do not differ by its absence).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from collections.abc import Collection, Iterable, Mapping
from typing import Any

#: the entries that change which kernels run; cpu_count and python are kept for the reader only
NUMERIC_KEYS = ("cpu_model", "cpu_capability", "quantized_engine", "torch_threads", "gpus", "torch", "transformers")
#: entries that differ only when both fingerprints record them (older fingerprints lack them; ``few_rows_kernel``
#: is recorded by a process that has tried to build the kernel: its build, or why it could not)
RECORDED_LATER_KEYS = ("native_dtypes", "few_rows_kernel")


def _cpu_model() -> str:
    from ..kernels.native_dtypes import read_cpuinfo  # the engine package imports torch: only when asked

    for line in read_cpuinfo().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _native_dtype_entries(devices: Iterable[str]) -> dict[str, Any]:
    """``native_dtypes`` and ``native_dtype_facts``, each keyed by device name."""
    from ..kernels import native_dtypes as native

    facts = {str(device): native.native_dtype_facts(device) for device in devices}
    return {
        "native_dtypes": {device: list(native.dtypes_from_facts(found)) for device, found in facts.items()},
        "native_dtype_facts": facts,
    }


def machine_fingerprint(devices: Iterable[str] = ()) -> dict[str, Any]:
    """This process's fingerprint (imports torch); native dtypes of the CPU, each CUDA device and ``devices``."""
    import torch

    gpus = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(index)
            gpus.append({"name": torch.cuda.get_device_name(index), "compute_capability": f"{major}.{minor}"})
    named = dict.fromkeys(["cpu", *(f"cuda:{index}" for index in range(len(gpus))), *map(str, devices)])
    return {
        "cpu_model": _cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY"),  # set by hand to emulate another CPU
        "quantized_engine": torch.backends.quantized.engine,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        **_native_dtype_entries(named),
        **_few_rows_entry(),
    }


def _few_rows_entry() -> dict[str, Any]:
    from ..kernels import few_rows

    state = few_rows.state_if_tried()
    return {} if state is None else {"few_rows_kernel": state}


def fingerprint_differences(
    old: Mapping[str, Any], new: Mapping[str, Any], leave_out: Collection[str] = ()
) -> list[str]:
    """``"cpu_capability AVX512 -> AVX2"`` for each numeric entry that differs (none when either is empty), but
    those in ``leave_out`` (entries a caller checks otherwise)."""
    if not old or not new:
        return []
    keys = [*NUMERIC_KEYS, *(key for key in RECORDED_LATER_KEYS if key in old and key in new)]
    return [
        f"{key} {old.get(key)!r} -> {new.get(key)!r}"
        for key in keys
        if key not in leave_out and old.get(key) != new.get(key)
    ]
