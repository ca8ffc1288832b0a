"""The environment check (run first, in the in-process child): versions, the device and what it supports,
which models this run can use; it writes the tiny models the benchmark parts load."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sys
from pathlib import Path
from typing import Any

from .context import Context, write_tiny_pairs


def bf16_native(torch) -> bool:
    """bfloat16 in hardware (compute capability 8.0 on), not torch's emulation."""
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # an older torch without the argument
        return torch.cuda.get_device_capability()[0] >= 8


def _device_facts(ctx: Context, env: dict[str, Any]) -> list[str]:
    """Add the device's facts to ``env``; return the problems found (no CUDA, a missing device, no triton)."""
    import torch

    problems = []
    if not ctx.cuda:
        env.update(device_name=platform.processor() or platform.machine())
        return problems
    if not env["cuda_available"]:
        problems.append(
            f"CUDA is not available to torch {torch.__version__} (a CPU build? install the CUDA "
            "build first: docs/gpu.md)"
        )
    elif (ctx.torch_device.index or 0) >= env["device_count"]:
        problems.append(f"{ctx.device} requested, {env['device_count']} device(s) visible")
    else:
        torch.cuda.set_device(ctx.torch_device)
        properties = torch.cuda.get_device_properties(ctx.torch_device)
        env.update(
            device_name=properties.name,
            capability=f"{properties.major}.{properties.minor}",
            memory_gib=round(properties.total_memory / 2**30, 1),
            bf16_native=bf16_native(torch),
            bf16_supported=bool(torch.cuda.is_bf16_supported()),
            cuda_sleep=hasattr(torch.cuda, "_sleep"),
        )
        if not env["triton"]:
            problems.append(
                "triton is not installed: torch.compile's inductor cannot compile for CUDA "
                "(bench_compiled and the suite's CUDA-graph test will fail)"
            )
    return problems


def _model_facts(env: dict[str, Any]) -> None:
    """Add to ``env`` whether Gemma and the Qwen pairs are installed and converted (or the lookup error)."""
    try:
        from ...models import embedded, gguf_cache, qwen

        env["embedded_installed"] = embedded.GEMMA3_270M.installed()
        if env["embedded_installed"]:
            env["gemma_converted"] = gguf_cache.cached_entry(embedded.GEMMA3_270M.expected_sha256()) is not None
        qwen_models = (qwen.QWEN_CODER_1_5B, qwen.QWEN_CODER_0_5B)
        env["qwen_missing"] = qwen_chunks_missing(qwen_models)
        env["qwen_installed"] = not env["qwen_missing"]
        env["qwen_converted"] = all(gguf_cache.cached_entry(model.sha256) is not None for model in qwen_models)
    except Exception as error:  # noqa: BLE001 - reported, not fatal: the model checks say more
        env["model_lookup_error"] = f"{type(error).__name__}: {error}"


def check_environment(ctx: Context, models_folder: Path) -> tuple[str, str, dict]:
    """Fails on a missing CUDA (fatal: nothing else runs), or on a missing triton or embedded extra."""
    import torch
    import transformers

    env: dict[str, Any] = {
        "python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "transformers": transformers.__version__, "cuda_available": torch.cuda.is_available(),
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "triton": importlib.util.find_spec("triton") is not None,
    }  # fmt: skip
    problems = _device_facts(ctx, env)
    _model_facts(env)
    if ctx.cuda and ctx.with_gemma and not env.get("embedded_installed"):
        problems.append(
            "the embedded extra is not installed (pip install -e '.[embedded,test]'): the Gemma pairs cannot run"
        )
    ctx.env = env
    if not problems or ctx.cuda and env["cuda_available"]:
        write_tiny_pairs(models_folder)
        env["tiny_pairs_file"] = str(models_folder / "pairs.toml")
    if ctx.cuda and (not env["cuda_available"] or "device_name" not in env):
        env["fatal"] = True
        return "fail", "; ".join(problems), env
    if problems:
        env["problems"] = problems
        # Missing triton or the embedded extra fails the checks that need them; the rest can still run.
        env["fatal"] = False
        return "fail", "; ".join(problems), env
    where = env.get("device_name", "")
    extra = f", compute capability {env['capability']}, bf16 native: {env['bf16_native']}" if ctx.cuda else ""
    return (
        "pass",
        (
            f"{ctx.device} ({where}{extra}); torch {env['torch']}, transformers {env['transformers']}; "
            f"Gemma converted: {env.get('gemma_converted')}, qwen extra: {env.get('qwen_installed')}"
        ),
        env,
    )


def qwen_chunks_missing(models) -> list[str]:
    """The chunk distributions of ``models`` (the package's recorded table) not installed at their pinned
    version, looked up with importlib.metadata."""
    missing = []
    for model in models:
        for chunk in model.chunks:
            try:
                found = importlib.metadata.version(chunk.distribution)
            except importlib.metadata.PackageNotFoundError:
                found = None
            if found != chunk.version:
                missing.append(chunk.requirement)
    return missing
