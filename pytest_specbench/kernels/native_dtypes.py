"""Which model dtypes a device runs natively, and the facts that decision rests on.

A dtype is native where the hardware multiplies in it: then a bfloat16 model's step costs less
than a float32 one's. Elsewhere it is emulated (converted to float32 around each kernel) and
slower, so a run would measure the emulation, not the method.

- CPU: float32, plus bfloat16 where the CPU has AVX512_BF16 or AMX-BF16 (``/proc/cpuinfo``
  flags), torch's oneDNN reports bfloat16 support and ``ONEDNN_MAX_CPU_ISA`` does not cap oneDNN
  below its bfloat16 ISA. torch's own answer alone is not enough: it says yes on any AVX512 CPU,
  where oneDNN emulates bfloat16. ``ATEN_CPU_CAPABILITY`` picks ATen's vectorised kernels, not
  oneDNN's matmuls, so it is recorded but does not decide.
- CUDA: float32; float16 from compute capability 7.0 (tensor cores); bfloat16 from 8.0.
- Anything else: float32.

Imports torch lazily: the settings layer may import this at pytest start-up.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: /proc/cpuinfo flags of an x86 CPU that multiplies bfloat16 natively
BF16_CPU_FLAGS: tuple[str, ...] = ("avx512_bf16", "amx_bf16")

#: ONEDNN_MAX_CPU_ISA values that cap oneDNN below its bfloat16 ISA (oneDNN then emulates bfloat16)
ONEDNN_ISAS_WITHOUT_BF16 = frozenset(
    {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}
)

#: (major, minor) compute capability from which a CUDA device runs the dtype natively
CUDA_MIN_CAPABILITY: dict[str, tuple[int, int]] = {"float16": (7, 0), "bfloat16": (8, 0)}


def read_cpuinfo() -> str:
    """The text of ``/proc/cpuinfo``; empty where there is none (macOS, Windows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first processor in ``cpuinfo`` text (x86 ``flags``, ARM ``Features``)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def _torch_cpu_bf16() -> bool | None:
    """torch's oneDNN answer to "is bfloat16 supported on this CPU"; None where this torch has no such call."""
    import torch

    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    if check is None:
        return None
    try:
        return bool(check())
    except (RuntimeError, AttributeError):  # an op missing from this build raises on the call
        return None


def _cpu_facts() -> dict[str, Any]:
    import torch

    flags = cpu_flags(read_cpuinfo())
    return {
        "device_type": "cpu",
        "bf16_flags": sorted(flag for flag in BF16_CPU_FLAGS if flag in flags),
        "torch_mkldnn_bf16": _torch_cpu_bf16(),
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA"),
        "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY"),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


def _cuda_facts(device: torch.device) -> dict[str, Any]:
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    try:
        torch_bf16: bool | None = bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # an older torch without the emulation switch
        torch_bf16 = None
    return {
        "device_type": "cuda",
        "device_name": torch.cuda.get_device_name(device),
        "compute_capability": f"{major}.{minor}",
        "torch_cuda_bf16": torch_bf16,
    }


def native_dtype_facts(device: str | torch.device) -> dict[str, Any]:
    """What :func:`native_dtypes` decides from for ``device``: flags, torch's answers, variables (JSON-safe)."""
    import torch

    device = torch.device(device)
    if device.type == "cpu":
        return _cpu_facts()
    if device.type == "cuda":
        return _cuda_facts(device)
    return {"device_type": device.type}


def dtypes_from_facts(facts: Mapping[str, Any]) -> tuple[str, ...]:
    """The native dtypes that ``facts`` (from :func:`native_dtype_facts`) imply: float32, float16, bfloat16 order."""
    if facts.get("device_type") == "cpu":
        isa = str(facts.get("onednn_max_cpu_isa") or "").upper()
        bf16 = bool(facts.get("bf16_flags")) and facts.get("torch_mkldnn_bf16") is not False
        return ("float32", "bfloat16") if bf16 and isa not in ONEDNN_ISAS_WITHOUT_BF16 else ("float32",)
    if facts.get("device_type") == "cuda":
        major, minor = (int(part) for part in str(facts["compute_capability"]).split("."))
        natives = [dtype for dtype in ("float16", "bfloat16") if (major, minor) >= CUDA_MIN_CAPABILITY[dtype]]
        return ("float32", *natives)
    return ("float32",)


def native_dtypes(device: str | torch.device) -> tuple[str, ...]:
    """The dtypes ``device`` runs natively, float32 first (see the module's docstring for the rules)."""
    return dtypes_from_facts(native_dtype_facts(device))
