"""Every model in the loop on one kernel setting, and predictions held to the bound speedup <= tau (issue 67): the
draft model's forms in the cost probe and in a row, its share of the read bandwidth in the summary, a probe curve
that dips probed again, and a prediction the bound forbids flagged with its cause, not kept as a figure."""

from __future__ import annotations

import pytest
import torch
from factory import case_result, tiny_model

from pytest_specbench.engine.cost_model import CURVE_FLOOR, curve_dip, lowest_ratio
from pytest_specbench.engine.decoding import greedy_generate, speculative_generate
from pytest_specbench.engine.derived_models import int8_copy
from pytest_specbench.engine.drafters import ModelDrafter, PromptLookupDrafter
from pytest_specbench.kernels.verify_forms import KernelForms, draft_kernel_forms
from pytest_specbench.measure import costs as costs_module
from pytest_specbench.measure.costs import (
    PROBE_TRIES,
    CostProfile,
    bandwidth_fields,
    cost_model_fields,
    measure_costs,
    prediction_fault,
)
from pytest_specbench.report.bandwidth import bandwidth_lines
from pytest_specbench.report.summary import FAULTS_NAMED, _prediction_fault_lines

PROMPT = torch.tensor([[5, 17, 33, 9, 60]])


def test_the_lowest_ratio_and_the_dip_name_the_pass_and_its_figure():
    assert lowest_ratio([10.0, 11.0, 9.5, 12.0]) == (3, pytest.approx(0.95))
    assert lowest_ratio([10.0, 11.0, 9.5, 12.0], longest=2) == (2, pytest.approx(1.1))
    assert lowest_ratio([10.0]) == (1, 1.0)
    assert curve_dip([10.0, 11.0, 9.5]) == ""  # 0.95: noise within the floor
    dip = curve_dip([10.0, 8.0, 12.0])
    assert "v(2)/v(1) = 0.80" in dip and f"{CURVE_FLOOR:.2f}" in dip and "2-row pass cheaper" in dip
    assert curve_dip([10.0, 12.0, 8.0], longest=2) == ""  # past the run's widest pass: not its fault


def test_a_prediction_the_bound_forbids_is_flagged_with_its_cause():
    honest = [10.0, 10.5, 11.0, 11.5]
    assert prediction_fault(2.5, 2.8, honest, 4) is None
    assert prediction_fault(2.8, 2.8, honest, 4) is None  # at the bound: allowed
    # A curve that dips past the floor: the probe's fault, whatever the prediction.
    assert prediction_fault(2.5, 2.8, [10.0, 7.0, 11.0, 11.5], 4) == (
        "the probe's v(2)/v(1) = 0.70, below 0.90: a 2-row pass cheaper than a one-row step"
    )
    # Above the run's tau: named with the curve's lowest ratio.
    cause = prediction_fault(3.0, 2.8, [10.0, 9.5, 11.0], 3)
    lowest = "the probe's lowest v(m)/v(1) up to v(3) is v(2)/v(1) = 0.95"
    assert cause == f"predicted speedup 3.00 above the run's tau 2.80: {lowest}"


def test_a_flagged_prediction_keeps_no_predicted_speedup_and_no_efficiency():
    drafted, accepted = [0, 2, 2, 2], [0, 2, 2, 2]  # alpha 1: tau 3 every step
    honest = cost_model_fields(2, drafted, accepted, CostProfile([0.010, 0.011, 0.012], 0.0, []), 2.4, tau=3.0)
    assert honest["prediction_fault"] is None and honest["predicted_speedup"] == pytest.approx(3 / 1.2)
    assert honest["efficiency"] == pytest.approx(2.4 / (3 / 1.2))
    # A planted probe fault: the 3-row pass measured at 0.6 of the one-row step.
    faulty = cost_model_fields(2, drafted, accepted, CostProfile([0.010, 0.011, 0.006], 0.0, []), 2.4, tau=3.0)
    assert faulty["predicted_speedup"] is None and faulty["efficiency"] is None
    assert "v(3)/v(1) = 0.60" in faulty["prediction_fault"]
    assert faulty["predicted_tau"] == pytest.approx(3.0)  # what the model said stays, apart from the figure


def test_a_pass_measured_a_little_below_a_one_row_step_is_priced_as_one():
    """Prompt lookup costs nothing to draft: with v(2) measured at 0.99 of v(1) (the probe's noise, within the floor)
    a step would be priced below the greedy token it replaces and the prediction pass tau, as 22 of the default run's
    rows did before the curve was bounded. Priced at v(1), the prediction meets tau, and nothing is flagged."""
    drafted, accepted = [0, 1, 1, 1, 1], [0, 1, 1, 1, 1]  # every one-token proposal accepted: tau 2
    fields = cost_model_fields(1, drafted, accepted, CostProfile([0.0100, 0.0099], 0.0, []), 1.9, tau=2.0)
    assert fields["prediction_fault"] is None and fields["predicted_speedup"] == pytest.approx(2.0)
    assert fields["efficiency"] == pytest.approx(0.95)
    assert fields["verify_cost_ratio"] == pytest.approx(0.99)  # the row still shows what the probe measured


