"""Drafting across tokenizers: a draft model whose tokenizer is not the target's, greedy and lossless.

The algorithm is string-level exact match, as transformers' universal assisted generation: the committed target
ids are decoded to text and encoded with the draft's tokenizer, the draft continues greedily in its own tokens,
its new tokens are decoded to text and that text is encoded with the target's tokenizer; those target ids are the
proposal. Why this one: it is exact for any two tokenizers and needs no retraining and no vocabulary map, and the
target verifies its own tokens, so the output is the target's greedy output by construction (a poor translation
only lowers acceptance). Sampling would need the draft's distribution over the target's tokens, which text does not
give: no algorithm lossless in distribution is implemented, so this drafter is greedy only.
"""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .drafters import Drafter
from .kv_cache import cache_length, crop_to, enable_rollback, new_cache
from .sampling import SamplingParams

__all__ = ["CrossTokenizerDrafter"]

#: committed target ids re-encoded in front of the continuation: a tokenizer may split text by its context
TARGET_TAIL = 4
#: draft ids decoded in front of the new ones: a decoder may render a token by the one before it (spaces)
DRAFT_TAIL = 4

_TEXT = dict(clean_up_tokenization_spaces=False)  # the text as the tokens spell it, no tidying


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


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

    def __init__(
        self,
        model: PreTrainedModel,
        draft_tokenizer: PreTrainedTokenizerBase,
        target_tokenizer: PreTrainedTokenizerBase,
    ) -> None:
        self.model = model
        self.draft_tokenizer = draft_tokenizer
        self.target_tokenizer = target_tokenizer
        eos = {draft_tokenizer.eos_token_id, *_as_ids(getattr(model.generation_config, "eos_token_id", None))}
        self._draft_eos = {token for token in eos if token is not None}
        self.reset()

    def reset(self) -> None:
        super().reset()
        self._cache = None
        self._held: list[int] = []  # the draft ids whose states the cache holds, in order
        self._floor = 0  # cache length at its last crop: a sliding-window layer cannot roll back past it

    # --- translation -------------------------------------------------------------------

    def _draft_ids(self, committed: list[int]) -> list[int]:
        """The draft's ids of the committed target text, with the draft's own special tokens (a leading target
        BOS is left out for them; an empty text gives the draft's BOS alone, if it has one)."""
        bos = self.target_tokenizer.bos_token_id
        if committed and bos is not None and committed[0] == bos:
            committed = committed[1:]
        text = self.target_tokenizer.decode(committed, skip_special_tokens=False, **_TEXT)
        ids = list(self.draft_tokenizer(text, add_special_tokens=True)["input_ids"])
        if not ids and self.draft_tokenizer.bos_token_id is not None:
            ids = [self.draft_tokenizer.bos_token_id]
        return ids

    def draft_ids_for(self, committed_ids: torch.Tensor) -> torch.Tensor:
        """The draft's ids, shape ``(1, L')`` on the draft's device, for the committed target ids ``(1, L)``."""
        ids = self._draft_ids(committed_ids[0].tolist())
        return torch.tensor([ids], dtype=torch.long, device=self.model.device)

    def _continuation(self, draft_ids: list[int], new: list[int]) -> str:
        """The text the draft's ``new`` tokens add after ``draft_ids``, special tokens (its EOS) left out."""
        tail = draft_ids[-DRAFT_TAIL:]
        before = self.draft_tokenizer.decode(tail, skip_special_tokens=True, **_TEXT)
        after = self.draft_tokenizer.decode(tail + new, skip_special_tokens=True, **_TEXT)
        text = after[len(before) :] if after.startswith(before) else None
        if text is None:
            text = self.draft_tokenizer.decode(new, skip_special_tokens=True, **_TEXT)
        # A block ending inside a multi-byte character decodes it as U+FFFD, a character the draft never meant.
        return text.rstrip("\ufffd")

    def _target_ids(self, committed: list[int], text: str) -> list[int]:
        """The target's ids of ``text`` after the committed ids: encoded behind the text of the last few
        committed ids when that re-encodes to them, else alone."""
        if not text:
            return []
        tail = committed[-TARGET_TAIL:]
        tail_text = self.target_tokenizer.decode(tail, skip_special_tokens=False, **_TEXT)
        ids = list(self.target_tokenizer.encode(tail_text + text, add_special_tokens=False))
        if ids[: len(tail)] == tail:
            return ids[len(tail) :]
        return list(self.target_tokenizer.encode(text, add_special_tokens=False))

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
        ids = self._draft_ids(prompt_ids[0].tolist())
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
        draft_ids = self._draft_ids(committed)
        self.translation_time_s += time.perf_counter() - start
        if not draft_ids:
            return empty
        new = self._generate(self._pending(draft_ids), k, min_confidence)
        start = time.perf_counter()
        proposal = self._target_ids(committed, self._continuation(draft_ids, new))[:k]
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
