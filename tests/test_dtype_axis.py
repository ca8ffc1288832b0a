"""dtype as an axis: --specbench-dtype takes a list (or auto), the matrix runs every case once per dtype, and each
case loads, drafts, references and judges in its own dtype."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import types
from pathlib import Path

import pytest
import torch
from factory import write_tiny_pair

from pytest_specbench.cases.matrix import build_matrix
from pytest_specbench.cases.pairs import PairSpec, load_pairs_file
from pytest_specbench.cases.prompts import Prompt
from pytest_specbench.measure.case_inputs import case_inputs
from pytest_specbench.measure.store import ModelStore
from pytest_specbench.results.log import settings_differences
from pytest_specbench.settings.config import (
    ConfigError,
    parse_settings,
    read_settings,
    result_settings,
    result_settings_from_raw,
)

PROMPTS = [Prompt("natural-01", "natural", "Once upon a time"), Prompt("code-01", "code", "def f():")]
TWO = ("float32", "bfloat16")


def _dtype(raw: str, **others: str):
    values = {name: (value, f"--specbench-{name}") for name, value in others.items()}
    return parse_settings({"dtype": (raw, "--specbench-dtype"), **values})


# --- the option ----------------------------------------------------------------------------------------------


def test_the_default_is_the_devices_native_dtypes_and_one_dtype_is_recorded_as_before(monkeypatch) -> None:
    import pytest_specbench.kernels.native_dtypes as native

    for flags, expected in (("avx2 fma", ("float32",)), ("avx512f amx_bf16", ("float32", "bfloat16"))):
        monkeypatch.setattr(native, "read_cpuinfo", lambda flags=flags: f"flags\t: {flags}\n")
        monkeypatch.setattr(native, "_torch_cpu_bf16", lambda: True)
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
        assert parse_settings({}).dtypes == expected
    # One dtype is recorded as the plain name a run recorded before the option took a list, so stored baselines
    # and logs still compare equal; the CI gate's baseline names float32, which its command pins.
    config = parse_settings({"dtype": ("float32", "--specbench-dtype")})
    assert result_settings(config)["--specbench-dtype"] == "float32"
    example = json.loads((Path(__file__).resolve().parents[1] / "examples" / "specbench_baseline.json").read_text())
    assert example["settings"]["--specbench-dtype"] == result_settings(config)["--specbench-dtype"]
    assert "--specbench-dtype=float32" in (Path(__file__).resolve().parents[1] / "examples" / "ci-gate.sh").read_text()


def test_a_comma_list_runs_each_dtype_and_is_recorded_as_a_list() -> None:
    config = _dtype("float32, bfloat16")
    assert config.dtypes == TWO
    assert result_settings(config)["--specbench-dtype"] == ["float32", "bfloat16"]
    assert result_settings_from_raw(config.raw) == result_settings(config)
    # Their order changes only the order the cases run in.
    assert settings_differences(result_settings(config), result_settings(_dtype("bfloat16,float32"))) == []


def test_an_ini_list_works_as_the_option_does() -> None:
    values = read_settings(lambda dest: None, {"specbench_dtype": "float32,float16"}.get)
    assert values["dtype"] == ("float32,float16", "ini specbench_dtype")
    assert parse_settings(values).dtypes == ("float32", "float16")


@pytest.fixture
def native(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``native_dtypes`` answering float32 and bfloat16 on a CPU, float16 too on CUDA; the devices asked, listed."""
    asked: list[str] = []

    def native_dtypes(device) -> tuple[str, ...]:
        asked.append(str(device))
        return ("float32", "bfloat16") if str(device) == "cpu" else ("float32", "float16", "bfloat16")

    module = types.ModuleType("pytest_specbench.kernels.native_dtypes")
    module.native_dtypes = native_dtypes
    monkeypatch.setitem(sys.modules, module.__name__, module)
    # no GPU here; by sys.modules, which another test may have refilled since the package's attribute was set
    monkeypatch.setattr(importlib.import_module("pytest_specbench.settings.devices"), "check_devices", lambda _: None)
    return asked


