"""Checking that a draft and its target speak the same token ids.

The engine hands the target's token ids straight to the draft. If the two
tokenizers number tokens differently, the draft predicts garbage: output
stays correct (verification is lossless) but acceptance collapses and the
benchmark silently measures nothing. Equal vocabulary sizes prove nothing
(fine-tunes reorder added tokens, families share sizes), so the check
encodes a fixed set of varied texts with both and compares the ids.
"""

from __future__ import annotations

from collections.abc import Iterable

from transformers import PretrainedConfig, PreTrainedTokenizerBase

from .base import UnrunnableCase

__all__ = [
    "DEFAULT_PROBE_TEXTS",
    "TokenizerMismatch",
    "VocabularyMismatch",
    "check_draft_vocabulary",
    "check_same_tokenization",
    "vocabulary_overlap",
]

#: varied texts that tend to expose differing vocabularies and normalisation
DEFAULT_PROBE_TEXTS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding lets a small draft model propose tokens that a large model verifies.",
    "def fibonacci(n: int) -> int:\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    '{"id": 42, "tags": ["a", "b"], "ok": true, "ratio": 3.14159}',
    "for (let i = 0; i < arr.length; i++) { console.log(arr[i] * 2); }",
    "Numbers: 0 7 42 1234 99999 3.5e-8 -17 1,000,000 2024-06-30 12:45:09",
    "Unicode: café naïve Straße Ελληνικά русский 中文字符 日本語 한국어 עברית العربية",
    "Emoji and symbols: 🙂🚀✨ → ≤ ≥ ≠ ∑ √ ∞ © ™ € £ ¥",
    "   leading spaces, trailing spaces   ",
    "tabs\tand\nnewlines\n\n\ndouble  spaces   triple",
    "MiXeD CaSe, UPPERCASE, lowercase, camelCase, snake_case, kebab-case",
    "URL https://example.com/path?q=1&r=two#frag and email someone@example.org",
)


class TokenizerMismatch(UnrunnableCase):
    """The draft's token ids differ from the target's."""

    def __init__(self, target_name: str, draft_name: str, detail: str) -> None:
        self.target_name = target_name
        self.draft_name = draft_name
        self.detail = detail
        super().__init__(
            f"draft {draft_name!r} does not share the tokenizer of target {target_name!r}: {detail}; to pair them "
            "anyway, mark the pair cross_tokenizer = true in its pairs file or pyproject.toml (its drafts then cross "
            'as text: docs/pairs.md, "Drafts with another tokenizer")'
        )


def _shorten(ids: list[int], limit: int = 12) -> str:
    return str(ids) if len(ids) <= limit else f"{str(ids[:limit])[:-1]}, ...] ({len(ids)} ids)"


def check_same_tokenization(
    target_tokenizer: PreTrainedTokenizerBase,
    draft_tokenizer: PreTrainedTokenizerBase,
    target_name: str,
    draft_name: str,
    probe_texts: Iterable[str] = DEFAULT_PROBE_TEXTS,
) -> None:
    """Raise :class:`TokenizerMismatch` unless both tokenizers give the same ids.

    Compares the BOS and EOS token ids, then the ids of every probe text
    (encoded without special tokens, since the engine shares ids, not text).
    """
    if target_tokenizer is draft_tokenizer:
        return
    for role in ("bos", "eos"):
        target_id = getattr(target_tokenizer, f"{role}_token_id", None)
        draft_id = getattr(draft_tokenizer, f"{role}_token_id", None)
        if target_id != draft_id:
            raise TokenizerMismatch(
                target_name, draft_name, f"{role.upper()} token id {draft_id} in the draft, {target_id} in the target"
            )
    for text in probe_texts:
        target_ids = list(target_tokenizer.encode(text, add_special_tokens=False))
        draft_ids = list(draft_tokenizer.encode(text, add_special_tokens=False))
        if target_ids != draft_ids:
            raise TokenizerMismatch(
                target_name,
                draft_name,
                f"{text[:40]!r} encodes to {_shorten(draft_ids)} in the draft but {_shorten(target_ids)} in the target",
            )


class VocabularyMismatch(UnrunnableCase):
    """The draft can propose token ids that the target has no embedding for."""


def check_draft_vocabulary(
    target_config: PretrainedConfig, draft_config: PretrainedConfig, target_name: str, draft_name: str
) -> None:
    """Raise :class:`VocabularyMismatch` when the draft's ``vocab_size`` is larger than the target's.

    Equal tokenizers do not settle it: a model's embedding may have more rows than its tokenizer has
    tokens, and a draft id at or above the target's ``vocab_size`` ends in an IndexError inside the
    target. A smaller draft vocabulary is fine (its padding rows are never proposed).
    """
    target_size, draft_size = target_config.vocab_size, draft_config.vocab_size
    if draft_size > target_size:
        raise VocabularyMismatch(
            f"draft {draft_name!r} has vocab_size {draft_size}, more than target {target_name!r} with "
            f"{target_size}: the draft could propose ids {target_size} to {draft_size - 1}, which the target has "
            f"no embedding for; pair the target with a draft whose vocab_size is at most {target_size}"
        )


def _token_texts(tokenizer: PreTrainedTokenizerBase) -> set[str]:
    """The text of each id decoded alone, special ids and partial UTF-8 (U+FFFD) left out."""
    special = set(tokenizer.all_special_ids)
    ids = [[i] for i in range(len(tokenizer)) if i not in special]
    backend = getattr(tokenizer, "backend_tokenizer", None)  # a fast tokenizer: one batch in Rust, no Python per id
    if backend is not None:
        texts = backend.decode_batch(ids, skip_special_tokens=False)
    else:
        texts = tokenizer.batch_decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return {text for text in texts if "\ufffd" not in text}


def vocabulary_overlap(target_tokenizer: PreTrainedTokenizerBase, draft_tokenizer: PreTrainedTokenizerBase) -> float:
    """Share of target token texts (each id decoded alone, special and U+FFFD ones dropped) also the draft's.

    U+FFFD marks partial UTF-8 bytes; 0.0 for a target with no text left. A cross-tokenizer draft proposes
    through text, so this says how much of the target's vocabulary it can spell in one token. It decodes each
    vocabulary once (one batch): callers that ask often should keep the answer.
    """
    target_texts = _token_texts(target_tokenizer)
    if not target_texts:
        return 0.0
    return len(target_texts & _token_texts(draft_tokenizer)) / len(target_texts)
