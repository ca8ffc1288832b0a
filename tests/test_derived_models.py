"""Derived draft models: truncated_copy and int8_copy, and their losslessness as drafts."""

from __future__ import annotations

import pytest
import torch
from factory import NEW_TOKENS, REPETITIVE_PROMPT, tiny_model, word_gpt2
from torch import nn
from transformers import PreTrainedModel

from pytest_specbench import greedy_generate, speculative_generate
from pytest_specbench.engine.derived_models import (
    Int8WeightOnlyLinear,
    UnsupportedArchitecture,
    int8_copy,
    transformer_layers,
    truncated_copy,
)

#: config overrides per architecture: more layers than the factory's two, so there is something to cut
DEEPER = {
    "llama": dict(num_hidden_layers=3),
    "gemma3": dict(
        num_hidden_layers=4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    ),
    "gpt_neox": dict(num_hidden_layers=3),
}


def deeper_model(arch: str) -> PreTrainedModel:
    return tiny_model(arch, **DEEPER[arch])


@pytest.mark.slow
def test_bare_derived_models_work_as_drafts(gpt2_target, repetitive_prompt, gpt2_reference):
    # speculative_generate wraps a bare model in ModelDrafter itself.
    for draft in (truncated_copy(gpt2_target, 1), int8_copy(gpt2_target)):
        assert torch.equal(
            speculative_generate(gpt2_target, draft, repetitive_prompt, k=4, max_new_tokens=NEW_TOKENS).sequences,
            gpt2_reference,
        )


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(DEEPER))
def test_truncated_drafts_of_other_architectures_are_lossless(arch):
    model = deeper_model(arch)
    ids = torch.tensor([REPETITIVE_PROMPT])
    expected = greedy_generate(model, ids, 24).token_ids
    draft = truncated_copy(model, 2)
    assert speculative_generate(model, draft, ids, k=4, max_new_tokens=24).token_ids == expected


# --- truncated_copy ----------------------------------------------------------------


def test_truncated_gpt2_copies_embeddings_first_blocks_norm_and_head(gpt2_target):
    target = gpt2_target
    draft = truncated_copy(target, 1)
    assert type(draft) is type(target)
    assert draft.config.n_layer == 1 and draft.config.num_hidden_layers == 1
    assert len(draft.transformer.h) == 1
    assert len(target.transformer.h) == 2 and target.config.n_layer == 2  # target untouched
    assert torch.equal(draft.transformer.wte.weight, target.transformer.wte.weight)
    assert torch.equal(draft.transformer.wpe.weight, target.transformer.wpe.weight)
    assert torch.equal(draft.transformer.ln_f.weight, target.transformer.ln_f.weight)
    assert torch.equal(draft.lm_head.weight, target.lm_head.weight)
    first_block = dict(target.transformer.h[0].named_parameters())
    for name, param in draft.transformer.h[0].named_parameters():
        assert torch.equal(param, first_block[name]), name
    # Copies, not shared storage.
    assert draft.transformer.wte.weight.data_ptr() != target.transformer.wte.weight.data_ptr()
    assert draft.transformer.h[0].attn.c_attn.weight.data_ptr() != target.transformer.h[0].attn.c_attn.weight.data_ptr()
    assert draft.lm_head.weight.data_ptr() == draft.transformer.wte.weight.data_ptr()  # tying kept


def test_truncated_gemma3_cuts_layer_types():
    model = deeper_model("gemma3")
    draft = truncated_copy(model, 3)
    assert draft.config.num_hidden_layers == 3
    assert draft.config.layer_types == ["sliding_attention", "full_attention", "sliding_attention"]
    assert len(draft.model.layers) == 3 and len(model.model.layers) == 4
    assert torch.equal(draft.model.embed_tokens.weight, model.model.embed_tokens.weight)
    assert torch.equal(draft.model.norm.weight, model.model.norm.weight)
    assert torch.equal(draft.model.layers[0].self_attn.q_proj.weight, model.model.layers[0].self_attn.q_proj.weight)


def test_truncated_llama_and_neox_layer_counts():
    assert truncated_copy(deeper_model("llama"), 1).config.num_hidden_layers == 1
    neox = truncated_copy(deeper_model("gpt_neox"), 2)
    assert neox.config.num_hidden_layers == 2 and len(neox.gpt_neox.layers) == 2


@pytest.mark.parametrize("bad", [0, 3, -1, True, 1.0])
def test_truncated_copy_validates_num_layers(gpt2_target, bad):
    with pytest.raises(ValueError, match="num_layers"):
        truncated_copy(gpt2_target, bad)


