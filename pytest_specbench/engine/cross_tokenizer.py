"""Drafting across tokenizers: a draft model whose tokenizer is not the target's, greedy and lossless.

The algorithm is string-level exact match, as transformers' universal assisted generation: the committed target
ids are decoded to text and encoded with the draft's tokenizer, the draft continues greedily in its own tokens,
its new tokens are decoded to text and that text is encoded with the target's tokenizer; those target ids are the
proposal. Why this one: it is exact for any two tokenizers and needs no retraining and no vocabulary map, and the
target verifies its own tokens, so the output is the target's greedy output by construction (a poor translation
only lowers acceptance). Sampling would need the draft's distribution over the target's tokens, which text does not
give: no algorithm lossless in distribution is implemented, so this drafter is greedy only.

Text crosses in whole characters only (:class:`TextBridge`): a byte-level or byte-fallback tokenizer splits a rare
character (CJK, emoji) over several ids, and ids that stop inside it decode to U+FFFD, which would re-encode as
other bytes. So committed ids that end inside a character are held back from the draft until the target completes
it (the draft spells that character again, in as many more tokens as ids were held), the proposal starts with the
ids that complete it, and draft ids that end inside one are left for a later block.
"""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .drafters import Drafter
from .kv_cache import cache_length, crop_to, enable_rollback, new_cache
from .sampling import SamplingParams

__all__ = ["CrossTokenizerDrafter", "TextBridge"]

#: committed target ids re-encoded in front of the continuation: a tokenizer may split text by its context
TARGET_TAIL = 4
#: draft ids decoded in front of the new ones: a decoder may render a token by the one before it (spaces)
DRAFT_TAIL = 4

#: ids a partial UTF-8 character can span at the end of a text, or cut off at its start (its bytes after the first)
UTF8_SPAN = 3
_PARTIAL = "\ufffd"  # what a decoder makes of bytes that are no whole UTF-8 character
_TEXT = dict(clean_up_tokenization_spaces=False)  # the text as the tokens spell it, no tidying


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _decode(tokenizer: PreTrainedTokenizerBase, ids: list[int], skip_special: bool) -> str:
    return tokenizer.decode(ids, skip_special_tokens=skip_special, **_TEXT)


def _char_start(tokenizer: PreTrainedTokenizerBase, ids: list[int], start: int, skip_special: bool) -> int:
    """``start``, or the nearest index up to :data:`UTF8_SPAN` before it, where a character begins: ids cut inside
    one decode to U+FFFD first (a byte-fallback decoder spoils the whole run of byte tokens after the cut)."""
    start = max(start, 0)
    for index in range(start, max(start - UTF8_SPAN, 0) - 1, -1):
        if not _decode(tokenizer, ids[index:], skip_special).startswith(_PARTIAL):
            return index
    return start


def _whole_end(tokenizer: PreTrainedTokenizerBase, ids: list[int], start: int, skip_special: bool) -> tuple[int, str]:
    """Where the last whole character of ``ids`` ends and the text of ``ids[start:there]``: up to
    :data:`UTF8_SPAN` ids that end inside a character (they decode to U+FFFD) are held back until later ids
    complete it; past that, the U+FFFD is the tokens' own and stays."""
    for end in range(len(ids), max(len(ids) - UTF8_SPAN, start) - 1, -1):
        text = _decode(tokenizer, ids[start:end], skip_special)
        if not text.endswith(_PARTIAL):
            return end, text
    return len(ids), _decode(tokenizer, ids[start:], skip_special)


