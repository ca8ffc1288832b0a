"""A float32 and bfloat16 CPU kernel for ``linear`` over 1 to 32 rows: decode steps and verify passes at
memory speed.

torch's float32 ``linear`` over 4 to 32 rows of a large weight costs two to three one-row passes on
some CPUs, and its one-row passes stream the weights at about half the machine's read bandwidth
(docs/engines.md, "The verify pass's kernels"). The kernel in ``cpp/`` (:data:`SOURCES`) reads each
block of weight rows once and multiplies it with every row of ``x`` while it is in registers,
fetching ahead. bfloat16 multiplies with AVX512_BF16 dot products where the CPU has them (denormal
inputs then count as zero), and otherwise widens to float32 in registers; its ``tiles`` variant multiplies
in AMX tiles where the CPU has them (1 to 16 rows: many rows cost little more than one there, where the dot
products are bound by their arithmetic). Each output is one dot product
summed in float32 in a fixed order, so its result does not depend on the row or thread count; it
rounds differently from torch's kernels in the last bits, as a many-row pass does from a one-row pass.

It is compiled on first use (``torch.utils.cpp_extension``, a C++ compiler and ninja needed, for
this CPU's instruction set, or AVX2's under ``ATEN_CPU_CAPABILITY=avx2``) and cached per source,
flags, CPU and torch version (:func:`identity`, which rows record). A cached build that does not load or
does not compute ``linear`` (a damaged file) is removed and built once more. Where it cannot be built,
:func:`kernel` returns None and :func:`unavailable_reason` says why: under ``auto`` the engine then keeps
torch's kernels, and each model's forms say so (``verify_forms.KernelForms.few_rows_fallback``); a setting that
asks for it by name is refused. Where the CPU has AMX and the tiles cannot run (a build for AVX2, or a system
that refuses a process AMX's state), :func:`recorded_state` says so after the build's identity.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
from pathlib import Path
from typing import Any

import torch

from .names import FEW_ROWS_BUILT, WITHOUT_TILES
from .native_dtypes import cpu_flags, read_cpuinfo

__all__ = [
    "DTYPES",
    "applies_to",
    "MAX_ROWS",
    "HEADERS",
    "SOURCES",
    "build_cached",
    "compile_flags",
    "few_rows_linear",
    "identity",
    "recorded_state",
    "state_if_tried",
    "kernel",
    "supports",
    "TILE_ROWS",
    "tiles_available",
    "tiles_unavailable_reason",
    "VARIANTS",
    "unavailable_reason",
]

_KERNELS = Path(__file__).with_name("cpp")
#: the binding, then the loops' parts: compiled apart, on every core (the binding's torch headers alone take about
#: as long as each part)
SOURCES = tuple(_KERNELS / name for name in ("few_rows.cpp", "float32_rows.cpp", "bfloat16_rows.cpp", "tiles.cpp"))
HEADERS = (_KERNELS / "few_rows.h", _KERNELS / "loops.h")
#: the most rows one call takes (``kMaxRows`` in the source), and the most the ``tiles`` variant takes
MAX_ROWS = 32
TILE_ROWS = 16
#: the kernel's variants: ``rows`` (vector registers), ``held`` (float32 x held in registers: the same results),
#: ``tiles`` (bfloat16 in AMX tiles)
VARIANTS = ("rows", "held", "tiles")
#: ATEN_CPU_CAPABILITY -> the instruction set the kernel is built for, so that a run capped to AVX2 (to
#: reproduce an AVX2 machine) caps the kernel too; anything else: this CPU's own (-march=native)
_MARCH = {"avx2": "x86-64-v3", "default": "x86-64"}


def compile_flags() -> list[str]:
    """The compiler flags of the kernel on this machine under this environment."""
    march = _MARCH.get(os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower(), "native")
    return ["-O3", f"-march={march}", "-fopenmp"]


def _extension_name(flags: list[str]) -> str:
    # -march=native ties the binary to this CPU: its flags are part of the name, as are the sources and torch.
    digest = hashlib.sha256()
    for path in (*SOURCES, *HEADERS):
        digest.update(path.read_bytes())
    digest.update(" ".join(sorted(cpu_flags(read_cpuinfo()))).encode())
    digest.update(f"{torch.__version__} {' '.join(flags)}".encode())
    return f"specbench_few_rows_{digest.hexdigest()[:16]}"


def identity() -> str:
    """The kernel build this machine and environment run, as rows record it: ``built <extension name>``, the name
    a digest of the source, the CPU's flags, torch's version and the compiler flags; computed without building."""
    return f"{FEW_ROWS_BUILT} {_extension_name(compile_flags())}"


def _computes_linear(module: Any) -> bool:
    """A loaded build computes ``linear`` as torch does on a small case (a damaged binary may load and not)."""
    generator = torch.Generator().manual_seed(0)
    # 96 columns: the tiles' paired steps and the step alone after them
    hidden, weight = torch.randn(3, 96, generator=generator), torch.randn(40, 96, generator=generator)
    bias = torch.randn(40, generator=generator)
    expected = torch.nn.functional.linear(hidden, weight, bias)
    if not torch.allclose(module.linear(hidden, weight, bias), expected, atol=1e-4):
        return False
    if not module.tiles_available():
        return True
    halves = hidden.bfloat16(), weight.bfloat16(), bias.bfloat16()
    return torch.allclose(module.linear(*halves, "tiles").float(), module.linear(*halves).float(), atol=0.1)


def _load() -> Any:
    from torch.utils.cpp_extension import load

    flags = compile_flags()
    module = load(_extension_name(flags), [str(p) for p in SOURCES], extra_cflags=flags, extra_ldflags=["-fopenmp"])
    if not _computes_linear(module):
        raise RuntimeError("the built kernel computes linear wrongly")
    return module


def build_cached() -> bool:
    """Whether this machine's build is in torch's extensions folder already, so that using it builds nothing."""
    from torch.utils.cpp_extension import _get_build_directory

    name = _extension_name(compile_flags())
    return (Path(_get_build_directory(name, verbose=False)) / f"{name}.so").exists()


def _remove_build() -> bool:
    """Remove this build's cached folder (a damaged build would load again as it is); whether there was one."""
    from torch.utils.cpp_extension import JIT_EXTENSION_VERSIONER, _get_build_directory

    name = _extension_name(compile_flags())
    folder = Path(_get_build_directory(name, verbose=False))
    if not (folder / f"{name}.so").exists():
        return False
    shutil.rmtree(folder, ignore_errors=True)
    # torch builds a name once per process: forget it, so that the next load builds it again.
    JIT_EXTENSION_VERSIONER.entries.pop(name, None)
    return True


