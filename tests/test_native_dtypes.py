"""Which dtypes a device runs natively: CPU flags, torch's oneDNN answer, oneDNN's ISA cap, CUDA capability."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from factory import tiny_model

from pytest_specbench.engine import dtype_step
from pytest_specbench.kernels import native_dtypes as nd

SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512bw avx512vl avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512bw avx512vl avx512_bf16 amx_bf16 amx_tile amx_int8
"""
SKYLAKE_AVX512 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 avx512f avx512bw avx512vl avx512dq\n"
ZEN4 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 avx512f avx512bw avx512_bf16\n"
GRAVITON = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes sha1 bf16 i8mm\n"


@pytest.fixture
def cpu_with(monkeypatch: pytest.MonkeyPatch):
    """Pretend the CPU's /proc/cpuinfo reads ``text`` and torch's oneDNN answers ``torch_says``."""
    for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY"):
        monkeypatch.delenv(name, raising=False)

    def pretend(text: str, torch_says: bool | None = True) -> None:
        monkeypatch.setattr(nd, "read_cpuinfo", lambda: text)
        monkeypatch.setattr(nd, "_torch_cpu_bf16", lambda: torch_says)

    return pretend


def test_cpu_flags_are_read_from_the_first_processor():
    assert {"avx512_bf16", "amx_bf16", "avx2"} <= nd.cpu_flags(SAPPHIRE_RAPIDS)
    assert "bf16" in nd.cpu_flags(GRAVITON)
    assert nd.cpu_flags("") == frozenset()


@pytest.mark.parametrize(
    ("cpuinfo", "expected"),
    [
        (SAPPHIRE_RAPIDS, ("float32", "bfloat16")),
        (ZEN4, ("float32", "bfloat16")),
        (SKYLAKE_AVX512, ("float32",)),  # torch says yes here, but oneDNN emulates bfloat16
        (GRAVITON, ("float32",)),
        ("", ("float32",)),  # no /proc/cpuinfo (macOS, Windows)
    ],
)
def test_a_cpu_has_native_bfloat16_only_with_its_flags(cpu_with, cpuinfo, expected):
    cpu_with(cpuinfo)
    assert nd.native_dtypes("cpu") == expected


def test_the_flags_name_what_they_found(cpu_with):
    cpu_with(SAPPHIRE_RAPIDS)
    assert nd.native_dtype_facts("cpu")["bf16_flags"] == ["amx_bf16", "avx512_bf16"]


def test_torch_saying_no_removes_bfloat16(cpu_with):
    cpu_with(SAPPHIRE_RAPIDS, torch_says=False)
    assert nd.native_dtypes("cpu") == ("float32",)
    cpu_with(SAPPHIRE_RAPIDS, torch_says=None)  # a torch without the call: the flags decide
    assert nd.native_dtypes("cpu") == ("float32", "bfloat16")


@pytest.mark.parametrize(
    ("isa", "expected"),
    [
        ("avx2", ("float32",)),
        ("AVX512_CORE", ("float32",)),
        ("AVX512_CORE_VNNI", ("float32",)),
        ("AVX512_CORE_BF16", ("float32", "bfloat16")),
        ("AVX512_CORE_AMX", ("float32", "bfloat16")),
        ("ALL", ("float32", "bfloat16")),
    ],
)
def test_a_onednn_isa_cap_below_bfloat16_removes_it(cpu_with, monkeypatch, isa, expected):
    cpu_with(SAPPHIRE_RAPIDS)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", isa)
    assert nd.native_dtypes("cpu") == expected
    assert nd.native_dtype_facts("cpu")["onednn_max_cpu_isa"] == isa


@pytest.mark.parametrize("capability", ["avx2", "default", "avx512"])
def test_aten_cpu_capability_is_recorded_but_keeps_onednn_bfloat16(cpu_with, monkeypatch, capability):
    # ATEN_CPU_CAPABILITY picks ATen's vectorised kernels; the matmuls run in oneDNN, which it leaves alone.
    cpu_with(SAPPHIRE_RAPIDS)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", capability)
    assert nd.native_dtypes("cpu") == ("float32", "bfloat16")
    assert nd.native_dtype_facts("cpu")["aten_cpu_capability"] == capability


class FakeCuda:
    """torch.cuda of one device with the given compute capability."""

    def __init__(self, major: int, minor: int) -> None:
        self.capability = (major, minor)

    def get_device_capability(self, device=None) -> tuple[int, int]:
        return self.capability

    def get_device_name(self, device=None) -> str:
        return f"fake sm_{self.capability[0]}{self.capability[1]}"

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return self.capability >= (8, 0) or including_emulation


@pytest.mark.parametrize(
    ("capability", "expected"),
    [
        ((6, 1), ("float32",)),
        ((7, 5), ("float32", "float16")),
        ((8, 0), ("float32", "float16", "bfloat16")),
        ((9, 0), ("float32", "float16", "bfloat16")),
    ],
)
def test_a_cuda_device_runs_what_its_compute_capability_has(monkeypatch, capability, expected):
    monkeypatch.setattr(torch, "cuda", FakeCuda(*capability))
    assert nd.native_dtypes("cuda:0") == expected
    facts = nd.native_dtype_facts("cuda:0")
    assert facts["compute_capability"] == "{}.{}".format(*capability)
    assert facts["torch_cuda_bf16"] is (capability >= (8, 0))  # asked without emulation


def test_other_devices_run_float32():
    assert nd.native_dtypes("meta") == ("float32",)


def test_the_facts_are_json_safe(monkeypatch):
    facts = nd.native_dtype_facts("cpu")
    assert json.loads(json.dumps(facts)) == facts
    assert nd.dtypes_from_facts(facts) == nd.native_dtypes("cpu")
    monkeypatch.setattr(torch, "cuda", FakeCuda(8, 6))
    facts = nd.native_dtype_facts("cuda")
    assert json.loads(json.dumps(facts)) == facts


@pytest.mark.slow
def test_the_module_imports_without_torch():
    import subprocess
    import sys

    code = "import sys, pytest_specbench.kernels.native_dtypes; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_step_cost_ratio_times_both_dtypes_of_one_model():
    model = tiny_model("llama")
    built: list[torch.dtype] = []

    def factory(dtype: torch.dtype):
        built.append(dtype)
        return copy.deepcopy(model).to(dtype)

    ratio = dtype_step.step_cost_ratio(factory, torch.tensor([[1, 5, 9, 12]]), repeats=1)
    assert built == [torch.float32, torch.bfloat16]
    assert math.isfinite(ratio) and ratio > 0
    pair = (model, copy.deepcopy(model).to(torch.bfloat16))
    assert dtype_step.step_cost_ratio(pair, torch.tensor([[1, 5, 9]]), repeats=2) > 0


def test_step_cost_ratio_refuses_a_one_token_prompt():
    with pytest.raises(ValueError, match="at least 2 tokens"):
        dtype_step.step_cost_ratio(lambda dtype: None, torch.tensor([[1]]), repeats=1)