class TextBridge:
    """Target ids to the draft's and the draft's new ids back to the target's, through text in whole characters.

    Torch-free, so that it can be checked on real tokenizers without their models.
    """

    def __init__(self, draft_tokenizer: PreTrainedTokenizerBase, target_tokenizer: PreTrainedTokenizerBase) -> None:
        self.draft_tokenizer = draft_tokenizer
        self.target_tokenizer = target_tokenizer

    def committed_text(self, committed: list[int]) -> tuple[int, str]:
        """How many committed ids end in whole characters, and their text (a leading target BOS left out: the
        draft adds its own special tokens)."""
        bos = self.target_tokenizer.bos_token_id
        start = 1 if committed and bos is not None and committed[0] == bos else 0
        return _whole_end(self.target_tokenizer, committed, start, skip_special=False)

    def draft_ids(self, text: str) -> list[int]:
        """The draft's ids of the committed ``text``, with its special tokens (its BOS alone for no text)."""
        ids = list(self.draft_tokenizer(text, add_special_tokens=True)["input_ids"])
        if not ids and self.draft_tokenizer.bos_token_id is not None:
            ids = [self.draft_tokenizer.bos_token_id]
        return ids

    def continuation(self, draft_ids: list[int], new: list[int]) -> str:
        """The whole characters the draft's ``new`` ids add after ``draft_ids``, special tokens (its EOS) left
        out; decoded behind a few ids before them, as a decoder may render a token by the one before (spaces)."""
        tokenizer = self.draft_tokenizer
        tail = draft_ids[_char_start(tokenizer, draft_ids, len(draft_ids) - DRAFT_TAIL, skip_special=True) :]
        before = _decode(tokenizer, tail, skip_special=True)
        after = _whole_end(tokenizer, tail + new, 0, skip_special=True)[1]
        if after.startswith(before):
            return after[len(before) :]
        return _whole_end(tokenizer, new, 0, skip_special=True)[1]

    def target_ids(self, committed: list[int], whole: int, text: str) -> list[int]:
        """The target's ids that continue ``committed`` with ``text``, which follows its first ``whole`` ids: the
        text is encoded behind that of the last few of them, and what re-encodes as the committed ids after them
        (the held-back ones too) is dropped; ``text`` encoded alone when that fails and nothing was held back."""
        if not text:
            return []
        tokenizer = self.target_tokenizer
        start = _char_start(tokenizer, committed[:whole], whole - TARGET_TAIL, skip_special=False)
        tail_text = _decode(tokenizer, committed[start:whole], skip_special=False)
        ids = list(tokenizer.encode(tail_text + text, add_special_tokens=False))
        known = committed[start:]
        if ids[: len(known)] == known:
            return ids[len(known) :]
        if whole < len(committed):
            return []  # the held-back ids do not start the text: no proposal lines up behind them
        return list(tokenizer.encode(text, add_special_tokens=False))


def _has_sliding_layers(cache) -> bool:
    return any(getattr(layer, "is_sliding", False) for layer in getattr(cache, "layers", ()))


