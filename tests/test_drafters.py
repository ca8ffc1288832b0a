"""Drafters and derived draft models: behaviour, and losslessness against ``generate``."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from models_factory import build_model
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedModel

from pytest_specbench import greedy_generate, speculative_generate
from pytest_specbench.engine.derived_models import (
    Int8WeightOnlyLinear,
    UnsupportedArchitecture,
    int8_copy,
    transformer_layers,
    truncated_copy,
)
from pytest_specbench.engine.drafters import Drafter, ModelDrafter, PromptLookupDrafter

NEW_TOKENS = 40
# Repeats itself, so that prompt lookup finds n-grams to copy.
REPETITIVE_PROMPT = [5, 6, 7, 8, 9, 10] * 4 + [5, 6]


def tiny_gpt2(seed: int = 0, n_layer: int = 2) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=n_layer, n_embd=64, n_head=4, vocab_size=128, n_positions=256,
        bos_token_id=1, eos_token_id=2, initializer_range=0.5,
    )  # fmt: skip
    model = GPT2LMHeadModel(config).eval()
    model.generation_config.eos_token_id = None  # compare fixed-length outputs
    model.generation_config.pad_token_id = 0
    return model


def tiny_llama() -> PreTrainedModel:
    return build_model("llama", num_hidden_layers=3)


def tiny_gemma3() -> PreTrainedModel:
    return build_model(
        "gemma3", num_hidden_layers=4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    )  # fmt: skip


def tiny_neox() -> PreTrainedModel:
    return build_model("gpt_neox", num_hidden_layers=3)


@pytest.fixture(scope="module")
def target() -> GPT2LMHeadModel:
    return tiny_gpt2()


@pytest.fixture(scope="module")
def prompt() -> torch.Tensor:
    return torch.tensor([REPETITIVE_PROMPT])


@pytest.fixture(scope="module")
def reference(target, prompt) -> torch.Tensor:
    with torch.inference_mode():
        return target.generate(
            prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=NEW_TOKENS
        )


# --- losslessness ------------------------------------------------------------------

DRAFTERS = {
    "truncated": lambda target: ModelDrafter(truncated_copy(target, 1)),
    "int8": lambda target: ModelDrafter(int8_copy(target)),
    "prompt-lookup": lambda target: PromptLookupDrafter(ngram_size=3),
}


@pytest.mark.parametrize("k", [1, 4, 8])
@pytest.mark.parametrize("kind", list(DRAFTERS))
def test_every_drafter_is_lossless(target, prompt, reference, kind, k):
    result = speculative_generate(target, DRAFTERS[kind](target), prompt, k=k, max_new_tokens=NEW_TOKENS)
    assert torch.equal(result.sequences, reference)
    assert result.stats.new_tokens == NEW_TOKENS
    if kind == "prompt-lookup":
        assert result.stats.accepted_tokens > 0
        assert result.stats.draft_forward_passes == 0


def test_bare_derived_models_work_as_drafts(target, prompt, reference):
    # speculative_generate wraps a bare model in ModelDrafter itself.
    for draft in (truncated_copy(target, 1), int8_copy(target)):
        assert torch.equal(
            speculative_generate(target, draft, prompt, k=4, max_new_tokens=NEW_TOKENS).sequences, reference
        )


@pytest.mark.parametrize("build", [tiny_llama, tiny_gemma3, tiny_neox], ids=["llama", "gemma3", "gpt-neox"])
def test_truncated_drafts_of_other_architectures_are_lossless(build):
    model = build()
    ids = torch.tensor([REPETITIVE_PROMPT])
    expected = greedy_generate(model, ids, 24).token_ids
    draft = truncated_copy(model, 2)
    assert speculative_generate(model, draft, ids, k=4, max_new_tokens=24).token_ids == expected


# --- truncated_copy ----------------------------------------------------------------


def test_truncated_gpt2_copies_embeddings_first_blocks_norm_and_head(target):
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
    model = tiny_gemma3()
    draft = truncated_copy(model, 3)
    assert draft.config.num_hidden_layers == 3
    assert draft.config.layer_types == ["sliding_attention", "full_attention", "sliding_attention"]
    assert len(draft.model.layers) == 3 and len(model.model.layers) == 4
    assert torch.equal(draft.model.embed_tokens.weight, model.model.embed_tokens.weight)
    assert torch.equal(draft.model.norm.weight, model.model.norm.weight)
    assert torch.equal(draft.model.layers[0].self_attn.q_proj.weight, model.model.layers[0].self_attn.q_proj.weight)


def test_truncated_llama_and_neox_layer_counts():
    assert truncated_copy(tiny_llama(), 1).config.num_hidden_layers == 1
    neox = truncated_copy(tiny_neox(), 2)
    assert neox.config.num_hidden_layers == 2 and len(neox.gpt_neox.layers) == 2


@pytest.mark.parametrize("bad", [0, 3, -1, True, 1.0])
def test_truncated_copy_validates_num_layers(target, bad):
    with pytest.raises(ValueError, match="num_layers"):
        truncated_copy(target, bad)


def test_truncated_copy_rejects_unknown_architectures():
    with pytest.raises(UnsupportedArchitecture, match="cannot find the decoder blocks"):
        truncated_copy(nn.Sequential(nn.Linear(2, 2)), 1)
    assert issubclass(UnsupportedArchitecture, ValueError)
    assert transformer_layers(tiny_llama())[0] == "model.layers"


# --- int8_copy ---------------------------------------------------------------------


def test_int8_copy_quantises_every_linear_on_cpu(target, prompt):
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


def test_int8_copy_falls_back_to_weight_only_without_quantize_dynamic(target, prompt, reference, monkeypatch):
    monkeypatch.delattr(torch.ao.quantization, "quantize_dynamic")
    draft = int8_copy(target)
    assert any(isinstance(m, Int8WeightOnlyLinear) for m in draft.modules())
    result = speculative_generate(target, draft, prompt, k=4, max_new_tokens=NEW_TOKENS)
    assert torch.equal(result.sequences, reference)
    assert result.stats.acceptance_rate > 0.3


def test_int8_copy_off_cpu_is_a_half_precision_copy():
    model = tiny_gpt2().to("meta")  # any non-CPU device takes the accelerator branch
    draft = int8_copy(model)
    assert draft.dtype == torch.float16 and model.dtype == torch.float32


# --- prompt lookup -------------------------------------------------------------------


def ids(*tokens: int) -> torch.Tensor:
    return torch.tensor([tokens])


def test_prompt_lookup_copies_what_followed_the_most_recent_match():
    drafter = PromptLookupDrafter(ngram_size=2)
    # "1 2" occurs at 0 (followed by 3 4) and at 4 (followed by 9 8); the latter is more recent.
    assert drafter.propose(ids(1, 2, 3, 4, 1, 2, 9, 8, 7, 1, 2), 3).tolist() == [9, 8, 7]
    assert drafter.forward_passes == 0


def test_prompt_lookup_falls_back_to_shorter_ngrams():
    drafter = PromptLookupDrafter(ngram_size=3)
    # No earlier "4 5 6" or "5 6"; the unigram "6" occurred, followed by 7 8.
    assert drafter.propose(ids(6, 7, 8, 4, 5, 6), 2).tolist() == [7, 8]


def test_prompt_lookup_proposes_nothing_without_a_match():
    drafter = PromptLookupDrafter()
    for sequence in [(1,), (1, 2, 3, 4)]:
        proposal = drafter.propose(ids(*sequence), 4)
        assert proposal.numel() == 0 and proposal.dtype == torch.long


def test_prompt_lookup_limits_the_proposal():
    sequence = ids(1, 2, 3, 4, 5, 6, 7, 1, 2)
    assert PromptLookupDrafter(ngram_size=2).propose(sequence, 3).tolist() == [3, 4, 5]
    assert PromptLookupDrafter(ngram_size=2, max_proposal=2).propose(sequence, 3).tolist() == [3, 4]
    # A match near the end has fewer tokens after it than asked for.
    assert PromptLookupDrafter(ngram_size=1).propose(ids(4, 5, 4), 5).tolist() == [5, 4]


@pytest.mark.parametrize(
    "kwargs", [{"ngram_size": 0}, {"ngram_size": 2.0}, {"ngram_size": True}, {"max_proposal": 0}, {"max_proposal": "3"}]
)
def test_prompt_lookup_validates_its_arguments(kwargs):
    with pytest.raises(ValueError):
        PromptLookupDrafter(**kwargs)


class _NeverDrafts(Drafter):
    def propose(self, committed_ids: torch.Tensor, k: int) -> torch.Tensor:
        return torch.empty(0, dtype=torch.long)


def test_engine_takes_a_plain_target_step_on_an_empty_proposal(target, prompt, reference):
    result = speculative_generate(target, _NeverDrafts(), prompt, k=4, max_new_tokens=NEW_TOKENS)
    assert torch.equal(result.sequences, reference)
    assert result.stats.drafted_tokens == 0 and result.stats.steps == NEW_TOKENS