@functools.cache
def _build() -> tuple[Any | None, str | None]:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None, f"the kernel is built for x86-64 CPUs; this one is {platform.machine()}"
    try:
        try:
            return _load(), None
        except Exception:
            # A cached build that fails to load or to compute (a damaged file) is built again, once; a build
            # that failed for another reason (no compiler, no ninja) fails the same way again.
            if not _remove_build():
                raise
            return _load(), None
    except Exception as error:  # no compiler, no ninja, a read-only cache: torch's kernels stay
        return None, f"could not build the few-rows kernel ({type(error).__name__}: {str(error)[:200]})"


def kernel() -> Any | None:
    """The built extension (its ``linear(x, weight, bias)``), or None where it cannot be built."""
    return _build()[0]


def unavailable_reason() -> str | None:
    """Why :func:`kernel` is None; None where the kernel is built."""
    return _build()[1]


def tiles_unavailable_reason() -> str | None:
    """Why the ``tiles`` variant cannot run on this CPU with AMX (the kernel not built, a build for another
    instruction set, or a system that refuses AMX's tile state); None where it runs, or where the CPU has no
    AMX (nothing is missing there)."""
    if not {"amx_bf16", "amx_tile"} <= cpu_flags(read_cpuinfo()):
        return None
    module = kernel()
    if module is None:
        return unavailable_reason()
    if module.tiles_available():
        return None
    march = compile_flags()[1].removeprefix("-march=")
    if march != "native":
        return f"built for {march} (ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY')})"
    if not module.tiles_built:
        return "the compiler did not enable AMX's instructions for this CPU"
    return "the system did not give this process AMX's tile state"


