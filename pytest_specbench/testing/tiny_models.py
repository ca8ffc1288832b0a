"""Tiny random models and tokenizers built in-process: the one place that builds them, for the tests
(tests/factory.py re-exports these names), for the tools (``python -m pytest_specbench gpu-check``) and for the
benchmark scripts.

No weights are downloaded: :func:`tiny_model` builds any of :data:`ARCHITECTURES` from a config, seeded, float32,
in eval mode, by default on one vocabulary of :data:`VOCAB_SIZE` ids and one set of special ids, so any target
pairs with any draft; :func:`noisy_copy` makes a draft by adding weight noise; :func:`byte_tokenizer`,
:func:`word_tokenizer` and :func:`char_tokenizer` need no download. The initialiser range is large on purpose: the
logits spread over several units, so float32 differences between a multi-token verify pass and one-token passes
cannot flip the greedy argmax. The tests' exact greedy comparisons were checked with these seeds and sizes;
changing them changes the outputs. No pytest import, so it loads outside a test run.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
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
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

# --- models ---------------------------------------------------------------------------

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
        dict(
            n_layer=2,
            n_embd=48,
            n_head=4,
            n_positions=MAX_POSITIONS,
            initializer_range=0.5,
            pad_token_id=None,
        ),
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


def tiny_config(arch: str, **overrides) -> PretrainedConfig:
    """The tiny config of ``arch`` (one of :data:`ARCHITECTURES`), with overrides."""
    _, config_cls, kwargs, _ = _ARCHS[arch]
    return config_cls(**{**_SPECIAL, **kwargs, **overrides})


def tiny_model(arch: str, seed: int | None = None, **overrides) -> PreTrainedModel:
    """A seeded, randomly initialised float32 model of ``arch`` in eval mode.

    ``seed`` defaults to the architecture's vetted seed; config fields can be
    overridden. ``generate()`` gets :data:`PAD_TOKEN_ID` as its pad id.
    """
    model_cls, _, _, default_seed = _ARCHS[arch]
    torch.manual_seed(default_seed if seed is None else seed)
    model = model_cls(tiny_config(arch, **overrides))
    model.generation_config.pad_token_id = PAD_TOKEN_ID
    return model.eval()


@torch.no_grad()
def noisy_copy(model: PreTrainedModel, noise: float, seed: int, *, relative: bool = True) -> PreTrainedModel:
    """A copy of ``model`` with seeded Gaussian noise added to every weight: a draft with partial acceptance.

    ``relative=True``: the noise of each tensor is ``noise`` times that tensor's
    RMS, and all-zero tensors (fresh biases) stay zero. ``relative=False``: the
    noise has standard deviation ``noise`` in every tensor, zero ones included.
    Tied weights stay tied (the copy is a deep copy) and get noise once.
    """
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    for param in draft.parameters():
        scale = noise
        if relative:
            rms = float(param.pow(2).mean().sqrt())
            if rms == 0:
                continue
            scale = noise * rms
        param.add_(scale * torch.randn(param.shape, generator=generator, dtype=param.dtype))
    return draft.eval()


def tiny_pair(arch: str, noise: float = DRAFT_NOISE) -> tuple[PreTrainedModel, PreTrainedModel]:
    """A ``(target, draft)`` pair of ``arch``: the draft is a noisy copy of the target."""
    target = tiny_model(arch)
    return target, noisy_copy(target, noise, seed=_ARCHS[arch][3] + 100)


def small_draft(seed: int = 7) -> PreTrainedModel:
    """An unrelated one-layer GPT-2 with the shared vocabulary: a draft of another size."""
    return tiny_model("gpt2", seed=seed, n_layer=1, n_embd=32, n_head=2)


# --- tokenizers -----------------------------------------------------------------------

#: end-of-text token of :func:`byte_tokenizer`, after the 256 byte tokens (id 256)
BYTE_EOS = "<|endoftext|>"

#: the vocabulary of :func:`word_tokenizer`: three special tokens, then w3 ... w127
WORDS = ["<unk>", "<bos>", "<eos>"] + [f"w{i}" for i in range(3, 128)]


def _byte_symbols() -> list[str]:
    """The byte-level symbols in id order, then EOS (id 256)."""
    return [*sorted(pre_tokenizers.ByteLevel.alphabet()), BYTE_EOS]


def _byte_level_tokenizer(
    vocab: dict[str, int], merges: list[tuple[str, str]] | None = None, *, split_words: bool = True
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer over ``vocab`` with EOS (also BOS and pad) :data:`BYTE_EOS`; ``split_words=False``
    lets merges cross spaces."""
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges or []))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split_words)
    tokenizer.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token=BYTE_EOS, bos_token=BYTE_EOS, pad_token=BYTE_EOS
    )


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """One token per byte plus EOS (id 256): any text encodes, nothing to download."""
    return _byte_level_tokenizer({symbol: index for index, symbol in enumerate(_byte_symbols())})