def test_a_curve_that_dips_is_probed_again_and_kept_with_its_fault_when_it_always_does(monkeypatch):
    target = tiny_model("llama")
    curves = iter([[0.010, 0.007], [0.010, 0.0105]])
    calls = []

    def probe(*args, **kwargs):
        calls.append(1)
        return next(curves)

    monkeypatch.setattr(costs_module, "verify_costs", probe)
    profile = measure_costs(target, PromptLookupDrafter(), PROMPT, 2, kernels="linear")
    assert len(calls) == 2 and profile.verify_costs_s == [0.010, 0.0105]
    calls.clear()
    always = iter([[0.010, 0.006], [0.010, 0.008], [0.010, 0.007]])
    monkeypatch.setattr(costs_module, "verify_costs", lambda *a, **k: calls.append(1) or next(always))
    profile = measure_costs(target, PromptLookupDrafter(), PROMPT, 2, kernels="linear")
    assert len(calls) == PROBE_TRIES and profile.verify_costs_s == [0.010, 0.008]  # the try that dipped least
    # a row priced on it is flagged, its prediction no figure
    fields = cost_model_fields(1, [0, 1, 1], [0, 1, 1], profile, 1.8, tau=2.0)
    assert (
        fields["prediction_fault"]
        == "the probe's v(2)/v(1) = 0.80, below 0.90: a 2-row pass cheaper than a one-row step"
    )
    assert fields["predicted_speedup"] is None


@pytest.mark.usefixtures("one_torch_thread")
def test_under_auto_the_row_describes_the_draft_forms_the_probe_settled_and_timed(monkeypatch):
    from pytest_specbench.kernels import verify_forms

    # Each group settles on its last applicable form (the head: column), so that an unsettled object would differ.
    monkeypatch.setattr(verify_forms, "_fastest", lambda layers, forms, rows: forms[-1])
    target, draft = tiny_model("llama"), tiny_model("llama", seed=1)
    profile = measure_costs(target, ModelDrafter(draft), PROMPT, 2, kernels="auto")  # draft_kernels: the target's
    assert profile.draft_forms.endswith("column in the head")
    settled = KernelForms(draft, "auto")
    settled.settle(2)
    assert profile.draft_forms == settled.described(1)
    # A draft that is its target: the target's own forms, one object, its layers patched once.
    forms = KernelForms(target, "auto")
    assert draft_kernel_forms(target, None, forms, 2) is forms
    assert draft_kernel_forms(None, None, forms, 2) is None
    assert draft_kernel_forms(draft, "linear", forms, 2).kernel == "linear"
    result = speculative_generate(target, target, PROMPT, 2, 6, kernels=forms)
    assert result.token_ids == greedy_generate(target, PROMPT, 6, kernels="linear").token_ids


@pytest.mark.usefixtures("one_torch_thread")
def test_the_probe_records_the_draft_models_forms_and_its_bytes():
    target, draft = tiny_model("llama"), tiny_model("llama", seed=1)
    profile = measure_costs(target, ModelDrafter(draft), PROMPT, 2, kernels="column")
    assert profile.draft_forms.endswith("column in the head") and profile.draft_weight_bytes > 0
    fields = bandwidth_fields("native", profile, 1)
    assert fields["draft_kernel_forms"] == profile.draft_forms
    assert fields["draft_one_row_gbps"] == pytest.approx(profile.draft_weight_bytes / profile.draft_token_s / 1e9)
    assert measure_costs(target, PromptLookupDrafter(), PROMPT, 2, kernels="column").draft_forms == ""
    # A dynamic int8 copy: no layer the engine's forms serve, and the row says so.
    quantised = measure_costs(target, ModelDrafter(int8_copy(target)), PROMPT, 2, kernels="auto")
    assert quantised.draft_forms.startswith("own: no plain float linear layer (")
    # --specbench-kernels=linear: both models on their own kernels.
    assert measure_costs(target, ModelDrafter(draft), PROMPT, 2, kernels="linear").draft_forms.startswith(
        "own: --specbench-kernels=linear"
    )


