"""Tokenizer compatibility of a target and a draft."""

from __future__ import annotations

import pytest
from factory import WORDS, char_tokenizer, word_tokenizer

from pytest_specbench.models.tokenization import DEFAULT_PROBE_TEXTS, TokenizerMismatch, check_same_tokenization


def test_identical_tokenizers_pass():
    check_same_tokenization(word_tokenizer(WORDS), word_tokenizer(WORDS), "t", "d", probe_texts=["w5 w9 w100 w3"])
    chars = [chr(c) for c in range(32, 127)]
    check_same_tokenization(char_tokenizer(chars), char_tokenizer(chars), "t", "d")
    tokenizer = word_tokenizer(WORDS)
    check_same_tokenization(tokenizer, tokenizer, "t", "t")


def test_reordered_vocabulary_of_the_same_size_is_a_mismatch():
    reordered = WORDS[:3] + list(reversed(WORDS[3:]))
    target, draft = word_tokenizer(WORDS), word_tokenizer(reordered)
    assert len(target) == len(draft)
    with pytest.raises(TokenizerMismatch) as info:
        check_same_tokenization(target, draft, "big-model", "small-model", probe_texts=["w5 w6 w7"])
    assert isinstance(info.value, ValueError)
    assert "big-model" in str(info.value) and "small-model" in str(info.value)


def test_default_probes_catch_a_reordered_character_vocabulary():
    chars = [chr(c) for c in range(32, 127)]
    a, e = chars.index("a"), chars.index("e")
    swapped = list(chars)
    swapped[a], swapped[e] = "e", "a"
    assert len(DEFAULT_PROBE_TEXTS) >= 8
    with pytest.raises(TokenizerMismatch, match="encodes to"):
        check_same_tokenization(char_tokenizer(chars), char_tokenizer(swapped), "t", "d")


def test_different_special_token_ids_are_a_mismatch():
    with pytest.raises(TokenizerMismatch, match="EOS token id"):
        check_same_tokenization(word_tokenizer(WORDS), word_tokenizer(WORDS, eos="w9"), "t", "d", probe_texts=["w5"])
