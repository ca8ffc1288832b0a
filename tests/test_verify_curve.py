"""``python -m pytest_specbench verify-curve`` (pytest_specbench/tools/verify_curve): v(m) per dtype and kernel
form, on a tiny model (its points, its table, its JSON), run through the command line as a user runs it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from factory import tiny_model

from pytest_specbench import cli
from pytest_specbench.tools.verify_curve import command, curve, measure


def test_the_points_divide_by_v1_and_by_float32() -> None:
    # Two rounds per (dtype, form); curves hold v(1) .. v(5).
    samples = {
        ("float32", "own"): [[2.0, 0, 0, 0, 3.0], [4.0, 0, 0, 0, 4.0]],
        ("bfloat16", "own"): [[1.0, 0, 0, 0, 1.0], [1.0, 0, 0, 0, 1.5]],
    }
    points = {(point.dtype, point.m): point for point in curve.curve_rows(samples, [1, 5])}
    assert points["float32", 5].v_s == 3.5 and points["float32", 5].ratio_to_v1 == 1.25  # median of 1.5 and 1.0
    assert (points["float32", 5].ratio_to_v1_low, points["float32", 5].ratio_to_v1_high) == (1.0, 1.5)
    assert points["bfloat16", 5].ratio_to_float32 == pytest.approx(1.25 / 3.5)
    assert points["float32", 1].ratio_to_v1 == 1.0
    alone = curve.curve_rows({("bfloat16", "engine"): [[1.0]]}, [1])
    assert alone[0].ratio_to_float32 is None  # no float32 curve to divide by


def test_the_bandwidth_is_the_weight_bytes_over_v_m() -> None:
    (point,) = curve.curve_rows({("float32", "own"): [[0.5]]}, [1], nbytes={"float32": 10**9}, read_gbps=4.0)
    assert point.gbps == pytest.approx(2.0) and point.read_share == pytest.approx(0.5)
    assert point.to_json()["gbps"] == point.gbps
    assert "2.0" in curve.table([point]) and "50%" in curve.table([point])


def test_the_engine_forms_are_described_as_runs_of_row_counts() -> None:
    chosen = {((300, 48), "float32", True): {2: "own", 3: "rows", 4: "rows", 5: "column"}}

    class Forms:  # what the dtype's KernelForms settled
        def choices(self, max_rows):
            return chosen

    assert curve.engine_forms({"float32": Forms()}, 5) == {"float32": {"head 300x48": "2 own, 3-4 rows, 5 column"}}


def test_v1_is_always_measured() -> None:
    assert command.positions("5,2,5") == [1, 2, 5]
    with pytest.raises(SystemExit, match="positive integers"):
        command.positions("0,3")


def test_a_target_that_cannot_load_is_named_before_any_load(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="'embedded:gemma9' is not an embedded model; available: embedded:gemma3-270m"):
        command.check_target("embedded:gemma9")
    with pytest.raises(SystemExit, match="does not exist"):
        command.check_target(str(tmp_path / "no-such-checkpoint"))


def test_an_unknown_dtype_or_form_is_named() -> None:
    with pytest.raises(SystemExit, match="unknown float8"):
        command.names("float32,float8", ("float32", "bfloat16"), "dtype")
    with pytest.raises(SystemExit, match="unknown hf"):
        command.names("own,hf", list(curve.FORMS), "forms")


@pytest.mark.parametrize(
    "arguments, message",
    [
        ([], "one of the arguments target --tiny is required"),
        (["--tiny", "embedded:gemma3-270m"], "not allowed with"),
        (["--tiny", "--repeats", "0"], "at least 1"),
    ],
)
def test_usage_errors_exit_2_before_anything_loads(arguments, message, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["verify-curve", *arguments])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.slow
def test_the_tiny_run_prints_every_m_and_dtype(tmp_path: Path, capsys) -> None:
    out = tmp_path / "curve.json"
    arguments = ["verify-curve", "--tiny", "--repeats", "2", "--forms", "own,engine", "--json", str(out)]
    assert cli.main(arguments) == 0
    lines = capsys.readouterr().out.splitlines()
    cells = {tuple(line.split()[:3]) for line in lines if line.split()[:1] in (["float32"], ["bfloat16"])}
    dtypes, forms, positions = ("float32", "bfloat16"), ("own", "engine"), (1, 2, 3, 5, 9, 17)
    expected = {(dtype, form, str(m)) for dtype in dtypes for form in forms for m in positions}
    assert cells == expected
    document = json.loads(out.read_text(encoding="utf-8"))
    assert {(row["dtype"], row["form"], str(row["m"])) for row in document["curves"]} == expected
    assert all(row["v_s"] > 0 and row["ratio_to_v1_low"] <= row["ratio_to_v1_high"] for row in document["curves"])
    assert set(document["engine_forms"]) == set(dtypes)
    assert document["native_dtypes"][0] == "float32" and document["native_dtype_facts"]["device_type"] == "cpu"
    # One step per (dtype, form), split into its linear layers and the rest.
    assert set(document["one_row_split"]) == {f"{dtype} {form}" for dtype in dtypes for form in forms}
    for split in document["one_row_split"].values():
        assert 0 < split["linear_s"] < split["step_s"] and split["linear_bytes"] > 0
    assert any(line.startswith("one-row step, float32 engine: ") for line in lines)
    # The widest pass (m = 17) split as the step is: the head within the linear layers, they within the pass;
    # the printed parts add up to what the pass adds.
    widest = document["widest_split"]
    assert widest["m"] == 17 and set(widest["passes"]) == set(document["one_row_split"])
    for split in widest["passes"].values():
        assert 0 < split["head_s"] < split["linear_s"] < split["step_s"]
    added = [line for line in lines if line.startswith("17-position pass, ")]
    assert len(added) == len(dtypes) * len(forms)
    for line in added:
        total, *parts = (float(value) for value in re.findall(r"([+-]\d+\.\d) ", line.partition(" ms, ")[2]))
        assert len(parts) == 3 and abs(sum(parts) - total) <= 0.2
    assert set(document["floors"]) == set(dtypes)
    for floor in document["floors"].values():
        ratios = [floor["ratio"][str(m)] for m in positions]
        assert floor["matmul_gflops"] > 0 and ratios[0] == 1 and ratios == sorted(ratios)
    assert any(line.startswith("floors' v(m)/v(1), bfloat16: ") for line in lines)


def test_one_m_alone_splits_the_step_and_no_wider_pass(tmp_path: Path, capsys) -> None:
    out = tmp_path / "curve.json"
    arguments = ["verify-curve", "--tiny", "--repeats", "1", "--dtype", "float32", "--forms", "own", "--m", "1"]
    assert cli.main([*arguments, "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    document = json.loads(out.read_text(encoding="utf-8"))
    assert set(document["one_row_split"]) == {"float32 own"} and document["widest_split"] is None
    assert any(line.startswith("one-row step, float32 own: ") for line in lines)
    assert not any("-position pass, " in line for line in lines)


def test_a_draft_is_timed_after_the_target_in_the_same_dtypes_and_forms(tmp_path: Path, capsys) -> None:
    out = tmp_path / "curve.json"
    arguments = ["verify-curve", "--tiny", "--draft", "tiny:gemma3", "--repeats", "1", "--m", "1", "--forms"]
    assert cli.main([*arguments, "own,engine", "--dtype", "float32", "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    draft = json.loads(out.read_text(encoding="utf-8"))["draft"]
    assert draft["model"] == "tiny:gemma3" and draft["memory_read_gbps"] > 0 and draft["weight_bytes"]["float32"] > 0
    # its one-row step (a drafted token) and its two-row catch-up, per form, each with its share of the read
    assert {(row["form"], row["m"]) for row in draft["curves"]} == {
        ("own", 1),
        ("own", 2),
        ("engine", 1),
        ("engine", 2),
    }
    assert all(row["v_s"] > 0 and row["gbps"] > 0 for row in draft["curves"])
    assert set(draft["engine_forms"]) == {"float32"}
    at = lines.index(next(line for line in lines if line.startswith("draft tiny:gemma3: memory read ")))
    assert any(line.split()[:3] == ["float32", "engine", "1"] for line in lines[at:])


def test_a_draft_that_cannot_load_is_named_before_any_load(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no-such-draft"):
        cli.main(["verify-curve", "--tiny", "--draft", str(tmp_path / "no-such-draft")])


@pytest.mark.parametrize("tied", [False, True])
def test_the_splits_count_the_time_inside_every_linear_layer_and_the_head_apart(monkeypatch, tied: bool) -> None:
    model = tiny_model("llama", tie_word_embeddings=tied)
    linears = [module for module in model.modules() if isinstance(module, torch.nn.Linear)]
    ticks = iter(range(10**6))
    # A clock that advances one second per read: each linear layer's call spans exactly one second.
    monkeypatch.setattr(measure.DeviceClock, "now", lambda self: float(next(ticks)))
    ids = torch.tensor([[5, 17, 33, 9]])
    assert set(measure.pass_splits(model, ids, "own", widest=1, repeats=1)) == {1}
    passes = measure.pass_splits(model, ids, "own", widest=3, repeats=1)
    assert set(passes) == {1, 3}
    weights = {id(layer.weight): layer.weight for layer in linears}.values()
    for split in passes.values():
        assert split["linear_s"] == len(linears)
        assert split["head_s"] == 1  # the output head, one of them
        assert split["step_s"] == 2 * len(linears) + 1  # the pass's own two reads around the layers' pairs
        assert split["linear_bytes"] == sum(weight.numel() * weight.element_size() for weight in weights)