def test_the_summary_sets_the_drafts_step_beside_the_targets_and_names_a_draft_on_its_own_kernels():
    rows = [
        case_result(engine="native", pair="p", memory_read_gbps=40.0, one_row_gbps=32.0, draft_one_row_gbps=30.0),
        case_result(engine="native", pair="p", memory_read_gbps=40.0, one_row_gbps=32.0, draft_one_row_gbps=31.0),
        case_result(engine="native", pair="q", memory_read_gbps=40.0, one_row_gbps=32.0, draft_one_row_gbps=20.0),
        case_result(
            engine="native",
            memory_read_gbps=40.0,
            one_row_gbps=32.0,
            draft_kernel_forms="own: no plain float linear layer (DynamicQuantizedLinear), so its layers ran their "
            "own kernels",
        ),
    ]
    lines = bandwidth_lines(rows)
    assert "one-row step 32.0 GB/s (80%); p's draft model's one-row step 30.5 GB/s (76%)" in lines[1]
    named = "draft model's layers: no plain float linear layer (DynamicQuantizedLinear)"
    assert any(line.startswith(named) for line in lines)
    # No draft figure: no draft part (prompt lookup, or a row from before the draft had forms).
    assert "q's draft model's one-row step 20.0 GB/s (50%)" in lines[1]  # each pair's apart
    assert "draft model" not in bandwidth_lines(rows[3:4])[1]


def test_the_summary_counts_the_flagged_predictions_and_names_the_first():
    assert _prediction_fault_lines([case_result(prediction_fault=None)]) == []
    flagged = [case_result(case=f"p-k{k}-natural", prediction_fault=f"cause {k}") for k in range(FAULTS_NAMED + 2)]
    lines = _prediction_fault_lines(flagged)
    assert lines[0].startswith(f"{FAULTS_NAMED + 2} prediction(s) flagged, not figures")
    assert lines[1] == "  p-k0-natural: cause 0" and len(lines) == 1 + FAULTS_NAMED + 1
    assert lines[-1] == "  and 2 more (the JSON's prediction_fault)"


@pytest.mark.usefixtures("one_torch_thread")
def test_a_row_records_the_few_rows_build_a_draft_ran_where_its_target_had_no_use_for_it():
    from pytest_specbench.kernels import few_rows

    target, draft = tiny_model("llama").to(torch.float16), tiny_model("llama", seed=1)  # the kernel: no float16
    profile = measure_costs(target, ModelDrafter(draft), PROMPT, 2, kernels="auto")
    # the draft's build, which resume and compare then check as they check a target's
    assert profile.few_rows_kernel == few_rows.recorded_state()
    assert measure_costs(target, PromptLookupDrafter(), PROMPT, 2, kernels="auto").few_rows_kernel == ""


def test_a_truncated_draft_is_moved_into_the_pages_its_target_is_in():
    from pytest_specbench.cases.drafter_kinds import KINDS
    from pytest_specbench.models.loading import LoadedModel
    from pytest_specbench.models.weight_pages import pages_of

    class Pair:
        name, target, draft, drafter, drafter_options, cross_tokenizer = "p", "t", None, "truncated", (), False
        options = {"num_layers": 1}

    target = LoadedModel(tiny_model("llama"), None, "t", 0.0, "local")
    drafter = KINDS["truncated"].build(Pair(), target, None)
    assert pages_of(drafter.model).startswith(("2 MB pages", "4 KB pages: "))  # asked for: what it got, or why not
    assert pages_of(target.model) == ""  # a copy: the target is left as it was


def test_a_dynamic_int8_copys_packed_weights_count_one_byte_each():
    from pytest_specbench.kernels.bandwidth import weight_bytes

    target = tiny_model("llama")
    linears = [module for module in target.modules() if isinstance(module, torch.nn.Linear)]
    packed = sum(layer.weight.numel() for layer in linears)  # int8: a byte a weight
    quantised = int8_copy(target)
    floats = weight_bytes(target) - sum(layer.weight.numel() * 4 for layer in linears)  # norms, biases, the rest
    assert weight_bytes(quantised) >= packed + floats - 4 * sum(layer.out_features for layer in linears)
    assert weight_bytes(quantised) < weight_bytes(target)


def test_a_conversations_later_prefill_counts_one_token_as_it_is_priced_one_plain_step():
    # Two turns: the second turn's prefill sits in the step lists as a step that drafted nothing (0, 0). The run's
    # tau (9 tokens over 3 decode steps) leaves it out; the prediction prices it as a plain step and counts the one
    # token it is priced for, not tau's 3: 10 tokens over 4 steps of v(1) each.
    drafted, accepted = [0, 2, 2, 0, 2], [0, 2, 2, 0, 2]
    fields = cost_model_fields(2, drafted, accepted, CostProfile([0.010, 0.010, 0.010], 0.0, []), 2.4, tau=3.0)
    assert fields["predicted_speedup"] == pytest.approx(10 / 4) and fields["prediction_fault"] is None
