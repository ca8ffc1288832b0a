"""The target's passes against memory: weight bytes, effective and read bandwidth, the row fields made of them,
the summary's lines, and the cost probe's figures (kernels/bandwidth.py, measure/costs.py, report/bandwidth.py).

No assertion compares two timings: the measured figures are only checked to be there, positive and finite.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from factory import case_result, tiny_model

import pytest_specbench.kernels.verify_forms as verify_forms_module
from pytest_specbench.engine.cost_probe import own_kernel_step_costs
from pytest_specbench.engine.drafters import ModelDrafter
from pytest_specbench.kernels import bandwidth, few_rows
from pytest_specbench.kernels.bandwidth import effective_gbps, memory_read_gbps, weight_bytes
from pytest_specbench.measure.costs import CostProfile, bandwidth_fields, cost_model_fields, measure_costs
from pytest_specbench.report.bandwidth import bandwidth_lines
from pytest_specbench.report.summary import summary_lines

PROMPT = torch.tensor([[5, 17, 33, 9, 60, 2, 41]])


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


# --- weight bytes, effective and read bandwidth --------------------------------------------------------------


def test_weight_bytes_count_tied_weights_once():
    tied = tiny_model("gpt2")
    head = tied.get_output_embeddings().weight
    assert head is tied.get_input_embeddings().weight
    every_name = _bytes(tied.state_dict(keep_vars=True).values())  # the tied matrix under both of its names
    assert weight_bytes(tied) == every_name - _bytes([head]) == _bytes(tied.parameters())
    untied = tiny_model("gpt2", tie_word_embeddings=False)
    table = untied.get_input_embeddings().weight
    assert untied.get_output_embeddings().weight is not table
    # A pass reads the head whole but only its tokens' rows of an input table the head does not share.
    assert weight_bytes(untied) == _bytes(untied.parameters()) - _bytes([table]) == weight_bytes(tied)


def test_weight_bytes_count_buffers_and_the_dtypes_width():
    model = tiny_model("llama")
    buffers = _bytes(model.buffers())
    assert buffers > 0  # the rotary frequencies
    table = model.get_input_embeddings().weight
    unread = [] if table is model.get_output_embeddings().weight else [table]
    assert weight_bytes(model) == _bytes(model.parameters()) + buffers - _bytes(unread)
    gpt2 = tiny_model("gpt2")  # no buffers: bfloat16 halves every byte
    assert weight_bytes(copy.deepcopy(gpt2).to(torch.bfloat16)) * 2 == weight_bytes(gpt2)


def test_effective_bandwidth_is_bytes_over_seconds_in_gb():
    assert effective_gbps(2 * 10**9, 2.0) == pytest.approx(1.0)
    assert effective_gbps(3 * 10**8, 0.01) == pytest.approx(30.0)
    assert effective_gbps(10**9, 0.0) is None
    assert effective_gbps(10**9, -1.0) is None


def test_the_memory_read_is_positive_finite_and_measured_once():
    first = memory_read_gbps("cpu", 1 << 20)
    assert isinstance(first, float) and first > 0 and math.isfinite(first)
    # The same (device, size, threads): the cached figure, not a new timing (which would differ in its last bits).
    hits = bandwidth._read_gbps.cache_info().hits
    assert memory_read_gbps(torch.device("cpu"), 1 << 20) == first
    assert memory_read_gbps("cpu", 1000) == first  # sizes under 1 MiB read 1 MiB
    assert bandwidth._read_gbps.cache_info().hits == hits + 2
    fresh = memory_read_gbps("cpu", 1 << 20, fresh=True)
    assert fresh > 0 and math.isfinite(fresh)
    assert bandwidth._read_gbps.cache_info().hits == hits + 2  # a fresh read neither reads nor fills the cache


def test_the_read_is_the_fastest_of_the_reads_timed(monkeypatch: pytest.MonkeyPatch):
    # Which reduction reads fastest depends on the CPU: one held back must not set the figure. The clock moves
    # only as the reads say, so the machine's load cannot change the figures.
    elapsed = [0.0]

    class Clock:
        def __init__(self, device: str) -> None:
            pass

        def now(self) -> float:
            return elapsed[0]

    def read_taking(seconds: float):
        def read(buffer: torch.Tensor) -> None:
            elapsed[0] += seconds

        return read

    monkeypatch.setattr(bandwidth, "DeviceClock", Clock)
    monkeypatch.setattr(bandwidth, "_READS", {"slow": read_taking(0.05), "fast": read_taking(0.001)})
    assert memory_read_gbps("cpu", 1 << 20, fresh=True) == pytest.approx((1 << 20) / 0.001 / 1e9)
    monkeypatch.setattr(bandwidth, "_READS", {"slow": read_taking(0.05)})
    assert memory_read_gbps("cpu", 1 << 20, fresh=True) == pytest.approx((1 << 20) / 0.05 / 1e9)


def _caches(root, cpu: int, *described: tuple[str, str, str]):
    """``root`` described as the kernel does, CPU ``cpu`` with caches of (type, size, the CPUs that share it)."""
    for number, (kind, size, shared) in enumerate(described):
        index = root / f"cpu{cpu}" / "cache" / f"index{number}"
        index.mkdir(parents=True)
        (index / "type").write_text(kind + "\n")
        (index / "size").write_text(size + "\n")
        (index / "shared_cpu_list").write_text(shared + "\n")
    return root


def test_the_last_level_cache_is_the_largest_data_or_unified_one_each_instance_once(tmp_path, monkeypatch):
    monkeypatch.setattr(bandwidth, "CPU_ROOT", tmp_path)
    for cpu in (0, 1):
        own = str(cpu)
        _caches(tmp_path, cpu, ("Data", "48K", own), ("Instruction", "64M", own), ("Unified", "1024K", own))
    for cpu, complex_ in ((0, "0-1"), (1, "0-1"), (2, "2-3"), (3, "2-3")):
        index = tmp_path / f"cpu{cpu}" / "cache" / "index3"
        if cpu >= 2:
            _caches(tmp_path, cpu, ("Data", "48K", str(cpu)))
            index = tmp_path / f"cpu{cpu}" / "cache" / "index1"
        index.mkdir(parents=True)
        (index / "type").write_text("Unified\n")
        (index / "size").write_text("32768K\n")
        (index / "shared_cpu_list").write_text(complex_ + "\n")
    assert bandwidth.last_level_cache_bytes([0, 1]) == 32 << 20  # two CPUs, one complex: its cache once
    assert bandwidth.last_level_cache_bytes([0, 1, 2, 3]) == 64 << 20  # two complexes: both caches
    assert bandwidth.last_level_cache_bytes([7]) is None  # a CPU not described


def test_a_cpu_reads_a_buffer_sized_by_its_cache_not_by_the_weights(tmp_path, monkeypatch: pytest.MonkeyPatch):
    # A buffer as large as the weights doubled a run's peak memory for the second it was read.
    monkeypatch.setattr(bandwidth, "CPU_ROOT", tmp_path)
    monkeypatch.setattr(bandwidth.os, "sched_getaffinity", lambda pid: {0})
    _caches(tmp_path, 0, ("Unified", "32768K", "0"))
    assert bandwidth.read_buffer_bytes("cpu", 3 << 30) == 256 << 20  # eight times the cache
    assert bandwidth.read_buffer_bytes("cpu", 100 << 20) == 100 << 20  # never more than the weights
    assert bandwidth.read_buffer_bytes("cpu", 1000) == 1 << 20
    assert bandwidth.read_buffer_bytes("meta", 3 << 30) == bandwidth.MAX_BUFFER_BYTES  # a GPU's memory: as before
    monkeypatch.setattr(bandwidth, "CPU_ROOT", _caches(tmp_path / "small", 0, ("Unified", "2048K", "0")))
    assert bandwidth.read_buffer_bytes("cpu", 3 << 30) == bandwidth.CPU_MIN_BUFFER_BYTES
    monkeypatch.setattr(bandwidth, "CPU_ROOT", tmp_path / "absent")  # no description: the largest buffer
    assert bandwidth.read_buffer_bytes("cpu", 3 << 30) == bandwidth.MAX_BUFFER_BYTES


def test_a_packed_module_without_a_bias_counts_its_weight(monkeypatch):
    # torch.ao quantises embeddings too: a packed module need not have a bias to unpack.
    quantised = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(torch.nn.Linear(8, 4, bias=False)))
    assert bandwidth.packed_bytes(quantised) == 32  # int8: a byte a weight, no bias
    assert bandwidth.packed_bytes(quantised) == 32  # read once, the same
    embedding = torch.ao.quantization.quantize_dynamic(
        torch.nn.Sequential(torch.nn.Embedding(10, 8)),
        {torch.nn.Embedding: torch.ao.quantization.float_qparams_weight_only_qconfig},
    )
    assert bandwidth.packed_bytes(embedding) == 80  # a quantised embedding has a weight and no bias to ask for


# --- the row fields ------------------------------------------------------------------------------------------


def _costs(**fields) -> CostProfile:
    values = dict(
        verify_costs_s=[0.010, 0.0125, 0.016],  # v(1), v(2), v(3)
        draft_token_s=0.001,
        column_head_rows=[],
        weight_bytes=2 * 10**8,
        memory_read_gbps=40.0,
        own_step_s=0.03,
        engine_step_s=0.012,
        few_rows_kernel="built",
    )
    return CostProfile(**{**values, **fields})


def test_the_rows_bandwidth_fields_come_from_the_probe():
    costs = _costs()
    fields = bandwidth_fields("native", costs, 2)
    assert fields["memory_read_gbps"] == 40.0 and fields["few_rows_kernel"] == "built"
    assert fields["one_row_gbps"] == pytest.approx(2e8 / 0.010 / 1e9) == pytest.approx(20.0)
    assert fields["verify_pass_gbps"] == pytest.approx(2e8 / 0.016 / 1e9)  # v(k + 1) at k = 2
    assert bandwidth_fields("native", costs, 1)["verify_pass_gbps"] == pytest.approx(2e8 / 0.0125 / 1e9)
    assert fields["kernel_step_gain"] == pytest.approx(0.03 / 0.012)
    # k beyond the curve, or a schedule's: no verify pass of that size was timed
    for k in (3, 8, "auto"):
        other = bandwidth_fields("native", costs, k)
        assert "verify_pass_gbps" not in other and other["one_row_gbps"] == pytest.approx(20.0)
    # Not measured: no figure, not a zero.
    bare = bandwidth_fields(
        "native", _costs(weight_bytes=None, own_step_s=None, engine_step_s=None, few_rows_kernel=""), 2
    )
    assert bare == {"memory_read_gbps": 40.0, "few_rows_kernel": "", "weight_pages": "", "kernel_forms": ""}
    assert bandwidth_fields("native", _costs(forms_digest="0123456789ab/-"), 2)["kernel_forms"] == "0123456789ab/-"
    assert bandwidth_fields("native", _costs(weight_pages="2 MB pages: 1.00 of 1.00 GB"), 2)["weight_pages"] == (
        "2 MB pages: 1.00 of 1.00 GB"
    )
    assert "kernel_step_gain" not in bandwidth_fields("native", _costs(engine_step_s=None), 2)


def test_only_the_native_engines_rows_carry_the_bandwidth_fields():
    # transformers' loop runs its own kernels: the probe's figures describe the native engine's passes only.
    for engine in ("hf", "vllm"):
        assert bandwidth_fields(engine, _costs(), 2) == {}
    assert bandwidth_fields("native", None, 2) == {}
    fields = bandwidth_fields("native", _costs(), 2)
    assert not set(fields) & set(cost_model_fields(2, [0, 2, 2], [0, 1, 2], _costs(), 1.5))  # one source each
    row = case_result(**fields)
    assert row.verify_pass_gbps == pytest.approx(12.5) and row.few_rows_kernel == "built"


# --- the summary's lines -------------------------------------------------------------------------------------

HEADER = "target passes against memory (weight bytes over the probe's pass time, medians of the cases):"
GAIN = "transformers' own one-row step {gain}x the engine's (kernels on both sides of each speedup, so in none)"


def _row(k, dtype="float32", engine="native", **fields):
    return case_result(case=f"tiny-{engine}-k{k}-{dtype}", k=k, dtype=dtype, engine=engine, **fields)


def test_the_bandwidth_lines_set_each_pass_beside_the_memory_read():
    rows = [
        _row(1, "bfloat16", one_row_gbps=3.0, few_rows_kernel="built"),  # no read measured: no shares
        _row(1, memory_read_gbps=20.0, one_row_gbps=10.0, verify_pass_gbps=8.0, kernel_step_gain=1.5),
        _row(4, memory_read_gbps=20.0, one_row_gbps=10.0, verify_pass_gbps=5.0, kernel_step_gain=1.5),
        _row(4, memory_read_gbps=20.0, one_row_gbps=10.0, verify_pass_gbps=7.0, kernel_step_gain=1.5),
        _row("auto", memory_read_gbps=20.0, one_row_gbps=10.0, kernel_step_gain=1.5),
        # transformers' loop: not the engine's kernels, left out
        _row(4, engine="hf", memory_read_gbps=99.0, one_row_gbps=99.0, verify_pass_gbps=99.0, kernel_step_gain=9.0),
    ]
    assert bandwidth_lines(rows) == [
        HEADER,
        "  float32: memory read 20.0 GB/s; one-row step 10.0 GB/s (50%); verify pass 8.0 GB/s (40%) at k=1 "
        "to 6.0 GB/s (30%) at k=4; " + GAIN.format(gain="1.50"),
        "  bfloat16: memory read not measured; one-row step 3.0 GB/s",
    ]
    one_k = bandwidth_lines([_row(2, memory_read_gbps=20.0, one_row_gbps=10.0, verify_pass_gbps=10.0)])
    assert one_k == [
        HEADER,
        "  float32: memory read 20.0 GB/s; one-row step 10.0 GB/s (50%); verify pass 10.0 GB/s (50%) at k=2",
    ]


def test_a_few_rows_kernel_that_did_not_run_is_named():
    reason = "could not build the few-rows kernel (OSError: ninja not found)"
    rows = [
        _row(1, few_rows_kernel=reason),
        _row(4, few_rows_kernel=reason),
        _row(2, few_rows_kernel="built"),
        _row(3, few_rows_kernel=""),
        _row(4, engine="hf", few_rows_kernel="an hf row's reason is not the engine's"),
    ]
    # No pass figures: no header, only the kernel's line, once.
    assert bandwidth_lines(rows) == [f"few-rows kernel not used: {reason}; torch's own kernels ran"]
    assert bandwidth_lines([_row(1, few_rows_kernel="built"), _row(2)]) == []
    with_figures = bandwidth_lines([*rows, _row(1, one_row_gbps=10.0)])
    assert with_figures[0] == HEADER and with_figures[-1].startswith("few-rows kernel not used: could not build")
    assert f"few-rows kernel not used: {reason}; torch's own kernels ran" in summary_lines(rows)


def test_amx_tiles_that_did_not_run_on_a_cpu_with_them_are_named_once():
    without = (
        "built specbench_few_rows_0123456789abcdef, without AMX tiles: built for x86-64-v3 (ATEN_CPU_CAPABILITY=avx2)"
    )
    rows = [_row(1, few_rows_kernel=without), _row(2, few_rows_kernel=without), _row(2, few_rows_kernel="built x")]
    assert bandwidth_lines(rows) == [
        "few-rows kernel ran without AMX tiles: built for x86-64-v3 (ATEN_CPU_CAPABILITY=avx2); "
        "its dot products ran in their place"
    ]
    assert bandwidth_lines([_row(1, few_rows_kernel="built specbench_few_rows_0123456789abcdef")]) == []


def test_a_cpu_with_amx_records_why_its_tiles_did_not_run(monkeypatch):
    if few_rows.kernel() is None:
        pytest.skip(f"the few-rows kernel is not built here: {few_rows.unavailable_reason()}")
    monkeypatch.setattr(few_rows, "cpu_flags", lambda info: {"avx512f", "amx_tile", "amx_bf16"})
    monkeypatch.setattr(few_rows.kernel(), "tiles_available", lambda: False, raising=False)
    state = few_rows.recorded_state()
    assert state.startswith(few_rows.identity() + ", without AMX tiles: ")
    monkeypatch.setattr(few_rows, "cpu_flags", lambda info: {"avx512f"})
    assert few_rows.recorded_state() == few_rows.identity()  # no AMX: nothing is missing


def test_weights_in_small_pages_are_named_once_and_large_pages_say_nothing():
    small = "4 KB pages: transparent huge pages are never on this system (/sys/kernel/mm/transparent_hugepage/enabled)"
    rows = [
        _row(1, weight_pages=small),
        _row(2, weight_pages=small),
        _row(2, weight_pages="2 MB pages: 1.05 of 1.05 GB"),
        _row(4, engine="hf", weight_pages="4 KB pages: an hf row's pages are not the engine's"),
    ]
    assert bandwidth_lines(rows) == [f"target weights in {small}"]
    assert bandwidth_lines([_row(1, weight_pages="2 MB pages: 1.05 of 1.05 GB"), _row(2)]) == []


# --- the cost probe ------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("one_torch_thread")
def test_the_one_row_step_is_timed_in_the_engines_forms_and_in_the_models_own(monkeypatch):
    target = tiny_model("llama")
    column_rows = []
    real = verify_forms_module.column_logits

    def column(head, hidden):
        column_rows.append(hidden.numel() // hidden.shape[-1])
        return real(head, hidden)

    monkeypatch.setattr(verify_forms_module, "column_logits", column)
    engine_s, own_s = own_kernel_step_costs(target, PROMPT, "column", repeats=2)
    assert engine_s > 0 and own_s > 0 and math.isfinite(engine_s) and math.isfinite(own_s)
    assert column_rows == [1] * 3  # the engine's half only, warm-up round included; the own half left alone
    assert not any("forward" in vars(module) for module in target.modules())


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("kernels", ["auto", "linear", "column"])
def test_the_cost_profile_has_the_bandwidth_figures(kernels):
    target, draft = tiny_model("llama"), tiny_model("llama", seed=1)
    profile = measure_costs(target, ModelDrafter(draft), PROMPT, 2, kernels=kernels)
    assert profile.weight_bytes == weight_bytes(target) > 0
    assert profile.memory_read_gbps > 0 and math.isfinite(profile.memory_read_gbps)
    assert profile.memory_read_gbps == memory_read_gbps(target.device, profile.weight_bytes)  # measured once
    if kernels == "linear":  # both sides are the model's own: nothing to time, no kernel wanted
        assert profile.own_step_s is None and profile.engine_step_s is None
        assert profile.few_rows_kernel == ""
    else:
        assert profile.own_step_s > 0 and profile.engine_step_s > 0
        # auto may choose the few-rows kernel on CPU; a forced column form never does
        kernel_state = few_rows.recorded_state()
        assert profile.few_rows_kernel == (kernel_state if kernels == "auto" else "")
        # A target no layer of which the kernel computes wants no kernel, built or not.
        half = measure_costs(target.to(torch.float16), ModelDrafter(draft.to(torch.float16)), PROMPT, 2, kernels)
        assert half.few_rows_kernel == ""
    fields = bandwidth_fields("native", profile, 1)
    assert fields["one_row_gbps"] == pytest.approx(profile.weight_bytes / profile.verify_costs_s[0] / 1e9)
    assert fields["verify_pass_gbps"] == pytest.approx(profile.weight_bytes / profile.verify_costs_s[1] / 1e9)
    assert ("kernel_step_gain" in fields) == (kernels != "linear")
