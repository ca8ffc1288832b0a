"""Tiny GPT-2 pairs saved to disk, for plugin tests that load through from_pretrained."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

EOS = "<|endoftext|>"


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """One token per byte plus EOS: any text encodes, nothing to download."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: index for index, symbol in enumerate(sorted(alphabet))}
    vocab[EOS] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, bos_token=EOS, pad_token=EOS)


def tiny_gpt2(seed: int, n_layer: int = 2) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=257, n_positions=4096, n_embd=64, n_layer=n_layer, n_head=4,
        bos_token_id=256, eos_token_id=256, initializer_range=0.5,
    )
    return GPT2LMHeadModel(config).eval()


def perturbed_copy(model: GPT2LMHeadModel, noise: float, seed: int) -> GPT2LMHeadModel:
    """The same weights plus noise: a draft that agrees with the target often, not always."""
    copy = GPT2LMHeadModel(model.config).eval()
    copy.load_state_dict(model.state_dict())
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in copy.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * noise)
    return copy


def save(model, directory: Path) -> Path:
    model.save_pretrained(directory)
    byte_tokenizer().save_pretrained(directory)
    return directory


def write_tiny_pair(root: Path, name: str = "tiny", noise: float = 0.01) -> Path:
    """Save a target and a draft under ``root`` and return a pairs TOML naming them."""
    target = tiny_gpt2(seed=0)
    save(target, root / "target")
    save(perturbed_copy(target, noise, seed=1), root / "draft")
    pairs_file = root / "pairs.toml"
    pairs_file.write_text(
        f'[pairs.{name}]\ntarget = "./target"\ndraft = "./draft"\ndescription = "tiny test pair"\n',
        encoding="utf-8",
    )
    return pairs_file