def word_tokenizer(words: list[str] = WORDS, *, bos: str = "<bos>", eos: str = "<eos>") -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer whose ids follow the order of ``words``."""
    backend = Tokenizer(models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos, eos_token=eos, unk_token="<unk>")


def char_tokenizer(chars: list[str]) -> PreTrainedTokenizerFast:
    """A character-level tokenizer (BPE without merges) over ``chars``, after <unk>, <bos>, <eos>."""
    vocab = {"<unk>": 0, "<bos>": 1, "<eos>": 2}
    vocab.update({c: i + 3 for i, c in enumerate(chars)})
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")


def word_gpt2(seed: int = 0) -> GPT2LMHeadModel:
    """A GPT-2 with one id per entry of :data:`WORDS` (128), 64 wide: fits :func:`word_tokenizer`."""
    return tiny_model("gpt2", seed, vocab_size=len(WORDS), n_embd=64)


def byte_gpt2(seed: int = 0, **overrides) -> GPT2LMHeadModel:
    """A GPT-2 that fits :func:`byte_tokenizer` (257 ids, EOS 256), 64 wide, with room for long contexts."""
    return tiny_model(
        "gpt2",
        seed,
        **{
            "vocab_size": 257,
            "n_positions": 4096,
            "n_embd": 64,
            "bos_token_id": 256,
            "eos_token_id": 256,
            **overrides,
        },
    )


#: a tiny byte-level Llama in a shape vLLM serves (its CPU attention takes head sizes such as 64, not the tiny 12)
SERVED_LLAMA = dict(
    hidden_size=128,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=64,
    intermediate_size=256,
    vocab_size=257,
    pad_token_id=256,
    bos_token_id=256,
    eos_token_id=256,
    max_position_embeddings=4096,
)


def save_checkpoint(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: Path) -> Path:
    """Save ``model`` and ``tokenizer`` as a from_pretrained checkpoint in ``directory``."""
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


#: the drafter tests' prompt: it repeats itself, so that prompt lookup finds n-grams to copy
REPETITIVE_PROMPT = [5, 6, 7, 8, 9, 10] * 4 + [5, 6]


# --- tokenizers that differ from a target's: cross-tokenizer drafting ---------------------

#: merges of :func:`merged_byte_tokenizer`, in byte-level symbols (Ġ is a space); some cross a word boundary
BYTE_MERGES: tuple[tuple[str, str], ...] = (
    ("s", "Ġ"), ("d", "Ġ"), ("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"),
    ("o", "n"), ("a", "n"), ("r", "e"), ("Ġ", "w"), ("o", "r"), ("e", "Ġ"), ("Ġthe", "Ġ"), ("l", "l"),
)  # fmt: skip


def merged_byte_tokenizer() -> PreTrainedTokenizerFast:
    """:func:`byte_tokenizer` (the same 257 ids) plus the merged tokens of :data:`BYTE_MERGES` after them.

    No pre-tokenizer split, so merges cross spaces ("eĠ" ends one word and starts the next): its tokens straddle
    the boundaries of a byte-level or a word-level tokenizer's.
    """
    vocab = {symbol: index for index, symbol in enumerate(_byte_symbols())}
    for left, right in BYTE_MERGES:
        vocab.setdefault(left + right, len(vocab))
    return _byte_level_tokenizer(vocab, list(BYTE_MERGES), split_words=False)


def permuted_byte_tokenizer(permutation: list[int]) -> PreTrainedTokenizerFast:
    """:func:`byte_tokenizer` renumbered: its id ``i`` becomes ``permutation[i]`` (the same tokens and text)."""
    return _byte_level_tokenizer({symbol: permutation[i] for i, symbol in enumerate(_byte_symbols())})


@torch.no_grad()
def permuted_copy(model: PreTrainedModel, permutation: list[int]) -> PreTrainedModel:
    """A copy of ``model`` whose token ``i`` is id ``permutation[i]``: embedding and output rows (and the special
    ids) moved to match, so it computes what ``model`` does in another numbering."""
    clone = copy.deepcopy(model)
    order = torch.as_tensor(permutation, dtype=torch.long)
    matrices = {id(m.weight): m.weight for m in (clone.get_input_embeddings(), clone.get_output_embeddings())}
    for weight in matrices.values():  # a tied head is the embedding: moved once
        moved = torch.empty_like(weight)
        moved[order] = weight
        weight.copy_(moved)
    for config in (clone.config, clone.generation_config):
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(config, name, None)
            if isinstance(value, int) and 0 <= value < len(permutation):
                setattr(config, name, permutation[value])
    return clone.eval()