def test_auto_is_the_native_dtypes_of_the_runs_device_and_is_recorded_resolved(native: list[str]) -> None:
    config = parse_settings({"dtype": ("auto", "--specbench-dtype")}, cuda_available=lambda: False)
    assert config.dtypes == TWO and native == ["cpu"]
    # What ran, not "auto": a resume or a gate on another machine compares the dtypes themselves.
    assert config.raw["specbench_dtype"] == "float32,bfloat16"
    assert result_settings_from_raw(config.raw)["--specbench-dtype"] == ["float32", "bfloat16"]
    assert _dtype("auto", gpu="cuda:1").dtypes == ("float32", "float16", "bfloat16") and native[-1] == "cuda:1"
    # No device given: the one the run will take.
    assert parse_settings({"dtype": ("auto", "ini specbench_dtype")}, cuda_available=lambda: True).dtypes == (
        "float32",
        "float16",
        "bfloat16",
    )
    assert native[-1] == "cuda:0"
    # Several devices (one per xdist worker): every worker runs the same matrix, so the dtypes native on all.
    assert _dtype("auto", gpu="cpu,cuda:0").dtypes == TWO


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("fp8", "unknown dtype 'fp8'; accepted: float32, float16, bfloat16 or a comma list of them, or auto"),
        ("float32,float32", "listed more than once: float32"),
        ("auto,float16", "auto stands alone"),
        (" , ", "no value given"),
    ],
)
def test_a_bad_dtype_names_the_option_the_value_and_what_is_accepted(raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"--specbench-dtype={raw!r}: .*{message}"):
        _dtype(raw)


# --- the matrix ----------------------------------------------------------------------------------------------

GEMMA = PairSpec("int8", "gemma", drafter="int8")
LOOKUP = PairSpec("lookup", "gemma", drafter="prompt_lookup")


def test_every_case_runs_once_per_dtype_and_only_other_dtypes_than_float32_show_in_the_id() -> None:
    one = build_matrix([GEMMA], (1, 4), PROMPTS[:1])
    cases = build_matrix([GEMMA], (1, 4), PROMPTS[:1], dtypes=("float32", "bfloat16", "float16"))
    assert [case.id for case in cases] == [
        *(case.id for case in one),  # float32 keeps its id: stored baselines still match
        "int8-k1-natural-bf16",
        "int8-k4-natural-bf16",
        "int8-k1-natural-fp16",
        "int8-k4-natural-fp16",
    ]
    assert [case.dtype for case in cases] == ["float32"] * 2 + ["bfloat16"] * 2 + ["float16"] * 2
    # One block (one baseline) per dtype: each case's speedup is against the target in its own dtype.
    assert len({case.block for case in cases}) == 3
    assert {case.block for case in cases if case.dtype == "float32"} == {case.block for case in one}
    # One dtype alone, even another one: no suffix.
    alone = build_matrix([GEMMA], (1,), PROMPTS[:1], dtypes=("bfloat16",))
    assert [(case.id, case.dtype) for case in alone] == [("int8-k1-natural", "bfloat16")]


def test_a_blocks_cases_stay_together_with_several_dtypes() -> None:
    cases = build_matrix([GEMMA, LOOKUP], (1,), PROMPTS, dtypes=TWO)
    order = [case.block for case in cases]
    assert order == sorted(order, key=order.index)  # each block contiguous
    for block in set(order):
        assert len({case.dtype for case in cases if case.block == block}) == 1
    assert len(cases) == 2 * 2 * 2


def test_a_pair_pinned_to_a_dtype_runs_in_that_dtype_only_once() -> None:
    pinned = PairSpec("pinned", "gemma", drafter="prompt_lookup", dtype="bfloat16")
    cases = build_matrix([GEMMA, pinned], (4,), PROMPTS[:1], dtypes=TWO)
    assert [(case.id, case.dtype) for case in cases if case.pair is pinned] == [("pinned-k4-natural-bf16", "bfloat16")]
    # It shares the block (the baseline) of the other bfloat16 cases on its target.
    by_id = {case.id: case.block for case in cases}
    assert by_id["pinned-k4-natural-bf16"] == by_id["int8-k4-natural-bf16"] != by_id["int8-k4-natural"]
    # In a run of one dtype it keeps its plain id, in its own dtype and its own block.
    alone = build_matrix([GEMMA, pinned], (4,), PROMPTS[:1])
    assert [(case.id, case.dtype) for case in alone] == [
        ("int8-k4-natural", "float32"),
        ("pinned-k4-natural", "bfloat16"),
    ]
    assert alone[0].block != alone[1].block