def tiles_available() -> bool:
    """Whether the ``tiles`` variant runs here."""
    module = kernel()
    return module is not None and module.tiles_available()


def state_if_tried() -> str | None:
    """:func:`recorded_state` where this process has already tried to build the kernel; None where it has not
    (never a build only to say so)."""
    info = getattr(_build, "cache_info", None)
    return recorded_state() if info is None or info().currsize else None


def recorded_state() -> str:
    """What a row using the kernel here records (building it if need be): :func:`identity`, or why it cannot
    run; after the identity, why AMX tiles cannot run on a CPU that has them."""
    reason = unavailable_reason()
    if reason:
        return reason
    tiles = tiles_unavailable_reason()
    return f"{identity()}, {WITHOUT_TILES}: {tiles}" if tiles else identity()


#: the weight dtypes the kernel computes
DTYPES = (torch.float32, torch.bfloat16)


def supports(module: torch.nn.Module, rows: int, variant: str = "rows") -> bool:
    """Whether the kernel's ``variant`` can compute ``module`` (a float32 or bfloat16 CPU ``Linear``) over ``rows``
    rows (``tiles``: bfloat16, at most :data:`TILE_ROWS`, where :func:`tiles_available`)."""
    weight = getattr(module, "weight", None)
    fits = (
        isinstance(weight, torch.Tensor)
        and weight.dtype in DTYPES
        and weight.device.type == "cpu"
        and weight.dim() == 2
        and 1 <= rows <= MAX_ROWS
    )
    if variant == "held":
        return fits and weight.dtype == torch.float32
    if variant == "tiles":
        return fits and weight.dtype == torch.bfloat16 and rows <= TILE_ROWS and tiles_available()
    return fits


# A custom op, so that compiled one-token steps (engine/compiled_steps.py) trace through the kernel instead of
# breaking their graph.
@torch.library.custom_op("specbench::few_rows_linear", mutates_args=())
def _linear_op(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, variant: str) -> torch.Tensor:
    return kernel().linear(hidden, weight, bias, variant)


@_linear_op.register_fake
def _(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, variant: str) -> torch.Tensor:
    return hidden.new_empty((*hidden.shape[:-1], weight.shape[0]))


def applies_to(model: torch.nn.Module) -> bool:
    """Whether some plain linear layer of ``model`` has weights the kernel computes."""
    return any(type(module) is torch.nn.Linear and supports(module, 1) for module in model.modules())


def few_rows_linear(module: torch.nn.Linear, hidden: torch.Tensor, variant: str = "rows") -> torch.Tensor:
    """``module(hidden)`` through the kernel's ``variant`` (one of :data:`VARIANTS`; the kernel must be built and
    :func:`supports` the call). ``held`` holds each vector of a float32 x in a register (the same results;
    faster or slower by shape and CPU), ``tiles`` multiplies bfloat16 in AMX tiles: :mod:`.verify_forms` times
    each where it applies."""
    if torch.compiler.is_compiling() or torch.is_grad_enabled():
        # Compiled steps trace the op; with gradients on, the op refuses a backward pass the kernel cannot give.
        return _linear_op(hidden, module.weight, module.bias, variant)
    # The engine's passes (no gradients): straight to the extension, without the op's dispatch
    # (docs/results/2026-12-05-eager-kernel-calls.md). Same kernel.
    return kernel().linear(hidden, module.weight, module.bias, variant)