def test_truncated_copy_rejects_unknown_architectures():
    with pytest.raises(UnsupportedArchitecture, match="cannot find the decoder blocks"):
        truncated_copy(nn.Sequential(nn.Linear(2, 2)), 1)
    assert issubclass(UnsupportedArchitecture, ValueError)
    assert transformer_layers(deeper_model("llama"))[0] == "model.layers"


# --- int8_copy ---------------------------------------------------------------------


def test_int8_copy_quantises_every_linear_on_cpu(gpt2_target, repetitive_prompt):
    target, prompt = gpt2_target, repetitive_prompt
    draft = int8_copy(target)
    assert isinstance(draft, PreTrainedModel) and not draft.training
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

    kinds = {type(m).__name__ for m in draft.modules()}
    quantised = sum(isinstance(m, DynamicQuantizedLinear) for m in draft.modules())
    assert quantised == 4 * target.config.n_layer + 1  # c_attn, c_proj, c_fc, mlp.c_proj per block + lm_head
    assert "Conv1D" not in kinds  # GPT-2's Conv1D blocks were converted so they are quantised too
    assert "Conv1D" in {type(m).__name__ for m in target.modules()}  # target untouched
    with torch.no_grad():
        close = torch.nn.functional.cosine_similarity(draft(prompt).logits, target(prompt).logits, dim=-1)
    assert close.min() > 0.9


@pytest.mark.filterwarnings("ignore:.*torch.ao.quantization is deprecated")
def test_int8_copy_is_torchs_own_dynamic_quantisation_bit_for_bit(gpt2_target, repetitive_prompt):
    # the copy skips the zero placeholder torch's conversion packs first; the layers it makes must not differ
    import copy

    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

    from pytest_specbench.engine.derived_models import _conv1d_to_linear

    torchs = copy.deepcopy(gpt2_target).float()
    _conv1d_to_linear(torchs)
    torch.ao.quantization.quantize_dynamic(torchs, {nn.Linear}, dtype=torch.qint8, inplace=True)
    ours = int8_copy(gpt2_target)
    pairs = [
        (name, module, dict(torchs.named_modules())[name])
        for name, module in ours.named_modules()
        if isinstance(module, DynamicQuantizedLinear)
    ]
    assert len(pairs) == 4 * gpt2_target.config.n_layer + 1
    for name, mine, theirs in pairs:
        (weight, bias), (their_weight, their_bias) = mine._weight_bias(), theirs._weight_bias()
        assert weight.q_scale() == their_weight.q_scale() and weight.q_zero_point() == their_weight.q_zero_point()
        assert torch.equal(weight.int_repr(), their_weight.int_repr()), name
        assert (bias is None) == (their_bias is None) and (bias is None or torch.equal(bias, their_bias)), name
        assert (mine.in_features, mine.out_features) == (theirs.in_features, theirs.out_features), name
    with torch.no_grad():
        assert torch.equal(ours(repetitive_prompt).logits, torchs(repetitive_prompt).logits)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_copy_holds_the_targets_float32_weights_once_and_leaves_the_target_as_it_was(dtype, repetitive_prompt):
    target = word_gpt2().to(dtype)
    before = {name: parameter.detach().clone() for name, parameter in target.named_parameters()}
    draft = int8_copy(target)
    embedding, target_embedding = draft.transformer.wte.weight, target.transformer.wte.weight
    assert embedding.dtype == torch.float32 and target_embedding.dtype == dtype
    # one tensor where the target's is float32 already; a float32 copy of another dtype's
    assert (embedding.data_ptr() == target_embedding.data_ptr()) == (dtype == torch.float32)
    for name, parameter in target.named_parameters():
        assert parameter.dtype == dtype and torch.equal(parameter, before[name]), name
    with torch.no_grad():
        draft(repetitive_prompt)  # runs: float32 activations throughout


@pytest.mark.slow
def test_int8_copy_falls_back_to_weight_only_without_quantize_dynamic(
    gpt2_target, repetitive_prompt, gpt2_reference, monkeypatch
):
    monkeypatch.delattr(torch.ao.quantization, "quantize_dynamic")
    draft = int8_copy(gpt2_target)
    assert any(isinstance(m, Int8WeightOnlyLinear) for m in draft.modules())
    result = speculative_generate(gpt2_target, draft, repetitive_prompt, k=4, max_new_tokens=NEW_TOKENS)
    assert torch.equal(result.sequences, gpt2_reference)
    assert result.stats.acceptance_rate > 0.3


def test_int8_copy_off_cpu_is_a_half_precision_copy():
    model = word_gpt2().to("meta")  # any non-CPU device takes the accelerator branch
    draft = int8_copy(model)
    assert draft.dtype == torch.float16 and model.dtype == torch.float32
