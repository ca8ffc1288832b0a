"""A float32 and bfloat16 CPU kernel for ``linear`` over 1 to 32 rows: decode steps and verify passes at
memory speed.

torch's float32 ``linear`` over 4 to 32 rows of a large weight costs two to three one-row passes on
some CPUs, and its one-row passes stream the weights at about half the machine's read bandwidth
(docs/engines.md, "The verify pass's kernels"). The kernel in ``kernels/few_rows.cpp`` reads each
block of weight rows once and multiplies it with every row of ``x`` while it is in registers,
fetching ahead. bfloat16 multiplies with AVX512_BF16 dot products where the CPU has them (denormal
inputs then count as zero), and otherwise widens to float32 in registers. Each output is one dot product
summed in float32 in a fixed order, so its result does not depend on the row or thread count; it
rounds differently from torch's kernels in the last bits, as a many-row pass does from a one-row pass.

It is compiled on first use (``torch.utils.cpp_extension``, a C++ compiler and ninja needed, for
this CPU's instruction set, or AVX2's under ``ATEN_CPU_CAPABILITY=avx2``) and cached per source,
flags, CPU and torch version. Where it cannot be
built, :func:`kernel` returns None and :func:`unavailable_reason` says why: the engine then keeps
torch's kernels, and each model's forms say so (``verify_forms.KernelForms.few_rows_fallback``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from pathlib import Path
from typing import Any

import torch

from .native_dtypes import cpu_flags, read_cpuinfo

__all__ = [
    "DTYPES",
    "applies_to",
    "MAX_ROWS",
    "SOURCE",
    "compile_flags",
    "few_rows_linear",
    "kernel",
    "supports",
    "unavailable_reason",
]

SOURCE = Path(__file__).with_name("kernels") / "few_rows.cpp"
#: the most rows one call takes (``kMaxRows`` in the source)
MAX_ROWS = 32
#: ATEN_CPU_CAPABILITY -> the instruction set the kernel is built for, so that a run capped to AVX2 (to
#: reproduce an AVX2 machine) caps the kernel too; anything else: this CPU's own (-march=native)
_MARCH = {"avx2": "x86-64-v3", "default": "x86-64"}


def compile_flags() -> list[str]:
    """The compiler flags of the kernel on this machine under this environment."""
    march = _MARCH.get(os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower(), "native")
    return ["-O3", f"-march={march}", "-fopenmp"]


def _extension_name(flags: list[str]) -> str:
    # -march=native ties the binary to this CPU: its flags are part of the name, as are the source and torch.
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(" ".join(sorted(cpu_flags(read_cpuinfo()))).encode())
    digest.update(f"{torch.__version__} {' '.join(flags)}".encode())
    return f"specbench_few_rows_{digest.hexdigest()[:16]}"


@functools.cache
def _build() -> tuple[Any | None, str | None]:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None, f"the kernel is built for x86-64 CPUs; this one is {platform.machine()}"
    try:
        from torch.utils.cpp_extension import load

        flags = compile_flags()
        module = load(_extension_name(flags), [str(SOURCE)], extra_cflags=flags, extra_ldflags=["-fopenmp"])
    except Exception as error:  # no compiler, no ninja, a read-only cache: torch's kernels stay
        return None, f"could not build the few-rows kernel ({type(error).__name__}: {str(error)[:200]})"
    return module, None


def kernel() -> Any | None:
    """The built extension (its ``linear(x, weight, bias)``), or None where it cannot be built."""
    return _build()[0]


def unavailable_reason() -> str | None:
    """Why :func:`kernel` is None; None where the kernel is built."""
    return _build()[1]


#: the weight dtypes the kernel computes
DTYPES = (torch.float32, torch.bfloat16)


def supports(module: torch.nn.Module, rows: int) -> bool:
    """Whether the kernel can compute ``module`` (a float32 or bfloat16 CPU ``Linear``) over ``rows`` rows."""
    weight = getattr(module, "weight", None)
    return (
        isinstance(weight, torch.Tensor)
        and weight.dtype in DTYPES
        and weight.device.type == "cpu"
        and weight.dim() == 2
        and 1 <= rows <= MAX_ROWS
    )


# A custom op, not the bare extension call, so that compiled one-token steps (engine/compiled_steps.py)
# trace through it instead of breaking their graph.
@torch.library.custom_op("specbench::few_rows_linear", mutates_args=())
def _linear_op(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return kernel().linear(hidden, weight, bias)


@_linear_op.register_fake
def _(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return hidden.new_empty((*hidden.shape[:-1], weight.shape[0]))


def applies_to(model: torch.nn.Module) -> bool:
    """Whether some plain linear layer of ``model`` has weights the kernel computes."""
    return any(type(module) is torch.nn.Linear and supports(module, 1) for module in model.modules())


def few_rows_linear(module: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    """``module(hidden)`` through the kernel (which must be built and :func:`supports` the call)."""
    return _linear_op(hidden, module.weight, module.bias)
