"""ModelStore: each model loaded once per device; drafters and the target's greedy references built once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch

from ..engine.drafters import Drafter, ModelDrafter, PromptLookupDrafter
from ..models.loading import LoadedModel, load_model
from .pairs import PairSpec
from .verdicts import reference_tokens


class ModelStore:
    """Loads on first use and keeps what it loaded for the whole session.

    Keys include the device and dtype, so a model shared by two pairs (gpt2
    is a target in one and a draft in another) is loaded once.
    """

    def __init__(self, device: str, dtype: str, cache_dir: Path | None = None) -> None:
        self.device = device
        self.dtype = dtype
        self.cache_dir = cache_dir
        self.load_counts: Counter[str] = Counter()
        self._models: dict[tuple, LoadedModel] = {}
        self._drafters: dict[str, Drafter] = {}
        self._references: dict[tuple, list[int]] = {}

    def dtype_for(self, pair: PairSpec) -> str:
        return pair.dtype or self.dtype

    def model(self, source: str, revision: str | None = None, dtype: str | None = None) -> LoadedModel:
        key = (source, revision, dtype or self.dtype, self.device)
        if key not in self._models:
            self._models[key] = load_model(
                source, device=self.device, dtype=dtype or self.dtype, revision=revision, cache_dir=self.cache_dir
            )
            self.load_counts[source] += 1
        return self._models[key]

    def target(self, pair: PairSpec) -> LoadedModel:
        return self.model(pair.target, pair.revision, self.dtype_for(pair))

    def drafter(self, pair: PairSpec) -> Drafter:
        """The pair's drafter; for a draft model, its tokenizer is checked against the target's first."""
        if pair.name not in self._drafters:
            self._drafters[pair.name] = self._build_drafter(pair)
        return self._drafters[pair.name]

    def _build_drafter(self, pair: PairSpec) -> Drafter:
        from ..engine import derived_models
        from ..engine.names import DEFAULT_NGRAM_SIZE, DEFAULT_TRUNCATED_LAYERS
        from ..models.tokenization import check_draft_vocabulary, check_same_tokenization

        target = self.target(pair)
        options = pair.options
        if pair.drafter == "model":
            draft = self.model(pair.draft, None, self.dtype_for(pair))  # a pair's revision is its target's
            check_same_tokenization(target.tokenizer, draft.tokenizer, pair.target, pair.draft)
            check_draft_vocabulary(target.model.config, draft.model.config, pair.target, pair.draft)
            return ModelDrafter(draft.model)
        if pair.drafter == "truncated":
            layers = options.get("num_layers", DEFAULT_TRUNCATED_LAYERS)
            return ModelDrafter(derived_models.truncated_copy(target.model, layers))
        if pair.drafter == "int8":
            return ModelDrafter(derived_models.int8_copy(target.model))
        if pair.drafter == "prompt_lookup":
            return PromptLookupDrafter(
                ngram_size=options.get("ngram_size", DEFAULT_NGRAM_SIZE), max_proposal=options.get("max_proposal")
            )
        raise ValueError(f"pair {pair.name!r}: unknown drafter {pair.drafter!r}")

    def reference(
        self, pair: PairSpec, prompt_key: str, input_ids: torch.Tensor, max_new_tokens: int, eos_token_id: int | None
    ) -> list[int]:
        """The target's ``generate(do_sample=False)`` tokens, shared by every k of a prompt."""
        target = self.target(pair)
        key = (pair.target, pair.revision, self.dtype_for(pair), prompt_key, max_new_tokens, eos_token_id)
        if key not in self._references:
            self._references[key] = reference_tokens(target.model, input_ids, max_new_tokens, eos_token_id)
        return self._references[key]