def test_the_inputs_fingerprint_tells_the_dtypes_apart(tiny_pairs_file: Path) -> None:
    config = parse_settings({"dtype": ("float32,bfloat16", "--specbench-dtype")})
    float32, bfloat16 = build_matrix([load_pairs_file(tiny_pairs_file)["tiny"]], (1,), PROMPTS[:1], dtypes=TWO)
    assert case_inputs(float32, config, PROMPTS)["case"] != case_inputs(bfloat16, config, PROMPTS)["case"]
    assert case_inputs(float32, config, PROMPTS)["target"] == case_inputs(bfloat16, config, PROMPTS)["target"]


# --- the store: once per (model, dtype, device) --------------------------------------------------------------


@pytest.fixture(scope="module")
def int8_pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny pair, and pair ``tiny_int8``: the tiny target drafted for by its own int8 copy."""
    path = write_tiny_pair(tmp_path_factory.mktemp("int8_pair"), name="tiny")
    with path.open("a", encoding="utf-8") as handle:
        handle.write('[pairs.tiny_int8]\ntarget = "./target"\ndrafter = "int8"\n')
    return path


def test_each_model_and_drafter_is_built_once_per_dtype(int8_pairs_file: Path) -> None:
    pairs = load_pairs_file(int8_pairs_file)
    store = ModelStore("cpu")
    targets = {dtype: store.target(pairs["tiny"], dtype) for dtype in TWO}
    assert {dtype: target.model.dtype for dtype, target in targets.items()} == {
        "float32": torch.float32,
        "bfloat16": torch.bfloat16,
    }
    for dtype in TWO:
        assert store.target(pairs["tiny_int8"], dtype) is targets[dtype]  # the same target, loaded once
        assert store.drafter(pairs["tiny"], dtype).model.dtype == getattr(torch, dtype)
    assert store.drafter(pairs["tiny_int8"], "float32") is not store.drafter(pairs["tiny_int8"], "bfloat16")
    assert sorted(store.load_counts.values()) == [1, 1, 1, 1]  # target and draft, in each dtype
    # A pinned pair loads in its own dtype whatever the case asks.
    pinned = dataclasses.replace(pairs["tiny"], dtype="bfloat16")
    assert store.target(pinned, "float32") is targets["bfloat16"]


# --- through pytest ------------------------------------------------------------------------------------------


def test_the_marker_selects_by_dtype(bench) -> None:
    result = bench("--collect-only", "-q", "--specbench-dtype=float32,bfloat16", "-m", "specbench(dtype='bfloat16')")
    lines = [line for line in result.stdout.lines if "::test_speculative_decoding[" in line]
    selected = [line.split("[")[1].rstrip("]") for line in lines]
    assert selected == [f"tiny-k{k}-{prompt}-bf16" for prompt in ("natural", "code_json") for k in (1, 4)]


@pytest.mark.slow
def test_a_run_in_two_dtypes_measures_each_case_in_each(
    bench, pytester: pytest.Pytester, int8_pairs_file: Path
) -> None:
    result = bench(
        "--specbench-dtype=float32,bfloat16",
        "--specbench-pairs=tiny,tiny_int8",
        "--specbench-json=out.json",
        "-k",
        "not (tiny_int8 and k1)",
        pairs_file=int8_pairs_file,
        prompts="natural",
    )
    result.assert_outcomes(passed=6, deselected=2)
    rows = {row["case"]: row for row in json.loads((pytester.path / "out.json").read_text())["results"]}
    assert list(rows) == [
        "tiny-k1-natural",
        "tiny-k4-natural",
        "tiny_int8-k4-natural",
        "tiny-k1-natural-bf16",
        "tiny-k4-natural-bf16",
        "tiny_int8-k4-natural-bf16",
    ]
    for case, row in rows.items():
        assert row["dtype"] == ("bfloat16" if case.endswith("-bf16") else "float32"), case
        assert row["verdict"] in ("lossless", "tie-divergence"), (case, row["verdict"])
        # Each model loaded once per dtype on the one worker.
        assert set(row["model_loads"].values()) == {1}, row["model_loads"]
    assert len(rows["tiny_int8-k4-natural-bf16"]["model_loads"]) == 4
    assert rows["tiny-k4-natural-bf16"]["block"] != rows["tiny-k4-natural"]["block"]
    # The int8 copy computes in float32 whatever the target's dtype: its row says so.
    assert rows["tiny_int8-k4-natural-bf16"]["draft"].endswith("int8 (float32 activations)")
    assert rows["tiny_int8-k4-natural"]["draft"].endswith("int8")
    recorded = json.loads((pytester.path / "out.json").read_text())["options"]["specbench_dtype"]
    assert recorded == "float32,bfloat16"
