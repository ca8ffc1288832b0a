"""The cross-tokenizer text bridge (engine/cross_tokenizer.py, TextBridge) on real tokenizers, no model: a draft
with the target's own tokenizer that drafts the target's next ids gets every one of them back, on text where
characters (CJK, emoji, accents) split over several ids, in committed ids and in draft blocks alike."""

from __future__ import annotations

import functools

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from pytest_specbench.engine.cross_tokenizer import TextBridge
from pytest_specbench.models import embedded, gguf_cache
from pytest_specbench.models.qwen import QWEN_CODER_0_5B
from pytest_specbench.testing.tiny_models import byte_tokenizer

#: common and rare CJK (Gemma and Qwen spell the rare ones in byte tokens), emoji, joined emoji, accents
TEXT = (
    "Write it in many scripts: café naïve Straße Ελληνικά 中文字符 日本語 한국어 🙂🚀✨ 龘靐 𠜎 👩‍💻 "
    "déjà vu — 你好，世界！这是一个测试。Ünïcödé 🇫🇷 齉龘 end"
)
#: ids of TEXT committed before the first proposal
PROMPT_IDS = 6
REAL = {"gemma": embedded.GEMMA3_270M, "qwen": QWEN_CODER_0_5B}


def _cached_entry(name: str):
    model = REAL[name]
    return gguf_cache.cached_entry(model.expected_sha256()) if model.installed() else None


def _real(name: str):
    return pytest.param(
        name,
        marks=[
            pytest.mark.slow,
            pytest.mark.skipif(
                _cached_entry(name) is None,
                reason=f"needs {REAL[name].name} installed and converted once (loading it as a model converts it)",
            ),
        ],
    )


@functools.cache
def tokenizer_of(name: str) -> PreTrainedTokenizerBase:
    """The byte tokenizer of the tiny models, or a real one from its cached conversion (seconds)."""
    return byte_tokenizer() if name == "byte" else AutoTokenizer.from_pretrained(str(_cached_entry(name)))


def self_drafted(tokenizer: PreTrainedTokenizerBase, k: int) -> tuple[list[list[int]], list[int], int]:
    """Speculative steps over TEXT through a same-tokenizer bridge with a draft that always drafts what the target
    will commit: the proposals, each checked against the target's next ids; the ids held back at each step; and
    the draft blocks that ended inside a character."""
    bridge = TextBridge(tokenizer, tokenizer)
    ids = tokenizer.encode(TEXT)
    committed, proposals, held, split_blocks = ids[:PROMPT_IDS], [], [], 0
    while len(committed) < len(ids):
        whole, text = bridge.committed_text(committed)
        draft_ids = bridge.draft_ids(text)
        assert ids[: len(draft_ids)] == draft_ids  # the draft reads the committed text in whole characters
        new = ids[len(draft_ids) : len(draft_ids) + k + len(committed) - whole]  # as CrossTokenizerDrafter drafts
        split_blocks += tokenizer.decode(draft_ids[-1:] + new).endswith("\ufffd")
        proposal = bridge.target_ids(committed, whole, bridge.continuation(draft_ids, new))[:k]
        assert proposal == ids[len(committed) : len(committed) + len(proposal)], (committed, proposal)
        proposals.append(proposal)
        held.append(len(committed) - whole)
        committed = ids[: len(committed) + len(proposal) + 1]  # all accepted, and the target's own next id
    return proposals, held, split_blocks


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("name", ["byte", _real("gemma"), _real("qwen")])
def test_a_same_tokenizer_bridge_gives_back_the_targets_own_ids(name: str, k: int) -> None:
    tokenizer = tokenizer_of(name)
    proposals, held, split_blocks = self_drafted(tokenizer, k)
    # The text splits characters: some steps began after ids inside a character, some blocks ended inside one.
    assert max(held) > 0 and split_blocks > 0
    # Every proposed id was the target's (checked above), and nearly as many as an unmarked twin proposes.
    remaining = len(tokenizer.encode(TEXT)) - PROMPT_IDS
    unmarked = remaining // (k + 1) * k + min(remaining % (k + 1), k)
    assert sum(map(len, proposals)) >= 0.7 * unmarked


def test_ids_that_end_inside_a_character_are_held_back_until_it_is_whole() -> None:
    byte = byte_tokenizer()
    bridge = TextBridge(byte, byte)
    ids = byte.encode("ab中")  # 中 is three byte tokens
    assert bridge.committed_text(ids[:3]) == (2, "ab")
    assert bridge.committed_text(ids) == (5, "ab中")
    # The draft spells 中 again; the proposal drops the byte already committed and keeps the two that complete it.
    assert bridge.target_ids(ids[:3], 2, "中d") == ids[3:] + byte.encode("d")
    # A draft block that ends inside a character proposes only its whole characters.
    assert bridge.continuation(ids[:2], ids[2:4]) == "" and bridge.continuation(ids[:2], ids[2:]) == "中"
