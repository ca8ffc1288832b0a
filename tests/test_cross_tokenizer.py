"""Drafts from a model with another tokenizer than the target's (engine/cross_tokenizer.py): lossless against
``generate``, a translation that is right (a renumbered copy of the target accepts nearly everything, on multi-byte
characters too), the planted bug of skipping verification caught, the times and counts, vocabulary_overlap, and
transformers' own engine."""

from __future__ import annotations

import copy
import functools
import random

import pytest
import torch
from factory import WORDS, byte_gpt2, byte_tokenizer, hf_generate, word_gpt2, word_tokenizer

from pytest_specbench import speculative_generate
from pytest_specbench.engine import decoding
from pytest_specbench.engine.cross_tokenizer import CrossTokenizerDrafter
from pytest_specbench.engine.drafters import ModelDrafter
from pytest_specbench.engine.hf_assisted import hf_assisted_generate
from pytest_specbench.engine.sampling import SamplingParams
from pytest_specbench.engine.stats import joined_result
from pytest_specbench.models.tokenization import vocabulary_overlap
from pytest_specbench.testing.tiny_models import (
    merged_byte_tokenizer,
    permuted_byte_tokenizer,
    permuted_copy,
    tiny_model,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NEW_TOKENS = 24
#: BOS first, EOS text inside, and " dogs" at the end, whose "s" the merged BPE joins with a space after it
BYTE_PROMPT_TEXT = "<|endoftext|>the cats on the wall.<|endoftext|> Then the dogs"
#: the word-level target's prompt: <bos>, words, <eos>, words
WORD_PROMPT = [1, 5, 9, 2, 17, 3, 40]


@functools.cache
def merged_gpt2(seed: int):
    return byte_gpt2(seed, vocab_size=len(merged_byte_tokenizer()))


@functools.cache
def setting(name: str):
    """(target, target tokenizer, draft, draft tokenizer, prompt ids) of each pairing of tokenizers."""
    byte, word, merged = byte_tokenizer(), word_tokenizer(), merged_byte_tokenizer()
    if name == "byte-target-word-draft":
        return byte_gpt2(0), byte, word_gpt2(1), word, byte.encode(BYTE_PROMPT_TEXT)
    if name == "byte-target-bpe-draft":
        return byte_gpt2(0), byte, merged_gpt2(2), merged, byte.encode(BYTE_PROMPT_TEXT)
    if name == "bpe-target-byte-draft":
        return merged_gpt2(3), merged, byte_gpt2(1), byte, merged.encode(BYTE_PROMPT_TEXT)
    if name == "word-target-byte-draft":
        return word_gpt2(0), word, byte_gpt2(1), byte, WORD_PROMPT
    if name == "byte-target-sliding-draft":  # a Mistral draft: sliding-window layers, window 8
        draft = tiny_model("mistral", 1, vocab_size=len(merged), bos_token_id=256, eos_token_id=256, pad_token_id=256)
        return byte_gpt2(0), byte, draft, merged, byte.encode(BYTE_PROMPT_TEXT)
    raise KeyError(name)


SETTINGS = [
    "byte-target-word-draft",
    "byte-target-bpe-draft",
    "bpe-target-byte-draft",
    "word-target-byte-draft",
    "byte-target-sliding-draft",
]


@functools.cache
def reference(name: str) -> list[int]:
    target, _, _, _, prompt = setting(name)
    return hf_generate(target, prompt, NEW_TOKENS)


def drafter_for(name: str) -> CrossTokenizerDrafter:
    _, target_tokenizer, draft, draft_tokenizer, _ = setting(name)
    return CrossTokenizerDrafter(draft, draft_tokenizer, target_tokenizer)


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("name", SETTINGS)
def test_cross_tokenizer_drafts_are_lossless(name: str, k: int) -> None:
    target, _, _, _, prompt = setting(name)
    result = speculative_generate(target, drafter_for(name), prompt, k=k, max_new_tokens=NEW_TOKENS)
    assert result.token_ids == reference(name)
    stats = result.stats
    assert stats.new_tokens == NEW_TOKENS
    assert stats.drafted_tokens > 0 and stats.draft_forward_passes > 0
    assert all(0 <= a <= d <= k for d, a in zip(stats.drafted_per_step, stats.accepted_per_step))


def test_the_prompts_exercise_special_tokens_and_context() -> None:
    # The byte prompt holds BOS and EOS; the merged BPE splits " dogs" by what follows it, across words.
    byte, merged = byte_tokenizer(), merged_byte_tokenizer()
    ids = byte.encode(BYTE_PROMPT_TEXT)
    assert ids[0] == byte.bos_token_id and ids.count(byte.eos_token_id) == 2
    alone, in_context = merged.encode(" dogs"), merged.encode(" dogs and")
    assert in_context[: len(alone)] != alone
    assert any(token.endswith("Ġ") and len(token) > 1 for token in merged.convert_ids_to_tokens(in_context))


# --- the translation is right, not just harmless ------------------------------------------


@functools.cache
def ascii_byte_gpt2():
    """A byte-level GPT-2 whose greedy tokens are ASCII bytes: the output rows of every other id are zero, so
    its text round-trips through any byte tokenizer (a lone byte >= 0x80 decodes to U+FFFD)."""
    model = byte_gpt2(0)
    tokenizer = byte_tokenizer()
    ascii_ids = [i for i in range(256) if len(text := tokenizer.decode([i])) == 1 and ord(text) < 128]
    others = sorted(set(range(257)) - set(ascii_ids))
    with torch.no_grad():
        model.get_output_embeddings().weight[others] = 0.0  # tied: their input rows too, never fed
    return model


def test_a_renumbered_copy_of_the_target_accepts_nearly_everything() -> None:
    target, byte = ascii_byte_gpt2(), byte_tokenizer()
    permutation = list(range(257))
    random.Random(0).shuffle(permutation)
    prompt = byte.encode("The cat sat on the mat. The dog")
    twin = CrossTokenizerDrafter(permuted_copy(target, permutation), permuted_byte_tokenizer(permutation), byte)
    result = speculative_generate(target, twin, prompt, k=4, max_new_tokens=32)
    expected = hf_generate(target, prompt, 32)
    assert result.token_ids == expected
    assert all(len(byte.decode([t])) == 1 and ord(byte.decode([t])) < 128 for t in expected)
    assert result.stats.acceptance_rate >= 0.9
    # An unrelated draft through the same translation: what chance alone gives.
    stranger = CrossTokenizerDrafter(byte_gpt2(5), permuted_byte_tokenizer(permutation), byte)
    assert speculative_generate(target, stranger, prompt, k=4, max_new_tokens=32).stats.acceptance_rate < 0.5


#: the text :func:`cycling_byte_gpt2` repeats: characters of one to four bytes, no byte twice
CYCLE = "a中b🙂cé dЖ"


@functools.cache
@torch.no_grad()
def cycling_byte_gpt2():
    """A byte-level GPT-2 whose greedy text is :data:`CYCLE` over and over, in whole multi-byte characters.

    Its blocks add nothing (output projections and positions zeroed), so its head reads the last token's
    embedding alone; the head row of each byte of the cycle is the final-norm embedding of the byte before it,
    which that embedding matches best (equal norms), and every other row is zero.
    """
    model = byte_gpt2(0, tie_word_embeddings=False)
    for block in model.transformer.h:
        for projection in (block.attn.c_proj, block.mlp.c_proj):
            projection.weight.zero_()
            projection.bias.zero_()
    model.transformer.wpe.weight.zero_()
    hidden = model.transformer.ln_f(model.transformer.wte.weight)
    cycle = byte_tokenizer().encode(CYCLE)
    assert len(set(cycle)) == len(cycle)
    model.lm_head.weight.zero_()
    for before, after in zip(cycle, cycle[1:] + cycle[:1]):
        model.lm_head.weight[after] = hidden[before]
    return model


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("twin", ["same", "renumbered"])
def test_a_twin_marked_cross_tokenizer_accepts_as_the_unmarked_one_on_multi_byte_text(twin: str, k: int) -> None:
    # Blocks of k byte tokens end inside characters of 2 to 4 bytes: the bridge must carry every byte across.
    target, byte = cycling_byte_gpt2(), byte_tokenizer()
    prompt = byte.encode("xyz " + CYCLE * 2)
    if twin == "same":
        crossing = CrossTokenizerDrafter(target, byte, byte)
    else:
        permutation = list(range(257))
        random.Random(1).shuffle(permutation)
        crossing = CrossTokenizerDrafter(permuted_copy(target, permutation), permuted_byte_tokenizer(permutation), byte)
    plain = speculative_generate(target, ModelDrafter(target), prompt, k=k, max_new_tokens=32)
    crossed = speculative_generate(target, crossing, prompt, k=k, max_new_tokens=32)
    assert crossed.token_ids == plain.token_ids == hf_generate(target, prompt, 32)
    assert byte.decode(plain.token_ids).startswith(CYCLE * 2)
    assert crossed.stats.acceptance_rate == plain.stats.acceptance_rate == 1.0
    # Whole characters only: a block that ends inside one proposes the rest later, so a little less per step.
    assert crossed.stats.accepted_tokens >= 0.75 * plain.stats.accepted_tokens


def test_skipping_verification_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The planted bug: every proposal committed as if the target had agreed with it.
    def accept_everything(drafts, target_tokens, valid=None):
        return torch.full((drafts.shape[0],), drafts.shape[1], dtype=torch.long)

    monkeypatch.setattr(decoding, "greedy_accepted", accept_everything)
    target, _, _, _, prompt = setting("byte-target-bpe-draft")
    result = speculative_generate(target, drafter_for("byte-target-bpe-draft"), prompt, k=4, max_new_tokens=NEW_TOKENS)
    assert result.token_ids != reference("byte-target-bpe-draft")


# --- the drafter's own behaviour ------------------------------------------------------------


@pytest.mark.parametrize("name", ["byte-target-bpe-draft", "byte-target-sliding-draft"])
def test_a_reused_cache_proposes_what_a_fresh_drafter_does(name: str) -> None:
    # Sequences that diverge early, late and not at all: the cache is cropped or rebuilt, never stale.
    _, byte, _, _, _ = setting(name)
    texts = ["the cats and dogs on the wall", "the cats and dogs on the wal", "then dogs", "then dogs and cats on"]
    reused = drafter_for(name)
    for text in texts:
        committed = torch.tensor([byte.encode(text)])
        assert reused.propose(committed, 4).tolist() == drafter_for(name).propose(committed, 4).tolist()


def test_draft_ids_for_is_the_committed_text_in_the_drafts_tokens() -> None:
    drafter = drafter_for("byte-target-bpe-draft")
    byte, merged = byte_tokenizer(), merged_byte_tokenizer()
    ids = drafter.draft_ids_for(torch.tensor([byte.encode(BYTE_PROMPT_TEXT)]))
    # The target's leading BOS is left out; the EOS inside stays, as the draft's own special token.
    assert ids.tolist() == [merged.encode(BYTE_PROMPT_TEXT.removeprefix("<|endoftext|>"))]
    assert ids.shape[0] == 1 and merged.eos_token_id in ids[0].tolist()


def test_min_confidence_ends_the_block_after_an_unsure_token() -> None:
    drafter = drafter_for("byte-target-word-draft")
    committed = torch.tensor([byte_tokenizer().encode("w5 w9 w17")])
    drafter.propose(committed, 8, min_confidence=1.01)  # no token is that sure
    assert drafter.forward_passes == 1
    drafter.propose(committed, 8)
    assert drafter.forward_passes == 1 + 8


def test_the_drafts_eos_ends_the_proposal() -> None:
    _, byte, draft, _, _ = setting("byte-target-word-draft")
    committed = torch.tensor([byte.encode("w5 w9 w17")])
    with torch.no_grad():
        token = int(
            draft(input_ids=drafter_for("byte-target-word-draft").draft_ids_for(committed)).logits[0, -1].argmax()
        )
    # The draft's first greedy token made its EOS: the block ends there, and its text never reaches the target.
    eos_draft = CrossTokenizerDrafter(draft, word_tokenizer(WORDS, eos=WORDS[token]), byte)
    assert drafter_for("byte-target-word-draft").propose(committed, 3).numel() > 0
    assert eos_draft.propose(committed, 3).numel() == 0


def test_sampling_is_refused_and_translation_time_is_counted() -> None:
    target, _, _, _, prompt = setting("byte-target-word-draft")
    drafter = drafter_for("byte-target-word-draft")
    with pytest.raises(ValueError, match="greedy only"):
        speculative_generate(target, drafter, prompt, k=4, max_new_tokens=8, temperature=0.8)
    result = speculative_generate(target, drafter, prompt, k=4, max_new_tokens=NEW_TOKENS)
    stats = result.stats
    assert stats.translation_time_s == drafter.translation_time_s > 0
    assert stats.translation_time_s <= stats.draft_time_s
    drafter.reset()
    assert drafter.translation_time_s == 0.0 and drafter.forward_passes == 0
    # A multi-turn run's stats sum their turns', this field among them.
    assert joined_result([result, result]).stats.translation_time_s == pytest.approx(2 * stats.translation_time_s)


# --- vocabulary overlap -----------------------------------------------------------------------


def test_vocabulary_overlap() -> None:
    byte, merged = byte_tokenizer(), merged_byte_tokenizer()
    assert vocabulary_overlap(merged, merged) == 1.0
    # The byte tokenizer's texts: 128 ASCII characters (a lone byte >= 0x80 is partial UTF-8, EOS is special);
    # the merged one adds 16 texts of two or more characters.
    assert vocabulary_overlap(byte, merged) == 1.0
    assert vocabulary_overlap(merged, byte) == pytest.approx(128 / 144)
    # Special tokens (<unk>, <bos>, <eos>) count on neither side: {a, b, c, d} against {b, d, x}.
    target = word_tokenizer(["<unk>", "<bos>", "<eos>", "a", "b", "c", "d"])
    draft = word_tokenizer(["<unk>", "<bos>", "<eos>", "b", "d", "x"])
    assert vocabulary_overlap(target, draft) == 0.5


# --- transformers' universal assisted generation ------------------------------------------------


def fed_blocks(target) -> tuple[list[tuple[int, list[int]]], object]:
    """A hook recording each target pass's cache length and the ids it fed; returns the list and the handle."""
    blocks = []

    def record(module, args, kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        ids = kwargs.get("input_ids", args[0] if args else None)
        blocks.append((int(cache.get_seq_length()) if cache is not None else 0, ids[0].tolist()))

    return blocks, target.register_forward_pre_hook(record, with_kwargs=True)


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("name", ["byte-target-word-draft", "byte-target-bpe-draft", "word-target-byte-draft"])
def test_hf_engine_runs_universal_assisted_generation(name: str, k: int) -> None:
    target, _, _, _, prompt = setting(name)
    blocks, handle = fed_blocks(target)
    try:
        result = hf_assisted_generate(target, drafter_for(name), torch.tensor([prompt]), k, NEW_TOKENS)
    finally:
        handle.remove()
    assert result.token_ids == reference(name)
    stats = result.stats
    # UAG re-tokenises, so a block can hold more target tokens than k: the counts must still add up.
    assert stats.new_tokens == NEW_TOKENS == sum(a + 1 for a in stats.accepted_per_step)
    assert all(0 <= a <= d for d, a in zip(stats.drafted_per_step, stats.accepted_per_step))
    assert stats.draft_forward_passes >= 1 and stats.drafted_tokens > 0
    # Read independently of the counting: each pass's drafts are the ids it fed after the committed ones, and it
    # accepted the longest run of them that the final output holds at their positions.
    final = result.sequences[0].tolist()
    assert len(blocks) == stats.steps
    for (cached, fed), drafted, accepted in zip(blocks, stats.drafted_per_step, stats.accepted_per_step):
        committed = max(cached + 1, len(prompt))
        drafts = fed[committed - cached :]
        assert fed[: committed - cached] == final[cached:committed] and len(drafts) == drafted
        agree = [a == b for a, b in zip(drafts, final[committed:])] + [False]
        assert agree.index(False) == accepted


def test_hf_engine_refuses_what_transformers_would_misread() -> None:
    byte = byte_tokenizer()
    same_size = CrossTokenizerDrafter(copy.deepcopy(byte_gpt2(1)), permuted_byte_tokenizer(list(range(257))), byte)
    prompt = torch.tensor([byte.encode("the cat")])
    with pytest.raises(ValueError, match="vocab_size equals"):
        hf_assisted_generate(byte_gpt2(0), same_size, prompt, 4, 8)
    with pytest.raises(ValueError, match="greedy only"):
        hf_assisted_generate(
            byte_gpt2(0), drafter_for("byte-target-word-draft"), prompt, 4, 8, sampling=SamplingParams(0.8)
        )