class CrossTokenizerDrafter(Drafter):
    """A small causal LM with its own tokenizer drafting for a target, through text (module docstring).

    The draft keeps its KV cache across steps: each proposal re-encodes the committed text, crops the cache to
    the longest prefix it shares with the new draft ids and feeds only the rest. ``translation_time_s`` counts
    the tokenizer work of proposals (the prefill's is timed with the prefill). It drafts one sequence at a time,
    greedily, and eagerly (its steps change length with the text).
    """

    drafts_sampled = False
    assisted_by = "universal"
    # re-tokenised text feeds a few ids a step, most often one to three; a longer feed runs the model's own kernels
    pass_rows = 4

    def __init__(
        self,
        model: PreTrainedModel,
        draft_tokenizer: PreTrainedTokenizerBase,
        target_tokenizer: PreTrainedTokenizerBase,
    ) -> None:
        self.model = model
        self.draft_tokenizer = draft_tokenizer
        self.target_tokenizer = target_tokenizer
        self.bridge = TextBridge(draft_tokenizer, target_tokenizer)
        eos = {draft_tokenizer.eos_token_id, *_as_ids(getattr(model.generation_config, "eos_token_id", None))}
        self._draft_eos = {token for token in eos if token is not None}
        self.reset()

    def reset(self) -> None:
        super().reset()
        self._cache = None
        self._held: list[int] = []  # the draft ids whose states the cache holds, in order
        self._floor = 0  # cache length at its last crop: a sliding-window layer cannot roll back past it

    def draft_ids_for(self, committed_ids: torch.Tensor) -> torch.Tensor:
        """The draft's ids, shape ``(1, L')`` on the draft's device, for the committed target ids ``(1, L)``."""
        ids = self.bridge.draft_ids(self.bridge.committed_text(committed_ids[0].tolist())[1])
        return torch.tensor([ids], dtype=torch.long, device=self.model.device)

    # --- the draft's cache -------------------------------------------------------------

    def _pending(self, ids: list[int]) -> list[int]:
        """Crop the cache to the longest prefix it holds of ``ids`` (at least one id left to feed); the rest."""
        keep = min(_common_prefix(self._held, ids), len(ids) - 1)
        if self._cache is None or (keep < self._floor and _has_sliding_layers(self._cache)):
            self._cache, self._held, keep = new_cache(self.model), [], 0
            enable_rollback(self._cache)
        elif cache_length(self._cache):
            crop_to(self._cache, keep)  # also trims sliding-window layers back to their window
        self._held, self._floor = ids[:keep], keep
        return ids[keep:]

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.model(input_ids=ids, cache=self._cache, use_cache=True, logits_to_keep=1).logits
        self.forward_passes += 1
        return logits[0, -1]

    @torch.inference_mode()
    def prefill(self, prompt_ids: torch.Tensor) -> None:
        ids = self.bridge.draft_ids(self.bridge.committed_text(prompt_ids[0].tolist())[1])
        if ids:
            pending = self._pending(ids)
            self._forward(torch.tensor([pending], dtype=torch.long, device=self.model.device))
            self._held = ids

    def _generate(self, pending: list[int], k: int, min_confidence: float | None) -> list[int]:
        """Feed ``pending``, then up to ``k`` greedy draft tokens, cut after an unsure one and before EOS."""
        feed = torch.tensor([pending], dtype=torch.long, device=self.model.device)
        tokens = []
        for _ in range(k):
            logits = self._forward(feed)
            feed = logits.argmax().reshape(1, 1)
            tokens.append(feed)
            # As transformers' confidence criterion: keep the unsure token, draft no further.
            if min_confidence is not None and float(logits.float().softmax(-1).max()) < min_confidence:
                break
        # One read of the block, not one per token: the passes stay queued on the device. A block that reached
        # EOS wasted its passes after it, which is rarer than a sync per token is costly.
        drafted = torch.cat(tokens, dim=1)[0].tolist()
        self._held += pending + drafted[:-1]
        for i, token in enumerate(drafted):
            if token in self._draft_eos:
                return drafted[:i]
        return drafted

    # --- the drafter interface ---------------------------------------------------------

    @torch.inference_mode()
    def propose(self, committed_ids: torch.Tensor, k: int, min_confidence: float | None = None) -> torch.Tensor:
        empty = torch.empty(0, dtype=torch.long, device=committed_ids.device)
        committed = committed_ids[0].tolist()
        if k <= 0 or not committed:
            return empty
        start = time.perf_counter()
        whole, text = self.bridge.committed_text(committed)
        draft_ids = self.bridge.draft_ids(text)
        self.translation_time_s += time.perf_counter() - start
        if not draft_ids:
            return empty
        # The draft spells the held-back ids' character again before its k new tokens (module docstring).
        new = self._generate(self._pending(draft_ids), k + len(committed) - whole, min_confidence)
        start = time.perf_counter()
        proposal = self.bridge.target_ids(committed, whole, self.bridge.continuation(draft_ids, new))[:k]
        self.translation_time_s += time.perf_counter() - start
        return torch.tensor(proposal, dtype=torch.long, device=committed_ids.device)

    def propose_sampled(
        self, committed_ids: torch.Tensor, k: int, sampling: SamplingParams, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        raise ValueError(
            "cross-tokenizer drafting is greedy only: no algorithm lossless in distribution is implemented for a "
            "draft with another tokenizer than the target's; run it at temperature 0"
        )

    def commit(self, num_accepted: int) -> None:
        """Nothing to roll back here: the next proposal re-syncs the draft from the committed text."""


def _as_ids(value: object) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    return [v for v in value if isinstance(v, int)] if isinstance(value, (list, tuple)) else []
