"""Tiny, randomly initialised causal LMs for the engine's tests.

No weights are downloaded: every model is built from a config in-process,
seeded, in float32 and in eval mode. All architectures share one vocabulary
and one set of special-token ids, so any target can be paired with any draft.

The initialiser range is large on purpose: logits then spread over several
units, so the greedy argmax has a clear margin over the runner-up and the
tiny float32 differences between a multi-token verify pass and one-token
passes cannot flip a token.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
)

VOCAB_SIZE = 96
PAD_TOKEN_ID = 0
BOS_TOKEN_ID = 1
EOS_TOKEN_ID = 2
#: sliding window of the Gemma 3 and Mistral models; prompts and generations run past it
SLIDING_WINDOW = 8
MAX_POSITIONS = 256

#: relative weight noise of the default draft: acceptance ~0.3-0.7 at k=4, lower at k=16
DRAFT_NOISE = 0.02

ARCHITECTURES: tuple[str, ...] = ("gpt2", "llama", "gpt_neox", "gemma3", "mistral")

_SPECIAL = dict(
    vocab_size=VOCAB_SIZE,
    pad_token_id=PAD_TOKEN_ID,
    bos_token_id=BOS_TOKEN_ID,
    eos_token_id=EOS_TOKEN_ID,
)

_LAYERS = dict(
    num_hidden_layers=2,
    hidden_size=48,
    intermediate_size=96,
    num_attention_heads=4,
    max_position_embeddings=MAX_POSITIONS,
    initializer_range=0.5,
)

# Per architecture: model class, config class, config kwargs, default seed.
# Seeds picked so greedy outputs of the test prompts are varied and have
# top-2 logit margins of at least ~5e-3 (float32 noise is ~1e-6).
_ARCHS: dict[str, tuple[type[PreTrainedModel], type[PretrainedConfig], dict, int]] = {
    "gpt2": (
        GPT2LMHeadModel,
        GPT2Config,
        # GPT-2 has no pad token; a pad id in its config makes forward() warn
        # whenever a generated token equals it, so only generate() gets one.
        dict(n_layer=2, n_embd=48, n_head=4, n_positions=MAX_POSITIONS, initializer_range=0.5, pad_token_id=None),
        0,
    ),
    "llama": (LlamaForCausalLM, LlamaConfig, dict(_LAYERS, num_key_value_heads=2), 2),
    "gpt_neox": (GPTNeoXForCausalLM, GPTNeoXConfig, dict(_LAYERS), 0),
    # One sliding-window layer, one full-attention layer. Untied embeddings: with
    # tied ones Gemma's scaled embeddings make a random model repeat one token.
    "gemma3": (
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        dict(
            _LAYERS,
            num_key_value_heads=2,
            head_dim=16,
            query_pre_attn_scalar=16,
            sliding_window=SLIDING_WINDOW,
            layer_types=["sliding_attention", "full_attention"],
            tie_word_embeddings=False,
            initializer_range=0.3,
        ),
        1,
    ),
    "mistral": (
        MistralForCausalLM,
        MistralConfig,
        dict(_LAYERS, num_key_value_heads=2, sliding_window=SLIDING_WINDOW),
        3,
    ),
}


def make_config(arch: str, **overrides) -> PretrainedConfig:
    """The tiny config of ``arch`` (one of :data:`ARCHITECTURES`), with overrides."""
    _, config_cls, kwargs, _ = _ARCHS[arch]
    return config_cls(**{**_SPECIAL, **kwargs, **overrides})


def build_model(arch: str, seed: int | None = None, **overrides) -> PreTrainedModel:
    """A seeded, randomly initialised float32 model of ``arch`` in eval mode.

    ``seed`` defaults to the architecture's vetted seed; config fields can be overridden.
    """
    model_cls, _, _, default_seed = _ARCHS[arch]
    torch.manual_seed(default_seed if seed is None else seed)
    model = model_cls(make_config(arch, **overrides))
    model.generation_config.pad_token_id = PAD_TOKEN_ID
    return model.eval()


@torch.no_grad()
def perturbed_copy(model: PreTrainedModel, noise: float, seed: int = 1) -> PreTrainedModel:
    """A copy of ``model`` with Gaussian noise of ``noise`` times each tensor's RMS added.

    Agrees with ``model`` often but not always: a draft with partial acceptance.
    Tied weights stay tied (the copy is a deep copy).
    """
    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    for param in draft.parameters():
        rms = float(param.pow(2).mean().sqrt())
        if rms > 0:  # zero-initialised tensors (biases) stay zero
            param.add_(noise * rms * torch.randn(param.shape, generator=gen, dtype=param.dtype))
    return draft.eval()


def build_pair(arch: str, noise: float = DRAFT_NOISE) -> tuple[PreTrainedModel, PreTrainedModel]:
    """A ``(target, draft)`` pair of ``arch``: the draft is a perturbed copy of the target."""
    target = build_model(arch)
    return target, perturbed_copy(target, noise, seed=_ARCHS[arch][3] + 100)


def build_small_draft(seed: int = 7) -> PreTrainedModel:
    """An unrelated one-layer GPT-2 with the shared vocabulary: a draft of another size."""
    return build_model("gpt2", seed=seed, n_layer=1, n_embd=32, n_head=2)


def hf_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor | Sequence[int],
    max_new_tokens: int,
    eos_token_id: int | None = None,
) -> list[int]:
    """New tokens of transformers' own greedy ``generate`` (EOS off unless given)."""
    ids = torch.as_tensor(input_ids, dtype=torch.long).reshape(1, -1)
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
            pad_token_id=PAD_TOKEN_ID,
        )
    return out[0, ids.shape[1] :].tolist()


@torch.inference_mode()
def top2_margins(model: PreTrainedModel, sequence: Sequence[int], prompt_length: int) -> torch.Tensor:
    """Top-1 minus top-2 logit at every position that predicted a generated token."""
    ids = torch.as_tensor(list(sequence), dtype=torch.long).unsqueeze(0)
    logits = model(input_ids=ids).logits[0, prompt_length - 1 : -1]
    top = logits.topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]
